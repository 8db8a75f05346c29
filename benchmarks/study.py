"""The study: every method against the baseline its paper compares to, trained to convergence
(early stopping on target dev F1), several seeds, scored with ``spacy_crossner evaluate``.

Resumable: each run writes one JSON into ``--results`` (default benchmarks/results/study/) when it
finishes; a run whose JSON exists is skipped, so the study is many short invocations::

    python benchmarks/study.py plan --rows 1 3 --domains ai music
    python benchmarks/study.py run --rows 1 3 --domains ai --seeds 555 666 777 --max-runs 4
    python benchmarks/study.py report

``run`` trains one model at a time with one torch thread (run two invocations at most on a
2-core machine, each on its own ``--rows``/``--domains``). The corpus folder holds
``<domain>/{train,dev,test}.spacy`` (``python -m spacy_crossner convert``, as the project's
``convert`` step writes to project/corpus) and, for the unsupervised rows, ``raw/<domain>.txt``
(``raw-text``); any source and target domain names work (``--source``, ``--domains``).

Each JSON has: row, method, baseline_of, domain, seed, features, test {p, r, f} (x100), dev_f,
best_step, max_steps, wall_s, cpu_s, device, config, overrides, command, machine, load, date.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "study"
SOURCE_TYPES = "person,organisation,location,misc"


@dataclass
class Method:
    """One row entry: how to train it and what it is compared with."""

    name: str
    row: int
    config: str
    baseline_of: Optional[str] = None
    kind: str = "target"  # target | joint | source | finetune | uda | zero | spacy_target | spacy_joint
    extra: List[str] = field(default_factory=list)
    features: tuple = ("wordchar", "wordchar+glove")
    note: str = ""


METHODS = [
    Method("bilstm_target", 1, "bilstm_target", kind="target"),
    Method("bilstm_joint", 1, "bilstm_joint", kind="joint"),
    # pre-train on the source (the bilstm_source model of the same seed), fine-tune on the target,
    # the target's output rows starting from the source's for shared tag names (the authors')
    Method("bilstm_finetune", 1, "bilstm_finetune", kind="finetune"),
    Method("multi_cell_sda", 3, "multi_cell_sda", baseline_of="bilstm_joint", kind="joint"),
    # PGN like for like with its baseline: the target sampled x10 as in bilstm_joint
    Method("pgn_sda", 4, "pgn_sda", baseline_of="bilstm_joint", kind="joint"),
    Method("bilstm_source", 4, "bilstm_pretrain", kind="source"),
    Method("pgn_uda", 4, "pgn_uda", baseline_of="bilstm_source", kind="uda"),
    Method("multi_cell_uda", 5, "multi_cell_uda", baseline_of="bilstm_source", kind="uda"),
    Method("moee_zero", 6, "moee_zero", baseline_of="bilstm_source", kind="zero"),
    # the peers spaCy users try first: spaCy's own ner (CNN tok2vec, `spacy init config -p ner`)
    Method("spacy_ner_cnn_target", 9, "spacy_ner_cnn", kind="spacy_target", features=("spacy_cnn",)),
    Method("spacy_ner_cnn_joint", 9, "spacy_ner_cnn", kind="spacy_joint", features=("spacy_cnn",),
           note="naive joint: source and target (x target_upsample) in one label set"),
]
BY_NAME = {m.name: m for m in METHODS}


def spacy_ner_config(args) -> Path:
    """spaCy's own ner pipeline (CNN tok2vec, efficiency defaults), made by ``spacy init config``."""
    path = args.workdir / "spacy_ner_cnn.cfg"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "spacy", "init", "config", str(path), "--lang", "en",
                        "--pipeline", "ner", "--optimize", "efficiency", "--force"], check=True,
                       capture_output=True)
    return path


def joint_folder(args, domain: str) -> Path:
    """A folder of the source train file and the target's, x target_upsample (spaCy's Corpus
    reads every .spacy file of a folder): the naive joint training set of spaCy's ner."""
    folder = args.workdir / f"joint-{args.source}-{domain}-x{args.target_upsample}"
    folder.mkdir(parents=True, exist_ok=True)
    links = {"source.spacy": args.corpus / args.source / "train.spacy"}
    links.update({f"target{i}.spacy": args.corpus / domain / "train.spacy" for i in range(args.target_upsample)})
    for name, target in links.items():
        if not (folder / name).exists():
            (folder / name).symlink_to(target.resolve())
    return folder


def source_model(args, seed: int, features: str) -> Path:
    return args.workdir / f"bilstm_source-shared-{features}-s{seed}" / "model-best"


def train_args(method: Method, args, domain: str, seed: int, features: str, out: Path) -> List[str]:
    """The ``spacy train`` arguments of one run (config, data, seed, convergence settings)."""
    corpus = args.corpus
    source = args.source
    common = ["--output", str(out), "--system.seed", str(seed),
              "--training.max_steps", str(args.max_steps), "--training.eval_frequency",
              str(args.eval_frequency), "--training.patience", str(args.patience)]
    if method.kind in ("spacy_target", "spacy_joint"):
        train = f"{corpus}/{domain}/train.spacy" if method.kind == "spacy_target" else str(joint_folder(args, domain))
        return [str(spacy_ner_config(args)), *common, "--paths.train", train,
                "--paths.dev", f"{corpus}/{domain}/dev.spacy"]
    cmd = [str(CONFIGS / f"{method.config}.cfg"), *common, "--vars.source_domain", source]
    target = ["--paths.target_train", f"{corpus}/{domain}/train.spacy",
              "--paths.target_dev", f"{corpus}/{domain}/dev.spacy", "--vars.target_domain", domain]
    src = ["--paths.source_train", f"{corpus}/{source}/train.spacy"]
    src_dev = ["--paths.source_dev", f"{corpus}/{source}/dev.spacy"]
    if method.kind == "target":
        cmd += target
    elif method.kind == "joint":
        cmd += src + target + ["--vars.target_upsample", str(args.target_upsample)]
    elif method.kind in ("source", "zero"):
        cmd += src + src_dev
    elif method.kind == "finetune":
        cmd += ["--paths.pretrained", str(source_model(args, seed, features)),
                "--paths.target_train", f"{corpus}/{domain}/train.spacy",
                "--paths.target_dev", f"{corpus}/{domain}/dev.spacy", "--vars.target_domain", domain,
                "--vars.init_from", source]
    elif method.kind == "uda":
        cmd += src + src_dev + ["--paths.target_raw", f"{args.raw}/{domain}.txt",
                                "--vars.target_domain", domain]
        if method.name == "multi_cell_uda":
            cmd += ["--paths.dictionary", str(args.dictionary)]
        if method.name == "pgn_uda":
            cmd += ["--paths.source_raw", f"{args.raw}/{source}.txt"]
    if method.kind not in ("target", "finetune") and args.source_limit:
        cmd += ["--corpora.train.limit", str(args.source_limit)]
    if features == "wordchar+glove":
        if not args.vectors:
            raise SystemExit("features wordchar+glove need --vectors DIR (python -m spacy_crossner vectors)")
        cmd += ["--paths.vectors", str(args.vectors),
                "--components.crossner.model.tok2vec.include_static_vectors", "true"]
    cmd += method.extra
    return cmd


def eval_args(method: Method, args, domain: str, model: Path, out: Path) -> List[str]:
    cmd = [str(model), f"{args.corpus}/{domain}/test.spacy", "--output", str(out)]
    if method.kind in ("source", "zero", "uda"):
        # tagged with the source's labels; the zero-shot rows are scored on the source's types
        cmd += ["--domain", args.source]
    if method.kind == "zero" or (method.kind == "source" and args.zero_labels):
        cmd += ["--labels", args.zero_labels or SOURCE_TYPES]
    return cmd


def planned(args) -> List[Dict]:
    runs = []
    for method in METHODS:
        if args.rows and method.row not in args.rows:
            continue
        if args.methods and method.name not in args.methods:
            continue
        # the peers have features of their own (spaCy's CNN tok2vec): always in the grid
        grid = method.features if method.kind.startswith("spacy") else args.features
        for features in grid:
            if features not in method.features:
                continue
            for domain in args.domains:
                for seed in args.seeds:
                    runs.append({"method": method, "domain": domain, "seed": seed, "features": features})
    return runs


def run_id(run: Dict) -> str:
    return f"{run['method'].name}-{run['domain']}-{run['features']}-s{run['seed']}"


def best_step(log: str):
    """(best score x100, its step, the last evaluated step) from spaCy's training table (the
    last column is the score)."""
    best, last = (None, None), None
    for line in log.splitlines():
        cells = line.split()
        if len(cells) > 3 and cells[0].isdigit() and cells[1].isdigit():
            try:
                score = float(cells[-1])
            except ValueError:
                continue
            last = int(cells[1])
            if best[0] is None or score > best[0]:
                best = (score, last)
    return (100 * best[0] if best[0] is not None else None), best[1], last


def train(method: Method, args, domain: str, seed: int, features: str, work: Path, env) -> Dict:
    """Train once (a model trained on the source only is shared by every target domain)."""
    meta_path = work / "train_meta.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    targs = train_args(method, args, domain, seed, features, work)
    cmd = [sys.executable, "-m", "spacy", "train", *targs, "--gpu-id", str(args.gpu_id)]
    load = os.getloadavg()
    start, usage = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - start
    cpu = sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), k) - getattr(usage, k)
              for k in ("ru_utime", "ru_stime"))
    log = work.parent / f"{work.name}.log"
    log.write_text(proc.stdout + proc.stderr, encoding="utf8")
    if proc.returncode != 0:
        raise RuntimeError(f"{work.name}: spacy train failed (log: {log})")
    dev_f, step, last = best_step(proc.stdout + proc.stderr)
    meta = {"targs": targs, "dev_f": dev_f, "step": step, "last": last, "wall": wall, "cpu": cpu,
            "load": list(load)}
    meta_path.write_text(json.dumps(meta), encoding="utf8")
    return meta


def execute(run: Dict, args) -> Dict:
    method, domain, seed, features = run["method"], run["domain"], run["seed"], run["features"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if method.kind == "finetune" and not source_model(args, seed, features).exists():
        print(f"[study] pre-training bilstm_source (seed {seed}, {features}) for {run_id(run)} ...", flush=True)
        train(BY_NAME["bilstm_source"], args, domain, seed, features,
              source_model(args, seed, features).parent, env)
    if method.name == "bilstm_source":
        work = source_model(args, seed, features).parent
    elif method.kind in ("source", "zero"):
        work = args.workdir / f"{method.name}-shared-{features}-s{seed}"
    else:
        work = args.workdir / run_id(run)
    meta = train(method, args, domain, seed, features, work, env)
    targs, dev_f, step, last = meta["targs"], meta["dev_f"], meta["step"], meta["last"]
    wall, cpu, load_before = meta["wall"], meta["cpu"], meta["load"]
    metrics = work / f"test_metrics_{domain}.json"
    eval_cmd = [sys.executable, "-m", "spacy_crossner", "evaluate",
                *eval_args(method, args, domain, work / "model-best", metrics)]
    proc = subprocess.run(eval_cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{run_id(run)}: evaluate failed: {proc.stdout}{proc.stderr}")
    scores = json.loads(metrics.read_text())
    return {
        "row": method.row, "method": method.name, "baseline_of": method.baseline_of,
        "domain": domain, "seed": seed, "features": features,
        "test": {k: round(100 * scores[f"ents_{k}"], 2) for k in ("p", "r", "f")},
        "dev_f": round(dev_f, 2) if dev_f is not None else None, "best_step": step,
        "max_steps": args.max_steps, "patience": args.patience, "last_step": last,
        # converged: the best dev score is not the last evaluation's
        "best_not_last": step is not None and last is not None and step < last,
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "device": "cpu" if args.gpu_id < 0 else f"gpu{args.gpu_id}",
        "config": targs[0] if method.kind.startswith("spacy") else f"configs/{method.config}.cfg",
        "overrides": targs[1:],
        "command": " ".join(shlex.quote(c) for c in ["python", "-m", "spacy", "train", *targs]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load": [round(x, 2) for x in load_before],
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
    }


def cmd_run(args) -> int:
    args.results.mkdir(parents=True, exist_ok=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    done = 0
    for run in planned(args):
        path = args.results / f"{run_id(run)}.json"
        if path.exists():
            continue
        if args.max_runs and done >= args.max_runs:
            break
        print(f"[study] {run_id(run)} ...", flush=True)
        result = execute(run, args)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        print(f"[study] {run_id(run)}: test F1 {result['test']['f']:.2f}, best step "
              f"{result['best_step']} of {args.max_steps}, {result['wall_s'] / 60:.1f} min", flush=True)
        done += 1
    return 0


def cmd_plan(args) -> int:
    for run in planned(args):
        exists = (args.results / f"{run_id(run)}.json").exists()
        print(("done  " if exists else "todo  ") + run_id(run))
    return 0


def load_results(path: Path) -> List[Dict]:
    return [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]


def mean_sd(values: List[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def verdict(diffs: List[float]) -> str:
    if len(diffs) < 2:
        return "too few seeds"
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
    if abs(mean) <= sd:
        return "within noise"
    return "reproduced in direction" if mean > 0 else "not reproduced"


def cmd_report(args) -> int:
    results = load_results(args.results)
    if not results:
        raise SystemExit(f"No results in {args.results}")
    groups: Dict[tuple, Dict] = {}
    for r in results:
        groups.setdefault((r["row"], r["method"], r["features"]), {}).setdefault(r["domain"], []).append(r)
    domains = sorted({r["domain"] for r in results})
    lines = ["# The study: each method against its baseline", "",
             f"Generated by `python benchmarks/study.py report` from {len(results)} runs in "
             f"`{args.results.relative_to(ROOT) if args.results.is_relative_to(ROOT) else args.results}`"
             " (one JSON per run, with its command). Test F1 x100, mean ± sd over seeds.", "",
             "| row | method | features | " + " | ".join(domains) + " | mean |",
             "|---|---|---|" + "---:|" * (len(domains) + 1)]
    heat = []
    for (row, method, features), by_domain in sorted(groups.items()):
        cells, means = [], []
        for d in domains:
            f1 = [r["test"]["f"] for r in by_domain.get(d, [])]
            cells.append(mean_sd(f1))
            means.append(statistics.mean(f1) if f1 else float("nan"))
        known = [m for m in means if m == m]
        lines.append(f"| {row} | {method} | {features} | " + " | ".join(cells) +
                     f" | {statistics.mean(known):.2f} |" if known else " | – |")
        heat.append((f"{method} ({features})", means))
    lines += ["", "## Gains over the baseline (paired by domain, seed and features)", "",
              "| method | baseline | features | domain | gain (mean ± sd) | verdict |", "|---|---|---|---|---:|---|"]
    index = {(r["method"], r["domain"], r["seed"], r["features"]): r for r in results}
    for (row, method, features), by_domain in sorted(groups.items()):
        base = BY_NAME[method].baseline_of if method in BY_NAME else None
        if not base:
            continue
        for d in domains:
            diffs = [r["test"]["f"] - index[(base, d, r["seed"], features)]["test"]["f"]
                     for r in by_domain.get(d, []) if (base, d, r["seed"], features) in index]
            if diffs:
                lines.append(f"| {method} | {base} | {features} | {d} | {mean_sd(diffs)} | {verdict(diffs)} |")
    not_converged = [r for r in results if not r.get("best_not_last")]
    if not_converged:
        lines += ["", f"{len(not_converged)} run(s) had their best dev F1 at the last evaluation "
                  "(not converged: dev F1 may still have been rising): " + ", ".join(
                      f"{r['method']}/{r['domain']}/s{r['seed']}" for r in not_converged)]
    out = args.results.parent / "study.md"
    png = args.results.parent / "study_f1.png"
    plot_heatmap(heat, domains, png)
    lines += ["", f"![F1 per method and domain]({png.name})", ""]
    out.write_text("\n".join(lines), encoding="utf8")
    print(f"Wrote {out} and {png}")
    return 0


def plot_heatmap(rows, domains, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy

    values = numpy.array([m for _, m in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(1.4 * len(domains) + 4, 0.45 * len(rows) + 1.5))
    image = ax.imshow(numpy.ma.masked_invalid(values), cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(domains)), domains)
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if values[i, j] == values[i, j]:
                ax.text(j, i, f"{values[i, j]:.1f}", ha="center", va="center",
                        color="white" if values[i, j] < numpy.nanmean(values) else "black")
    fig.colorbar(image, ax=ax, label="test F1")
    ax.set_title("Test F1 per method and domain (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["plan", "run", "report"])
    p.add_argument("--rows", nargs="*", default=[])
    p.add_argument("--methods", nargs="*", default=[])
    p.add_argument("--domains", nargs="*", default=["ai"])
    p.add_argument("--seeds", nargs="*", default=["555", "666", "777"])
    p.add_argument("--features", nargs="*", default=["wordchar"])
    p.add_argument("--source", default="conll2003", help="the labelled source domain")
    p.add_argument("--corpus", type=Path, default=ROOT / "project" / "corpus")
    p.add_argument("--raw", type=Path, default=ROOT / "project" / "raw")
    p.add_argument("--dictionary", type=Path, default=ROOT / "project" / "assets" / "dictionaries" / "conll2003")
    p.add_argument("--vectors", type=Path, default=None, help="spaCy vectors dir (wordchar+glove)")
    p.add_argument("--zero-labels", default="", help="types scored for source-only models (default: all)")
    p.add_argument("--max-steps", type=int, default=20000)
    p.add_argument("--eval-frequency", type=int, default=200)
    p.add_argument("--patience", type=int, default=1600)
    p.add_argument("--source-limit", type=int, default=0, help="first N source sentences (0 = all)")
    p.add_argument("--target-upsample", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gpu-id", type=int, default=-1)
    p.add_argument("--max-runs", type=int, default=0, help="stop after N new runs (0 = all)")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/crossner_study"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # lists may also be given comma-separated (as the project's vars are)
    for name in ("rows", "methods", "domains", "seeds", "features"):
        values = [v for item in getattr(args, name) for v in str(item).split(",") if v]
        setattr(args, name, [int(v) for v in values] if name in ("rows", "seeds") else values)
    return {"plan": cmd_plan, "run": cmd_run, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
