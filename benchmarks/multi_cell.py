"""Multi-cell compositional LSTM vs BiLSTM-CRF: throughput and CrossNER F1 (issue 3).

Usage (from the repository root)::

    python benchmarks/multi_cell.py [--target ai] [--steps 600] [--seed 0] [--output benchmarks/results/multi_cell.md]

1. Throughput. ``spacy_crossner.BiLSTMCRF.v1`` and ``spacy_crossner.MultiCellLSTM.v1`` with the
   same hidden size (100 per direction) and the same features (``WordCharEmbed.v1`` defaults:
   word 100 + char CNN 50 = 150), built in the same process and trained on the same batches of
   16 CoNLL sentences, taking turns batch by batch, so that both see the same machine load.
   Training words/s = words / time of the ``nlp.update`` calls; inference words/s = words /
   time of ``nlp.pipe`` over CoNLL dev sentences (median of rounds). Measured with the CoNLL
   labels only (5 typed cells: O + 4 types, the issue's "5 entity types") and with CoNLL + the
   target domain (the union of both domains' types).
2. F1. ``configs/bilstm_joint.cfg`` (hidden_size 100), ``configs/multi_cell_sda.cfg`` and
   ``configs/multi_cell_uda.cfg`` trained with ``spacy train`` on CPU-sized settings -- CoNLL
   subsampled to a tenth per pass, the target train set x10 (SDA/joint) or the target's raw
   train+dev text x2 (UDA, no target labels), a fixed number of steps, best checkpoint on the
   target dev set (SDA/joint) or on a CoNLL dev subsample (UDA) -- then scored on the target's
   test set: strict entity F1 over all target types, and F1 over the four CoNLL types only (the
   only ones a UDA model can predict). These are NOT the paper's settings (GloVe, full data,
   100 epochs, SGD).

torch runs on one thread (``torch.set_num_threads(1)``) for stable timings on a shared machine.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import cpu_model, utc_now  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
CROSSNER = SHARED / "crossner"
DICTIONARY = SHARED / "dictionaries" / "conll2003"
SOURCE = "conll2003"
SOURCE_TYPES = ("location", "misc", "organisation", "person")




def prepare_data(work: Path, target: str) -> Dict[str, str]:
    from spacy_crossner.convert import convert, write_raw_text

    paths = {}
    for domain in (SOURCE, target):
        out = work / "corpus" / domain
        if not (out / "test.spacy").exists():
            convert(CROSSNER / domain, out, domain=domain)
        for split in ("train", "dev", "test"):
            paths[f"{domain}_{split}"] = str(out / f"{split}.spacy")
    raw = work / "raw" / f"{target}.txt"
    if not raw.exists():
        write_raw_text([CROSSNER / target / "train.txt", CROSSNER / target / "dev.txt"], raw, domain=target)
    paths["raw"] = str(raw)
    return paths


def read_docs(nlp, path: str, limit: int = 0):
    from spacy.tokens import DocBin

    docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    return docs[:limit] if limit else docs


# -- throughput --------------------------------------------------------------------------------


def build(arch: str):
    import spacy

    nlp = spacy.blank("en")
    model = {"@architectures": arch, "hidden_size": 100, "dropout": 0.5,
             "tok2vec": {"@architectures": "spacy_crossner.WordCharEmbed.v1"}}
    nlp.add_pipe("crossner", config={"model": model, "target_domain": SOURCE})
    return nlp


def examples_of(nlp, docs):
    from spacy.tokens import Doc
    from spacy.training import Example

    from spacy_crossner import get_domain, set_domain

    out = []
    for doc in docs:
        pred = Doc(nlp.vocab, words=[t.text for t in doc])
        set_domain(pred, get_domain(doc))
        out.append(Example(pred, doc))
    return out


def throughput(paths: Dict[str, str], target: str, n_train: int, n_infer: int, rounds: int, seed: int) -> Dict:
    import spacy
    from thinc.api import Adam, fix_random_seed

    results = {}
    vocab_nlp = spacy.blank("en")
    source = read_docs(vocab_nlp, paths[f"{SOURCE}_train"])
    target_docs = read_docs(vocab_nlp, paths[f"{target}_train"])
    dev = read_docs(vocab_nlp, paths[f"{SOURCE}_dev"], n_infer)
    rng = random.Random(seed)
    settings = {
        "5 cells (CoNLL: O + 4 types)": rng.sample(source, n_train),
        f"CoNLL + {target} ({target} batches use the union of types)": rng.sample(source, n_train // 2)
        + rng.sample(target_docs, min(n_train // 2, len(target_docs))),
    }
    for name, docs in settings.items():
        fix_random_seed(seed)
        models = {arch: build(arch) for arch in ("spacy_crossner.BiLSTMCRF.v1", "spacy_crossner.MultiCellLSTM.v1")}
        data = {}
        for arch, nlp in models.items():
            exs = examples_of(nlp, docs)
            nlp.initialize(lambda exs=exs: exs)
            data[arch] = exs
        order = list(range(len(docs)))
        rng.shuffle(order)
        batches = [order[i : i + 16] for i in range(0, len(order), 16)]
        train_time = {arch: 0.0 for arch in models}
        words = {arch: 0 for arch in models}
        optimizers = {arch: Adam(0.001) for arch in models}
        for r in range(rounds):
            for i, batch in enumerate(batches):
                archs = list(models) if (i + r) % 2 == 0 else list(models)[::-1]
                for arch in archs:
                    egs = [data[arch][j] for j in batch]
                    start = time.perf_counter()
                    models[arch].update(egs, sgd=optimizers[arch], drop=0.1)
                    train_time[arch] += time.perf_counter() - start
                    words[arch] += sum(len(eg) for eg in egs)
        infer = {arch: [] for arch in models}
        n_words = sum(len(d) for d in dev)
        texts = [[t.text for t in d] for d in dev]
        for r in range(rounds):
            for arch in (list(models) if r % 2 == 0 else list(models)[::-1]):
                nlp = models[arch]
                from spacy.tokens import Doc

                inputs = [Doc(nlp.vocab, words=w) for w in texts]
                start = time.perf_counter()
                list(nlp.pipe(inputs, batch_size=256))
                infer[arch].append(n_words / (time.perf_counter() - start))
        row = {}
        for arch in models:
            row[arch] = {
                "train_wps": words[arch] / train_time[arch],
                "infer_wps": statistics.median(infer[arch]),
            }
        mc, bl = row["spacy_crossner.MultiCellLSTM.v1"], row["spacy_crossner.BiLSTMCRF.v1"]
        row["ratio_train"] = mc["train_wps"] / bl["train_wps"]
        row["ratio_infer"] = mc["infer_wps"] / bl["infer_wps"]
        results[name] = row
        print(name, json.dumps(row, indent=1), flush=True)
    return results


# -- F1 ----------------------------------------------------------------------------------------


def start_training(config: str, output: Path, overrides: Dict[str, str], log: Path):
    """``spacy train`` in a subprocess on one thread; returns (process, start time, log file)."""
    cmd = [sys.executable, "-m", "spacy", "train", str(ROOT / "configs" / config), "--output", str(output)]
    for key, value in overrides.items():
        cmd += [f"--{key}", str(value)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    f = log.open("w")
    f.write(" ".join(cmd) + "\n")
    f.flush()
    return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), time.time(), f


def spans(doc, labels=None):
    return {(e.start, e.end, e.label_) for e in doc.ents if labels is None or e.label_ in labels}


def prf(pairs: Sequence[Tuple[set, set]]) -> Dict[str, float]:
    tp = sum(len(g & p) for g, p in pairs)
    n_gold = sum(len(g) for g, _ in pairs)
    n_pred = sum(len(p) for _, p in pairs)
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {"p": p, "r": r, "f": 2 * p * r / (p + r) if p + r else 0.0}


def score_test(model_dir: Path, test_path: str, target: str) -> Dict[str, Dict[str, float]]:
    import spacy
    import torch
    from spacy.tokens import Doc

    from spacy_crossner import set_domain

    torch.set_num_threads(1)
    nlp = spacy.load(model_dir)
    gold = read_docs(nlp, test_path)
    inputs = []
    for g in gold:
        doc = Doc(nlp.vocab, words=[t.text for t in g])
        set_domain(doc, target)
        inputs.append(doc)
    preds = list(nlp.pipe(inputs, batch_size=256))
    return {
        "all": prf([(spans(g), spans(p)) for g, p in zip(gold, preds)]),
        "conll_types": prf([(spans(g, SOURCE_TYPES), spans(p, SOURCE_TYPES)) for g, p in zip(gold, preds)]),
    }


def f1_runs(paths: Dict[str, str], target: str, work: Path, steps: int, eval_frequency: int, seed: int) -> Dict:
    common = {
        "paths.source_train": paths[f"{SOURCE}_train"],
        "vars.target_domain": target,
        "corpora.train.domains.source.upsample": 0.1,
        "system.seed": seed,
        "training.max_steps": steps,
        "training.eval_frequency": eval_frequency,
    }
    sda = dict(common, **{"paths.target_train": paths[f"{target}_train"], "paths.target_dev": paths[f"{target}_dev"],
                          "vars.target_upsample": 10})
    runs = {
        "BiLSTMCRF joint (bilstm_joint.cfg, hidden_size 100)": ("bilstm_joint.cfg", dict(sda, **{"components.crossner.model.hidden_size": 100})),
        "MultiCellLSTM SDA (multi_cell_sda.cfg)": ("multi_cell_sda.cfg", sda),
        "MultiCellLSTM UDA (multi_cell_uda.cfg)": ("multi_cell_uda.cfg", dict(common, **{
            "paths.source_dev": paths[f"{SOURCE}_dev"], "paths.target_raw": paths["raw"],
            "paths.dictionary": str(DICTIONARY), "vars.target_upsample": 2, "corpora.dev.limit": 1000,
            "vars.source_domain": SOURCE,  # domain_aliases {target: SOURCE} is built from the vars
        })),
    }
    # The three runs train concurrently (one thread each): their F1 does not depend on timing.
    jobs = {}
    for name, (config, overrides) in runs.items():
        out = work / "training" / config.replace(".cfg", "")
        jobs[name] = (config, overrides, out, *start_training(config, out, overrides, work / f"{config}.log"))
    results = {}
    for name, (config, overrides, out, proc, start, log) in jobs.items():
        if proc.wait() != 0:
            raise RuntimeError(f"{name}: spacy train failed, see {log.name}")
        log.close()
        seconds = time.time() - start
        scores = score_test(out / "model-best", paths[f"{target}_test"], target)
        results[name] = {"config": config, "seconds": seconds, "overrides": overrides, **scores}
        print(name, json.dumps(scores), f"{seconds:.0f}s", flush=True)
    return results


def write_report(output: Path, args, tput: Dict, f1: Dict, started: str, minutes: float) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    lines = [
        "# Multi-cell compositional LSTM vs BiLSTM-CRF (issue 3)",
        "",
        f"- Command: `python benchmarks/multi_cell.py --target {args.target} --steps {args.steps} "
        f"--eval-frequency {args.eval_frequency} --seed {args.seed}`",
        f"- Machine: {os.cpu_count()} CPUs (nproc), {cpu_model()}, shared with other jobs; torch on 1 thread "
        f"(`torch.set_num_threads(1)`, OMP/MKL_NUM_THREADS=1 for the training runs).",
        f"- Date: {started}; git {commit}; whole run {minutes:.1f} min.",
        "- CPU-sized settings, NOT the paper's: no pretrained word vectors (WordCharEmbed's hashed "
        "embeddings; the paper fine-tunes GloVe), Adam 0.001 and spaCy's batcher (16 sentences, "
        "domains mixed in a batch) instead of SGD with alternating single-domain batches of 10, "
        f"{args.steps} steps instead of 100 epochs, CoNLL subsampled to a tenth per pass.",
        "",
        "## Throughput (words/second, same batches, models taking turns)",
        "",
        f"Hidden size 100 per direction for both, features WordCharEmbed (D = 150), batches of 16 "
        f"sentences, {args.train_sentences} training sentences x {args.rounds} rounds, inference "
        f"`nlp.pipe` over {args.infer_sentences} CoNLL dev sentences (median of {args.rounds}). "
        "Ratios are multi-cell / BiLSTM-CRF.",
        "",
        "| setting | BiLSTM-CRF train | Multi-cell train | train ratio | BiLSTM-CRF infer | Multi-cell infer | infer ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in tput.items():
        bl, mc = row["spacy_crossner.BiLSTMCRF.v1"], row["spacy_crossner.MultiCellLSTM.v1"]
        lines.append(
            f"| {name} | {bl['train_wps']:.0f} | {mc['train_wps']:.0f} | **{row['ratio_train']:.2f}** | "
            f"{bl['infer_wps']:.0f} | {mc['infer_wps']:.0f} | **{row['ratio_infer']:.2f}** |"
        )
    first = next(iter(tput.values()))
    verdict = "meets" if first["ratio_train"] >= 1 / 3 else "misses"
    lines += [
        "",
        f"Target (issue 3): training at least 1/3 of the BiLSTM-CRF's speed at 5 entity-type cells: "
        f"**{verdict}** it ({first['ratio_train']:.2f}).",
        "",
        f"## CrossNER {args.target} test F1 (seed {args.seed}, one run each)",
        "",
        "| model (config) | strict F1, all target types | P | R | F1 on the 4 CoNLL types | wall time (3 runs concurrently) |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in f1.items():
        a, c = row["all"], row["conll_types"]
        lines.append(
            f"| {name} | **{100 * a['f']:.2f}** | {100 * a['p']:.2f} | {100 * a['r']:.2f} | {100 * c['f']:.2f} | "
            f"{row['seconds'] / 60:.1f} min |"
        )
    lines += [
        "",
        "Settings of the F1 runs (spacy train overrides): every run `corpora.train.domains.source.upsample = 0.1`, "
        f"`training.max_steps = {args.steps}`, `training.eval_frequency = {args.eval_frequency}`, "
        f"`system.seed = {args.seed}`. Joint and SDA: target train x10, best checkpoint on the target dev set. "
        "UDA: no target labels; the target's train+dev text as raw text x2 (LMs, dictionary labels from "
        "../shared/data/dictionaries/conll2003 with organization -> organisation), best checkpoint on the "
        "first 1,000 CoNLL dev sentences; it can only predict the four CoNLL types, so its strict F1 over "
        "all target types is bounded by their share of the target's entities.",
        "",
    ]
    output.write_text("\n".join(lines) + "\n", encoding="utf8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="ai", help="CrossNER target domain")
    parser.add_argument("--steps", type=int, default=400, help="training steps of each F1 run")
    parser.add_argument("--eval-frequency", type=int, default=100, help="steps between dev evaluations")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument("--train-sentences", type=int, default=320, help="sentences per throughput round")
    parser.add_argument("--infer-sentences", type=int, default=1000, help="CoNLL dev sentences for inference speed")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds")
    parser.add_argument("--work", default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--skip-f1", action="store_true", help="throughput only")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "multi_cell.md"))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    started = utc_now()
    t0 = time.time()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="multi_cell_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    import spacy_crossner  # noqa: F401

    paths = prepare_data(work, args.target)
    tput = throughput(paths, args.target, args.train_sentences, args.infer_sentences, args.rounds, args.seed)
    f1 = {} if args.skip_f1 else f1_runs(paths, args.target, work, args.steps, args.eval_frequency, args.seed)
    (work / "results.json").write_text(json.dumps({"throughput": tput, "f1": f1}, indent=1, default=str))
    write_report(Path(args.output), args, tput, f1, started, (time.time() - t0) / 60)
    print(f"Wrote {args.output} ({(time.time() - t0) / 60:.1f} min; work dir {work})")


if __name__ == "__main__":
    main()
