"""benchmarks/gpu_check.py where there is no GPU: its --device cpu smoke flow on a copy of the
AI domain given with --data (the device machine has no ../shared), the JSON it writes, and a
clear error for a --data folder without the AI files; benchmarks/gpu_study.sh's argument checks."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from util import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
CROSSNER = ROOT.parent / "shared" / "data" / "crossner"


def test_cpu_flow_on_a_data_folder_writes_the_rows(tmp_path):
    if not (CROSSNER / "ai" / "train.txt").exists():
        pytest.fail(f"{CROSSNER}/ai is missing: the tests need ../shared/data (see shared/data/README.md)")
    data = tmp_path / "somewhere"
    shutil.copytree(CROSSNER / "ai", data / "ai")
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--data", str(data), "--archs", "bilstm_crf",
         "--steps", "2", "--docs", "8", "--test-docs", "8", "--json", str(out)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| bilstm_crf | cpu |" in proc.stdout and "| ok |" in proc.stdout
    written = json.loads(out.read_text())
    assert "cores" in written["machine"] and "spacy 3.8" in written["machine"]
    (row,) = written["rows"]
    assert row["arch"] == "bilstm_crf" and row["device"] == "cpu" and row["problems"] == []
    assert row["cpu_diff_docs"] == [0, 0] and row["torch_tensors"] > 0
    # the same device on both sides: the scores agree to float32 rounding at most
    assert row["cpu_score_diff"] is not None and row["cpu_score_diff"] < 1e-5


def test_data_without_the_ai_domain_is_named(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--data", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"--data: {tmp_path / 'ai' / 'train.txt'} does not exist" in proc.stderr


def test_gpu_study_names_its_arguments_and_a_missing_runs_file(tmp_path):
    script = ROOT / "benchmarks" / "gpu_study.sh"
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "CORPUS RAW RESULTS WORKERS DEADLINE RUNS_FILE" in usage.stdout
    missing = tmp_path / "runs.txt"
    proc = subprocess.run(["bash", str(script), "c", "r", str(tmp_path / "res"), "2", "5", str(missing)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and f"RUNS_FILE {missing} does not exist" in proc.stdout


def test_gpu_study_runs_share_one_work_folder(tmp_path):
    # a stand-in python3 records each study.py command: every run gets the same --workdir, so
    # runs of one seed share its stage-1 model (study.py's lock makes the others wait for it)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text('#!/usr/bin/env bash\necho "$@" >> "$CALLS"\n')
    fake.chmod(0o755)
    runs = tmp_path / "runs.txt"
    runs.write_text("# two runs of one seed\ntrf_finetune music 555\n\ntrf_finetune ai 555\n")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", TMPDIR=str(tmp_path),
               CALLS=str(tmp_path / "calls.txt"))
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_study.sh"), "C", "R", str(tmp_path / "res"),
                           "2", "30", str(runs), "--max-steps", "5"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = sorted((tmp_path / "calls.txt").read_text().splitlines())
    assert len(calls) == 2 and all(c.startswith("project/scripts/study.py run --workers 0 --features minilm --methods trf_finetune")
                                   for c in calls)
    assert all(f"--workdir {tmp_path / 'gpu_study'} --gpu-id 0" in c and c.endswith("--max-steps 5") for c in calls)
    assert ["--domains ai" in c for c in calls] == [True, False]
    assert proc.stdout.count("exit 0 at") == 2


def test_max_score_diff_is_relative_and_strict_about_infinities():
    import numpy

    gpu_check = load_script("benchmarks/gpu_check.py")
    a = [numpy.array([[10.0, -numpy.inf], [2.0, 3.0]], dtype="f")]
    assert gpu_check.max_score_diff(a, [x.copy() for x in a]) == 0.0
    b = [numpy.array([[10.0, -numpy.inf], [2.0, 3.05]], dtype="f")]
    assert abs(gpu_check.max_score_diff(a, b) - 0.005) < 1e-5  # 0.05 over a scale of 10
    c = [numpy.array([[10.0, 0.0], [2.0, 3.0]], dtype="f")]
    assert gpu_check.max_score_diff(a, c) == float("inf")  # -inf on one device only
    assert gpu_check.max_score_diff(a, [numpy.zeros((3, 2), dtype="f")]) == float("inf")
