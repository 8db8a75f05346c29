"""Run one script line of a project command with N torch threads, and say how long it took.

    python scripts/timed.py STEP[:LABEL] N [--log FILE] [--skip-if-missing PATH] PYTHON_ARGS...
    python scripts/timed.py train-target 1 --log training/ai/bilstm_target/train.log -m spacy train ...
    python scripts/timed.py evaluate:bilstm_target 1 -m spacy_crossner evaluate ...

STEP is the project command the line belongs to; LABEL (optional) names the line among the
command's lines in what is printed and in the timings.

- N > 0 sets OMP_NUM_THREADS and MKL_NUM_THREADS for the child (N = 0 leaves them alone). On a
  small or shared CPU, OpenMP threads that spin against each other make torch's LSTM and
  transformer steps many times slower; one thread per process is then much faster. The variables
  must be set before torch is imported, hence a wrapper. (A pipeline can carry its own setting:
  ``[nlp.before_creation]`` with ``spacy_crossner.torch_threads.v1``.)
- ``--log FILE`` also writes the output to FILE, after a ``$ command`` line and followed by a
  ``[time]`` line: ``scripts/training_log.py`` reads spaCy's training table from it (did the dev
  score level?) and ``scripts/report.py`` the features and the time.
- ``--skip-if-missing PATH``: when PATH does not exist (a training that was skipped), say so and
  do nothing.
- The wall time of the line is appended to ``metrics/timings.jsonl`` with the step and the
  ``spacy project run`` process that ran it. When the step's last line ends (the number of lines
  is read from project.yml), the step's total is printed; ``scripts/timings.py`` (the last step
  of ``all``) prints every step of the run and the total.
- Between ``scripts/runner.py open STEP`` and ``scripts/runner.py run STEP`` of the same
  ``spacy project run``, the line is queued (written to ``metrics/runner/queue.json``) and runs
  later as a job of the runner, which starts this script in job mode (CROSSNER_RUNNER_JOB set):
  the output goes only to the log, and the time is recorded as a job of STEP. This script knows
  the queue only as a file: it imports nothing of the runner.
"""
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
LOG = PROJECT_DIR / "metrics" / "timings.jsonl"
RUN_ENV = "CROSSNER_RUN_ID"
JOB_ENV = "CROSSNER_RUNNER_JOB"  # {"step": ..., "index": ...} of a runner's job
RUNNER_DIR = PROJECT_DIR / "metrics" / "runner"
QUEUE = RUNNER_DIR / "queue.json"
USAGE = ("usage: python scripts/timed.py STEP N [--log FILE] [--skip-if-missing PATH] PYTHON_ARGS...  "
         "(N torch threads; 0 leaves the thread settings alone)")


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
    """The ``spacy project run`` process that started this line (pid and start time: pids recur).
    A runner's job is told it in CROSSNER_RUN_ID (it runs in a Dask worker)."""
    if os.environ.get(RUN_ENV):
        return os.environ[RUN_ENV]
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


def parent_workflow() -> str:
    """The workflow of the ``spacy project run WORKFLOW`` process that started this line ("" when
    not known, e.g. a single command or not on Linux)."""
    try:
        argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode("utf8", "replace").split("\0")
    except OSError:
        return ""
    for i, token in enumerate(argv[:-1]):
        if token == "run" and i > 0 and "project" in argv[i - 1]:
            return argv[i + 1]
    return ""


def workflow_position(step: str, workflow: str, timings: Path = None) -> str:
    """"[WORKFLOW] step N of M: STEP" when STEP is in the project's WORKFLOW, else "". When an
    earlier run of ``all`` left its step times (``reports/timings.json``, the ``timings`` step),
    the line adds the time that run took from this step on, as an estimate of the time left."""
    import srsly

    timings = PROJECT_DIR / "reports" / "timings.json" if timings is None else timings

    if not workflow:
        return ""
    try:
        steps = srsly.read_yaml(PROJECT_DIR / "project.yml").get("workflows", {}).get(workflow, [])
    except (OSError, ValueError):
        return ""
    if step not in steps:
        return ""
    text = f"[{workflow}] step {steps.index(step) + 1} of {len(steps)}: {step}"
    try:
        before = {r["step"]: r.get("seconds") for r in srsly.read_json(timings).get("steps", [])}
    except (OSError, ValueError, AttributeError):
        return text
    rest = [before.get(name) for name in steps[steps.index(step):]]
    if workflow == "all" and rest and all(isinstance(sec, (int, float)) for sec in rest):
        text += f"; about {format_seconds(sum(rest))} left (the step times of the last run, {timings.name})"
    return text


def read_log(path: Path = LOG) -> list:
    if not path.exists():
        return []
    with path.open(encoding="utf8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_record(record: dict) -> None:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("a", encoding="utf8") as f:
        f.write(json.dumps(record) + "\n")


def parse_args(argv: list):
    """(step, threads, log, skip_if_missing, python args) of a command line."""
    if len(argv) < 3 or not argv[1].isdigit():
        sys.exit(USAGE)
    step, threads, rest = argv[0], argv[1], list(argv[2:])
    options = {"--log": None, "--skip-if-missing": None}
    while rest and rest[0] in options:
        if len(rest) < 2:
            sys.exit(f"{rest[0]} needs a value. {USAGE}")
        options[rest[0]] = rest[1]
        rest = rest[2:]
    if not rest:
        sys.exit(USAGE)
    return step, threads, options["--log"], options["--skip-if-missing"], rest


def run(step: str, threads: str, args: list, log: str = None, echo: bool = True):
    """Run ``python ARGS`` with the thread settings; with ``log``, tee its output to that file
    between a ``$ command`` line and a ``[time]`` line. Returns (exit code, seconds)."""
    env = os.environ.copy()
    if threads != "0":
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = threads
    start = time.time()
    if log is None:
        code = subprocess.call([sys.executable] + args, env=env)
        return code, time.time() - start
    env["PYTHONUNBUFFERED"] = "1"
    path = Path(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf8") as out:
        out.write("$ " + shlex.join(["python"] + args) + "\n")
        out.flush()
        proc = subprocess.Popen([sys.executable] + args, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                errors="replace")
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        code = proc.wait()
        seconds = time.time() - start
        status = format_seconds(seconds) if code == 0 else f"failed after {format_seconds(seconds)}"
        out.write(f"[time] {step}: {status} ({seconds:.1f} s)\n")
    return code, seconds


def split_name(name: str):
    """(project command, label or None) of a STEP[:LABEL] argument."""
    step, _, label = name.partition(":")
    return step, (label or None)


def record(name: str, seconds: float, args: list, **extra) -> dict:
    step, label = split_name(name)
    data = {"run": run_id(), "step": step, "seconds": round(seconds, 2), "ended": time.time(),
            "command": " ".join(args[:3]), **({"label": label} if label else {}), **extra}
    write_record(data)
    return data


def run_job(step: str, threads: str, log: str, args: list, job: dict) -> int:
    """A runner's job: run the line into its log, record its time as a job of the runner's step,
    say what it did; the exit code is the line's."""
    code, seconds = run(step, threads, args, log, echo=False)
    if code != 0:
        print(f"[time] {step}: failed after {format_seconds(seconds)}", flush=True)
        return code
    record(step, seconds, args, pool=job["step"], job=job["index"])
    import training_log

    parsed = training_log.read(log)
    if parsed.steps or parsed.skipped:
        what = parsed.verdict()
    else:  # the last line says what it did (e.g. "Wrote metrics/ai/x.json"); the rest is in the log
        body = [line for line in Path(log).read_text(encoding="utf8", errors="replace").splitlines()[1:-1]
                if line.strip()]
        what = f"{body[-1].strip() if body else 'no output'} (output: {log})"
    print(f"[time] {step}: {format_seconds(seconds)} (in parallel, step {job['step']}); {what}", flush=True)
    return 0


def queue_line(step: str, threads: str, log: str, args: list) -> bool:
    """Queue the line for the runner if a queue of this ``spacy project run`` is open."""
    try:
        queue = json.loads(QUEUE.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return False
    if not queue.get("open") or queue.get("run") != run_id():
        return False
    queue["jobs"].append({"name": step, "threads": threads, "log": log, "args": args})
    tmp = QUEUE.with_suffix(".tmp")
    tmp.write_text(json.dumps(queue), encoding="utf8")
    tmp.replace(QUEUE)
    print(f"[runner {queue['step']}] queued {step}" + (f" (output: {log})" if log else ""), flush=True)
    return True


def training_verdict(log) -> str:
    """"; <what the training table says>" for a log with spaCy's training table, else ""."""
    if log is None or not Path(log).exists():
        return ""
    import training_log

    parsed = training_log.read(log)
    return f"; {parsed.verdict()}" if parsed.steps or parsed.skipped else ""


def main() -> None:
    step, threads, log, skip_if_missing, args = parse_args(sys.argv[1:])
    if skip_if_missing and not Path(skip_if_missing).exists():
        print(f"[time] {step}: skipped this line ({skip_if_missing} does not exist; the step that "
              f"makes it said why)", flush=True)
        return
    if os.environ.get(JOB_ENV):
        sys.exit(run_job(step, threads, log, args, json.loads(os.environ[JOB_ENV])))
    if queue_line(step, threads, log, args):
        return
    command, _ = split_name(step)
    if not [r for r in read_log() if r["run"] == run_id() and r["step"] == command]:
        position = workflow_position(command, parent_workflow())
        if position:
            print(position, flush=True)
    code, seconds = run(step, threads, args, log, echo=True)
    if code != 0:
        print(f"[time] {step}: failed after {format_seconds(seconds)}", flush=True)
        sys.exit(code)
    this_run = record(step, seconds, args)["run"]
    command, _ = split_name(step)
    done = [r for r in read_log() if r["run"] == this_run and r["step"] == command and "pool" not in r]
    n_lines = lines_of_step(command)
    if n_lines <= 1:
        print(f"[time] {step}: {format_seconds(seconds)}{training_verdict(log)}", flush=True)
    elif len(done) >= n_lines:
        total = sum(r["seconds"] for r in done[-n_lines:])
        print(f"[time] {step}: {format_seconds(total)} ({n_lines} commands)", flush=True)
    else:
        print(f"[time] {step}: command {len(done)} of {n_lines} took {format_seconds(seconds)}", flush=True)


if __name__ == "__main__":
    main()
