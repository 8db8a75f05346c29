"""LabelAwareTagger.v1 against TransformerTagger.v1 (linear and CRF) on the same transformer.

Usage (from the repository root)::

    python benchmarks/label_aware.py [--source-limit 640] [--source-steps 40]
        [--target-steps 30] [--lr 2e-4] [--seed 0] [--transformer DIR]

Three measurements, one process, ``torch.set_num_threads(1)`` (the machine is shared: only
ratios against the peers measured in the same run are meaningful):

1. Head cost: forward + backward of the label-aware head alone on random MiniLM-sized features,
   vectorised over prefixes vs the per-position reference loop (one BiLSTM call per prefix, as
   the authors' code runs it).
2. Throughput, words/second: training (``nlp.update``, batches of 16 CrossNER AI train
   sentences) and inference (``nlp.pipe`` over AI dev sentences, batches of 64), rounds
   interleaved over the models, median of the rounds. Models are initialised, not trained
   (timing does not depend on the weights).
3. CrossNER AI test F1, two stages: CoNLL-2003 train (the first ``--source-limit`` sentences,
   ``--source-steps`` steps of 16) then AI train (``--target-steps`` steps of 16), a fresh Adam
   (constant ``--lr``, no clipping) per stage, the last weights (no dev selection), exact-span
   micro F1 from ``nlp.evaluate``. CPU-sized: NOT the paper's setting (BERT-base, full CoNLL for
   2 epochs, 5e-5, up to 100 target epochs with early stopping on dev, mean of 3 seeds).
   The label-aware model is scored with greedy decoding (the paper); greedy and a beam of 4
   are also compared on the first ``--beam-limit`` test sentences.

Results go to ``benchmarks/results/label_aware.md``.
"""
import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

from spacy_crossner import set_domain
from spacy_crossner.convert import column_file_to_docs
from spacy_crossner.formats import read_column_file
from spacy_crossner.models.base import get_emitter
from spacy_crossner.models.pytorch_label_aware import LabelAwareEmitter
from spacy_crossner.decoding import bio_tags

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import cpu_model, utc_now  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "label_aware.md"
CROSSNER = ROOT.parent / "shared" / "data" / "crossner"

TRANSFORMER = {
    "@architectures": "spacy-transformers.TransformerModel.v3",
    "tokenizer_config": {"use_fast": True},
    "get_spans": {"@span_getters": "spacy-transformers.strided_spans.v1", "window": 128, "stride": 96},
}
LISTENER = {
    "@architectures": "spacy-transformers.TransformerListener.v1",
    "grad_factor": 1.0,
    "pooling": {"@layers": "spacy_crossner.reduce_first.v1"},
    "upstream": "*",
}
HEADS = {
    "TransformerTagger linear": {"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": False, "dropout": 0.1},
    "TransformerTagger CRF": {"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True, "dropout": 0.1},
    "LabelAwareTagger": {"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 100, "hidden_width": 100},
}


def make_nlp(head: Dict, transformer: str) -> spacy.Language:
    nlp = spacy.blank("en")
    trf = dict(TRANSFORMER, name={"@misc": "spacy_crossner.transformer_name.v1", "name": transformer})
    nlp.add_pipe("transformer", config={"model": trf})
    nlp.add_pipe("crossner", config={"model": dict(head, tok2vec=LISTENER)})
    return nlp


def read_docs(nlp, domain: str, split: str, limit: int = 0) -> List[Doc]:
    column_file = read_column_file(CROSSNER / domain / f"{split}.txt")
    docs = list(column_file_to_docs(column_file, nlp.vocab, domain=domain))
    return docs[:limit] if limit else docs


def examples_of(nlp, docs: List[Doc]) -> List[Example]:
    out = []
    for doc in docs:
        predicted = Doc(nlp.vocab, words=[t.text for t in doc])
        set_domain(predicted, doc._.domain)
        out.append(Example(predicted, doc))
    return out


def fresh(nlp, docs: List[Doc]) -> List[Doc]:
    out = []
    for doc in docs:
        new = Doc(nlp.vocab, words=[t.text for t in doc])
        set_domain(new, doc._.domain)
        out.append(new)
    return out


def batches(examples, size, n_steps, rng):
    order = []
    while len(order) < n_steps * size:
        block = list(examples)
        rng.shuffle(block)
        order.extend(block)
    return [order[i * size : (i + 1) * size] for i in range(n_steps)]


def head_cost(rounds: int = 2) -> Dict[str, float]:
    torch.manual_seed(0)
    tags = bio_tags(["l%d" % i for i in range(14)])  # K = 29, as AI
    emitter = LabelAwareEmitter(label_width=100, hidden_width=100)
    emitter.setup(384, {"ai": tags}, {})
    lengths = torch.tensor([random.Random(i).randint(10, 50) for i in range(16)])
    n = int(lengths.max())
    X = torch.randn(16, n, 384)
    gold = torch.randint(0, 29, (16, n))
    idx, _ = emitter.domain_index(["ai"] * 16, X.device)
    inputs = emitter.shifted_inputs(gold, idx)
    out = {}
    for name, fn in (("vectorised", emitter.chain_logits), ("reference loop", emitter.reference_logits)):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            fn(X.requires_grad_(True), lengths, inputs).sum().backward()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times)
    return out


def throughput(transformer: str, rounds: int, train_batches: int, infer_limit: int) -> Dict[str, Dict[str, float]]:
    fix_random_seed(0)
    nlps = {}
    probe = spacy.blank("en")
    train_docs = read_docs(probe, "ai", "train")
    dev_docs = read_docs(probe, "ai", "dev", limit=infer_limit)
    for name, head in HEADS.items():
        nlp = make_nlp(head, transformer)
        nlp.initialize(lambda: examples_of(nlp, train_docs))
        nlps[name] = nlp
    nlps["LabelAwareTagger beam 4"] = nlps["LabelAwareTagger"]
    train_words = {name: [] for name in HEADS}
    infer_words = {name: [] for name in nlps}
    rng = random.Random(0)
    for r in range(rounds + 1):  # round 0 warms up
        for name in HEADS:
            nlp = nlps[name]
            optimizer = Adam(1e-5)
            steps = batches(examples_of(nlp, train_docs), 16, train_batches, rng)
            words = sum(len(eg.predicted) for b in steps for eg in b)
            start = time.perf_counter()
            for b in steps:
                nlp.update(b, sgd=optimizer)
            if r:
                train_words[name].append(words / (time.perf_counter() - start))
        for name, nlp in nlps.items():
            if name.startswith("LabelAware"):
                get_emitter(nlp.get_pipe("crossner").model).beam_width = 4 if "beam" in name else 1
            docs = fresh(nlp, dev_docs)
            words = sum(len(d) for d in docs)
            start = time.perf_counter()
            list(nlp.pipe(docs, batch_size=64))
            if r:
                infer_words[name].append(words / (time.perf_counter() - start))
    return {
        "train": {k: statistics.median(v) for k, v in train_words.items()},
        "infer": {k: statistics.median(v) for k, v in infer_words.items()},
    }


def two_stages(transformer, source_limit, source_steps, target_steps, lr, seed, beam_limit) -> Dict[str, Dict]:
    results = {}
    probe = spacy.blank("en")
    conll = read_docs(probe, "conll2003", "train", limit=source_limit)
    ai_train = read_docs(probe, "ai", "train")
    ai_test = read_docs(probe, "ai", "test")
    for name, head in HEADS.items():
        fix_random_seed(seed)
        rng = random.Random(seed)
        nlp = make_nlp(head, transformer)
        source = examples_of(nlp, conll)
        nlp.initialize(lambda: source)
        start = time.perf_counter()
        optimizer = Adam(lr, grad_clip=0.0)
        losses = {}
        for b in batches(source, 16, source_steps, rng):
            nlp.update(b, sgd=optimizer, drop=0.1, losses=losses)
        stage1 = time.perf_counter() - start
        pipe = nlp.get_pipe("crossner")
        pipe.target_domain = "ai"
        # All target labels before the first target update (what [initialize.after_init]
        # labels does): a TransformerTagger head grown mid-run breaks thinc's Adam moments.
        for label in sorted({e.label_ for doc in ai_train for e in doc.ents}):
            pipe.add_label(label, domain="ai")
        target = examples_of(nlp, ai_train)
        optimizer = Adam(lr, grad_clip=0.0)
        start = time.perf_counter()
        for b in batches(target, 16, target_steps, rng):
            nlp.update(b, sgd=optimizer, drop=0.1, losses=losses)
        stage2 = time.perf_counter() - start
        scores = nlp.evaluate(examples_of(nlp, ai_test))
        row = {"f1": scores["ents_f"], "p": scores["ents_p"], "r": scores["ents_r"],
               "stage1_s": stage1, "stage2_s": stage2}
        if name == "LabelAwareTagger":
            subset = examples_of(nlp, ai_test[:beam_limit])
            row["f1_greedy_subset"] = nlp.evaluate(subset)["ents_f"]
            get_emitter(pipe.model).beam_width = 4
            row["f1_beam4_subset"] = nlp.evaluate(examples_of(nlp, ai_test[:beam_limit]))["ents_f"]
        results[name] = row
        print(name, {k: round(v, 4) for k, v in row.items()}, flush=True)
    return results




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transformer", default=None, help="HF model name or dir (default: bundled MiniLM)")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds (after one warm-up)")
    parser.add_argument("--train-batches", type=int, default=2, help="training batches per throughput round")
    parser.add_argument("--infer-limit", type=int, default=96, help="AI dev sentences per inference round")
    parser.add_argument("--source-limit", type=int, default=640, help="CoNLL train sentences for stage 1")
    parser.add_argument("--source-steps", type=int, default=40, help="stage-1 steps (batches of 16)")
    parser.add_argument("--target-steps", type=int, default=30, help="stage-2 steps (batches of 16)")
    parser.add_argument("--lr", type=float, default=2e-4, help="Adam learning rate, both stages")
    parser.add_argument("--beam-limit", type=int, default=200, help="AI test sentences for greedy vs beam 4")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--skip-f1", action="store_true", help="throughput only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from spacy_crossner.misc import transformer_name

    transformer = transformer_name(args.transformer)
    began = time.perf_counter()
    cost = head_cost()
    print("head cost", cost, flush=True)
    speed = throughput(args.transformer, args.rounds, args.train_batches, args.infer_limit)
    print("throughput", speed, flush=True)
    f1 = None
    if not args.skip_f1:
        f1 = two_stages(args.transformer, args.source_limit, args.source_steps, args.target_steps, args.lr,
                        args.seed, args.beam_limit)
    total = time.perf_counter() - began
    write_report(args, transformer, cost, speed, f1, total)


def write_report(args, transformer, cost, speed, f1, total) -> None:
    base_train = speed["train"]["TransformerTagger linear"]
    base_infer = speed["infer"]["TransformerTagger linear"]
    lines = [
        "# LabelAwareTagger.v1 vs TransformerTagger.v1 (linear, CRF)",
        "",
        f"- Command: `python {' '.join(sys.argv)}` (from the repository root)",
        f"- Date: {utc_now()}; total run {total / 60:.1f} min",
        f"- Machine: {cpu_model()}, nproc = {__import__('os').cpu_count()}, shared with other jobs; "
        "torch.set_num_threads(1); CPU only",
        f"- Transformer: `{transformer}` (spacy-transformers, strided spans 128/96, reduce_first pooling), "
        "the same for all heads; label-aware head d2 = h = 100",
        "",
        "## Head alone (K = 29, 16 docs of 10-50 words, d1 = 384): forward + backward, seconds",
        "",
        "| implementation | s / batch |",
        "|---|---|",
    ]
    for name, value in cost.items():
        lines.append(f"| {name} | {value:.3f} |")
    lines += [
        "",
        f"Vectorised is {cost['reference loop'] / cost['vectorised']:.0f}x faster than the per-prefix loop.",
        "",
        f"## Throughput, words/second (median of {args.rounds} interleaved rounds)",
        "",
        "| model | training w/s | x linear | inference w/s | x linear |",
        "|---|---|---|---|---|",
    ]
    for name in speed["infer"]:
        tr = speed["train"].get(name)
        tr_cells = f"{tr:.0f} | {tr / base_train:.2f}" if tr else "- | -"
        inf = speed["infer"][name]
        lines.append(f"| {name} | {tr_cells} | {inf:.0f} | {inf / base_infer:.2f} |")
    lines += [
        "",
        "Targets of issue 6: training >= 0.7x, inference >= 0.5x of TransformerTagger.",
    ]
    if f1 is not None:
        lines += [
            "",
            "## CrossNER AI test F1, two stages (CPU-sized; NOT the paper's setting)",
            "",
            f"Stage 1: first {args.source_limit} CoNLL-2003 train sentences, {args.source_steps} steps of 16; "
            f"stage 2: AI train (100 sentences), {args.target_steps} steps of 16; Adam lr {args.lr} (constant, "
            f"no clipping, fresh per stage), dropout 0.1, seed {args.seed}, last weights (no dev selection), all AI "
            "labels added before stage 2; "
            "AI test = 431 sentences, exact-span micro F1. One seed: differences of a few points are noise.",
            "",
            "| model | F1 | P | R | stage 1 s | stage 2 s |",
            "|---|---|---|---|---|---|",
        ]
        for name, row in f1.items():
            lines.append(
                f"| {name} | {100 * row['f1']:.2f} | {100 * row['p']:.2f} | {100 * row['r']:.2f} | "
                f"{row['stage1_s']:.0f} | {row['stage2_s']:.0f} |"
            )
        row = f1.get("LabelAwareTagger")
        if row and "f1_beam4_subset" in row:
            lines += [
                "",
                f"Greedy vs beam 4, same LabelAwareTagger, first {args.beam_limit} AI test sentences: "
                f"F1 {100 * row['f1_greedy_subset']:.2f} (greedy) vs {100 * row['f1_beam4_subset']:.2f} (beam 4).",
            ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
