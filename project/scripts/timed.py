"""Run one script line of a project command with N torch threads, and say how long it took.

    python scripts/timed.py STEP N PYTHON_ARGS...
    python scripts/timed.py train-target 1 -m spacy train ../configs/bilstm_target.cfg ...

- N > 0 sets OMP_NUM_THREADS and MKL_NUM_THREADS for the child (N = 0 leaves them alone). On a
  small or shared CPU, OpenMP threads that spin against each other make torch's LSTM and
  transformer steps many times slower; one thread per process is then much faster. The variables
  must be set before torch is imported, hence a wrapper. (A pipeline can carry its own setting:
  ``[nlp.before_creation]`` with ``spacy_crossner.torch_threads.v1``.)
- The wall time of the line is appended to ``metrics/timings.jsonl`` with the step and the
  ``spacy project run`` process that ran it. When the step's last line ends (the number of lines
  is read from project.yml), the step's total is printed; ``scripts/timings.py`` (the last step
  of ``all``) prints every step of the run and the total.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
LOG = PROJECT_DIR / "metrics" / "timings.jsonl"


def format_seconds(seconds: float) -> str:
    """A duration a person reads: "48 s", "3 min 05 s", "1 h 02 min"."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def run_id() -> str:
    """The ``spacy project run`` process that started this line (pid and start time: pids recur)."""
    parent = os.getppid()
    try:
        start = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "?"
    return f"{parent}:{start}"


def lines_of_step(step: str) -> int:
    """How many script lines the project command STEP has (0 if unknown)."""
    import srsly

    try:
        commands = srsly.read_yaml(PROJECT_DIR / "project.yml").get("commands", [])
    except (OSError, ValueError):
        return 0
    return next((len(c.get("script", [])) for c in commands if c.get("name") == step), 0)


def read_log(path: Path = LOG) -> list:
    if not path.exists():
        return []
    with path.open(encoding="utf8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    if len(sys.argv) < 4 or not sys.argv[2].isdigit():
        sys.exit("usage: python scripts/timed.py STEP N PYTHON_ARGS...  (N torch threads; 0 leaves "
                 "the thread settings alone)")
    step, threads, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    env = os.environ.copy()
    if threads != "0":
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = threads
    start = time.time()
    code = subprocess.call([sys.executable] + args, env=env)
    seconds = time.time() - start
    if code != 0:
        print(f"[time] {step}: failed after {format_seconds(seconds)}", flush=True)
        sys.exit(code)
    run = run_id()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("a", encoding="utf8") as f:
        f.write(json.dumps({"run": run, "step": step, "seconds": round(seconds, 2), "ended": time.time(),
                            "command": " ".join(args[:3])}) + "\n")
    done = [r for r in read_log() if r["run"] == run and r["step"] == step]
    n_lines = lines_of_step(step)
    if n_lines <= 1:
        print(f"[time] {step}: {format_seconds(seconds)}", flush=True)
    elif len(done) >= n_lines:
        total = sum(r["seconds"] for r in done[-n_lines:])
        print(f"[time] {step}: {format_seconds(total)} ({n_lines} commands)", flush=True)
    else:
        print(f"[time] {step}: command {len(done)} of {n_lines} took {format_seconds(seconds)}", flush=True)


if __name__ == "__main__":
    main()
