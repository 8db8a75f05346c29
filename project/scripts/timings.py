"""Print and save how long each step of a workflow took in this ``spacy project run``.

    python scripts/timings.py --workflow all --output reports/timings

Reads ``metrics/timings.jsonl`` (written by ``scripts/timed.py``), keeps the lines of the
``spacy project run`` process that runs this script (so the steps of this run of the workflow),
and writes ``<output>.md`` and ``<output>.json``: the wall time of each step in workflow order
(steps skipped because nothing changed are marked so), the total, the date and the machine. A
step that ran its lines through the runner (``scripts/runner.py``) counts with its wall time, and
its jobs are listed under it with their own times (they overlap, so they do not add up to it).
"""
import argparse
import os
import platform
import sys
import time
from pathlib import Path

import srsly

from machine import cpu_model
from timed import LOG, PROJECT_DIR, format_seconds, read_log, run_id


def machine() -> str:
    cpu = cpu_model()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()}, load average at the end {load}"


def collect(records, run: str, steps):
    """(step, seconds or None) in workflow order, for the records of one run (a runner's jobs are
    not added to any step: the runner step's own record is its wall time)."""
    seconds = {}
    for record in records:
        if record["run"] == run and "pool" not in record:
            seconds[record["step"]] = seconds.get(record["step"], 0.0) + record["seconds"]
    return [(step, seconds.get(step)) for step in steps]


def pool_jobs(records, run: str, step: str):
    """(job, seconds) of the jobs the runner of ``step`` ran in this run, in queue order."""
    jobs = [r for r in records if r["run"] == run and r.get("pool") == step]
    return [(f"{r['step']} ({r['label']})" if r.get("label") else r["step"], r["seconds"])
            for r in sorted(jobs, key=lambda r: r.get("job", 0))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflow", default="all")
    parser.add_argument("--output", default="reports/timings", help="Path without suffix.")
    parser.add_argument("--log", default=str(LOG))
    args = parser.parse_args()
    workflows = srsly.read_yaml(PROJECT_DIR / "project.yml").get("workflows", {})
    if args.workflow not in workflows:
        sys.exit(f"project.yml has no workflow '{args.workflow}' (workflows: {', '.join(workflows)})")
    steps = [s for s in workflows[args.workflow] if s != "timings"]
    records = read_log(Path(args.log))
    rows = collect(records, run_id(), steps)
    jobs = {step: pool_jobs(records, run_id(), step) for step in steps}
    total = sum(s for _, s in rows if s is not None)
    ran = sum(1 for _, s in rows if s is not None)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Wall time of `spacy project run {args.workflow}`", "",
             f"{date}; {machine()}.", "",
             "| step | wall time |", "|---|---:|"]
    for step, seconds in rows:
        lines.append(f"| {step} | {format_seconds(seconds) if seconds is not None else 'skipped (nothing changed)'} |")
        for job, job_seconds in jobs[step]:
            lines.append(f"| &nbsp;&nbsp;↳ {job} (in parallel) | {format_seconds(job_seconds)} |")
    lines.append(f"| **total ({ran} of {len(steps)} steps ran)** | **{format_seconds(total)}** |")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf8")
    srsly.write_json(out.with_suffix(".json"), {
        "workflow": args.workflow, "date": date, "machine": machine(), "total_seconds": round(total, 1),
        "steps": [{"step": s, "seconds": None if t is None else round(t, 1),
                   **({"jobs": [{"step": j, "seconds": round(js, 1)} for j, js in jobs[s]]} if jobs[s] else {})}
                  for s, t in rows],
    })
    width = max([len(s) for s in steps] + [len(j) + 2 for js in jobs.values() for j, _ in js])
    print(f"Wall time of the steps of '{args.workflow}' in this run:")
    for step, seconds in rows:
        print(f"  {step:<{width}}  {format_seconds(seconds) if seconds is not None else 'skipped'}")
        for job, job_seconds in jobs[step]:
            print(f"    {job:<{width - 2}}  {format_seconds(job_seconds)} (in parallel)")
    print(f"  {'total':<{width}}  {format_seconds(total)} ({ran} of {len(steps)} steps ran)")
    print(f"Wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
