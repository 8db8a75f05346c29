"""Tests of project/project.yml: it validates, is declarative, and its assets match the data."""
import hashlib
import re
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
    assert config["workflows"]["all"][-1] == "report"
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
