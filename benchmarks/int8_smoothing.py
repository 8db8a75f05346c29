"""The smoothing strength of ``quantize --calibration`` (issue 50), chosen on dev sets.

For each trained pipeline (the study's ``{method}-{domain}-minilm-s{seed}/model-best``), the dev F1
of the fp32 pipeline, of plain int8 (``quantize``) and of int8 smoothed on the domain's training
set at each strength (``quantize --calibration CORPUS/{domain}/train.spacy --smoothing A``).
Test sets are not read: the strength chosen here is then scored on test by ``speed.py --int8
--calibration``. F1 only (no timing), so it may run beside other work::

    python benchmarks/int8_smoothing.py --study-workdir WORK --corpus CORPUS --domains ai,music \
        --alphas 0.5,0.7,0.8,0.9,1.0

Writes benchmarks/results/int8_smoothing.md and .json (one row per pipeline x variant).
"""
import argparse
import json
import os
import re
import statistics
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


def pipelines(workdir: Path, methods: List[str], domains: List[str], seeds: List[str]) -> List[Dict]:
    pattern = re.compile(rf"^({'|'.join(map(re.escape, methods))})-(\w+)-minilm-s(\d+)$")
    found = []
    for run in sorted(workdir.iterdir()):
        m = pattern.match(run.name)
        if m and m.group(2) in domains and (not seeds or m.group(3) in seeds) \
                and (run / "model-best" / "config.cfg").exists():
            found.append({"pipeline": f"{m.group(1)}-s{m.group(3)}", "domain": m.group(2),
                          "path": run / "model-best"})
    return found


def measure(subject: Dict, corpus: Path, alphas: List[float], tmp: Path) -> List[Dict]:
    import spacy

    from spacy_crossner.evaluate import evaluate
    from spacy_crossner.quantize import quantize

    domain, path = subject["domain"], subject["path"]
    dev, train = corpus / domain / "dev.spacy", corpus / domain / "train.spacy"
    variants = [("fp32", None, path)]
    plain = tmp / f"{domain}-int8"
    quantize(model=path, output=plain)
    variants.append(("int8", None, plain))
    for alpha in alphas:
        out = tmp / f"{domain}-smooth{alpha}"
        quantize(model=path, output=out, calibration=train, smoothing=alpha)
        variants.append((f"int8-smooth{alpha:g}", alpha, out))
    rows = []
    for variant, alpha, model in variants:
        result = evaluate(model=model, data=dev, nlp=spacy.load(model))
        rows.append({"pipeline": subject["pipeline"], "domain": domain, "variant": variant,
                     "smoothing": alpha, "dev_f1": 100 * result["ents_f"], "path": str(path)})
        print(f"{subject['pipeline']} {domain} {variant}: dev F1 {rows[-1]['dev_f1']:.2f}", flush=True)
    for row in rows:
        row["dev_f1_change"] = row["dev_f1"] - rows[0]["dev_f1"]
    return rows


def write_report(args, rows: List[Dict], minutes: float) -> None:
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    lines = [
        "# int8 smoothing strength, chosen on dev (issue 50)",
        "",
        f"- Command (from the repository root): `python benchmarks/int8_smoothing.py {' '.join(args.argv)}`",
        f"- Machine: {os.cpu_count()} CPU cores, {cpu_model()}; date {utc_now()}; {minutes:.1f} min. "
        "F1 only (no timing). Raw rows in `int8_smoothing.json`.",
        "- Variants: fp32 (the trained pipeline), int8 (`quantize`), int8-smoothA (`quantize "
        "--calibration CORPUS/DOMAIN/train.spacy --smoothing A`); dev F1 with `spacy_crossner.evaluate`, "
        "sentence mode.",
        "",
        "## Dev F1 change from fp32",
        "",
        "| variant | " + " | ".join(domains) + " | mean |",
        "|---|" + "---:|" * (len(domains) + 1),
    ]
    for variant in variants:
        changes = []
        cells = []
        for domain in domains:
            vals = [r["dev_f1_change"] for r in rows if r["variant"] == variant and r["domain"] == domain]
            value = statistics.mean(vals) if vals else None
            cells.append("" if value is None else f"{value:+.2f}")
            if value is not None:
                changes.append(value)
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {statistics.mean(changes):+.2f} |")
    lines += ["", "## Dev F1", "", "| pipeline | domain | " + " | ".join(variants) + " |",
              "|---|---|" + "---:|" * len(variants)]
    for key in dict.fromkeys((r["pipeline"], r["domain"]) for r in rows):
        by = {r["variant"]: r["dev_f1"] for r in rows if (r["pipeline"], r["domain"]) == key}
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(f"{by[v]:.2f}" if v in by else "" for v in variants) + " |")
    Path(args.output).write_text("\n".join(lines) + "\n" + kept_notes(args.output))


def kept_notes(path) -> str:
    """The hand-written "## Notes" section of the previous report, kept across runs."""
    old = Path(path).read_text() if Path(path).exists() else ""
    return old[old.index("\n## Notes"):] if "\n## Notes" in old else ""


def add_pipeline_args(parser: argparse.ArgumentParser, splits: str) -> None:
    """The options that name the trained pipelines and their corpora (this script's and
    calibration.py's)."""
    parser.add_argument("--study-workdir", type=Path, required=True, help="the study's --workdir")
    parser.add_argument("--corpus", type=Path, required=True, help=f"converted corpora: DOMAIN/{{{splits}}}.spacy")
    parser.add_argument("--methods", default="trf_finetune", help="study methods (comma-separated)")
    parser.add_argument("--domains", default="ai,literature,music,politics,science")
    parser.add_argument("--seeds", default="", help="seeds (comma-separated; default all)")


def subjects_of(args) -> List[Dict]:
    """The pipelines the options name; exits with what was looked for when there is none."""
    if not args.study_workdir.is_dir():
        sys.exit(f"--study-workdir {args.study_workdir}: no such directory (the study's --workdir)")
    found = pipelines(args.study_workdir, args.methods.split(","), args.domains.split(","),
                      [s for s in args.seeds.split(",") if s])
    if not found:
        sys.exit(f"--study-workdir {args.study_workdir}: no {args.methods}-DOMAIN-minilm-sSEED/model-best "
                 f"for the domains {args.domains}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pipeline_args(parser, "train,dev")
    parser.add_argument("--alphas", default="0.5,0.7,0.8,0.9,1.0", help="smoothing strengths")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--output", default=str(RESULTS / "int8_smoothing.md"))
    parser.add_argument("--json", default=str(RESULTS / "int8_smoothing.json"))
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    import torch

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    subjects = subjects_of(args)
    alphas = [float(a) for a in args.alphas.split(",")]
    start = time.time()
    rows: List[Dict] = []
    with tempfile.TemporaryDirectory(prefix="int8_smoothing_") as tmp:
        for subject in subjects:
            rows += measure(subject, args.corpus, alphas, Path(tmp))
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
            write_report(args, rows, (time.time() - start) / 60)
    print(Path(args.output).read_text())


if __name__ == "__main__":
    main()
