"""The project's one runner: many command lines (trainings, evaluations) as jobs on a Dask cluster.

    python scripts/runner.py open STEP                       # first line of the project command STEP
    python scripts/timed.py train-target 1 --log training/ai/bilstm_target/train.log scripts/train.py ...
    python scripts/timed.py train-joint 1 --log training/ai/bilstm_joint/train.log scripts/train.py ...
    python scripts/runner.py run STEP --workers 2 [--scheduler tcp://host:8786]   # last line

Between ``open`` and ``run``, every ``scripts/timed.py`` line of the same ``spacy project run``
is queued instead of run (its output goes to its ``--log`` file, or ``metrics/runner/NN-STEP.log``).
``run`` runs the queue on a Dask cluster: a local one of ``--workers`` processes, or the cluster
of ``--scheduler`` (its workers must see this project folder at the same path, e.g. a shared file
system, and have the same environment). A job whose project command needs the outputs of another
(the ``deps`` and ``outputs`` of project.yml, compared before the vars are filled in) waits for
it. While jobs run, each new row of their spaCy training tables is printed.

A failed job is named with the end of its log; the other jobs go on (only those that need its
outputs are not run) and the step fails at the end. Each job that succeeded leaves a mark in
``metrics/runner/done/STEP/``: rerunning the step after a failure skips the jobs already done
with the same command line (``--fresh`` runs them again). When the whole step succeeds the marks
are removed, so the next time spaCy reruns the step (its deps changed) every job runs again.

The study (``scripts/study.py run --workers N --scheduler ADDRESS``) and ``scripts/grid.py``
call :func:`run_jobs` directly with their own jobs.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import training_log
from timed import (JOB_ENV, PROJECT_DIR, QUEUE, RUN_ENV, RUNNER_DIR, format_seconds, parent_workflow,
                   run_id, workflow_position, write_record)

POLL_SECONDS = float(os.environ.get("CROSSNER_RUNNER_POLL", "2"))
# the job times of the last timed run of the `all` workflow (reports/timings.json, copied by
# `spacy project run readme`), for the time left; the estimate falls back to the mean of the
# finished jobs without it
EXPECTED_TIMES = PROJECT_DIR / "expected_times.json"
TAIL_LINES = 25


@dataclass
class Job:
    """One command line to run: ``argv`` in ``cwd`` with ``env`` added, its output in ``log``."""

    name: str
    argv: List[str]
    log: str
    cwd: str = "."
    env: Dict[str, str] = field(default_factory=dict)
    needs: List[str] = field(default_factory=list)  # names of jobs that must succeed first
    writes_log: bool = False  # True: the command writes ``log`` itself and prints a summary

    @property
    def key(self) -> str:
        """What makes two jobs the same job: the command line, where it runs, its log."""
        text = json.dumps([self.argv, str(Path(self.cwd).resolve()), self.log])
        return hashlib.sha1(text.encode("utf8")).hexdigest()[:16]


@dataclass
class Result:
    name: str
    status: str  # ok | failed | not run | done before
    seconds: float = 0.0
    returncode: Optional[int] = None
    output: str = ""  # what the command printed (its log holds the rest)
    why: str = ""

    def describe(self, job: Job) -> str:
        if self.status == "failed":
            return f"{self.name} failed ({self.why}); its log: {job.log}"
        if self.status == "not run":
            return f"{self.name} not run: {self.why}"
        return f"{self.name}: {self.status}"


def exit_reason(returncode: int) -> str:
    """How a process ended: a negative code is the signal that killed it."""
    if returncode >= 0:
        return f"exit code {returncode}"
    import signal

    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = ", e.g. by the kernel for lack of memory" if name == "SIGKILL" else ""
    return f"killed by {name}{hint}"


def execute(job: dict, *needed: dict) -> dict:
    """Run one job on a worker (a plain function of plain values: it travels to any worker).
    Not run when a job it needs did not succeed."""
    bad = [r["name"] for r in needed if r["status"] not in ("ok", "done before")]
    if bad:
        return {"name": job["name"], "status": "not run", "why": f"needs {', '.join(bad)}, which did not succeed"}
    log = Path(job["cwd"]) / job["log"]
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **job["env"])
    start = time.time()
    if job["writes_log"]:  # the command writes its log and prints a summary
        proc = subprocess.run(job["argv"], cwd=job["cwd"], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace")
        returncode, output = proc.returncode, (proc.stdout + proc.stderr).strip()
    else:  # its output is its log, written as it comes (a running job can be watched there)
        with log.open("w", encoding="utf8") as out:
            out.write("$ " + " ".join(job["argv"]) + "\n")
            out.flush()
            returncode = subprocess.run(job["argv"], cwd=job["cwd"], env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT).returncode
        lines = [line for line in log.read_text(encoding="utf8", errors="replace").splitlines()[1:] if line.strip()]
        output = f"{job['name']}: {lines[-1].strip() if lines else 'no output'} (log: {job['log']})"
    result = {"name": job["name"], "seconds": round(time.time() - start, 2), "returncode": returncode,
              "output": output}
    if returncode == 0:
        return {**result, "status": "ok"}
    return {**result, "status": "failed", "why": exit_reason(returncode)}


def _client(workers: int, scheduler: Optional[str]):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        sys.exit('The runner needs Dask distributed: pip install "spacy_crossner[project]"')
    if scheduler:
        try:
            return Client(scheduler, timeout="30s"), None
        except (OSError, TimeoutError) as err:
            sys.exit(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({err})")
    if workers < 1:
        sys.exit(f"--workers must be at least 1, not {workers}")
    # a free port for the dashboard (":8787" may be another cluster's), on this machine only
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=":0", silence_logs=40)
    return Client(cluster), cluster


def _mark_path(done_dir: Path, job: Job) -> Path:
    return done_dir / f"{job.key}.json"


def run_jobs(
    jobs: List[Job],
    *,
    workers: int = 2,
    scheduler: Optional[str] = None,
    done_dir: Optional[Path] = None,
    fresh: bool = False,
    say: Callable[[str], None] = print,
    progress: Optional[Callable[[List[Job]], None]] = None,
    expected: Optional[Dict[str, float]] = None,
) -> List[Result]:
    """Run ``jobs`` on a Dask cluster, each after the jobs it ``needs``; keep going after a
    failure (the jobs that need a failed one are not run). Returns one Result per job, in order.

    jobs (List[Job]): the jobs; a job's ``needs`` name earlier jobs.
    workers (int): worker processes of the local cluster (without ``scheduler``).
    scheduler (Optional[str]): address of a running Dask scheduler to use instead.
    done_dir (Optional[Path]): where a job that succeeded leaves a mark; a job with a mark is
        skipped (status "done before"). None: no marks.
    fresh (bool): ignore (and remove) the marks.
    say (Callable[[str], None]): where to print what happens.
    progress (Optional[Callable[[List[Job]], None]]): called with the running jobs every poll.
    expected (Optional[Dict[str, float]]): job name -> seconds of an earlier run, for the time
        left (see :func:`progress_line`).
    """
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique: {names}")
    for i, job in enumerate(jobs):
        unknown = [n for n in job.needs if n not in names[:i]]
        if unknown:
            raise ValueError(f"{job.name} needs {unknown}: not jobs listed before it")
    results: Dict[str, Result] = {}
    todo = []
    for job in jobs:
        mark = _mark_path(done_dir, job) if done_dir else None
        if mark is not None and fresh:
            mark.unlink(missing_ok=True)
        if mark is not None and mark.exists():
            results[job.name] = Result(job.name, "done before")
            say(f"{job.name}: done before (skipped; its log: {job.log})")
        else:
            todo.append(job)
    if not todo:
        return [results[n] for n in names]
    client, cluster = _client(workers, scheduler)
    try:
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[execute.__module__])
    except (ImportError, ValueError, KeyError):
        pass  # __main__ is pickled by value anyway
    try:
        in_todo = {job.name for job in todo}
        waiting = list(todo)
        running: Dict[str, object] = {}
        submitted: Dict[str, float] = {}
        by_name = {job.name: job for job in jobs}
        say(f"{len(todo)} job(s) on " + (f"the cluster of {scheduler}" if scheduler else
                                         f"a local Dask cluster of {workers} worker process(es)"))
        while waiting or running:
            for name, future in list(running.items()):
                if not future.done():
                    continue
                del running[name]
                try:
                    data = future.result()
                except Exception as err:  # the worker died or the task could not run
                    data = {"name": name, "status": "failed", "why": f"{type(err).__name__}: {err}"}
                result = Result(**{k: data.get(k, v) for k, v in asdict(Result(name, "")).items()})
                results[name] = result
                job = by_name[name]
                if result.status == "ok":
                    if done_dir is not None:
                        done_dir.mkdir(parents=True, exist_ok=True)
                        _mark_path(done_dir, job).write_text(json.dumps(
                            {"name": name, "argv": job.argv, "seconds": result.seconds, "ended": time.time()}))
                    say(result.output or f"{name}: done in {format_seconds(result.seconds)} (log: {job.log})")
                elif result.status == "failed":
                    tail = _tail(Path(job.cwd) / job.log)
                    say("\n".join([f"FAILED: {result.describe(job)}; the end of {job.log}:"]
                                  + ["    " + line for line in tail]))
                else:
                    say(f"NOT RUN: {result.describe(job)}")
                finished = [r for n, r in results.items() if n in in_todo]
                now = time.time()
                left_jobs = {job.name: now - submitted[job.name] if job.name in running else 0.0
                             for job in todo if job.name not in results}
                say(progress_line(len(finished), len(todo),
                                  {r.name: r.seconds for r in finished if r.status == "ok"},
                                  len(running), workers if not scheduler else None, expected, left_jobs))
            for job in next_jobs(waiting, results, in_todo, _slots(client, workers, scheduler) - len(running)):
                waiting.remove(job)
                needed = [asdict(results[n]) for n in job.needs if n in in_todo]
                running[job.name] = client.submit(execute, asdict(job), *needed,
                                                  key=f"{job.name}-{job.key}", pure=False)
                submitted[job.name] = time.time()
            if running:
                if progress is not None:
                    progress([by_name[n] for n in running])
                time.sleep(POLL_SECONDS)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return [results[n] for n in names]


def next_jobs(waiting: List[Job], results: Dict[str, "Result"], in_todo: set, free: int) -> List[Job]:
    """The jobs to start now, at most ``free``: those whose needed jobs (of this run) have ended,
    a job that continues a chain (it needs another) before the others, then in the given order.
    The runner hands Dask no more jobs than it has worker threads: left to itself, Dask's
    scheduler placed a queue of long jobs of unknown length on one worker while the other idled."""
    if free <= 0:
        return []
    ready = [job for job in waiting if all(n in results for n in job.needs if n in in_todo)]
    ready.sort(key=lambda job: not any(n in in_todo for n in job.needs))  # stable: chains first
    return ready[:free]


def _slots(client, workers: int, scheduler: Optional[str]) -> int:
    """Jobs the cluster runs at once: the local cluster's workers, or the threads of the workers
    the scheduler has now (workers may join or leave while the jobs run)."""
    if not scheduler:
        return workers
    info = client.scheduler_info().get("workers", {})
    return max(1, sum(int(w.get("nthreads", 1)) for w in info.values()))


def progress_line(done: int, total: int, finished: Dict[str, float], running: int,
                  workers: Optional[int], expected: Optional[Dict[str, float]] = None,
                  left_jobs: Optional[Dict[str, float]] = None) -> str:
    """"job N of M done" and a rough time left, ``workers`` at a time (a guide: early stopping
    ends some jobs sooner). ``finished``: name -> seconds of the jobs that succeeded.

    Without ``expected``: the jobs not finished at the mean time of the finished ones. With
    ``expected`` (job name -> seconds of a timed earlier run, EXPECTED_TIMES): each job not
    finished (``left_jobs``: name -> seconds it has run so far) at its expected time, scaled by
    how fast the finished jobs ran here against their expected times, less what it has run; a
    job missing from ``expected`` at the mean time of the finished ones."""
    text = f"{done} of {total} jobs done"
    left = total - done
    if not left:
        return text
    text += f", {running} running"
    at_a_time = max(1, min(workers or running or 1, left))
    mean = sum(finished.values()) / len(finished) if finished else None
    if expected and left_jobs is not None:
        known = [name for name in finished if expected.get(name)]
        scale = sum(finished[n] for n in known) / sum(expected[n] for n in known) if known else 1.0
        work = 0.0
        for name, ran in left_jobs.items():
            guess = expected[name] * scale if expected.get(name) else mean
            if guess is None:
                return text
            work += max(0.0, guess - ran)
        basis = "the times of the last timed run" + (f" x {scale:.2f}, this machine's pace so far" if known else "")
        return text + f"; about {format_seconds(work / at_a_time)} left ({basis}, {at_a_time} at a time)"
    if mean is not None:
        estimate = mean * left / at_a_time
        text += (f"; about {format_seconds(estimate)} left (the mean time of the "
                 f"finished jobs, {at_a_time} at a time)")
    return text


def read_expected(path: Path) -> Dict[str, float]:
    """Job name -> seconds from a timings table (``reports/timings.json`` of a timed run: its
    steps' ``jobs``, a job ``STEP:LABEL`` written there as ``STEP (LABEL)``); {} if the file is
    missing or unreadable."""
    data = _read_json(path, {}) or {}
    return {re.sub(r"^(\S+) \((.+)\)$", r"\1:\2", job["step"]): float(job["seconds"])
            for step in data.get("steps", []) for job in step.get("jobs", [])
            if "step" in job and "seconds" in job}


def _tail(path: Path) -> List[str]:
    try:
        return path.read_text(encoding="utf8", errors="replace").splitlines()[-TAIL_LINES:]
    except OSError:
        return ["(no log)"]


# -- project steps: a queue of timed lines -----------------------------------------------------


def _read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return default


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


def open_queue(step: str) -> None:
    """Start queueing the timed lines of this ``spacy project run`` for ``run STEP``."""
    RUNNER_DIR.mkdir(parents=True, exist_ok=True)
    QUEUE.write_text(json.dumps({"run": run_id(), "step": step, "open": True, "jobs": [],
                                 "started": time.time()}), encoding="utf8")
    position = workflow_position(step, parent_workflow())
    if position:
        print(position, flush=True)
    print(f"[runner {step}] queueing the lines of {step}; they run at its last line", flush=True)


def step_jobs(queue: dict) -> List[Job]:
    """The queued lines as jobs: each runs ``scripts/timed.py`` in job mode, after the earlier
    jobs whose project command makes what its command needs."""
    step, jobs, outputs = queue["step"], [], {}
    timed = str(Path(__file__).with_name("timed.py"))
    for index, line in enumerate(queue["jobs"]):
        member = line["name"].partition(":")[0]
        files = command_files(member)
        name = line["name"] if line["name"] not in outputs else f"{line['name']} ({index})"
        log = line["log"] or os.path.relpath(RUNNER_DIR / f"{index:02d}-{line['name'].replace(':', '-')}.log")
        needs = [other for other, made in outputs.items() if overlaps(made, files["deps"])]
        env = {JOB_ENV: json.dumps({"step": step, "index": index}), RUN_ENV: queue["run"]}
        jobs.append(Job(name, [sys.executable, timed, line["name"], line["threads"], "--log", log, *line["args"]],
                        log, cwd=os.getcwd(), env=env, needs=needs, writes_log=True))
        outputs[name] = files["outputs"]
    return jobs


def print_progress(running: List[Job], seen: Dict[str, int], say: Callable[[str], None],
                   order: Optional[Dict[str, int]] = None, started: Optional[Dict[str, float]] = None) -> None:
    """Each running job's training-table rows not printed yet (once per row): "job N of M", the
    step of its step budget, dev F1, and its time left at most at the step rate measured since
    its first row (early stopping may end it sooner)."""
    started = {} if started is None else started
    for job in running:
        path = Path(job.cwd) / job.log
        if not path.exists():
            continue
        log = training_log.read(path)
        if len(log.steps) > seen.get(job.name, 0):
            seen[job.name] = len(log.steps)
            now = time.time()
            first = started.setdefault(job.name, (log.last_step, now))
            which = f"job {order[job.name] + 1} of {len(order)} " if order and job.name in order else ""
            cap = f" of at most {log.max_steps}" if log.max_steps else ""
            text = (f"{which}{job.name}: step {log.last_step}{cap}, dev F1 {log.scores[-1]:.2f} "
                    f"(best {log.best_score:.2f} at step {log.best_step})")
            if log.demo:
                text += " [demo run]"
            if log.max_steps and log.last_step > first[0]:
                rate = (now - first[1]) / (log.last_step - first[0])
                text += f"; at most {format_seconds((log.max_steps - log.last_step) * rate)} left"
            say(text)


def run_queue(step: str, *, workers: int, scheduler: Optional[str], fresh: bool = False) -> int:
    """Run the lines queued since ``open STEP`` in this ``spacy project run``; 0 if all succeeded."""
    queue = _read_json(QUEUE)
    if not queue or not queue.get("open") or queue.get("step") != step or queue.get("run") != run_id():
        sys.exit(f"[runner {step}] no queue is open for {step} in this run: the command must start "
                 f"with `python scripts/runner.py open {step}`")
    queue["open"] = False
    QUEUE.write_text(json.dumps(queue), encoding="utf8")
    jobs = step_jobs(queue)
    start = time.time()

    def say(text: str) -> None:
        print(f"[runner {step} {format_seconds(time.time() - start)}] {text}", flush=True)

    seen: Dict[str, int] = {}
    order = {job.name: i for i, job in enumerate(jobs)}
    started: Dict[str, tuple] = {}
    results = run_jobs(jobs, workers=workers, scheduler=scheduler, done_dir=RUNNER_DIR / "done" / step,
                       fresh=fresh, say=say,
                       progress=lambda running: print_progress(running, seen, say, order, started),
                       expected=read_expected(EXPECTED_TIMES))
    seconds = time.time() - start
    write_record({"run": queue["run"], "step": step, "seconds": round(seconds, 2), "ended": time.time(),
                  "command": "scripts/runner.py", "jobs": len(jobs)})
    where = f"the cluster of {scheduler}" if scheduler else f"{workers} at a time"
    lines = [f"[time] {step}: {format_seconds(seconds)} ({len(jobs)} jobs, {where})"]
    for job, result in zip(jobs, results):
        took = format_seconds(result.seconds) if result.status == "ok" else result.status
        log = training_log.read(Path(job.log)) if Path(job.log).exists() else None
        what = log.verdict() if log is not None and (log.steps or log.skipped) else f"log: {job.log}"
        lines.append(f"  {job.name:<28} {took:>14}  {what}")
    print("\n".join(lines), flush=True)
    bad = [(job, r) for job, r in zip(jobs, results) if r.status in ("failed", "not run")]
    if bad:
        print(f"[runner {step}] failed: " + "; ".join(r.describe(job) for job, r in bad)
              + f". Rerunning the step skips the {sum(r.status != 'failed' and r.status != 'not run' for r in results)}"
              " job(s) that finished.", file=sys.stderr, flush=True)
        return 1
    for mark in (RUNNER_DIR / "done" / step).glob("*.json"):
        mark.unlink()  # the step is complete: spaCy reruns it only when its deps change
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["open", "run"], help="open: start queueing the step's "
                        "timed lines; run: run them on the Dask cluster and wait.")
    parser.add_argument("step", help="The project command whose lines the runner runs.")
    parser.add_argument("--workers", type=int, default=2,
                        help="Worker processes of the local Dask cluster (the var cpu_jobs).")
    parser.add_argument("--scheduler", default="",
                        help="Address of a running Dask scheduler (tcp://host:8786) to run the jobs "
                        "on instead of a local cluster (the var scheduler; empty: local).")
    parser.add_argument("--fresh", action="store_true",
                        help="Run every job again, also those a failed run of the step finished.")
    args = parser.parse_args(argv)
    if args.action == "open":
        open_queue(args.step)
        return 0
    return run_queue(args.step, workers=args.workers, scheduler=args.scheduler or None, fresh=args.fresh)


if __name__ == "__main__":
    sys.exit(main())
