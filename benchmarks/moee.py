"""MoEE (MTL + mixture of entity experts) vs BiLSTMCRF: throughput and zero-shot F1 (issue 5).

Usage (from the repository root)::

    python benchmarks/moee.py run [--train-limit 3000] [--steps 400] [--seed 0]
    python benchmarks/moee.py evaluate MODEL DATA [--output metrics.json] [--domain NAME]

``run`` trains ``spacy_crossner.MoEE.v1`` (use_mtl and use_moee on) and
``spacy_crossner.BiLSTMCRF.v1`` with the same features (WordCharEmbed, no pretrained vectors:
none are available offline), the same BiLSTM sizes, batches and seed, on a subsample of
CoNLL-2003 train (the source) only. The two models take turns on the same batches, so both see
the same machine load; training words/s is words over the time of the update calls. Each model is
selected on a CoNLL dev subsample, then tagged zero-shot on the CrossNER target test sets, scored
on the four source types (person, organisation, location, misc): gold entities of other types
count as O and are listed as unpredictable. Inference words/s is ``nlp.pipe`` over the CoNLL dev
subsample, models alternating, median of the rounds. torch runs on 1 thread
(``torch.set_num_threads(1)``) for stable timings on a shared machine. Results go to
``benchmarks/results/moee.md``. This is a CPU-sized run, not the paper's setting (FastText
vectors, full CoNLL, up to 300 epochs with early stopping).

``evaluate`` is the zero-shot evaluation on its own (used by the project): a trained pipeline on
a ``.spacy`` corpus of a target domain, scored on the types the model can predict for those docs,
listing the target's types it cannot predict instead of failing.
"""
import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import cpu_model, utc_now  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "moee.md"
CROSSNER = ROOT.parent / "shared" / "data" / "crossner"
TARGETS = ("ai", "literature", "music", "politics", "science")
SOURCE = "conll2003"


# -- zero-shot evaluation -----------------------------------------------------------------------


def evaluate_zero_shot(nlp, gold_docs: Sequence, domain: Optional[str] = None) -> Dict[str, Any]:
    """Tag gold docs with a crossner pipeline and score them on the types it can predict.

    nlp (Language): a pipeline with a ``crossner`` component (e.g. trained on the source, with
        ``domain_aliases`` mapping the target's domain to the source).
    gold_docs (Sequence[Doc]): docs with gold entities and ``doc._.domain``.
    domain (Optional[str]): domain set on every doc instead of its own (e.g. the source's, for
        a model trained without ``domain_aliases``).
    RETURNS (Dict[str, Any]): ``score_tags`` metrics restricted to the predictable types
        (``scored_types``), ``unpredictable`` ({type: gold entity count} of the data's types the
        model has no tag for; they count as O), ``label_map`` ({data domain: labelled domain}),
        ``note``, ``n_words`` and ``words_per_second``.
    """
    from spacy.tokens import Doc

    from spacy_crossner.domains import get_domain, set_domain
    from spacy_crossner.evaluate import doc_tags, score_tags

    pipe = nlp.get_pipe("crossner")
    aliases = pipe.cfg.get("domain_aliases") or {}
    inputs, label_map = [], {}
    for gold in gold_docs:
        doc = Doc(nlp.vocab, words=[t.text for t in gold], spaces=[bool(t.whitespace_) for t in gold])
        own = get_domain(gold) or pipe.default_domain()
        set_domain(doc, domain or own)
        label_map[own] = aliases.get(domain or own, domain or own)
        inputs.append(doc)
    unknown = sorted(d for d in set(label_map.values()) if d not in pipe.cfg["labels"])
    if unknown:
        raise ValueError(
            f"The model has no labels for domain(s) {unknown}: map them to a labelled domain "
            f"(domain_aliases or --domain); labelled domains: {sorted(pipe.cfg['labels'])}"
        )
    scored = sorted({l for d in label_map.values() for l in pipe.cfg["labels"][d]})
    gold_types = Counter(e.label_ for d in gold_docs for e in d.ents)
    start = time.perf_counter()
    predicted = list(nlp.pipe(inputs, batch_size=128))
    seconds = time.perf_counter() - start
    result = score_tags(
        [doc_tags(d) for d in gold_docs], [doc_tags(d) for d in predicted], labels=scored
    )
    n_words = sum(len(d) for d in inputs)
    unpredictable = {t: n for t, n in sorted(gold_types.items()) if t not in scored}
    # diagnostic only: predictions overlapping a gold entity of an unpredictable type ignored
    # (e.g. a researcher tagged person is then neither right nor wrong)
    lenient = score_tags(
        [doc_tags(d) for d in gold_docs],
        [_drop_overlapping(g, p, set(scored)) for g, p in zip(gold_docs, predicted)],
        labels=scored,
    )
    result.update(
        mode="sentence",
        domain=", ".join(f"{own} tagged as {to}" if own != to else own for own, to in label_map.items()),
        labels=scored,
        scored_types=scored,
        unpredictable=unpredictable,
        label_map=label_map,
        n_docs=len(inputs),
        n_words=n_words,
        n_gold_entities_scored=sum(n for t, n in gold_types.items() if t in scored),
        ents_f_ignoring_other_types=lenient["ents_f"],
        ents_p_ignoring_other_types=lenient["ents_p"],
        words_per_second=n_words / seconds if seconds > 0 else None,
        note=(
            f"scored on the types the model predicts ({', '.join(scored)}); gold entities of "
            f"the other {len(unpredictable)} types ({sum(unpredictable.values())} entities) "
            "cannot be predicted and count as O"
        ),
    )
    return result


def _drop_overlapping(gold, predicted, scored) -> List[str]:
    """Predicted IOB2 tags without the entities that overlap a gold entity of another type."""
    from spacy_crossner.evaluate import doc_tags

    tags = doc_tags(predicted)
    other = [(e.start, e.end) for e in gold.ents if e.label_ not in scored]
    for ent in predicted.ents:
        if any(ent.start < end and start < ent.end for start, end in other):
            tags[ent.start : ent.end] = ["O"] * (ent.end - ent.start)
    return tags


def per_type_table(result: Dict[str, Any]) -> str:
    lines = ["| type | P | R | F | gold |", "|---|---|---|---|---|"]
    counts = result["counts_per_type"]
    for label in result["scored_types"]:
        prf = result["ents_per_type"].get(label, {"p": 0.0, "r": 0.0, "f": 0.0})
        c = counts.get(label, {"tp": 0, "fn": 0})
        lines.append(f"| {label} | {100 * prf['p']:.2f} | {100 * prf['r']:.2f} | "
                     f"{100 * prf['f']:.2f} | {c['tp'] + c['fn']} |")
    lines.append(f"| **overall** | {100 * result['ents_p']:.2f} | {100 * result['ents_r']:.2f} | "
                 f"{100 * result['ents_f']:.2f} | {result['n_gold_entities_scored']} |")
    return "\n".join(lines)


def evaluate_main(args) -> None:
    import spacy
    from spacy.tokens import DocBin

    nlp = spacy.load(args.model)
    files = sorted(Path(args.data).glob("**/*.spacy")) if Path(args.data).is_dir() else [Path(args.data)]
    docs = [d for f in files for d in DocBin().from_disk(f).get_docs(nlp.vocab)]
    try:
        result = evaluate_zero_shot(nlp, docs, domain=args.domain)
    except ValueError as err:
        sys.exit(f"Error: {err}")
    print(f"{args.data}: {result['n_docs']:,} docs, {result['n_words']:,} words; domains "
          + ", ".join(f"{k} -> {v}" for k, v in result["label_map"].items()))
    print(per_type_table(result))
    print(f"Note: {result['note']}: {result['unpredictable']}")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result, indent=2))
        print(f"Wrote {args.output}")


# -- the benchmark run --------------------------------------------------------------------------


def read_docs(vocab, path: Path, domain: str, limit: int = 0, seed: int = 0) -> List:
    from spacy_crossner.convert import column_file_to_docs
    from spacy_crossner.formats import read_column_file

    docs = list(column_file_to_docs(read_column_file(path), vocab, domain=domain))
    if limit and limit < len(docs):
        docs = random.Random(seed).sample(docs, limit)
    return docs


def features_config(args) -> Dict[str, Any]:
    """The component's default WordCharEmbed features, with the run's dropout."""
    from spacy_crossner.pipeline import DEFAULT_MODEL

    return {**DEFAULT_MODEL["tok2vec"], "dropout": args.dropout}


def model_configs(args) -> Dict[str, Dict[str, Any]]:
    moee = {
        "@architectures": "spacy_crossner.MoEE.v1",
        "hidden_size": args.hidden,
        "depth": args.depth,
        "expert_width": args.expert_width,
        "use_mtl": True,
        "use_moee": True,
        "use_crf": True,
        "dropout": args.dropout,
        "tok2vec": features_config(args),
    }
    bilstm = {
        "@architectures": "spacy_crossner.BiLSTMCRF.v1",
        "hidden_size": args.hidden,
        "depth": args.depth,
        "dropout": args.dropout,
        "use_crf": True,
        "tok2vec": features_config(args),
    }
    return {"BiLSTMCRF": bilstm, "MoEE (MTL+MoEE)": moee}


def make_nlp(model: Dict[str, Any]):
    import spacy

    nlp = spacy.blank("en")
    aliases = {t: SOURCE for t in TARGETS}
    nlp.add_pipe("crossner", config={"model": model, "target_domain": SOURCE, "domain_aliases": aliases})
    return nlp




def run_main(args) -> None:
    import spacy
    import thinc
    import torch
    from spacy.training import Example
    from thinc.api import Adam, fix_random_seed

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()
    vocab = spacy.blank("en").vocab
    data = CROSSNER / SOURCE
    train_docs = read_docs(vocab, data / "train.txt", SOURCE, args.train_limit, args.seed)
    dev_docs = read_docs(vocab, data / "dev.txt", SOURCE, args.dev_limit, args.seed)
    targets = {t: read_docs(vocab, CROSSNER / t / "test.txt", t) for t in args.targets}
    configs = model_configs(args)
    models, optimizers, examples = {}, {}, {}
    for name, config in configs.items():
        fix_random_seed(args.seed)
        nlp = make_nlp(config)
        egs = [Example(d.copy(), d) for d in train_docs]
        for eg in egs:
            eg.predicted._.domain = SOURCE
        nlp.initialize(lambda egs=egs: egs)
        models[name], examples[name] = nlp, egs
        optimizers[name] = Adam(args.lr, grad_clip=5.0)
    rng = random.Random(args.seed)
    order: List[int] = []
    train_words = {n: 0 for n in models}
    train_time = {n: 0.0 for n in models}
    best = {n: (-1.0, None, 0) for n in models}
    curves = {n: [] for n in models}
    dev_examples = [Example(d.copy(), d) for d in dev_docs]
    for step in range(1, args.steps + 1):
        if len(order) < args.batch_size:
            fresh = list(range(len(train_docs)))
            rng.shuffle(fresh)
            order.extend(fresh)
        batch_ids, order = order[: args.batch_size], order[args.batch_size :]
        for name, nlp in models.items():
            batch = [examples[name][i] for i in batch_ids]
            start = time.perf_counter()
            nlp.update(batch, sgd=optimizers[name], drop=args.dropout)
            train_time[name] += time.perf_counter() - start
            train_words[name] += sum(len(eg.predicted) for eg in batch)
        if step % args.eval_every == 0 or step == args.steps:
            for name, nlp in models.items():
                f = nlp.evaluate(dev_examples)["ents_f"]
                curves[name].append((step, f))
                if f > best[name][0]:
                    best[name] = (f, nlp.get_pipe("crossner").to_bytes(), step)
            print(f"step {step}: dev F1 " + ", ".join(f"{n} {100 * c[-1][1]:.1f}" for n, c in curves.items()),
                  flush=True)
    for name, nlp in models.items():
        nlp.get_pipe("crossner").from_bytes(best[name][1])
    # inference words/s: models alternate over rounds on the same docs
    infer_docs = [d.copy() for d in dev_docs]
    for d in infer_docs:
        d.ents = []
    n_infer_words = sum(len(d) for d in infer_docs)
    infer: Dict[str, List[float]] = {n: [] for n in models}
    infer["MoEE, experts not folded"] = []
    moee_name = "MoEE (MTL+MoEE)"
    for _ in range(args.rounds):
        for name in infer:
            nlp = models[moee_name if name.startswith("MoEE") else name]
            emitter = emitter_of(nlp)
            if name.startswith("MoEE"):
                emitter.fold_at_prediction = name == moee_name
            start = time.perf_counter()
            list(nlp.pipe([d.copy() for d in infer_docs], batch_size=128))
            infer[name].append(n_infer_words / (time.perf_counter() - start))
    emitter_of(models[moee_name]).fold_at_prediction = True
    zero_shot = {n: {} for n in models}
    for target, docs in targets.items():
        for name, nlp in models.items():
            zero_shot[name][target] = evaluate_zero_shot(nlp, docs)
        print(f"{target}: " + ", ".join(f"{n} {100 * zero_shot[n][target]['ents_f']:.2f}" for n in models),
              flush=True)
    total_minutes = (time.perf_counter() - t_start) / 60
    write_report(args, models, configs, train_words, train_time, infer, n_infer_words, best, curves,
                 zero_shot, train_docs, dev_docs, load_before, total_minutes, torch, thinc)


def emitter_of(nlp):
    """The torch emitter of a pipeline's crossner model (through the model's public refs)."""
    from spacy_crossner.models.base import get_emitter

    return get_emitter(nlp.get_pipe("crossner").model)


def write_report(args, models, configs, train_words, train_time, infer, n_infer_words, best, curves,
                 zero_shot, train_docs, dev_docs, load_before, total_minutes, torch, thinc) -> None:
    import spacy

    base, moee = "BiLSTMCRF", "MoEE (MTL+MoEE)"
    n_params = {}
    for name, nlp in models.items():
        module = emitter_of(nlp)
        n_params[name] = sum(p.numel() for p in module.parameters())
    command = "python benchmarks/moee.py " + " ".join(sys.argv[1:])
    now = utc_now()
    lines = [
        "# MoEE (MTL + mixture of entity experts) vs BiLSTMCRF: throughput and zero-shot F1",
        "",
        f"- Date: {now}; whole run {total_minutes:.1f} min",
        f"- Machine: {os.cpu_count()} CPU(s) (`nproc`), {cpu_model()}, no GPU; Python "
        f"{platform.python_version()}, torch {torch.__version__}, spaCy {spacy.__version__}, thinc "
        f"{thinc.__version__}; torch on 1 thread; 1-min load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after (the machine is shared with other jobs: timings are noisy, "
        "compare the ratios)",
        f"- Command: `{command}`",
        f"- Source: {len(train_docs):,} sentences sampled (seed {args.seed}) from CoNLL-2003 train "
        f"({sum(len(d) for d in train_docs):,} words); model selection on {len(dev_docs):,} sampled "
        f"CoNLL dev sentences, evaluated every {args.eval_every} steps; {args.steps} steps of "
        f"{args.batch_size} sentences (about {args.steps * args.batch_size / len(train_docs):.1f} "
        f"epochs), Adam lr {args.lr}, grad clip 5, dropout {args.dropout}, seed {args.seed}.",
        f"- Both models: WordCharEmbed features (100-d NORM table trained from scratch + 50 char-CNN "
        f"filters; no pretrained vectors), BiLSTM {args.depth} x {args.hidden} per direction, "
        f"CRF on the full tag set. MoEE: expert width {args.expert_width}, 5 experts (4 types + "
        "non-entity), Task-1 CRF over O/B-ENT/I-ENT, loss weights 1/1/1. Emitter parameters: "
        + ", ".join(f"{n} {p:,}" for n, p in n_params.items()) + ".",
        "- **Not the paper's setting** (FastText 300-d frozen vectors, full CoNLL, up to 300 epochs "
        "with early stopping, 3 seeds): one seed, a CPU-sized subsample and a fixed number of steps.",
        "",
        "## Throughput (same run, models taking turns on the same batches / docs)",
        "",
        "| model | train words/s | vs BiLSTMCRF | inference words/s (median of "
        f"{args.rounds}) | vs BiLSTMCRF |",
        "|---|---|---|---|---|",
    ]
    base_train = train_words[base] / train_time[base]
    base_infer = statistics.median(infer[base])
    for name in infer:
        inf = statistics.median(infer[name])
        if name in train_words:
            tr = train_words[name] / train_time[name]
            train_cells = f"{tr:,.0f} | {tr / base_train:.2f}x"
        else:
            train_cells = "- | -"
        lines.append(f"| {name} | {train_cells} | {inf:,.0f} | {inf / base_infer:.2f}x |")
    lines += [
        "",
        f"Training words/s: words / time of `nlp.update` calls ({train_words[base]:,} words per model). "
        f"Inference: `nlp.pipe(batch_size=128)` over the {len(dev_docs):,} CoNLL dev sentences "
        f"({n_infer_words:,} words), decoding (Viterbi in numpy) included. \"Experts not folded\" "
        "is MoEE predicting through the stacked experts instead of the folded U_a = W_a V head. "
        f"Target (issue 5): MoEE inference >= 0.7x BiLSTMCRF.",
        "",
        "## Zero-shot F1 on the CrossNER test sets (trained on CoNLL only)",
        "",
        "Scored on the four source types (person, organisation, location, misc), each target "
        "domain's docs tagged with conll2003's labels, head and CRF (`domain_aliases`). The source "
        "types map to the target types of the same name (CrossNER and our CoNLL copy use the same "
        "lower-case names). **Gold entities of every other target type count as O** (the models "
        "cannot predict them; listed below), so a prediction on such a span is a false positive. "
        "Sentence-level exact-match micro F1 (spacy_crossner.evaluate.score_tags, mode sentence).",
        "",
        "| target | " + " | ".join(f"{n} F1" for n in models) + " | MoEE - BiLSTMCRF | gold entities scored | "
        + " | ".join(f"{n} F1 ignoring other-type spans*" for n in models) + " |",
        "|---|" + "---|" * (2 * len(models) + 2),
    ]
    diffs = []
    for target in args.targets:
        fs = [100 * zero_shot[n][target]["ents_f"] for n in models]
        diff = 100 * (zero_shot[moee][target]["ents_f"] - zero_shot[base][target]["ents_f"])
        diffs.append(diff)
        lenient = [100 * zero_shot[n][target]["ents_f_ignoring_other_types"] for n in models]
        lines.append(f"| {target} | " + " | ".join(f"{f:.2f}" for f in fs) + f" | {diff:+.2f} | "
                     f"{zero_shot[base][target]['n_gold_entities_scored']} | "
                     + " | ".join(f"{f:.2f}" for f in lenient) + " |")
    means = [statistics.mean(100 * zero_shot[n][t]["ents_f"] for t in args.targets) for n in models]
    lenient_means = [statistics.mean(100 * zero_shot[n][t]["ents_f_ignoring_other_types"]
                                     for t in args.targets) for n in models]
    lines.append("| **mean** | " + " | ".join(f"{m:.2f}" for m in means) +
                 f" | {statistics.mean(diffs):+.2f} | | " + " | ".join(f"{m:.2f}" for m in lenient_means) + " |")
    lines += [
        "",
        "\\* Diagnostic, not the protocol's score: predicted entities that overlap a gold entity of a "
        "type the model cannot predict (e.g. a `researcher` tagged `person`) are dropped before "
        "scoring, so they count neither as right nor as wrong.",
        "",
        "Source dev F1 of the selected checkpoints: " + ", ".join(
            f"{n} {100 * best[n][0]:.2f} (step {best[n][2]})" for n in models) + ".",
        "Dev F1 curves (step: F1): " + "; ".join(
            f"{n}: " + ", ".join(f"{s}: {100 * f:.1f}" for s, f in curves[n]) for n in models) + ".",
        "",
        "### Target types that cannot be predicted (gold entities counted as O)",
        "",
    ]
    for target in args.targets:
        unp = zero_shot[base][target]["unpredictable"]
        lines.append(f"- {target}: " + ", ".join(f"{t} ({n})" for t, n in unp.items()))
    lines += ["", "### Per type", ""]
    for target in args.targets:
        for name in models:
            lines += [f"**{target}, {name}**", "", per_type_table(zero_shot[name][target]), ""]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    output = Path(args.output)
    output.write_text("\n".join(lines) + "\n")
    print(f"Wrote {output}")


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train MoEE and BiLSTMCRF on CoNLL, measure, write the report")
    run.add_argument("--train-limit", type=int, default=3000, help="CoNLL train sentences (0 = all)")
    run.add_argument("--dev-limit", type=int, default=1000, help="CoNLL dev sentences for selection")
    run.add_argument("--steps", type=int, default=400, help="batches per model")
    run.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    run.add_argument("--eval-every", type=int, default=100, help="steps between dev evaluations")
    run.add_argument("--hidden", type=int, default=200, help="BiLSTM width per direction")
    run.add_argument("--depth", type=int, default=2, help="BiLSTM layers")
    run.add_argument("--expert-width", type=int, default=200, help="MoEE expert width")
    run.add_argument("--dropout", type=float, default=0.3, help="dropout")
    run.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    run.add_argument("--rounds", type=int, default=3, help="inference timing rounds")
    run.add_argument("--seed", type=int, default=0, help="seed of sampling, init and batches")
    run.add_argument("--targets", nargs="+", default=list(TARGETS), help="CrossNER target domains")
    run.add_argument("--output", default=str(RESULTS), help="markdown report")
    ev = sub.add_parser("evaluate", help="zero-shot evaluation of a trained pipeline on a target")
    ev.add_argument("model", help="trained pipeline directory")
    ev.add_argument("data", help=".spacy file (or folder) of the target with gold entities")
    ev.add_argument("--output", default=None, help="write the metrics JSON here")
    ev.add_argument("--domain", default=None, help="domain set on every doc instead of its own")
    args = parser.parse_args(argv)
    if args.command == "run":
        run_main(args)
    else:
        evaluate_main(args)


if __name__ == "__main__":
    main()
