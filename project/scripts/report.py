"""The report of the `all` workflow: results only for the runs whose dev F1 levelled.

    python scripts/report.py --output reports/ai --title "CrossNER ai test ..." \\
        --run bilstm_joint training/ai/bilstm_joint/train.log metrics/ai/bilstm_joint.json \\
        --peer spacy_ner training/ai/spacy_ner/train.log metrics/ai/spacy_ner.json \\
        --zero moee_zero training/zero/moee_zero/train.log metrics/zero/ai/moee_zero.json

Each run is NAME, its training log (``scripts/timed.py --log``) and its test metrics
(``python -m spacy_crossner evaluate``); ``--run`` is one of our pipelines, ``--peer`` a spaCy
pipeline beside them, ``--zero`` a source-only run scored on the source's types. From the log
(``scripts/training_log.py``) each run is one of:

- *levelled*: the best dev F1 came after step 0 and before the last evaluation, with at least two
  evaluations after it that did not beat it. Its test scores are results: the tables,
  ``report.json`` ``runs``, the per-type heatmap ``f1_per_type.png``.
- *demo*: the method ran end to end (trained, saved, scored), but its dev F1 had not levelled
  (still rising at its last evaluations, or never above step 0's). Its test score is NOT shown: a number from a model
  that has not converged says nothing about the method; the converged comparison is the study's
  (``benchmarks/results/study.md``). Listed with what its log says.
- *skipped*: the training said why it did not run (a spaCy pipeline that is not installed).

Every row says which features the model read (the ``[features]`` line of ``scripts/train.py``).
Writes ``report.md``, ``report.json`` and ``f1_per_type.png`` in ``--output``.
"""
import argparse
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

import srsly

import training_log
from timed import format_seconds

ROOT = Path(__file__).resolve().parents[2]
STUDY = "benchmarks/results/study.md"
KINDS = {"run": "ours", "peer": "spaCy peer", "zero": "ours, zero-resource"}


def dev_set(log: training_log.TrainingLog) -> str:
    """Which dev set selected the model, from the training command."""
    command = log.command
    if "--paths.target_dev" in command:
        return "target dev"
    if "--paths.source_dev" in command:
        limit = training_log.option_value(command, "--corpora.dev.limit", int)
        return "source dev" + (f" (first {limit:,})" if limit else "")
    if "--paths.dev" in command:
        return "target dev"
    return "dev"


def read_runs(specs: List[tuple]) -> List[Dict]:
    """Each run's name, kind, log (parsed), metrics path and status."""
    runs = []
    for option, (name, log_path, metrics) in specs:
        log = training_log.read(log_path)
        status = "skipped" if log.skipped else "levelled" if log.levelled else "demo"
        if status == "levelled" and not Path(metrics).exists():
            sys.exit(f"{name}: metrics not found: {metrics} (the evaluate step writes it)")
        runs.append({"name": name, "option": option, "kind": KINDS[option], "log": log,
                     "log_path": str(log_path), "metrics": str(metrics), "status": status})
    return runs


def dev_cell(log: training_log.TrainingLog) -> str:
    cap = f" (max {log.max_steps:,})" if log.max_steps else ""
    return (f"{log.best_score:.2f} at step {log.best_step:,}; last eval. {log.last_step:,}{cap}; "
            f"{dev_set(log)}")


def time_cell(log: training_log.TrainingLog) -> str:
    return format_seconds(log.seconds) if log.seconds is not None else "–"


def status_record(run: Dict, scores: Optional[Dict] = None) -> Dict:
    log = run["log"]
    record = {"name": run["name"], "kind": run["kind"], "status": run["status"],
              "features": log.features, "dev_set": dev_set(log), "log": run["log_path"],
              **{k: v for k, v in training_log.summary(log).items() if k != "features"}}
    if scores is not None:
        record["overall"] = scores
    return record


def scores_table(runs: List[Dict], loaded: Dict) -> List[str]:
    from spacy_crossner.report import format_percent

    lines = ["| run | | features | test F1 | P | R | dev F1 (best step; last evaluation; dev set) | train time |",
             "|---|---|---|---:|---:|---:|---|---:|"]
    for run in runs:
        p, r, f = loaded[run["name"]].overall
        lines.append(f"| {run['name']} | {run['kind']} | {run['log'].features or '–'} | "
                     f"**{format_percent(f)}** | {format_percent(p)} | {format_percent(r)} | "
                     f"{dev_cell(run['log'])} | {time_cell(run['log'])} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for option, what in (("run", "one of our pipelines"), ("peer", "a spaCy pipeline beside ours"),
                         ("zero", "a source-only run scored on the source's types")):
        parser.add_argument(f"--{option}", nargs=3, action="append", default=[],
                            metavar=("NAME", "LOG", "METRICS"), help=f"A run: {what}.")
    parser.add_argument("--output", type=Path, required=True, help="Folder for the report.")
    parser.add_argument("--title", default="Test scores")
    parser.add_argument("--zero-title", default="Zero-resource: trained on the source only, scored "
                        "on the source's types (other target types count as O)")
    args = parser.parse_args(argv)
    from spacy_crossner.report import PLOT_NAME, ReportError, load_runs, markdown_report, plot_f1, report_json

    specs = ([("run", s) for s in args.run] + [("peer", s) for s in args.peer]
             + [("zero", s) for s in args.zero])
    if not specs:
        sys.exit("Give at least one --run, --peer or --zero")
    try:
        runs = read_runs(specs)
    except FileNotFoundError as err:
        sys.exit(str(err))
    levelled = [r for r in runs if r["status"] == "levelled" and r["option"] != "zero"]
    zero = [r for r in runs if r["status"] == "levelled" and r["option"] == "zero"]
    demo = [r for r in runs if r["status"] == "demo"]
    skipped = [r for r in runs if r["status"] == "skipped"]
    try:
        loaded = {run.name: run for run in load_runs([f"{r['name']}={r['metrics']}" for r in levelled + zero])} \
            if levelled + zero else {}
    except ReportError as err:
        sys.exit(str(err))

    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    study = os.path.relpath(ROOT / STUDY, out.resolve())
    lines = [f"# {args.title}", "",
             "Each model kept its best checkpoint on a dev set, evaluated during training (the "
             "settings are in the first line of each training log). A test score is shown only "
             "where the dev F1 **levelled**: its best evaluation came after step 0 and before the "
             f"last one, with at least {training_log.EVALS_AFTER_BEST} evaluations after it that did "
             "not beat it. Test scores: entity-level exact match, ×100.", "",
             "## Trained to a levelled dev F1 (best step before the last evaluation)", ""]
    if levelled:
        lines += scores_table(levelled, loaded)
    else:
        lines.append("No run levelled.")
    if zero:
        lines += ["", f"### {args.zero_title}", ""] + scores_table(zero, loaded)
    lines += ["", f"## Demo runs, not converged: see [{STUDY}]({study})", ""]
    if demo:
        lines += ["These methods ran end to end (trained, saved, scored on the test set), at a budget "
                  "where their dev F1 had not levelled: their test scores are not results and are "
                  f"not shown. The converged comparison of the methods is in `{STUDY}`.", "",
                  "| run | | features | what the training log says | train time |", "|---|---|---|---|---:|"]
        lines += [f"| {r['name']} | {r['kind']} | {r['log'].features or '–'} | {r['log'].verdict()} | "
                  f"{time_cell(r['log'])} |" for r in demo]
    else:
        lines.append("None: every run levelled.")
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- **{r['name']}**: {r['log'].skipped}" for r in skipped]
    plot = out / PLOT_NAME
    if levelled:
        per_type = [loaded[r["name"]] for r in levelled]
        plot_f1(per_type, plot, title=f"{args.title}: F1 per type of the levelled runs")
        body = markdown_report(per_type, title="x", plot_name=PLOT_NAME).split("\n", 2)[2]
        lines += ["", "## The levelled runs in detail", "", body.replace("\n## ", "\n### ")]
    elif plot.exists():
        plot.unlink()  # no stale heatmap of an earlier run
    (out / "report.md").write_text("\n".join(lines).rstrip() + "\n", encoding="utf8")

    data = report_json([loaded[r["name"]] for r in levelled], title=args.title) if levelled else \
        {"title": args.title, "types": [], "scale": "percent", "runs": []}
    for record, run in zip(data["runs"], levelled):
        record.update(status_record(run))
    data["zero"] = {"title": args.zero_title,
                    "runs": [status_record(r, loaded[r["name"]].to_dict()["overall"]) for r in zero]}
    data["demo"] = [status_record(r) for r in demo]
    data["skipped"] = [status_record(r) for r in skipped]
    srsly.write_json(out / "report.json", data)
    for run in runs:
        print(f"{run['name']:<24} {run['status']:<9} {run['log'].verdict()}")
    print(f"Wrote {out / 'report.md'}, {out / 'report.json'}" + (f" and {plot}" if levelled else ""))


if __name__ == "__main__":
    main()
