"""Write the measured results of a run of ``all`` into README.md, between its results markers.

    python scripts/readme_results.py --report reports/ai/report.json --timings reports/timings.json

The scores come from ``report.json`` (written by the ``report`` step, ``scripts/report.py``):
the runs whose dev F1 levelled with their test scores and features, the zero-resource runs, and
the demo runs that did not converge, listed without scores. The step times come from
``reports/timings.json`` (the ``timings`` step), with the jobs of parallel steps under them. The
numbers in the README are never typed by hand. Everything between ``<!-- results:start -->`` and
``<!-- results:end -->`` is replaced. With ``--expected PATH`` the timings are also copied to
PATH (``expected_times.json``, which the runner reads for its estimates of the time left).
"""
import argparse
import shutil
import sys
from pathlib import Path

import srsly

from timed import format_seconds

START = "<!-- results:start -->"
END = "<!-- results:end -->"
STUDY_LINK = "[study/study.md](study/study.md)"


def fmt(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def dev_cell(run: dict) -> str:
    if run.get("best_step") is None:
        return "–"
    return (f"{fmt(run.get('best_dev_f'))} at {run['best_step']:,}; last {run['last_step']:,}"
            f"{'; ' + run['dev_set'] if run.get('dev_set') else ''}")


def f1_table(runs: list) -> list:
    lines = ["| run | | features | F1 | P | R | dev F1 (best step; last evaluation) |",
             "|---|---|---|---:|---:|---:|---|"]
    for run in runs:
        o = run["overall"]
        lines.append(f"| {run['name']} | {run.get('kind', '')} | {run.get('features') or '–'} | "
                     f"{fmt(o['f'])} | {fmt(o['p'])} | {fmt(o['r'])} | {dev_cell(run)} |")
    return lines


def step_rows(timings: dict) -> list:
    lines = ["| step | wall time |", "|---|---:|"]
    for step in timings["steps"]:
        seconds = step["seconds"]
        lines.append(f"| {step['step']} | {format_seconds(seconds) if seconds is not None else 'skipped (nothing changed)'} |")
        for job in step.get("jobs", []):
            lines.append(f"| &nbsp;&nbsp;↳ {job['step']} (in parallel) | {format_seconds(job['seconds'])} |")
    ran = sum(1 for s in timings["steps"] if s["seconds"] is not None)
    lines.append(f"| **total ({ran} of {len(timings['steps'])} steps ran)** | **{format_seconds(timings['total_seconds'])}** |")
    return lines


def results_section(report: dict, timings: dict, report_link: str = "") -> str:
    """The README's results: step times, then the levelled runs' scores (the zero-resource ones
    apart), then the demo runs (no scores: they did not converge) and the skipped ones."""
    zero = report.get("zero")
    lines = [START, "",
             f"Measured by `spacy project run all` on {timings['date']}, {timings['machine']}; "
             f"written by `spacy project run readme` from `reports/timings.json` and "
             f"`{report_link or 'report.json'}`.", ""]
    lines += step_rows(timings)
    lines += ["", "### Trained to a levelled dev F1 (best step before the last evaluation)", "",
              f"{report.get('title') or 'Target test'}; entity-level exact match, ×100. Only runs whose "
              "dev F1 levelled are shown: the best evaluation came after step 0 and before the last, "
              "and the two or more evaluations after it did not beat it.", ""]
    lines += f1_table(report["runs"]) if report["runs"] else ["No run levelled."]
    if zero and zero.get("runs"):
        lines += ["", f"{zero.get('title') or 'Zero-resource (source types only)'}:", ""]
        lines += f1_table(zero["runs"])
    demo = report.get("demo", [])
    lines += ["", f"### Demo runs, not converged: see {STUDY_LINK}", ""]
    if demo:
        lines += ["These ran end to end (trained, saved, scored) at a budget where their dev F1 had "
                  "not levelled: their test scores are not results and are not shown.", "",
                  "| run | | features | what the training log says |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {r.get('kind', '')} | {r.get('features') or '–'} | {r['verdict']} |"
                  for r in demo]
    else:
        lines.append("None: every run levelled.")
    skipped = report.get("skipped", [])
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"**{r['name']}** ({r['skipped']})" for r in skipped) + "."]
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--timings", type=Path, required=True)
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("--expected", type=Path, default=None,
                        help="Also copy the timings here (the runner's expected job times).")
    args = parser.parse_args()
    for path in (args.report, args.timings, args.readme):
        if not path.exists():
            sys.exit(f"Not found: {path} (run the `all` workflow first)")
    text = args.readme.read_text(encoding="utf8")
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        sys.exit(f"{args.readme} needs one '{START}' line and one '{END}' line after it")
    section = results_section(srsly.read_json(args.report), srsly.read_json(args.timings),
                              report_link=str(args.report))
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    args.readme.write_text(before + section + after, encoding="utf8")
    print(f"Wrote the results of {args.report} and {args.timings} into {args.readme}")
    if args.expected is not None:
        shutil.copyfile(args.timings, args.expected)
        print(f"Copied {args.timings} to {args.expected} (the job times the runner expects)")


if __name__ == "__main__":
    main()
