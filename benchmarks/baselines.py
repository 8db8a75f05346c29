"""Baselines, measured in one run on the same data (issue 2, "Measured, in benchmarks/").

1. Speed: training and inference words/second of the ``crossner`` component with
   ``spacy_crossner.BiLSTMCRF.v1`` against spaCy's own ``ner`` (``spacy.TransitionBasedParser.v2``)
   on the *same* token features (``spacy_crossner.WordCharEmbed.v1`` as its tok2vec), in one
   process, on the AI train set (training) and AI test set (inference), repeated and
   interleaved; the ratio crossner / ner is the figure to read (absolute times are noisy).
2. Accuracy: AI-domain test F1 of spaCy ``ner`` trained on AI train only, ``crossner``
   BiLSTM-CRF target-only (configs/bilstm_target.cfg) and ``crossner`` BiLSTM-CRF joint with
   CoNLL-2003 (configs/bilstm_joint.cfg, target upsampled ×10), all trained with ``spacy train``
   for the same number of steps and seed, model-best chosen on AI dev, scored with
   ``python -m spacy_crossner evaluate`` (per sentence and crossner-compat).

    python benchmarks/baselines.py --steps 1500 --output benchmarks/results/baselines.md

CPU-sized by default (a few thousand steps, CoNLL subsampled per pass): not the paper's settings.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "crossner"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="CrossNER ner_data/ copy")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/crossner_baselines"))
    p.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "baselines.md")
    p.add_argument("--steps", type=int, default=1500, help="training steps of each model")
    p.add_argument("--eval-frequency", type=int, default=250)
    p.add_argument("--source-upsample", type=float, default=0.2,
                   help="fraction of CoNLL train per pass in the joint model")
    p.add_argument("--source-limit", type=int, default=0,
                   help="use only the first N CoNLL train sentences in the joint model (0 = all)")
    p.add_argument("--target-upsample", type=float, default=10)
    p.add_argument("--seed", type=int, default=555)
    p.add_argument("--speed-repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads (0 = default)")
    p.add_argument("--skip-training", action="store_true", help="speed only")
    return p.parse_args()


ARGS = parse_args()
if ARGS.threads:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(ARGS.threads)

import spacy  # noqa: E402
import srsly  # noqa: E402
import torch  # noqa: E402
from spacy.tokens import Doc, DocBin  # noqa: E402
from spacy.training import Example  # noqa: E402
from spacy.util import load_config  # noqa: E402

from spacy_crossner.convert import convert  # noqa: E402
from spacy_crossner.domains import get_domain, set_domain  # noqa: E402
from spacy_crossner.evaluate import evaluate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import cpu_model, utc_now  # noqa: E402

CONFIGS = ROOT / "configs"


def word_char_config() -> dict:
    cfg = load_config(CONFIGS / "bilstm_target.cfg", interpolate=False)
    return dict(cfg["components"]["crossner"]["model"]["tok2vec"])


def ner_model_config() -> dict:
    return {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "ner",
        "extra_state_tokens": False,
        "hidden_width": 64,
        "maxout_pieces": 2,
        "use_upper": True,
        "nO": None,
        "tok2vec": word_char_config(),
    }


def write_ner_config(path: Path) -> Path:
    """configs/bilstm_target.cfg with spaCy's ner (same tok2vec) in place of crossner."""
    cfg = load_config(CONFIGS / "bilstm_target.cfg", interpolate=False)
    cfg["nlp"]["pipeline"] = ["ner"]
    cfg["components"] = {"ner": {"factory": "ner", "moves": None, "update_with_oracle_cut_size": 100,
                                 "incorrect_spans_key": None, "model": ner_model_config(),
                                 "scorer": {"@scorers": "spacy.ner_scorer.v1"}}}
    cfg.to_disk(path)
    return path


def docs_of(path: Path, vocab):
    return list(DocBin().from_disk(path).get_docs(vocab))


def examples_of(nlp, docs):
    out = []
    for ref in docs:
        pred = Doc(nlp.vocab, words=[t.text for t in ref], spaces=[bool(t.whitespace_) for t in ref])
        set_domain(pred, get_domain(ref))
        out.append(Example(pred, ref))
    return out


def build(kind: str):
    nlp = spacy.blank("en")
    if kind == "crossner":
        cfg = load_config(CONFIGS / "bilstm_target.cfg", interpolate=False)
        model = dict(cfg["components"]["crossner"]["model"])
        nlp.add_pipe("crossner", config={"model": model, "target_domain": "ai"})
    else:
        nlp.add_pipe("ner", config={"model": ner_model_config()})
    return nlp


def measure_speed(corpus: Path, repeats: int, seed: int):
    import random

    pipes = {}
    for kind in ("crossner", "ner"):
        spacy.util.fix_random_seed(seed)
        nlp = build(kind)
        train = examples_of(nlp, docs_of(corpus / "ai" / "train.spacy", nlp.vocab))
        test = [eg.predicted for eg in examples_of(nlp, docs_of(corpus / "ai" / "test.spacy", nlp.vocab))]
        optimizer = nlp.initialize(lambda: train)
        # warm-up: one pass of training and one of inference
        for i in range(0, len(train), 16):
            nlp.update(train[i:i + 16], sgd=optimizer, drop=0.1)
        list(nlp.pipe([d.copy() for d in test[:200]], batch_size=256))
        pipes[kind] = (nlp, train, test, optimizer)
    train_words = sum(len(eg.reference) for eg in pipes["crossner"][1])
    test_words = sum(len(d) for d in pipes["crossner"][2])
    results = {k: {"train": [], "infer": []} for k in pipes}
    for r in range(repeats):
        for kind, (nlp, train, test, optimizer) in pipes.items():
            rng = random.Random(seed + r)
            order = list(train)
            rng.shuffle(order)
            start = time.perf_counter()
            for i in range(0, len(order), 16):
                nlp.update(order[i:i + 16], sgd=optimizer, drop=0.1)
            results[kind]["train"].append(train_words / (time.perf_counter() - start))
            docs = [d.copy() for d in test]
            start = time.perf_counter()
            list(nlp.pipe(docs, batch_size=256))
            results[kind]["infer"].append(test_words / (time.perf_counter() - start))
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in results.items()}, \
        {"train_words": train_words, "test_words": test_words}


def run(cmd, log: Path):
    print("$", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    start = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}); see {log}")
    return time.perf_counter() - start


def train_all(corpus: Path, work: Path, args):
    common = ["--training.max_steps", args.steps, "--training.eval_frequency", args.eval_frequency,
              "--system.seed", args.seed, "--gpu-id", -1,
              "--paths.target_train", corpus / "ai" / "train.spacy",
              "--paths.target_dev", corpus / "ai" / "dev.spacy"]
    ner_cfg = write_ner_config(work / "ner_target.cfg")
    runs = {
        "spaCy ner, AI only": (ner_cfg, []),
        "crossner BiLSTM-CRF, AI only": (CONFIGS / "bilstm_target.cfg", []),
        "crossner BiLSTM-CRF, joint with CoNLL": (
            CONFIGS / "bilstm_joint.cfg",
            ["--paths.source_train", corpus / "conll2003" / "train.spacy",
             "--vars.target_upsample", args.target_upsample,
             "--corpora.train.domains.source.upsample", args.source_upsample,
             "--corpora.train.limit", args.source_limit]),
    }
    # the three trainings run in parallel (one thread each); speed is measured meanwhile
    procs = {}
    for i, (name, (cfg, extra)) in enumerate(runs.items()):
        cmd = [sys.executable, "-m", "spacy", "train", cfg, "--output", work / f"model{i}"] + common + extra
        print("$", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
        log = (work / f"train{i}.log").open("w")
        procs[name] = (subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT),
                       time.perf_counter(), log)
    return procs


def collect(procs, corpus: Path, work: Path, args):
    out = {}
    for i, (name, (proc, start, log)) in enumerate(procs.items()):
        if proc.wait() != 0:
            sys.exit(f"training '{name}' failed; see {log.name}")
        seconds = time.perf_counter() - start
        cfg = Path(proc.args[4])
        model_dir = work / f"model{i}"
        best = model_dir / "model-best"
        sentence = evaluate(model=best, data=corpus / "ai" / "test.spacy",
                            output=work / f"metrics{i}.json")
        compat = evaluate(model=best, data=corpus / "ai" / "test.spacy", mode="crossner-compat")
        meta = srsly.read_json(best / "meta.json")
        out[name] = {"config": cfg, "seconds": seconds, "test": sentence, "compat": compat,
                     "dev_f": meta.get("performance", {}).get("ents_f")}
        print(f"{name}: test F1 {100 * sentence['ents_f']:.2f} (train {seconds / 60:.1f} min)",
              flush=True)
    return out




def main() -> int:
    args = ARGS
    work = args.workdir
    corpus = work / "corpus"
    work.mkdir(parents=True, exist_ok=True)
    for domain in ("ai", "conll2003"):
        if not (corpus / domain / "test.spacy").exists():
            convert(args.data / domain, corpus / domain, domain=domain, show_progress=False)
    started = time.perf_counter()
    procs = {} if args.skip_training else train_all(corpus, work, args)
    speed, sizes = measure_speed(corpus, args.speed_repeats, args.seed)
    for kind, d in speed.items():
        print(f"{kind}: train {d['train']:.0f} words/s, inference {d['infer']:.0f} words/s", flush=True)
    runs = collect(procs, corpus, work, args) if procs else {}
    total = time.perf_counter() - started
    write_report(args, speed, sizes, runs, total)
    return 0


def write_report(args, speed, sizes, runs, total):
    cmd = "python benchmarks/baselines.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    ratio_train = speed["crossner"]["train"] / speed["ner"]["train"]
    ratio_infer = speed["crossner"]["infer"] / speed["ner"]["infer"]
    lines = [
        "# Baselines: crossner BiLSTM-CRF vs spaCy ner (same features), and AI-domain F1",
        "",
        f"- Command (from the repository root): `{cmd}`",
        f"- Machine: {os.cpu_count()} CPU cores (`nproc` {len(os.sched_getaffinity(0))}), "
        f"{cpu_model()}, no GPU; torch {torch.__version__}, spaCy {spacy.__version__}, "
        f"torch/OpenMP threads {args.threads or 'default'}; other jobs shared the machine.",
        f"- Date: {utc_now()}; "
        f"total run time {total / 60:.1f} min.",
        f"- Data: CrossNER at 2e7ba2a (`{args.data}`), converted with `python -m spacy_crossner convert`.",
        "",
        "## Speed (words/second, median of "
        f"{args.speed_repeats} interleaved repeats)",
        "",
        "Both use `spacy_crossner.WordCharEmbed.v1` (configs/bilstm_target.cfg: word 100, char CNN "
        "50 filters) as token features; crossner adds a BiLSTM (128 per direction) and a CRF, spaCy's "
        "`ner` is `spacy.TransitionBasedParser.v2` (hidden 64, maxout 2) on the same tok2vec. "
        f"Training: one pass over AI train ({sizes['train_words']:,} words, batches of 16 "
        f"sentences, dropout 0.1); inference: `nlp.pipe` over AI test ({sizes['test_words']:,} words).",
        "",
        "| | crossner BiLSTM-CRF | spaCy ner | ratio crossner/ner |",
        "|---|---:|---:|---:|",
        f"| training | {speed['crossner']['train']:,.0f} | {speed['ner']['train']:,.0f} | {ratio_train:.2f} |",
        f"| inference | {speed['crossner']['infer']:,.0f} | {speed['ner']['infer']:,.0f} | {ratio_infer:.2f} |",
        "",
    ]
    if runs:
        lines += [
            "## AI-domain test F1 (entity-level exact match, ×100)",
            "",
            f"CPU-sized settings, **not the paper's**: {args.steps} steps of 16 sentences each "
            f"(Adam, lr 0.001), evaluated on AI dev every {args.eval_frequency} steps, "
            f"model-best = best AI dev F1; seed {args.seed}; one run each; joint: "
            + (f"the first {args.source_limit:,} CoNLL-2003 train sentences, " if args.source_limit else "CoNLL-2003 train ")
            + f"subsampled to {args.source_upsample:g} per pass, AI train ×{args.target_upsample:g}. "
            "The three trainings ran in parallel, one thread each; train time is wall time. "
            "No pre-trained word vectors (the paper uses GloVe).",
            "",
            "| model | config | dev F1 | test P | test R | test F1 | test F1, crossner-compat | train time |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in runs.items():
            t, c = r["test"], r["compat"]
            cfg = Path(r["config"])
            cfg_name = f"configs/{cfg.name}" if cfg.parent == CONFIGS else \
                "configs/bilstm_target.cfg with `ner` (TransitionBasedParser.v2 on WordCharEmbed) in place of `crossner`"
            dev = "–" if r["dev_f"] is None else f"{100 * r['dev_f']:.2f}"
            lines.append(f"| {name} | {cfg_name} | {dev} | {100 * t['ents_p']:.2f} | {100 * t['ents_r']:.2f} | "
                         f"**{100 * t['ents_f']:.2f}** | {100 * c['ents_f']:.2f} | {r['seconds'] / 60:.1f} min |")
        lines += [
            "",
            "Paper reference (Liu et al. 2021, CrossNER, Table 2, AI column): BiLSTM-CRF word+char, "
            "joint with CoNLL (target ×10) **43.56**; word only 38.24; BERT-tagger jointly trained "
            "58.57. These use GloVe vectors, full CoNLL and training to convergence (early "
            "stopping, patience 8 epochs).",
            "",
        ]
    lines += ["## Reading the numbers", "", "(filled in by hand after the run)", ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines), encoding="utf8")
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    sys.exit(main())
