"""Entity probabilities before and after ``calibrate`` (issue 47 part 6), on trained pipelines.

For each pipeline (the study's ``{method}-{domain}-minilm-s{seed}/model-best``): fit the
temperature on the domain's dev set (``python -m spacy_crossner calibrate``), then score the
test set with the pipeline as trained and as calibrated (``spacy_crossner evaluate``): expected
calibration error (10 bins, over the predicted entities), the reliability table, and test F1
(calibration must leave the entities as they are)::

    python benchmarks/calibration.py --study-workdir WORK --corpus CORPUS --domains ai,music

Writes benchmarks/results/calibration.md and .json (and calibration.png, a reliability diagram per
domain, where matplotlib is installed). Inference only: minutes on CPU.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_model, utc_now  # noqa: E402
from int8_smoothing import add_pipeline_args, kept_notes, subjects_of  # noqa: E402


def measure(subject: Dict, corpus: Path, tmp: Path) -> Dict:
    from spacy_crossner.calibrate import calibrate
    from spacy_crossner.evaluate import evaluate

    domain, path = subject["domain"], subject["path"]
    out = tmp / f"{subject['pipeline']}-{domain}"
    fit = calibrate(model=path, dev=corpus / domain / "dev.spacy", output=out)
    fitted = fit["domains"]
    test = corpus / domain / "test.spacy"
    before, after = evaluate(model=path, data=test), evaluate(model=out, data=test)
    row = {
        "pipeline": subject["pipeline"], "domain": domain, "path": str(path),
        "temperature": {d: r["temperature"] for d, r in fitted.items()},
        "at_bound": {d: r["at_bound"] for d, r in fitted.items()},
        "dev_ece_before": {d: r["before"]["ece"] for d, r in fitted.items()},
        "dev_ece_after": {d: r["after"]["ece"] for d, r in fitted.items()},
        "test_f1_before": 100 * before["ents_f"], "test_f1_after": 100 * after["ents_f"],
        "test_ece_before": before["ents_ece"], "test_ece_after": after["ents_ece"],
        "test_before": before["calibration"]["overall"], "test_after": after["calibration"]["overall"],
    }
    print(f"{subject['pipeline']} {domain}: T {row['temperature']}, test ECE {row['test_ece_before']:.3f} -> "
          f"{row['test_ece_after']:.3f}, F1 {row['test_f1_before']:.2f} -> {row['test_f1_after']:.2f}", flush=True)
    return row


def bins_text(summary: Dict) -> str:
    cells = [f"{b['lower']:.1f}-{b['upper']:.1f}: {b['confidence']:.2f}/{b['accuracy']:.2f} ({b['count']})"
             for b in summary["bins"] if b["count"]]
    return "; ".join(cells)


def plot(rows: List[Dict], path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows), 3.2), squeeze=False)
    for ax, row in zip(axes[0], rows):
        for key, style in (("test_before", "o-"), ("test_after", "s-")):
            bins = [b for b in row[key]["bins"] if b["count"]]
            ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], style,
                    label=key.replace("test_", ""))
        ax.plot([0, 1], [0, 1], ":", color="grey")
        ax.set_title(row["domain"])
        ax.set_xlabel("confidence")
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def write_report(args, rows: List[Dict], minutes: float) -> None:
    lines = [
        "# Entity probabilities before and after `calibrate` (issue 47 part 6)",
        "",
        f"- Command (from the repository root): `python benchmarks/calibration.py {' '.join(args.argv)}`",
        f"- Machine: {os.cpu_count()} CPU cores, {cpu_model()}; date {utc_now()}; {minutes:.1f} min. "
        "Raw rows in `calibration.json`.",
        "- The temperature is fitted on each domain's dev set (`python -m spacy_crossner calibrate`); "
        "ECE (10 bins) and F1 are of the test set (`spacy_crossner.evaluate`, sentence mode), over "
        "the entities the pipeline predicts.",
        "",
        "| pipeline | domain | temperature | dev ECE before | dev ECE after | test ECE before | test ECE after | "
        "test F1 before | test F1 after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        d = next(iter(r["temperature"]))
        lines.append(
            f"| {r['pipeline']} | {r['domain']} | {r['temperature'][d]:.2f}{' (at bound)' if r['at_bound'][d] else ''} | "
            f"{r['dev_ece_before'][d]:.3f} | {r['dev_ece_after'][d]:.3f} | {r['test_ece_before']:.3f} | "
            f"{r['test_ece_after']:.3f} | {r['test_f1_before']:.2f} | {r['test_f1_after']:.2f} |")
    lines += ["", "## Reliability on test (bin: mean confidence / accuracy (entities))", ""]
    for r in rows:
        lines += [f"- {r['pipeline']} {r['domain']}, before: {bins_text(r['test_before'])}",
                  f"- {r['pipeline']} {r['domain']}, after: {bins_text(r['test_after'])}"]
    png = Path(args.output).with_suffix(".png")
    if plot(rows, png):
        lines += ["", f"![reliability on test, before and after]({png.name})"]
    Path(args.output).write_text("\n".join(lines) + "\n" + kept_notes(args.output))



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pipeline_args(parser, "dev,test")
    parser.add_argument("--output", default=str(RESULTS / "calibration.md"))
    parser.add_argument("--json", default=str(RESULTS / "calibration.json"))
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    warnings.filterwarnings("ignore")
    subjects = subjects_of(args)
    start = time.time()
    rows: List[Dict] = []
    with tempfile.TemporaryDirectory(prefix="calibration_") as tmp:
        for subject in subjects:
            rows.append(measure(subject, args.corpus, Path(tmp)))
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
            write_report(args, rows, (time.time() - start) / 60)
    print(Path(args.output).read_text())


if __name__ == "__main__":
    main()
