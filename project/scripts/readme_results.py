"""Write the measured results of a run of ``all`` into README.md, between its results markers.

    python scripts/readme_results.py --report reports/ai/report.json --timings reports/timings.json

The F1 table comes from ``report.json`` (written by the ``report`` step), the optional
zero-resource table from the ``report-zero`` step's, the step times from ``reports/timings.json``
(the ``timings`` step): the numbers in the README are never typed by hand. Everything between
``<!-- results:start -->`` and ``<!-- results:end -->`` is replaced.
"""
import argparse
import sys
from pathlib import Path

import srsly

from timed import format_seconds

START = "<!-- results:start -->"
END = "<!-- results:end -->"


def fmt(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def f1_table(report: dict) -> list:
    lines = ["| run | F1 | P | R |", "|---|---:|---:|---:|"]
    for run in report["runs"]:
        o = run["overall"]
        lines.append(f"| {run['name']} | {fmt(o['f'])} | {fmt(o['p'])} | {fmt(o['r'])} |")
    return lines


def results_section(report: dict, timings: dict, zero: dict = None, report_link: str = "") -> str:
    lines = [START, "",
             f"Measured by `spacy project run all` on {timings['date']}, {timings['machine']}; "
             f"written by `spacy project run readme` from `reports/timings.json` and "
             f"`{report_link or 'report.json'}`.", "",
             "| step | wall time |", "|---|---:|"]
    for step in timings["steps"]:
        seconds = step["seconds"]
        lines.append(f"| {step['step']} | {format_seconds(seconds) if seconds is not None else 'skipped (nothing changed)'} |")
    ran = sum(1 for s in timings["steps"] if s["seconds"] is not None)
    lines.append(f"| **total ({ran} of {len(timings['steps'])} steps ran)** | **{format_seconds(timings['total_seconds'])}** |")
    lines += ["", f"Test F1 ({report.get('title') or 'target domain'}; entity-level exact match, ×100):", ""]
    lines += f1_table(report)
    if zero:
        lines += ["", f"Zero-resource ({zero.get('title') or 'source types only'}):", ""]
        lines += f1_table(zero)
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--zero-report", type=Path, default=None)
    parser.add_argument("--timings", type=Path, required=True)
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    args = parser.parse_args()
    for path in (args.report, args.timings, args.readme):
        if not path.exists():
            sys.exit(f"Not found: {path} (run the `all` workflow first)")
    text = args.readme.read_text(encoding="utf8")
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        sys.exit(f"{args.readme} needs one '{START}' line and one '{END}' line after it")
    zero = srsly.read_json(args.zero_report) if args.zero_report and args.zero_report.exists() else None
    section = results_section(srsly.read_json(args.report), srsly.read_json(args.timings), zero,
                              report_link=str(args.report))
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    args.readme.write_text(before + section + after, encoding="utf8")
    print(f"Wrote the results of {args.report} and {args.timings} into {args.readme}")


if __name__ == "__main__":
    main()
