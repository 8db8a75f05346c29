"""Tests of project/project.yml: it validates, is declarative, and its assets match the data."""
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from weasel.schemas import ProjectConfigSchema, validate
from weasel.util import load_project_config

ROOT = Path(__file__).parents[1]
PROJECT = ROOT / "project"
DATA = Path(__file__).parents[2] / "shared" / "data" / "crossner"
DOMAINS = ("conll2003", "politics", "science", "music", "literature", "ai")
SPLITS = ("train", "dev", "test")
COMMIT = "2e7ba2a7798c961e3f29fbc51252c5a8d40224bf"


@pytest.fixture(scope="module")
def config():
    # load_project_config validates against weasel's schema and substitutes the vars
    return load_project_config(PROJECT)


def test_schema_and_workflows(config):
    assert validate(ProjectConfigSchema, config) == []
    names = {c["name"] for c in config["commands"]}
    for workflow, steps in config["workflows"].items():
        assert set(steps) <= names, workflow
    assert config["workflows"]["all"][-2:] == ["report", "timings"]
    assert {"full", "benchmark"} <= set(config["workflows"])


def test_every_command_has_help_deps_outputs(config):
    for command in config["commands"]:
        name = command["name"]
        assert command.get("help", "").strip(), name
        assert command.get("deps"), name
        assert command.get("outputs"), name
        assert command.get("script"), name
        for line in command["script"]:
            assert "${" not in line, (name, line)  # every variable resolved


def test_vars_and_gpu_everywhere(config):
    vars_ = config["vars"]
    assert vars_["source_domain"] == "conll2003" and vars_["target_domain"] == "ai"
    assert vars_["gpu_id"] == -1
    raw = (PROJECT / "project.yml").read_text()
    for line in re.findall(r"- \"(.*(?:spacy train|spacy_crossner evaluate).*)\"", raw):
        assert "--gpu-id ${vars.gpu_id}" in line, line
    # training takes its config from ../configs and its domains from the vars, never literally
    for line in re.findall(r"- \"(.*spacy train.*)\"", raw):
        assert "../configs/" in line, line
        assert "${vars.target_domain}" in line or "${vars.source_domain}" in line, line
        assert "corpus/ai" not in line and "corpus/conll2003" not in line, line


def test_assets_pinned_and_checksums_match_local_copy(config):
    assert DATA.is_dir(), f"the shared CrossNER copy is missing: {DATA}"
    assets = {a["dest"]: a for a in config["assets"] if a["dest"].startswith("assets/crossner/")}
    assert len(assets) == len(DOMAINS) * len(SPLITS)
    for domain in DOMAINS:
        for split in SPLITS:
            asset = assets[f"assets/crossner/{domain}/{split}.txt"]
            assert asset["url"] == (
                f"https://raw.githubusercontent.com/zliucr/CrossNER/{COMMIT}/ner_data/{domain}/{split}.txt"
            )
            local = DATA / domain / f"{split}.txt"
            assert hashlib.md5(local.read_bytes()).hexdigest() == asset["checksum"], local


def test_dictionary_assets_match_local_copy(config):
    local_dir = DATA.parent / "dictionaries" / "conll2003"
    assets = [a for a in config["assets"] if a["dest"].startswith("assets/dictionaries/conll2003/")]
    assert sorted(Path(a["dest"]).name for a in assets) == sorted(p.name for p in local_dir.glob("*.txt"))
    for asset in assets:
        local = local_dir / Path(asset["dest"]).name
        assert hashlib.md5(local.read_bytes()).hexdigest() == asset["checksum"], local


def test_no_data_files_in_repository():
    tracked = subprocess.run(["git", "ls-files", "project"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert not [p for p in tracked if p.startswith(("project/assets/", "project/corpus/"))]


def test_get_data_copies_and_verifies(tmp_path):
    # the documented local-copy route: copy ../shared/data/crossner files, checksums verified
    script = PROJECT / "scripts" / "get_data.py"
    out = tmp_path / "assets"
    res = subprocess.run([sys.executable, str(script), "--domains", "ai", "--local", str(DATA),
                          "--assets", str(out)], capture_output=True, text=True, cwd=PROJECT)
    assert res.returncode == 0, res.stderr
    for split in SPLITS:
        assert (out / "ai" / f"{split}.txt").read_bytes() == (DATA / "ai" / f"{split}.txt").read_bytes()
    res = subprocess.run([sys.executable, str(script), "--domains", "nowhere", "--local", str(DATA),
                          "--assets", str(out)], capture_output=True, text=True, cwd=PROJECT)
    assert res.returncode == 1 and "not an asset" in res.stderr
    bad = tmp_path / "copy" / "ai"
    bad.mkdir(parents=True)
    for split in SPLITS:
        (bad / f"{split}.txt").write_text("x\tO\n")
    res = subprocess.run([sys.executable, str(script), "--domains", "ai", "--local",
                          str(tmp_path / "copy"), "--assets", str(tmp_path / "out2")],
                         capture_output=True, text=True, cwd=PROJECT)
    assert res.returncode == 1 and "checksum differs" in res.stderr


def test_every_step_of_all_is_timed(config):
    commands = {c["name"]: c for c in config["commands"]}
    for step in config["workflows"]["all"]:
        if step == "timings":
            continue
        for line in commands[step]["script"]:
            assert line.startswith(f"python scripts/timed.py {step} "), (step, line)


TIMED_PROJECT = """
title: timing test
commands:
  - name: two-lines
    help: two commands
    script:
      - "python scripts/timed.py two-lines 1 -c 'import os; assert os.environ[\\"OMP_NUM_THREADS\\"] == \\"1\\"'"
      - "python scripts/timed.py two-lines 0 -c 'import time; time.sleep(1.2)'"
    deps: ["project.yml"]
    outputs: ["out.txt"]
  - name: one-line
    help: one command
    script:
      - "python scripts/timed.py one-line 0 -c 'pass'"
    deps: ["project.yml"]
    outputs: ["out2.txt"]
  - name: never
    help: not run
    script:
      - "python scripts/timed.py never 0 -c 'pass'"
  - name: timings
    help: the table
    script:
      - "python scripts/timings.py --workflow all --output reports/timings"
workflows:
  all: [two-lines, one-line, timings]
"""


def test_timed_steps_and_the_total_of_a_workflow(tmp_path):
    # a real `spacy project run` of a small project using the project's timing scripts
    (tmp_path / "scripts").mkdir()
    for name in ("timed.py", "timings.py"):
        shutil.copy(PROJECT / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "project.yml").write_text(TIMED_PROJECT)
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "all", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "[time] two-lines: command 1 of 2 took 0 s" in out
    assert re.search(r"\[time\] two-lines: [12] s \(2 commands\)", out)
    assert "[time] one-line: 0 s" in out
    assert re.search(r"total +[12] s \(2 of 2 steps ran\)", out)
    table = (tmp_path / "reports" / "timings.md").read_text()
    assert "| two-lines |" in table and "| **total (2 of 2 steps ran)** |" in table
    data = json.loads((tmp_path / "reports" / "timings.json").read_text())
    assert [s["step"] for s in data["steps"]] == ["two-lines", "one-line"]
    assert 1.2 <= data["total_seconds"] < 30 and "cores" in data["machine"]
    # a failing command says how long it ran and fails the step
    (tmp_path / "project.yml").write_text(TIMED_PROJECT.replace("time.sleep(1.2)", "raise SystemExit(3)"))
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "two-lines", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "[time] two-lines: failed after" in res.stdout


def test_readme_results_come_from_the_reports(tmp_path):
    report = {"title": "CrossNER ai test", "runs": [
        {"name": "bilstm_target", "overall": {"p": 40.0, "r": 36.2, "f": 38.0512}},
        {"name": "moee_zero", "overall": {"p": 20.0, "r": 5.0, "f": None}}]}
    timings = {"date": "2026-11-24 01:00 UTC", "machine": "2 cores (X)", "total_seconds": 2345.0,
               "steps": [{"step": "data", "seconds": 2.0}, {"step": "train-target", "seconds": 301.0},
                         {"step": "dapt", "seconds": None}]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    (tmp_path / "timings.json").write_text(json.dumps(timings))
    readme = tmp_path / "README.md"
    readme.write_text("# P\n\nbefore\n<!-- results:start -->\nold numbers\n<!-- results:end -->\nafter\n")
    script = PROJECT / "scripts" / "readme_results.py"
    res = subprocess.run([sys.executable, str(script), "--report", str(tmp_path / "report.json"),
                          "--timings", str(tmp_path / "timings.json"), "--readme", str(readme)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = readme.read_text()
    assert "old numbers" not in text and text.startswith("# P\n\nbefore\n") and text.endswith("after\n")
    assert "| train-target | 5 min 01 s |" in text and "| dapt | skipped (nothing changed) |" in text
    assert "| **total (2 of 3 steps ran)** | **39 min 05 s** |" in text
    assert "| bilstm_target | 38.05 | 40.00 | 36.20 |" in text and "| moee_zero | – | 20.00 | 5.00 |" in text
    readme.write_text("no markers")
    res = subprocess.run([sys.executable, str(script), "--report", str(tmp_path / "report.json"),
                          "--timings", str(tmp_path / "timings.json"), "--readme", str(readme)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "needs one '<!-- results:start -->' line" in res.stderr


def test_project_readme_has_the_results_markers():
    text = (PROJECT / "README.md").read_text()
    assert text.count("<!-- results:start -->") == 1 and text.count("<!-- results:end -->") == 1
