"""Print and save how long each step of a workflow took in this ``spacy project run``.

    python scripts/timings.py --workflow all --output reports/timings

Reads ``metrics/timings.jsonl`` (written by ``scripts/timed.py``), keeps the lines of the
``spacy project run`` process that runs this script (so the steps of this run of the workflow),
and writes ``<output>.md`` and ``<output>.json``: the wall time of each step in workflow order
(steps skipped because nothing changed are marked so), the total, the date and the machine.
"""
import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import srsly

from timed import LOG, PROJECT_DIR, format_seconds, read_log, run_id


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()}, load average at the end {load}"


def collect(records, run: str, steps):
    """(step, seconds or None) in workflow order, for the records of one run."""
    seconds = {}
    for record in records:
        if record["run"] == run:
            seconds[record["step"]] = seconds.get(record["step"], 0.0) + record["seconds"]
    return [(step, seconds.get(step)) for step in steps]


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
    rows = collect(read_log(Path(args.log)), run_id(), steps)
    total = sum(s for _, s in rows if s is not None)
    ran = sum(1 for _, s in rows if s is not None)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Wall time of `spacy project run {args.workflow}`", "",
             f"{date}; {machine()}.", "",
             "| step | wall time |", "|---|---:|"]
    for step, seconds in rows:
        lines.append(f"| {step} | {format_seconds(seconds) if seconds is not None else 'skipped (nothing changed)'} |")
    lines.append(f"| **total ({ran} of {len(steps)} steps ran)** | **{format_seconds(total)}** |")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf8")
    srsly.write_json(out.with_suffix(".json"), {
        "workflow": args.workflow, "date": date, "machine": machine(), "total_seconds": round(total, 1),
        "steps": [{"step": s, "seconds": None if t is None else round(t, 1)} for s, t in rows],
    })
    width = max(len(s) for s in steps)
    print(f"Wall time of the steps of '{args.workflow}' in this run:")
    for step, seconds in rows:
        print(f"  {step:<{width}}  {format_seconds(seconds) if seconds is not None else 'skipped'}")
    print(f"  {'total':<{width}}  {format_seconds(total)} ({ran} of {len(steps)} steps ran)")
    print(f"Wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
