"""PGN (spacy_crossner.PGNBiLSTM.v1) against BiLSTMCRF with the same sizes, in one run.

1. Speed: inference and training words/second of PGN and BiLSTMCRF (word 100 + char-CNN 50
   features, one BiLSTM layer of 100 per direction, CRF), on the same batches. PGN training is
   timed without LM passes (NER batches only: the issue's "excluding the LM batches") and with
   the LM on the labelled sentences (the SDA code's setting).
2. CrossNER AI test F1 of PGN SDA and PGN UDA next to BiLSTMCRF target-only, joint and
   source-only, all trained here with the same optimizer, batch size, number of steps and seed.
   CPU-sized: CoNLL-2003 subsampled per pass and a few hundred steps; NOT the paper's setting
   (100 epochs of SGD on all of CoNLL).

    python benchmarks/pgn.py --output benchmarks/results/pgn.md

Runs single-threaded (torch.set_num_threads(1)): the machine is small and shared, so the figures
that matter are the ratios between models measured in the same run.
"""
import argparse
import os
import platform
import random
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

from spacy_crossner import set_domain
from spacy_crossner.readers import create_domain_corpus, create_multi_domain_corpus

from spacy_crossner.pipeline import DEFAULT_MODEL  # noqa: E402

ROOT = Path(__file__).parents[1]
# The component's default features (WordCharEmbed: word 100 + char CNN 50, dropout 0.5).
TOK2VEC = dict(DEFAULT_MODEL["tok2vec"])
BILSTM = {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 100, "depth": 1, "dropout": 0.5,
          "use_crf": True, "tok2vec": TOK2VEC}
PGN = {"@architectures": "spacy_crossner.PGNBiLSTM.v1", "hidden_size": 100, "domain_width": 8, "task_width": 8,
       "dropout": 0.5, "lm_vocab_size": 20000, "lm_samples": 50, "use_crf": True, "tok2vec": TOK2VEC}


def make_nlp(model: Dict, target: str, aliases: Dict[str, str] = None):
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", config={"model": model, "target_domain": target, "domain_aliases": aliases or {}})
    return nlp


def read(nlp, reader) -> List[Example]:
    return list(reader(nlp))


def batches(pool_fn, size: int, n_steps: int, rng: random.Random):
    """n_steps batches of `size` examples, each pass a fresh (shuffled, resampled) pass."""
    step = 0
    while True:
        pool = list(pool_fn())
        for i in range(0, len(pool) - size + 1, size):
            yield pool[i : i + size]
            step += 1
            if step >= n_steps:
                return


def n_words(examples) -> int:
    return sum(len(eg.predicted) for eg in examples)


def time_training(nlp, batches_list, optimizer) -> float:
    start = time.perf_counter()
    for batch in batches_list:
        nlp.update(batch, sgd=optimizer, drop=0.5)
    return time.perf_counter() - start


def time_inference(nlp, docs: List[Doc], repeats: int = 2) -> float:
    best = float("inf")
    for _ in range(repeats):
        copies = [d.copy() for d in docs]
        start = time.perf_counter()
        list(nlp.pipe(copies, batch_size=256))
        best = min(best, time.perf_counter() - start)
    return best


def score(nlp, examples: List[Example]) -> Dict[str, float]:
    scores = nlp.evaluate(examples)
    return {k: scores[k] for k in ("ents_p", "ents_r", "ents_f")}


def train(nlp, get_pool, dev: List[Example], n_steps: int, eval_every: int, seed: int, lr: float,
          batch_size: int):
    """Train for n_steps, evaluate on dev every eval_every steps, keep the best weights."""
    rng = random.Random(seed)
    fix_random_seed(seed)
    nlp.initialize(lambda: get_pool(), sgd=None)
    optimizer = Adam(lr, use_averages=False)
    best = (-1.0, None, 0)
    seconds = 0.0
    words = 0
    lm_loss = 0.0
    for step, batch in enumerate(batches(get_pool, batch_size, n_steps, rng), 1):
        start = time.perf_counter()
        losses = {}
        nlp.update(batch, sgd=optimizer, drop=0.5, losses=losses)
        seconds += time.perf_counter() - start
        words += n_words(batch)
        lm_loss = losses.get("crossner_lm", lm_loss)
        if step % eval_every == 0 or step == n_steps:
            f = nlp.evaluate(dev)["ents_f"]
            if f > best[0]:
                best = (f, nlp.to_bytes(), step)
    nlp.from_bytes(best[1])
    return {"dev_f": best[0], "best_step": best[2], "train_words_per_s": words / seconds, "lm_loss": lm_loss}


def uda_diagnostics(nlp, test: List[Example], source: str, target: str) -> List[str]:
    """How far the never-directly-trained (target, NER) weights are from the source's."""
    from spacy_crossner.models.base import get_emitter
    from spacy_crossner.models.pgn import get_generated_weights
    from spacy_crossner.models.pytorch_heads import module_key

    as_source = []
    for eg in test:
        doc = eg.predicted.copy()
        set_domain(doc, source)
        as_source.append(Example(doc, eg.reference))
    own = score(nlp, test)
    through_source = score(nlp, as_source)
    gen = get_emitter(nlp.get_pipe("crossner").model).generator
    cos = torch.nn.functional.cosine_similarity
    d_src, d_tgt = (gen.domain_embeddings[module_key(d)].detach() for d in (source, target))
    t_src, t_tgt = (torch.cat([w.flatten() for w in get_generated_weights(nlp.get_pipe("crossner").model, d, "ner")])
                    for d in (source, target))
    return [
        f"| AI test docs through ({target}, ner) weights (the method) | {own['ents_p']:.4f} | {own['ents_r']:.4f} | {own['ents_f']:.4f} |",
        f"| AI test docs through ({source}, ner) weights (read as source) | {through_source['ents_p']:.4f} | "
        f"{through_source['ents_r']:.4f} | {through_source['ents_f']:.4f} |",
        "",
        f"cosine(I_D[{source}], I_D[{target}]) = {float(cos(d_src, d_tgt, dim=0)):.3f}; "
        f"cosine(theta[{source},ner], theta[{target},ner]) = {float(cos(t_src, t_tgt, dim=0)):.3f}",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(ROOT / "project" / "corpus"), help="folder with <domain>/{train,dev,test}.spacy")
    parser.add_argument("--raw", default=str(ROOT / "project" / "raw"), help="folder with <domain>.txt raw text")
    parser.add_argument("--target", default="ai", help="target domain")
    parser.add_argument("--source", default="conll2003", help="source domain")
    parser.add_argument("--steps", type=int, default=500, help="training steps per model (F1 part)")
    parser.add_argument("--eval-every", type=int, default=100, help="dev evaluation interval")
    parser.add_argument("--batch-size", type=int, default=30, help="sentences per step (paper: 30)")
    parser.add_argument("--lr", type=float, default=0.002, help="Adam learning rate (all models)")
    parser.add_argument("--source-fraction", type=float, default=0.15, help="CoNLL train sampled per pass")
    parser.add_argument("--target-upsample", type=float, default=10, help="target train copies per pass (joint, SDA)")
    parser.add_argument("--target-raw-upsample", type=float, default=2, help="target raw-text copies per pass (UDA)")
    parser.add_argument("--source-raw-fraction", type=float, default=0.05, help="CoNLL raw text sampled per pass (UDA)")
    parser.add_argument("--speed-batches", type=int, default=30, help="training batches timed per model (speed part)")
    parser.add_argument("--seed", type=int, default=42, help="seed of sampling and initialisation")
    parser.add_argument("--output", default=None, help="markdown file to write")
    parser.add_argument("--uda-only", action="store_true", help="train only PGN UDA and print its diagnostics")
    args = parser.parse_args()
    torch.set_num_threads(1)
    corpus, raw = Path(args.corpus), Path(args.raw)
    src, tgt = args.source, args.target
    began = time.time()
    load_before = os.getloadavg()[0]

    def mdc(entries, seed=args.seed):
        return create_multi_domain_corpus(entries, seed=seed, shuffle=True, max_length=250)

    nlp0 = spacy.blank("en")
    tgt_test = read(nlp0, create_domain_corpus(str(corpus / tgt / "test.spacy"), domain=tgt))
    tgt_dev = read(nlp0, create_domain_corpus(str(corpus / tgt / "dev.spacy"), domain=tgt))
    src_dev = read(nlp0, create_domain_corpus(str(corpus / src / "dev.spacy"), domain=src, limit=500))
    source = {"path": str(corpus / src / "train.spacy"), "domain": src, "upsample": args.source_fraction}
    target = {"path": str(corpus / tgt / "train.spacy"), "domain": tgt, "upsample": args.target_upsample}
    target_once = dict(target, upsample=1)
    source_raw = {"path": str(raw / f"{src}.txt"), "domain": src, "upsample": args.source_raw_fraction, "raw": True}
    target_raw = {"path": str(raw / f"{tgt}.txt"), "domain": tgt, "upsample": args.target_raw_upsample, "raw": True}
    alias = {tgt: src}
    lines = []

    if args.uda_only:
        nlp = make_nlp(dict(PGN, setting="unsupervised", lm_on_labelled=False, ner_weight_target=1.0), tgt, alias)
        reader = mdc({"source": source, "source_raw": source_raw, "target_raw": target_raw})
        info = train(nlp, lambda: reader(nlp), src_dev, args.steps, args.eval_every, args.seed, args.lr, args.batch_size)
        print(f"PGN UDA: dev F1 {info['dev_f']:.4f} at step {info['best_step']}, {time.time() - began:.0f}s")
        print("\n".join(uda_diagnostics(nlp, tgt_test, src, tgt)))
        return

    # -- 1. speed -------------------------------------------------------------------------------
    speed_reader = mdc({"source": source, "target": target_once})
    speed_pool = read(nlp0, speed_reader)
    rng = random.Random(args.seed)
    rng.shuffle(speed_pool)
    speed_batches = [speed_pool[i : i + args.batch_size] for i in range(0, args.speed_batches * args.batch_size, args.batch_size)]
    speed_words = sum(n_words(b) for b in speed_batches)
    infer_docs = [eg.predicted for eg in tgt_test]
    infer_words = sum(len(d) for d in infer_docs)
    models = {}
    for name, model in [
        ("BiLSTMCRF", BILSTM),
        ("PGN, NER only (no LM pass)", dict(PGN, lm_on_labelled=False, lm_weight_source=0.0, lm_weight_target=0.0)),
        ("PGN SDA (LM on the labelled sentences)", PGN),
    ]:
        fix_random_seed(args.seed)
        nlp = make_nlp(model, tgt)
        nlp.initialize(lambda: speed_pool)
        optimizer = Adam(args.lr, use_averages=False)
        time_training(nlp, speed_batches[:3], optimizer)  # warm-up
        models[name] = (nlp, optimizer)
    # Interleaved rounds, so that changes of the machine's load hit every model alike.
    train_s = {name: 0.0 for name in models}
    chunk = 5
    for i in range(0, len(speed_batches), chunk):
        for name, (nlp, optimizer) in models.items():
            train_s[name] += time_training(nlp, speed_batches[i : i + chunk], optimizer)
    infer_s = {name: float("inf") for name in models}
    for _ in range(3):
        for name, (nlp, _) in models.items():
            infer_s[name] = min(infer_s[name], time_inference(nlp, infer_docs, repeats=1))
    speed = {}
    for name in models:
        speed[name] = (speed_words / train_s[name], infer_words / infer_s[name])
        print(f"{name}: train {speed[name][0]:.0f} w/s, inference {speed[name][1]:.0f} w/s", flush=True)
    del models
    base_train, base_infer = speed["BiLSTMCRF"]

    # -- 2. F1 ----------------------------------------------------------------------------------
    runs = [
        ("BiLSTMCRF target-only", BILSTM, {"target": target_once}, tgt_dev, {}),
        ("BiLSTMCRF joint", BILSTM, {"source": source, "target": target}, tgt_dev, {}),
        ("BiLSTMCRF source-only", BILSTM, {"source": source}, src_dev, alias),
        ("PGN SDA (supervised)", dict(PGN, setting="supervised"), {"source": source, "target": target}, tgt_dev, {}),
        ("PGN UDA (unsupervised)", dict(PGN, setting="unsupervised", lm_on_labelled=False, ner_weight_target=1.0),
         {"source": source, "source_raw": source_raw, "target_raw": target_raw}, src_dev, alias),
    ]
    results = {}
    for name, model, entries, dev, aliases in runs:
        t0 = time.time()
        nlp = make_nlp(model, tgt, aliases)
        reader = mdc(entries)
        info = train(nlp, lambda: reader(nlp), dev, args.steps, args.eval_every, args.seed, args.lr, args.batch_size)
        test = score(nlp, tgt_test)
        results[name] = (info, test, dev is src_dev, time.time() - t0)
        print(f"{name}: test F1 {test['ents_f']:.4f} (dev F1 {info['dev_f']:.4f} at step {info['best_step']}, "
              f"{time.time() - t0:.0f}s)", flush=True)

    # -- report ---------------------------------------------------------------------------------
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines += [
        "# PGN (spacy_crossner.PGNBiLSTM.v1) vs BiLSTMCRF: speed and CrossNER AI F1",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}; commit {commit} (+ this script)",
        f"- Machine: {os.cpu_count()} CPU(s) (`nproc`), {cpu}, no GPU; Python {platform.python_version()}, "
        f"torch {torch.__version__}, spaCy {spacy.__version__}; torch.set_num_threads(1)",
        f"- Command: `python benchmarks/pgn.py --steps {args.steps} --eval-every {args.eval_every} --batch-size "
        f"{args.batch_size} --lr {args.lr} --source-fraction {args.source_fraction} --target-upsample "
        f"{args.target_upsample} --target-raw-upsample {args.target_raw_upsample} --source-raw-fraction "
        f"{args.source_raw_fraction} --speed-batches {args.speed_batches} --seed {args.seed}`",
        f"- Load average (1 min) before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs (other engineers' jobs share the machine); whole run {time.time() - began:.0f} s",
        "- Sizes (all models): WordCharEmbed word 100 + char-CNN 50 filters (d = 150), one BiLSTM layer of 100 "
        "per direction, dropout 0.5, CRF; PGN: U = V = 8, meta tensor 64 x 201,600, LM vocabulary <= 20,000 "
        "(frequency-sorted, from the LM text), 50 sampled negatives with log-Q correction.",
        "",
        "## Speed (words/second, same batches, same run)",
        "",
        f"Training: {args.speed_batches} batches of {args.batch_size} labelled sentences (CoNLL + AI train, "
        f"{speed_words:,} words) after 3 warm-up batches, in interleaved rounds of 5 batches per model, Adam without parameter averaging (as in the configs; thinc averaging of the 12.9M-entry meta tensor alone cost ~0.9 s per step here). Inference: `nlp.pipe` over the AI test set "
        f"({infer_words:,} words, batch 256), best of 3 interleaved rounds.",
        "",
        "| model | training w/s | vs BiLSTMCRF | inference w/s | vs BiLSTMCRF |",
        "|---|---|---|---|---|",
    ]
    for name, (tr, inf) in speed.items():
        lines.append(f"| {name} | {tr:,.0f} | {tr / base_train:.2f}x | {inf:,.0f} | {inf / base_infer:.2f}x |")
    lines += [
        "",
        "## CrossNER AI test (entity-level exact match, micro P/R/F1)",
        "",
        f"All models: Adam lr {args.lr} (no parameter averaging), batch {args.batch_size} sentences, {args.steps} steps, seed {args.seed}, "
        f"dev evaluation every {args.eval_every} steps, best dev weights kept. Data per pass: CoNLL-2003 train "
        f"sampled at {args.source_fraction} (about {int(14041 * args.source_fraction):,} sentences), AI train "
        f"x{args.target_upsample:g} (joint, SDA) or x1 (target-only); UDA adds raw text: the CoNLL train text "
        f"sampled at {args.source_raw_fraction} and the AI train+dev text x{args.target_raw_upsample:g} "
        "(project/raw, no labels). Source-only and UDA tag AI docs with CoNLL's labels (domain_aliases "
        "ai -> conll2003), so only person/location/organisation/misc can match AI's gold; they are selected "
        "on 500 CoNLL dev sentences, the others on AI dev.",
        "",
        "| model | dev used | dev F1 | best step | test P | test R | test F1 | train w/s | minutes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (info, test, on_src, secs) in results.items():
        lines.append(
            f"| {name} | {'CoNLL' if on_src else 'AI'} | {info['dev_f']:.4f} | {info['best_step']} | "
            f"{test['ents_p']:.4f} | {test['ents_r']:.4f} | {test['ents_f']:.4f} | "
            f"{info['train_words_per_s']:,.0f} | {secs / 60:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf8")


if __name__ == "__main__":
    main()
