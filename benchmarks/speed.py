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

The int8 comparison (issue 50, ``--int8``): per CrossNER domain, our transformer pipeline in
fp32 and its int8 copy (``python -m spacy_crossner quantize``) against spaCy ``ner`` on the
bundled MiniLM, in the same run, on one thread and on every thread (``--threads 1,all``).
Each (pipeline, variant, domain, threads) runs in its own subprocess: words/s of
``nlp.pipe`` over the domain's test set, its test F1 (``spacy_crossner.evaluate``, sentence
mode, as the study scores), the RSS once the pipeline is loaded and the peak RSS. Pipelines
are the study's trained ones (``--study-workdir`` finds ``{method}-{domain}-minilm-s{seed}/
model-best``) or given one by one (``--trained NAME/DOMAIN=PATH``); without either, tiny
pipelines trained for a few steps on ``--trf-train-docs`` sentences (a check that the
benchmark runs: their F1 means nothing). The peer is spaCy ``ner`` + MiniLM trained for a few
steps on the domain's labels (the speed of a network does not depend on its training).
Writes ``benchmarks/results/speed_int8.md`` and the raw rows ``speed_int8.json`` (one per
pipeline x variant x domain x threads: variant, words/s, ratio to spaCy ner + MiniLM in the
same run, test F1 and its change from fp32, RSS)::

    python benchmarks/speed.py --int8 --study-workdir /tmp/crossner_study --rounds 2
    python benchmarks/speed.py --int8 --domains ai --trf-train-docs 16 --infer-docs 16 --rounds 1
"""
import argparse
import json
import os
import platform
import random
import resource
import shutil
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
    "pooling": {"@layers": "spacy_crossner.reduce_first.v1"},
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


DEPLOY_NOTES = "## Deploy settings"


def kept_notes(path, heading: str = DEPLOY_NOTES) -> str:
    """The hand-written notes at the end of an earlier report, from their heading on: a rerun
    rewrites the measurements and keeps them."""
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    at = text.find("\n" + heading)
    return text[at:] if at >= 0 else ""


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
    notes = kept_notes(args.output)
    (Path(args.output)).write_text("\n".join(lines) + "\n" + notes)


# -- int8 on CPU (issue 50) -------------------------------------------------------------------

STUDY_DOMAINS = ["ai", "literature", "music", "politics", "science"]
INT8_METHODS = ["trf_target", "trf_finetune"]
PEER = "spacy_ner_minilm"


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def train_tiny(arch: str, domain: str, out: Path, work: Path, n_train: int, steps: int, seed: int) -> None:
    """A pipeline of ``arch`` ("transformer_tagger" or spaCy's ner on MiniLM) trained for a few
    steps on ``n_train`` sentences of ``domain``, saved to ``out`` (a subprocess's work)."""
    import torch
    from thinc.api import fix_random_seed

    torch.set_num_threads(1)
    fix_random_seed(seed)
    nlp = build_spacy_ner(arch) if arch == PEER else build_crossner(arch, domain)
    rng = random.Random(seed)
    pool = [d for d in load_docs(work, domain, "train") if len(d)]
    examples = make_examples(nlp, rng.sample(pool, min(len(pool), n_train)))
    optimizer = nlp.initialize(lambda: examples)
    for step in range(steps):
        nlp.update(examples[(step * 16) % len(examples):][:16] or examples[:16], sgd=optimizer, drop=0.1)
    partial = out.with_name(out.name + ".partial")  # a run cut short leaves no half pipeline at out
    if partial.exists():
        shutil.rmtree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(partial)
    partial.rename(out)


def test_file(work: Path, domain: str, n_docs: int) -> Path:
    """The domain's test set as a .spacy file (its first ``n_docs`` sentences; 0 = all)."""
    from spacy.tokens import DocBin

    full = work / "corpus" / domain / "test.spacy"
    if not full.exists():
        load_docs(work, domain, "test")
    if not n_docs:
        return full
    part = work / "int8" / "tests" / f"{domain}_{n_docs}.spacy"
    if not part.exists():
        import spacy

        docs = list(DocBin(store_user_data=True).from_disk(full).get_docs(spacy.blank("en").vocab))
        part.parent.mkdir(parents=True, exist_ok=True)
        DocBin(docs=docs[:n_docs], store_user_data=True).to_disk(part)
    return part


def measure_loaded(path: Path, data: Path, threads: int, batch_size: int,
                   max_batch_items: Optional[int]) -> Dict:
    """Load a pipeline, then words/s and entity F1 of one ``nlp.pipe`` pass over ``data``."""
    import spacy
    import torch
    from spacy.tokens import DocBin

    from spacy_crossner.evaluate import evaluate

    torch.set_num_threads(threads)
    rss_start = current_rss_mb()
    overrides = {}
    if max_batch_items:
        overrides = {f"components.{name}.max_batch_items": max_batch_items
                     for name in spacy.util.load_config(path / "config.cfg")["components"]
                     if name == "transformer"}
    nlp = spacy.load(path, config=overrides)
    rss_loaded = current_rss_mb()
    warm = list(DocBin(store_user_data=True).from_disk(data).get_docs(nlp.vocab))[:16]
    list(nlp.pipe([t.text for t in warm]))  # warm-up
    result = evaluate(model=path, data=data, nlp=nlp, batch_size=batch_size)
    from spacy_crossner.models.pytorch_int8 import count_int8_linears

    int8_layers = sum(count_int8_linears(pipe.model.transformer) for name, pipe in nlp.pipeline
                      if hasattr(pipe.model, "transformer"))
    return {
        "words_s": result["words_per_second"],
        "test_f1": 100 * result["ents_f"],
        "n_docs": result["n_docs"],
        "n_words": result["n_words"],
        "rss_start_mb": rss_start,
        "rss_loaded_mb": rss_loaded,
        "pipeline_rss_mb": rss_loaded - rss_start,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "int8_layers": int8_layers,
        "threads": threads,
    }


def int8_pipelines(args) -> List[Dict]:
    """The pipelines to compare: {pipeline, domain, path, trained}."""
    import re

    found = []
    for item in args.trained or []:
        name_domain, _, path = item.partition("=")
        name, _, domain = name_domain.partition("/")
        if not (name and domain and path):
            sys.exit(f"--trained {item!r}: write NAME/DOMAIN=PATH, e.g. trf_target-s555/ai=training/model-best")
        if not (Path(path) / "config.cfg").exists():
            sys.exit(f"--trained {item!r}: {path} is not a pipeline directory (no config.cfg)")
        found.append({"pipeline": name, "domain": domain, "path": Path(path), "trained": True})
    if args.study_workdir:
        if not Path(args.study_workdir).is_dir():
            sys.exit(f"--study-workdir {args.study_workdir}: no such directory (the study's --workdir)")
        pattern = re.compile(rf"^({'|'.join(args.methods.split(','))})-(\w+)-minilm-s(\d+)$")
        for run in sorted(Path(args.study_workdir).iterdir()):
            m = pattern.match(run.name)
            if m and (run / "model-best" / "config.cfg").exists() and m.group(2) in args.domains.split(",") \
                    and (not args.seeds or m.group(3) in args.seeds.split(",")):
                found.append({"pipeline": f"{m.group(1)}-s{m.group(3)}", "domain": m.group(2),
                              "path": run / "model-best", "trained": True})
        if not found:
            sys.exit(f"--study-workdir {args.study_workdir}: no {{{args.methods}}}-DOMAIN-minilm-sSEED/"
                     "model-best found for the domains " + args.domains)
    return found


def run_sub(cmd: List[str], threads: int) -> str:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def run_int8(args) -> None:
    work = args.work / "int8"
    work.mkdir(parents=True, exist_ok=True)
    domains = args.domains.split(",")
    all_threads = os.cpu_count() or 1
    threads = sorted({all_threads if t == "all" else int(t) for t in args.threads.split(",")})
    subjects = int8_pipelines(args)
    tiny = not subjects
    jobs = []  # (pipeline, domain, variant, path, trained)
    for domain in domains:
        peer = work / "peers" / domain
        if not peer.exists():
            print(f"training the peer {PEER} on {domain} ({args.trf_train_docs} sentences, "
                  f"{args.tiny_steps} steps)", flush=True)
            run_sub([__file__, "--int8-train", PEER, "--domain", domain, "--out", str(peer),
                     "--work", str(args.work), "--train-docs", str(args.trf_train_docs),
                     "--steps", str(args.tiny_steps), "--seed", str(args.seed)], 1)
        jobs.append((PEER, domain, PEER, peer, False))
        if tiny:
            path = work / "tiny" / domain
            if not path.exists():
                print(f"training a tiny transformer_tagger on {domain}", flush=True)
                run_sub([__file__, "--int8-train", "transformer_tagger", "--domain", domain, "--out",
                         str(path), "--work", str(args.work), "--train-docs", str(args.trf_train_docs),
                         "--steps", str(args.tiny_steps), "--seed", str(args.seed)], 1)
            subjects.append({"pipeline": "transformer_tagger-tiny", "domain": domain, "path": path,
                             "trained": False})
    for s in subjects:
        if s["domain"] not in domains:
            continue
        int8 = work / "int8_copies" / f"{s['pipeline']}-{s['domain']}"
        if int8.exists():
            shutil.rmtree(int8)  # always from the pipeline given now
        run_sub(["-m", "spacy_crossner", "quantize", str(s["path"]), str(int8)], 1)
        jobs.append((s["pipeline"], s["domain"], "fp32", s["path"], s["trained"]))
        jobs.append((s["pipeline"], s["domain"], "int8", int8, s["trained"]))
        if args.calibration:
            smooth = work / "int8_copies" / f"{s['pipeline']}-{s['domain']}-smooth"
            if smooth.exists():
                shutil.rmtree(smooth)
            calibration = args.calibration.replace("{domain}", s["domain"])
            if not Path(calibration).exists():
                sys.exit(f"--calibration {args.calibration}: {calibration} does not exist")
            run_sub(["-m", "spacy_crossner", "quantize", str(s["path"]), str(smooth),
                     "--calibration", calibration], 1)
            jobs.append((s["pipeline"], s["domain"], "int8-smooth", smooth, s["trained"]))
    load_start = os.getloadavg()
    start = time.time()
    runs: Dict = {}
    for r in range(args.rounds):
        args.rounds_done = r + 1
        for n in threads:
            for pipeline, domain, variant, path, trained in (jobs if r % 2 == 0 else jobs[::-1]):
                data = test_file(args.work, domain, args.infer_docs)
                cmd = [__file__, "--int8-worker", str(path), "--data", str(data), "--threads", str(n),
                       "--batch-size", str(args.batch_size)]
                if args.max_batch_items:
                    cmd += ["--max-batch-items", str(args.max_batch_items)]
                row = json.loads(run_sub(cmd, n).strip().splitlines()[-1])
                row.update(pipeline=pipeline, domain=domain, variant=variant, trained=trained, path=str(path))
                runs.setdefault((pipeline, domain, variant, n), []).append(row)
                print(f"round {r} {n} thread(s) {pipeline} {variant} {domain}: {row['words_s']:,.0f} w/s, "
                      f"F1 {row['test_f1']:.2f}, loaded {row['pipeline_rss_mb']:.0f} MB", flush=True)
        rows = int8_rows(runs)
        load = f"{load_start[0]:.1f} / {os.getloadavg()[0]:.1f}"
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        write_int8_report(args, rows, time.time() - start, load, tiny)
    print(Path(args.output).read_text())


def int8_rows(runs: Dict) -> List[Dict]:
    """One row per (pipeline, variant, domain, threads): medians over rounds, the ratio to the
    peer of the same domain and threads (per round, then the median), the F1 change from fp32."""
    rows = []
    for (pipeline, domain, variant, n), rs in runs.items():
        row = dict(rs[0])
        row["words_s"] = statistics.median(r["words_s"] for r in rs)
        row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
        row["pipeline_rss_mb"] = statistics.median(r["pipeline_rss_mb"] for r in rs)
        peers = runs.get((PEER, domain, PEER, n), [])
        ratios = [a["words_s"] / b["words_s"] for a, b in zip(rs, peers)]
        row["ratio_to_spacy_ner_minilm"] = statistics.median(ratios) if ratios else None
        row["rounds"] = len(rs)
        rows.append(row)
    fp32 = {(r["pipeline"], r["domain"], r["threads"]): r for r in rows if r["variant"] == "fp32"}
    for row in rows:
        base = fp32.get((row["pipeline"], row["domain"], row["threads"]))
        row["test_f1_change"] = (row["test_f1"] - base["test_f1"]) if base and row["variant"] != PEER else None
        if row["variant"] == PEER:
            row["test_f1"] = None  # a few training steps: its F1 is not a result
    order = {"fp32": 0, "int8": 1, "int8-smooth": 2, PEER: 3}
    return sorted(rows, key=lambda r: (r["domain"], r["threads"], r["pipeline"] == PEER, r["pipeline"],
                                       order.get(r["variant"], 3)))


def write_int8_report(args, rows: List[Dict], total: float, load: str, tiny: bool) -> None:
    import spacy
    import torch

    threads = sorted({r["threads"] for r in rows})
    lines = [
        "# int8 transformer pipelines on CPU (issue 50)",
        "",
        f"- Command (from the repository root): `python benchmarks/speed.py {' '.join(args.argv)}`",
        f"- Machine: {os.cpu_count()} CPU cores, {cpu_model()}, no GPU; torch {torch.__version__}, "
        f"spaCy {spacy.__version__}, Python {platform.python_version()}; load average at start / "
        f"end: {load} (the benchmark's own processes count in it).",
        f"- Date: {utc_now()}; total {total / 60:.1f} min; {args.rounds_done} of {args.rounds} "
        f"interleaved round(s), medians; raw rows in `{Path(args.json).name}`.",
        f"- Inference: `nlp.pipe(batch_size={args.batch_size})` over "
        + (f"the first {args.infer_docs} test sentences" if args.infer_docs else "the whole test set")
        + " of each domain; transformer `max_batch_items` "
        + (str(args.max_batch_items) if args.max_batch_items else "as saved in each pipeline")
        + "; test F1: `spacy_crossner.evaluate`, sentence mode. int8 = `python -m spacy_crossner "
        "quantize` (per-channel dynamic int8 of the encoder's linear layers)"
        + (f"; int8-smooth = the same with `--calibration {args.calibration}` (SmoothQuant "
           "smoothing, default strength, before quantizing)" if args.calibration else "")
        + ". Peer: spaCy `ner` on the same MiniLM (a few training steps; speed only).",
    ]
    if tiny:
        lines.append("- **Tiny pipelines** (a few training steps): a check that the benchmark runs; "
                     "their F1 and F1 changes mean nothing.")
    lines += [
        "",
        "## Words per second, memory, F1",
        "",
        "| domain | threads | pipeline | variant | words/s | x spaCy ner + MiniLM | test F1 | F1 change | "
        "loaded pipeline RSS (MB) | peak RSS (MB) |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]

    def fmt(value, spec):
        return "" if value is None else format(value, spec)

    for r in rows:
        lines.append(
            f"| {r['domain']} | {r['threads']} | {r['pipeline']} | {r['variant']} | {r['words_s']:,.0f} | "
            f"{fmt(r['ratio_to_spacy_ner_minilm'], '.2f')} | {fmt(r['test_f1'], '.2f')} | "
            f"{fmt(r['test_f1_change'], '+.2f')} | {r['pipeline_rss_mb']:,.0f} | {r['peak_rss_mb']:,.0f} |"
        )
    lines += ["", "## Targets", "", "| target | domain | value | met |", "|---|---|---:|---|"]
    goals = [(1, 2.0), (max(threads), 1.5)] if len(threads) > 1 else [(threads[0], 2.0 if threads[0] == 1 else 1.5)]
    variants = [v for v in ("int8", "int8-smooth") if any(r["variant"] == v for r in rows)]
    for variant in variants:
        for n, goal in goals:
            for domain in sorted({r["domain"] for r in rows}):
                ratios = [r["ratio_to_spacy_ner_minilm"] for r in rows if r["domain"] == domain and r["threads"] == n
                          and r["variant"] == variant and r["ratio_to_spacy_ner_minilm"] is not None]
                if ratios:
                    value = statistics.mean(ratios)
                    lines.append(f"| {variant} inference >= {goal}x spaCy ner + MiniLM, {n} thread(s) | {domain} | "
                                 f"{value:.2f} | {'yes' if value >= goal else '**no**'} |")
        for domain in sorted({r["domain"] for r in rows}):
            changes = [r["test_f1_change"] for r in rows if r["domain"] == domain and r["variant"] == variant
                       and r["threads"] == threads[0] and r["test_f1_change"] is not None]
            if changes:
                value = statistics.mean(changes)
                met = "n/a (tiny)" if tiny else ("yes" if value >= -0.5 else "**no**")
                lines.append(f"| {variant} test F1 change >= -0.5 (mean over {len(changes)} pipeline(s)) | "
                             f"{domain} | {value:+.2f} | {met} |")
    (Path(args.output)).write_text("\n".join(lines) + "\n" + kept_notes(args.output, "## Notes"))


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
    int8 = parser.add_argument_group("int8 comparison (issue 50)")
    int8.add_argument("--int8", action="store_true",
                      help="compare fp32 and int8 transformer pipelines with spaCy ner + MiniLM")
    int8.add_argument("--study-workdir", type=Path, default=None,
                      help="the study's --workdir: its {method}-{domain}-minilm-s{seed}/model-best")
    int8.add_argument("--methods", default=",".join(INT8_METHODS), help="study methods (comma-separated)")
    int8.add_argument("--seeds", default="", help="study seeds to use (comma-separated; default all)")
    int8.add_argument("--trained", action="append", default=[],
                      help="a trained pipeline NAME/DOMAIN=PATH (repeatable)")
    int8.add_argument("--domains", default=",".join(STUDY_DOMAINS), help="CrossNER domains (comma-separated)")
    int8.add_argument("--threads", default="1,all", help="torch thread counts (comma-separated; all = every core)")
    int8.add_argument("--batch-size", type=int, default=256, help="nlp.pipe batch size")
    int8.add_argument("--max-batch-items", type=int, default=0,
                      help="the transformer component's max_batch_items (0 = as saved in the pipeline)")
    int8.add_argument("--calibration", default="",
                      help="also an int8-smooth variant, quantized with --calibration this path "
                      "({domain} is replaced by the domain), e.g. CORPUS/{domain}/train.spacy")
    int8.add_argument("--tiny-steps", type=int, default=4, help="training steps of the tiny pipelines and peers")
    parser.add_argument("--int8-worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--int8-train", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--domain", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    if args.int8_worker:
        row = measure_loaded(args.int8_worker, args.data, int(args.threads), args.batch_size,
                             args.max_batch_items or None)
        print(json.dumps(row))
        return
    if args.int8_train:
        train_tiny(args.int8_train, args.domain, args.out, args.work, args.train_docs, args.steps, args.seed)
        return
    if args.int8:
        if args.output == str(RESULTS / "speed.md"):
            args.output = str(RESULTS / "speed_int8.md")
        if args.json == str(RESULTS / "speed.json"):
            args.json = str(RESULTS / "speed_int8.json")
        if "--infer-docs" not in sys.argv:
            args.infer_docs = 0  # the whole test set: F1 is part of the result
        run_int8(args)
        return
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
