"""Speed at scale (issue 14): training and inference words/s of every architecture at 4, 10 and
22 entity types, against spaCy's own ``ner`` (CNN tok2vec) and ``ner`` + MiniLM, in one run.

Usage (from the repository root)::

    python benchmarks/speed.py [--quick] [--rounds 2] [--output benchmarks/results/speed.md]

Label sets, over the real CrossNER text of the domains that have those types:

- ``4``: CoNLL-2003 (location, misc, organisation, person), one domain;
- ``10``: CrossNER politics (9 types + O = 10 tags types / multi-cell cells), one domain;
- ``22``: CoNLL-2003 with CoNLL's own labels (PER, LOC, ORG, MISC) + CrossNER science's 17
  types + O = 22 (two domains, half the docs each; the multi-cell LSTM has 22 cells).

Every (architecture, label set) is measured in its own subprocess (so that its peak RSS,
``resource.getrusage``, is its own), and the subprocesses take turns: round r runs every
architecture of a set in an order that is reversed every other round; words/s are medians over
rounds, as ``spacy benchmark speed`` reports them: training = words / time of the
``nlp.update`` calls (batches of 16 sentences, after one warm-up batch), inference = words /
time of ``nlp.pipe`` (batch size 256) over the test docs. For the crossner architectures the
share of the head's decoding in inference (``decode_share``: time inside
``spacy_crossner.models.head.decode`` / ``nlp.pipe`` time) is measured in the same run.

Architectures: the configs' models (configs/bilstm_target.cfg, multi_cell_sda.cfg,
pgn_sda.cfg, moee_zero.cfg), TransformerTagger and LabelAwareTagger (greedy) on the bundled
MiniLM, spaCy ``ner`` with ``spacy init config -p ner`` efficiency defaults (``spacy_ner_cnn``)
and spaCy ``ner`` on the bundled MiniLM (``spacy_ner_minilm``). Transformer rows use fewer docs
(``--trf-train-docs``, ``--trf-infer-docs``): on 2 CPU cores they are slow.

torch runs on one thread (OMP_NUM_THREADS=1 and ``torch.set_num_threads(1)``).
"""
import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spacy_crossner
from machine import cpu_model, utc_now  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CROSSNER = ROOT.parent / "shared" / "data" / "crossner"
CONFIGS = ROOT / "configs"
RESULTS = ROOT / "benchmarks" / "results"
CONLL_RENAME = {"person": "PER", "location": "LOC", "organisation": "ORG", "misc": "MISC"}
# label set -> [(domain, rename)], and the domain the crossner component treats as its target
LABEL_SETS = {
    4: {"domains": [("conll2003", None)], "target": "conll2003"},
    10: {"domains": [("politics", None)], "target": "politics"},
    22: {"domains": [("conll2003", CONLL_RENAME), ("science", None)], "target": "science"},
}
CROSSNER_CONFIGS = {
    "bilstm_crf": "bilstm_target.cfg",
    "multi_cell": "multi_cell_sda.cfg",
    "pgn": "pgn_sda.cfg",
    "moee": "moee_zero.cfg",
}
TRF_HEADS = {
    "transformer_tagger": {"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": False, "dropout": 0.1},
    "label_aware": {"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 100,
                    "hidden_width": 100, "beam_width": 1},
}
ARCHS = ["bilstm_crf", "multi_cell", "pgn", "moee", "transformer_tagger", "label_aware",
         "spacy_ner_cnn", "spacy_ner_minilm"]
TRF_ARCHS = {"transformer_tagger", "label_aware", "spacy_ner_minilm"}
TRANSFORMER = {
    "@architectures": "spacy-transformers.TransformerModel.v3",
    "name": {"@misc": "spacy_crossner.transformer_name.v1", "name": None},
    "tokenizer_config": {"use_fast": True},
    "get_spans": {"@span_getters": "spacy-transformers.strided_spans.v1", "window": 128, "stride": 96},
}
LISTENER = {
    "@architectures": "spacy-transformers.TransformerListener.v1",
    "grad_factor": 1.0,
    "pooling": {"@layers": "reduce_first.v1"},
    "upstream": "*",
}


# -- data -------------------------------------------------------------------------------------


def load_docs(work: Path, domain: str, split: str, rename: Optional[Dict[str, str]] = None):
    """The docs of a CrossNER split (converted into ``work/corpus`` on first use), with entity
    labels renamed by ``rename``."""
    import spacy
    from spacy.tokens import Doc, DocBin, Span

    from spacy_crossner import get_domain, set_domain
    from spacy_crossner.convert import convert

    out = work / "corpus" / domain
    if not (out / f"{split}.spacy").exists():
        convert(CROSSNER / domain, out, domain=domain)
    vocab = spacy.blank("en").vocab
    docs = list(DocBin().from_disk(out / f"{split}.spacy").get_docs(vocab))
    if rename:
        renamed = []
        for doc in docs:
            new = Doc(vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
            new.ents = [Span(new, e.start, e.end, label=rename.get(e.label_, e.label_)) for e in doc.ents]
            set_domain(new, get_domain(doc))
            renamed.append(new)
        docs = renamed
    return docs


def set_docs(work: Path, n_types: int, split: str, n: int, seed: int):
    """n docs of a label set's split, split evenly between its domains, in a fixed shuffle
    (cached in ``work/sets``, so that the subprocesses do not each read all of CoNLL)."""
    import spacy
    from spacy.tokens import DocBin

    cache = work / "sets" / f"{n_types}_{split}_{n}_{seed}.spacy"
    if cache.exists():
        return list(DocBin(store_user_data=True).from_disk(cache).get_docs(spacy.blank("en").vocab))
    parts = LABEL_SETS[n_types]["domains"]
    rng = random.Random(seed)
    docs = []
    for domain, rename in parts:
        pool = [d for d in load_docs(work, domain, split, rename) if len(d)]
        docs += rng.sample(pool, min(len(pool), n // len(parts)))
    rng.shuffle(docs)
    cache.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=True).to_disk(cache)
    return docs


def make_examples(nlp, docs):
    from spacy.tokens import Doc
    from spacy.training import Example

    from spacy_crossner import get_domain, set_domain

    out = []
    for doc in docs:
        pred = Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
        set_domain(pred, get_domain(doc))
        out.append(Example(pred, doc))
    return out


# -- pipelines --------------------------------------------------------------------------------


def build_crossner(arch: str, target: str):
    """A blank English pipeline with the crossner component of ``arch``."""
    import spacy
    from spacy.util import load_config

    nlp = spacy.blank("en")
    if arch in CROSSNER_CONFIGS:
        cfg = load_config(CONFIGS / CROSSNER_CONFIGS[arch], interpolate=False)
        model = cfg["components"]["crossner"]["model"]
    else:
        nlp.add_pipe("transformer", config={"model": TRANSFORMER})
        model = dict(TRF_HEADS[arch], tok2vec=LISTENER)
    nlp.add_pipe("crossner", config={"model": model, "target_domain": target})
    return nlp


def build_spacy_ner(arch: str):
    """spaCy's ner: ``spacy init config -p ner`` (efficiency, CPU) or ner on the bundled MiniLM."""
    import spacy
    from spacy.cli.init_config import init_config
    from spacy.util import load_model_from_config

    if arch == "spacy_ner_cnn":
        config = init_config(lang="en", pipeline=["ner"], optimize="efficiency", gpu=False, silent=True)
        return load_model_from_config(config, auto_fill=True)
    nlp = spacy.blank("en")
    nlp.add_pipe("transformer", config={"model": TRANSFORMER})
    nlp.add_pipe("ner", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner",
        "extra_state_tokens": False, "hidden_width": 64, "maxout_pieces": 2, "use_upper": False,
        "nO": None, "tok2vec": LISTENER,
    }})
    return nlp


# -- one measurement (a subprocess) ------------------------------------------------------------


def measure(arch: str, n_types: int, n_train: int, n_infer: int, work: Path, seed: int) -> Dict:
    import torch
    from spacy.tokens import Doc
    from thinc.api import fix_random_seed

    import spacy_crossner.pipeline as pipeline

    from spacy_crossner import get_domain, set_domain

    torch.set_num_threads(1)
    fix_random_seed(seed)
    train = set_docs(work, n_types, "train", n_train, seed)
    test = set_docs(work, n_types, "test", n_infer, seed)
    if arch.startswith("spacy_ner"):
        nlp = build_spacy_ner(arch)
    else:
        nlp = build_crossner(arch, LABEL_SETS[n_types]["target"])
    examples = make_examples(nlp, train)
    optimizer = nlp.initialize(lambda: examples)
    batches = [examples[i : i + 16] for i in range(0, len(examples), 16)]
    nlp.update(batches[0], sgd=optimizer, drop=0.1)  # warm-up
    words, elapsed = 0, 0.0
    for batch in batches[1:] or batches:
        start = time.perf_counter()
        nlp.update(batch, sgd=optimizer, drop=0.1)
        elapsed += time.perf_counter() - start
        words += sum(len(eg) for eg in batch)
    train_wps = words / elapsed

    decode_time = [0.0]
    original = pipeline.head_decode

    def timed_decode(*args, **kwargs):
        start = time.perf_counter()
        result = original(*args, **kwargs)
        decode_time[0] += time.perf_counter() - start
        return result

    pipeline.head_decode = timed_decode

    def fresh(docs):
        out = []
        for doc in docs:
            new = Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
            set_domain(new, get_domain(doc))
            out.append(new)
        return out

    list(nlp.pipe(fresh(test[:16])))  # warm-up
    decode_time[0] = 0.0
    docs = fresh(test)
    start = time.perf_counter()
    list(nlp.pipe(docs, batch_size=256))
    infer_s = time.perf_counter() - start
    pipeline.head_decode = original
    labels = sorted({e.label_ for d in train + test for e in d.ents})
    return {
        "arch": arch,
        "n_types": n_types,
        "n_labels": len(labels),
        "train_wps": train_wps,
        "infer_wps": sum(len(d) for d in docs) / infer_s,
        "decode_share": None if arch.startswith("spacy_ner") else decode_time[0] / infer_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "device": "cpu",
        "train_docs": len(examples),
        "train_words": sum(len(eg) for eg in examples),
        "infer_docs": len(docs),
        "infer_words": sum(len(d) for d in docs),
    }


# -- the run ----------------------------------------------------------------------------------


def run_worker(args, arch: str, n_types: int) -> Dict:
    trf = arch in TRF_ARCHS
    cmd = [
        sys.executable, __file__, "--worker", arch, "--set", str(n_types), "--work", str(args.work),
        "--train-docs", str(args.trf_train_docs if trf else args.train_docs),
        "--infer-docs", str(args.trf_infer_docs if trf else args.infer_docs),
        "--seed", str(args.seed),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{arch} at {n_types} types failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(runs: List[Dict]) -> Dict:
    row = dict(runs[0])
    for key in ("train_wps", "infer_wps", "decode_share"):
        values = [r[key] for r in runs if r[key] is not None]
        row[key] = statistics.median(values) if values else None
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    row["rounds"] = len(runs)
    return row


def ratio(rows: List[Dict], n: int, a: str, b: str, key: str) -> Optional[float]:
    by = {(r["arch"], r["n_types"]): r for r in rows}
    if (a, n) in by and (b, n) in by:
        return by[(a, n)][key] / by[(b, n)][key]
    return None


TARGETS = [
    ("multi-cell training >= 0.4x BiLSTM-CRF at 22 types", 22, "multi_cell", "bilstm_crf", "train_wps", 0.4),
    ("multi-cell training >= 0.5x BiLSTM-CRF at 10 types", 10, "multi_cell", "bilstm_crf", "train_wps", 0.5),
    ("BiLSTM-CRF inference >= 1.0x spaCy ner (CNN)", None, "bilstm_crf", "spacy_ner_cnn", "infer_wps", 1.0),
    ("TransformerTagger inference >= 0.9x spaCy ner + MiniLM", None, "transformer_tagger", "spacy_ner_minilm", "infer_wps", 0.9),
    ("label-aware greedy inference >= 0.7x TransformerTagger", None, "label_aware", "transformer_tagger", "infer_wps", 0.7),
]


def write_report(args, rows: List[Dict], total: float, load: str) -> None:
    import spacy
    import torch

    sets = sorted({r["n_types"] for r in rows})
    lines = [
        "# Speed at scale: every architecture at 4, 10 and 22 entity types (issue 14)",
        "",
        f"- Command (from the repository root): `python benchmarks/speed.py {' '.join(args.argv)}`",
        f"- Machine: {os.cpu_count()} CPU cores, {cpu_model()}, no GPU; torch {torch.__version__}, "
        f"spaCy {spacy.__version__}, Python {platform.python_version()}; torch/OpenMP threads 1; "
        f"load average at start / end: {load} (the benchmark's own processes count in it); read the "
        "ratios (measured side by side, interleaved), not the absolute words/s.",
        f"- Date: {utc_now()}; total {total / 60:.1f} min; "
        f"{args.rounds_done} of {args.rounds} interleaved round(s), medians; raw rows in `benchmarks/results/speed.json`.",
        f"- Docs: {args.train_docs} training / {args.infer_docs} test sentences per set "
        f"({args.trf_train_docs} / {args.trf_infer_docs} for the transformer rows), batches of 16 "
        "for training, `nlp.pipe(batch_size=256)` for inference.",
        "- Label sets: 4 = CoNLL-2003; 10 = CrossNER politics (9 types + O); 22 = CoNLL-2003 "
        "relabelled PER/LOC/ORG/MISC + CrossNER science (17 types) + O, two domains.",
        "",
        "## Words per second",
        "",
        "| arch | types | labels | train wps | infer wps | decode share of inference | peak RSS (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (ARCHS.index(r["arch"]), r["n_types"])):
        share = "" if r["decode_share"] is None else f"{100 * r['decode_share']:.1f}%"
        lines.append(
            f"| {r['arch']} | {r['n_types']} | {r['n_labels']} | {r['train_wps']:,.0f} | "
            f"{r['infer_wps']:,.0f} | {share} | {r['peak_rss_mb']:,.0f} |"
        )
    lines += ["", "## Targets", "", "| target | types | ratio | met |", "|---|---:|---:|---|"]
    for name, n, a, b, key, goal in TARGETS:
        for m in ([n] if n else sets):
            value = ratio(rows, m, a, b, key)
            if value is not None:
                lines.append(f"| {name} | {m} | {value:.2f} | {'yes' if value >= goal else '**no**'} |")
    by = {(r["arch"], r["n_types"]): r for r in rows}
    for m in sets:
        if ("bilstm_crf", m) in by:
            share = by[("bilstm_crf", m)]["decode_share"]
            lines.append(f"| decoding <= 10% of BiLSTM-CRF inference | {m} | {100 * share:.1f}% | "
                         f"{'yes' if share <= 0.10 else '**no**'} |")
    (Path(args.output)).write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small check: 4 types, few docs, one round")
    parser.add_argument("--sets", default="4,10,22", help="label sets (comma-separated of 4, 10, 22)")
    parser.add_argument("--archs", default=",".join(ARCHS), help="architectures (comma-separated)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repeats")
    parser.add_argument("--train-docs", type=int, default=96, help="training sentences per set")
    parser.add_argument("--infer-docs", type=int, default=400, help="test sentences per set")
    parser.add_argument("--trf-train-docs", type=int, default=32, help="training sentences, transformer rows")
    parser.add_argument("--trf-infer-docs", type=int, default=64, help="test sentences, transformer rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/crossner_speed"), help="converted corpora")
    parser.add_argument("--output", default=str(RESULTS / "speed.md"), help="markdown report")
    parser.add_argument("--json", default=str(RESULTS / "speed.json"), help="rows as JSON")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--set", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    if args.worker:
        row = measure(args.worker, args.set, args.train_docs, args.infer_docs, args.work, args.seed)
        print(json.dumps(row))
        return
    if args.quick:
        args.sets, args.rounds = "4", 1
        args.train_docs, args.infer_docs, args.trf_train_docs, args.trf_infer_docs = 32, 64, 16, 16
    archs = args.archs.split(",")
    sets = [int(s) for s in args.sets.split(",")]
    for n in sets:  # cache the samples once
        for trf in (False, True):
            set_docs(args.work, n, "train", args.trf_train_docs if trf else args.train_docs, args.seed)
            set_docs(args.work, n, "test", args.trf_infer_docs if trf else args.infer_docs, args.seed)
    load_start = os.getloadavg()
    start = time.time()
    runs: Dict = {}
    for r in range(args.rounds):
        args.rounds_done = r + 1
        for n in sets:
            for arch in archs if r % 2 == 0 else archs[::-1]:
                t0 = time.time()
                row = run_worker(args, arch, n)
                runs.setdefault((arch, n), []).append(row)
                print(f"round {r} {arch} {n}: train {row['train_wps']:.0f} w/s, infer "
                      f"{row['infer_wps']:.0f} w/s, {row['peak_rss_mb']:.0f} MB ({time.time() - t0:.0f} s)",
                      flush=True)
        # the report so far after every round (a long run cut short still leaves one)
        rows = [summarise(v) for v in runs.values()]
        load = f"{load_start[0]:.1f} / {os.getloadavg()[0]:.1f}"
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        write_report(args, rows, time.time() - start, load)
    print(Path(args.output).read_text())


if __name__ == "__main__":
    main()
