"""Run the paper-sized `full` workflow for several domains and seeds, then average over seeds.

    python scripts/grid.py --domains politics,ai --seeds 555,666,777 --gpu-id 0 \
        --configs bilstm_target,bilstm_joint,trf_joint,bilstm_finetune --output reports/full/summary.md

Each (domain, seed) is one ``spacy project run full . --vars.target_domain D --vars.seed S``
(finished steps are skipped by spaCy projects), a job of the project's runner (scripts/runner.py):
``--workers`` at a time on a local Dask cluster (default 1: the runs share the project folder's
data steps), or over the cluster of ``--scheduler``. A failed run is named, the others go on, and
no summary is written until every run succeeded. The summary gives the mean test F1 (x100) over
seeds per domain and config, in both scoring modes, with the paper's reference numbers.
"""
import argparse
import statistics
import sys
from pathlib import Path

import srsly

from runner import Job, run_jobs

PROJECT_DIR = Path(__file__).resolve().parents[1]
# CrossNER paper, Table 2 (F1): rows comparable to our configs
PAPER = {
    "BiLSTM-CRF word+char, joint (Table 2)": {
        "politics": 56.60, "science": 49.97, "music": 44.79, "literature": 43.03, "ai": 43.56},
    "BERT Jointly Train w/o DAPT (Table 2)": {
        "politics": 68.85, "science": 65.03, "music": 67.59, "literature": 62.57, "ai": 58.57},
    "BERT Pre-train then Fine-tune w/o DAPT (Table 2)": {
        "politics": 68.71, "science": 64.94, "music": 68.30, "literature": 63.63, "ai": 58.88},
}


def split(value: str):
    return [v.strip() for v in value.split(",") if v.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", required=True)
    parser.add_argument("--seeds", required=True)
    parser.add_argument("--configs", required=True)
    parser.add_argument("--gpu-id", default="-1")
    parser.add_argument("--local-data", default="")
    parser.add_argument("--output", default="reports/full/summary.md")
    parser.add_argument("--workers", type=int, default=1, help="Runs at a time (local Dask cluster).")
    parser.add_argument("--scheduler", default="", help="Address of a Dask scheduler to run on instead.")
    args = parser.parse_args()
    domains, seeds, configs = split(args.domains), split(args.seeds), split(args.configs)
    jobs = []
    for domain in domains:
        for seed in seeds:
            cmd = [sys.executable, "-m", "spacy", "project", "run", "full", str(PROJECT_DIR),
                   "--vars.target_domain", domain, "--vars.seed", seed,
                   "--vars.gpu_id", str(args.gpu_id), "--vars.local_data", args.local_data]
            jobs.append(Job(f"full-{domain}-s{seed}", cmd, f"reports/full/logs/{domain}-s{seed}.log",
                            cwd=str(PROJECT_DIR)))
    results = run_jobs(jobs, workers=args.workers, scheduler=args.scheduler or None)
    failed = [result.describe(job) for job, result in zip(jobs, results) if result.status != "ok"]
    if failed:
        print("Error: the full workflow failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    lines = ["# CrossNER baselines, paper-sized: mean test F1 over seeds " + ", ".join(seeds), ""]
    for suffix, mode in (("", "per sentence"), (".compat", "crossner-compat (the authors' scoring)")):
        lines += [f"## Scoring: {mode}", "", "| config | " + " | ".join(domains) + " | avg |",
                  "|---|" + "---:|" * (len(domains) + 1)]
        for config in configs:
            means = []
            for domain in domains:
                scores = []
                for seed in seeds:
                    path = PROJECT_DIR / "metrics" / "full" / domain / f"seed{seed}" / f"{config}{suffix}.json"
                    scores.append(100 * srsly.read_json(path)["ents_f"])
                means.append(statistics.mean(scores))
            lines.append(f"| {config} | " + " | ".join(f"{m:.2f}" for m in means)
                         + f" | {statistics.mean(means):.2f} |")
        lines.append("")
    lines += ["## Paper (Liu et al. 2021, Table 2)", "",
              "| row | " + " | ".join(domains) + " |", "|---|" + "---:|" * len(domains)]
    for row, values in PAPER.items():
        lines.append(f"| {row} | " + " | ".join(f"{values.get(d, float('nan')):.2f}" for d in domains) + " |")
    output = PROJECT_DIR / args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n", encoding="utf8")
    print(f"Wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
