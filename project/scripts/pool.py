"""Run the timed lines of one project command N at a time: a small job pool for `spacy project run`.

    python scripts/pool.py start STEP --jobs 2     # first line of the command STEP
    python scripts/timed.py train-joint 1 --log training/ai/bilstm_joint/train.log -m spacy train ...
    python scripts/timed.py train-target 1 --log training/ai/bilstm_target/train.log -m spacy train ...
    python scripts/pool.py wait STEP               # last line

Between ``start`` and ``wait``, every ``scripts/timed.py`` line of the same ``spacy project run``
becomes a job: it waits for a free slot, starts in the background with its output going to its
``--log`` file (or ``metrics/pool/NN-STEP.log``), and returns, so `spacy project run` goes on to
the next line. A job whose project command depends on the outputs of a running job (the
``deps`` and ``outputs`` of project.yml, compared before the vars are filled in) waits for it.
While lines wait, the pool prints each new row of the running jobs' spaCy training tables;
``wait`` waits for every job, prints what each did, and fails if one failed. After a failure no
new job starts: the running ones finish (as ``make -j`` does), then the step fails, naming the
log to read. Ctrl-C stops the jobs with the workflow (they stay in its process group).

The timed lines are the lines of the project's single-method commands (shared through YAML
anchors), so ``spacy project run train-joint`` alone runs the same line in the foreground: a line
is a job only while a pool of its own ``spacy project run`` is open. Each job is timed like any
line (``metrics/timings.jsonl``, marked with its pool); the pool step's own time is its wall time.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import training_log
from timed import JOB_ENV, PROJECT_DIR, RUN_ENV, format_seconds, run_id, write_record

STATE_DIR = PROJECT_DIR / "metrics" / "pool"
STATE = STATE_DIR / "state.json"
PROGRESS = STATE_DIR / "progress.json"
POLL_SECONDS = float(os.environ.get("CROSSNER_POOL_POLL", "2"))


def _read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return default


def _write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf8")
    tmp.replace(path)


def command_files(step: str) -> Dict[str, List[str]]:
    """The deps and outputs of project command ``step`` as written in project.yml (vars unfilled:
    two commands name the same file exactly when their templates are equal)."""
    import srsly

    try:
        commands = srsly.read_yaml(PROJECT_DIR / "project.yml").get("commands", [])
    except (OSError, ValueError):
        commands = []
    for command in commands:
        if command.get("name") == step:
            return {"deps": list(command.get("deps", [])), "outputs": list(command.get("outputs", []))}
    return {"deps": [], "outputs": []}


def _norm(path: str) -> str:
    return path[2:].rstrip("/") if path.startswith("./") else path.rstrip("/")


def overlaps(outputs: List[str], deps: List[str]) -> bool:
    """Whether a dependency is one of the outputs, or inside one, or contains one."""
    for out in map(_norm, outputs):
        for dep in map(_norm, deps):
            if dep == out or dep.startswith(out + "/") or out.startswith(dep + "/"):
                return True
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has ended
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class Job:
    """One line of the pool: its files in ``metrics/pool/`` and its state."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.info = _read_json(path, {})
        self.done = _read_json(path.with_suffix(".done"))

    @property
    def name(self) -> str:
        return self.info.get("name", self.path.stem)

    @property
    def log(self) -> Path:
        return Path(self.info.get("log", ""))

    @property
    def running(self) -> bool:
        return self.done is None and bool(self.info.get("pid")) and alive(self.info["pid"])

    @property
    def failed(self) -> bool:
        if self.done is not None:
            return self.done.get("rc", 1) != 0
        return bool(self.info.get("pid")) and not alive(self.info["pid"])

    def failure(self) -> str:
        if self.done is None:
            return f"{self.name} ended without a status (killed?); its log: {self.log}"
        return f"{self.name} failed (exit code {self.done.get('rc')}); its log: {self.log}"


class Pool:
    """The open pool of this ``spacy project run`` (state in ``metrics/pool/``)."""

    def __init__(self, state: Dict) -> None:
        self.state = state

    @property
    def step(self) -> str:
        return self.state["step"]

    def jobs(self) -> List[Job]:
        return [Job(p) for p in sorted(STATE_DIR.glob("[0-9]*.json"))]

    def elapsed(self) -> str:
        return format_seconds(time.time() - self.state["started"])

    def say(self, text: str) -> None:
        print(f"[pool {self.step} {self.elapsed()}] {text}", flush=True)

    def report_progress(self) -> None:
        """Print each running job's training-table rows not printed yet (once per row)."""
        seen = _read_json(PROGRESS, {})
        for job in self.jobs():
            if not job.running or not job.log.exists():
                continue
            log = training_log.read(job.log)
            key = job.path.stem
            if len(log.steps) > seen.get(key, 0):
                seen[key] = len(log.steps)
                self.say(f"{job.name}: step {log.last_step}, dev F1 {log.scores[-1]:.2f} "
                         f"(best {log.best_score:.2f} at step {log.best_step})")
        _write_json(PROGRESS, seen)

    def wait_for_running(self) -> None:
        while any(job.running for job in self.jobs()):
            self.report_progress()
            time.sleep(POLL_SECONDS)

    def fail(self, failed: List[Job]) -> None:
        """Stop the pool after a failure: let the running jobs finish, then exit non-zero."""
        running = [job.name for job in self.jobs() if job.running]
        for job in failed:
            self.say(f"FAILED: {job.failure()}")
        if running:
            self.say(f"starting no new jobs; waiting for the running ones to finish: {', '.join(running)}")
        self.wait_for_running()
        self.close()
        sys.exit(f"[pool {self.step}] failed: " + "; ".join(job.failure() for job in failed))

    def close(self) -> None:
        self.state["open"] = False
        _write_json(STATE, self.state)

    def submit(self, name: str, threads: str, log: Optional[str], args: List[str]) -> None:
        """Start the line (of project command STEP, given as STEP[:LABEL]) as a job as soon as a
        slot is free and no running job makes what it needs."""
        step = name.partition(":")[0]
        files = command_files(step)
        announced = False
        while True:
            jobs = self.jobs()
            failed = [job for job in jobs if job.failed]
            if failed:
                self.fail(failed)
            running = [job for job in jobs if job.running]
            needed = [job for job in running if overlaps(job.info.get("outputs", []), files["deps"])]
            if len(running) < self.state["jobs"] and not needed:
                break
            if not announced:
                why = (f"needs the outputs of {', '.join(j.name for j in needed)}" if needed
                       else f"{len(running)} of {self.state['jobs']} slots busy")
                self.say(f"{name} waits ({why})")
                announced = True
            self.report_progress()
            time.sleep(POLL_SECONDS)
        index = self.state["next"]
        self.state["next"] = index + 1
        _write_json(STATE, self.state)
        slug = name.replace(":", "-").replace("/", "-")
        path = STATE_DIR / f"{index:02d}-{slug}.json"
        log = log or os.path.relpath(STATE_DIR / f"{index:02d}-{slug}.log")
        info = {"index": index, "step": step, "name": name, "log": log, "started": time.time(), **files}
        _write_json(path, info)
        env = dict(os.environ, **{JOB_ENV: str(path), RUN_ENV: self.state["run"]})
        timed = Path(__file__).with_name("timed.py")
        proc = subprocess.Popen([sys.executable, str(timed), name, threads, "--log", log, *args],
                                env=env, stdin=subprocess.DEVNULL)
        info["pid"] = proc.pid
        _write_json(path, info)
        busy = sum(1 for job in self.jobs() if job.running or job.path == path)
        self.say(f"started {name} ({busy} of {self.state['jobs']} slots; output: {log})")


def open_pool(run: str) -> Optional[Pool]:
    """The pool opened by ``start`` in this ``spacy project run`` and not yet waited for."""
    state = _read_json(STATE)
    if state and state.get("open") and state.get("run") == run:
        return Pool(state)
    return None


def start(step: str, jobs: int) -> None:
    if jobs < 1:
        sys.exit(f"[pool {step}] --jobs must be at least 1 (the var cpu_jobs), not {jobs}")
    old = _read_json(STATE)
    if old and old.get("open") and old.get("run") != run_id():
        live = [job.name for job in Pool(old).jobs() if job.running]
        if live:
            sys.exit(f"[pool {step}] another `spacy project run` has jobs running in this project "
                     f"({', '.join(live)}, step {old['step']}): wait for it or stop it first")
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)
    STATE_DIR.mkdir(parents=True)
    state = {"run": run_id(), "step": step, "jobs": jobs, "started": time.time(), "open": True, "next": 0}
    _write_json(STATE, state)
    Pool(state).say(f"running the lines of {step} up to {jobs} at a time, each with its output in "
                    f"a log file; progress below")


def wait(step: str) -> None:
    pool = open_pool(run_id())
    if pool is None or pool.step != step:
        sys.exit(f"[pool {step}] no pool is open for {step} in this run: the command must start "
                 f"with `python scripts/pool.py start {step} --jobs N`")
    pool.wait_for_running()
    jobs = pool.jobs()
    failed = [job for job in jobs if job.failed]
    if failed:
        pool.fail(failed)
    seconds = time.time() - pool.state["started"]
    pool.close()
    write_record({"run": pool.state["run"], "step": step, "seconds": round(seconds, 2),
                  "ended": time.time(), "command": "scripts/pool.py", "jobs": len(jobs)})
    lines = [f"[time] {step}: {format_seconds(seconds)} ({len(jobs)} jobs, up to "
             f"{pool.state['jobs']} at a time)"]
    for job in jobs:
        took = format_seconds(job.done["seconds"]) if job.done else "?"
        log = training_log.read(job.log) if job.log.exists() else None
        what = log.verdict() if log is not None and (log.steps or log.skipped) else f"log: {job.log}"
        lines.append(f"  {job.name:<28} {took:>14}  {what}")
    print("\n".join(lines), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "wait"])
    parser.add_argument("step", help="The project command whose lines the pool runs.")
    parser.add_argument("--jobs", type=int, default=2, help="Jobs at a time (start only).")
    args = parser.parse_args()
    if args.action == "start":
        start(args.step, args.jobs)
    else:
        wait(args.step)


if __name__ == "__main__":
    main()
