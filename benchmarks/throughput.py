"""Inference settings of the transformer pipelines on CPU, chosen by measurement (issue 50).

Sweeps, for our TransformerTagger on the bundled MiniLM (fp32, and its int8 copy made by
``python -m spacy_crossner quantize``) and spaCy's ``ner`` on the same MiniLM (the peer):

- ``nlp.pipe`` batch size (``--batch-sizes``; the study's configs say ``[nlp] batch_size = 64``);
- the transformer component's ``max_batch_items`` (``--max-batch-items``): spacy-transformers'
  ``Transformer.pipe`` already sorts each batch by length into sub-batches of at most this many
  padded tokens (``spacy_transformers.util.batch_by_length``); ``0`` here means no sorting (one
  sub-batch per batch, padded to its longest doc), for our crossner component too;
- torch threads (``--threads``; ``all`` = every core), one worker process per thread count;
- at each batch size with the transformer's 4096, our crossner component's own sorting off
  (``CrossNER.max_batch_items = None``, its default) against on (4096); and the same on and off for
  the word/char architectures (``--word-char``, their configs' models, one thread), whose
  ``nlp.pipe`` the sorting changes too.

Throughput does not depend on training (F1 does: benchmarks/speed.py --int8 scores trained
pipelines), so the pipelines are real-size but trained for a few steps on the ai domain's
labels (``speed.train_tiny``). The input is a fixed shuffle of test sentences of all five
CrossNER domains, as text (mixed lengths, as a deployment sees them). In each worker the three
pipelines are loaded once and measured side by side for every setting (their order rotating),
so ratios to the peer are of the same moment; words/s = tokens / time of
``list(nlp.pipe(texts, batch_size=...))`` after a warm-up, medians over ``--rounds``.

Writes ``benchmarks/results/throughput.md`` (command, machine, date, load) and the raw rows
``throughput.json``::

    python benchmarks/throughput.py --docs 160 --rounds 1
    python benchmarks/throughput.py --quick   # a check that it runs (seconds of MiniLM)
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py, speed.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spacy_crossner
from machine import cpu_model, utc_now  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DOMAINS = ["ai", "literature", "music", "politics", "science"]
OURS, PEER = "transformer_tagger", "spacy_ner_minilm"
VARIANTS = [("transformer_tagger", "fp32"), ("transformer_tagger", "int8"), ("spacy_ner_minilm", "peer")]
CROSSNER_SORTED = 4096  # CrossNER.max_batch_items when its sorting is on (the transformer's default)


# -- preparing the pipelines and the text ------------------------------------------------------


def prepare(work: Path, n_docs: int, steps: int, seed: int) -> Dict[str, Path]:
    """The three pipelines (made once, kept in ``work``) and the texts file."""
    import speed

    from spacy_crossner.quantize import quantize

    paths = {"fp32": work / "fp32", "int8": work / "int8", "peer": work / "peer"}
    for key, arch in (("fp32", OURS), ("peer", PEER)):
        if not paths[key].exists():
            print(f"training {arch} on ai for {steps} steps (a real-size untrained-ish pipeline)", flush=True)
            speed.train_tiny(arch, "ai", paths[key], work, 32, steps, seed)
    if not paths["int8"].exists():
        quantize(model=paths["fp32"], output=paths["int8"])
    texts = work / f"texts_{n_docs}_{seed}.json"
    if not texts.exists():
        rng = random.Random(seed)
        pool = []
        for domain in DOMAINS:
            docs = [d for d in speed.load_docs(work, domain, "test") if len(d)]
            pool += rng.sample(docs, min(len(docs), -(-n_docs // len(DOMAINS))))
        rng.shuffle(pool)
        texts.write_text(json.dumps([d.text for d in pool[:n_docs]]))
    paths["texts"] = texts
    return paths


def settings_grid(batch_sizes: List[int], max_batch_items: List[int]) -> List[Dict]:
    """The settings measured: every (batch size, transformer max_batch_items), the crossner
    component's sorting as the transformer's (0: off too); and, at each batch size with the
    transformer at 4096, the crossner component's sorting off (our pipelines only)."""
    grid = []
    for bs in batch_sizes:
        for mbi in max_batch_items:
            grid.append({"batch_size": bs, "trf_max_batch_items": mbi,
                         "crossner_sort": mbi != 0, "peer": True})
        grid.append({"batch_size": bs, "trf_max_batch_items": 4096, "crossner_sort": False, "peer": False})
    return grid


# -- one worker: one thread count -----------------------------------------------------------------


def apply_setting(nlp, setting: Dict) -> None:
    """Set the transformer's and the crossner component's sub-batching on a loaded pipeline."""
    from spacy_crossner.pipeline import CrossNER

    mbi = setting["trf_max_batch_items"]
    for name, pipe in nlp.pipeline:
        if name == "transformer":
            # spacy-transformers reads cfg["max_batch_items"] at every pipe(); a budget above any
            # batch's padded size is one sub-batch per batch, in input order: no sorting
            pipe.cfg["max_batch_items"] = mbi if mbi else 10 ** 12
        if isinstance(pipe, CrossNER):
            pipe.max_batch_items = CROSSNER_SORTED if setting["crossner_sort"] else None


def worker(paths: Dict[str, str], threads: int, grid: List[Dict], rounds: int) -> List[Dict]:
    import spacy
    import torch

    torch.set_num_threads(threads)
    texts = json.loads(Path(paths["texts"]).read_text())
    pipelines = {}
    for arch, variant in VARIANTS:
        nlp = spacy.load(paths[variant])
        list(nlp.pipe(texts[:16]))  # warm-up
        pipelines[variant] = (arch, nlp)
    rows = []
    for r in range(rounds):
        for i, setting in enumerate(grid if r % 2 == 0 else grid[::-1]):
            variants = [v for _, v in VARIANTS if setting["peer"] or v != "peer"]
            k = (i + r) % len(variants)
            for variant in variants[k:] + variants[:k]:  # who goes first rotates
                arch, nlp = pipelines[variant]
                apply_setting(nlp, setting)
                start = time.perf_counter()
                docs = list(nlp.pipe(texts, batch_size=setting["batch_size"]))
                elapsed = time.perf_counter() - start
                n_words = sum(len(d) for d in docs)
                rows.append({
                    "pipeline": arch, "variant": variant, "threads": threads, "round": r,
                    "batch_size": setting["batch_size"],
                    "trf_max_batch_items": setting["trf_max_batch_items"],
                    "crossner_sort": setting["crossner_sort"] if arch == OURS else None,
                    "words_s": n_words / elapsed, "seconds": elapsed, "n_docs": len(docs), "n_words": n_words,
                })
                print(f"{threads} thread(s) round {r} bs {setting['batch_size']} mbi "
                      f"{setting['trf_max_batch_items']} crossner sort {setting['crossner_sort']} {variant}: "
                      f"{n_words / elapsed:,.0f} w/s", file=sys.stderr, flush=True)
    return rows


def word_char_worker(work: Path, archs: List[str], batch_sizes: List[int], texts: List[str],
                     rounds: int, seed: int) -> List[Dict]:
    """The crossner component's own sorting on and off for the word/char architectures (their
    configs' models, initialized on 32 ai sentences: untrained, real size), one thread."""
    import speed
    import torch
    from thinc.api import fix_random_seed

    torch.set_num_threads(1)
    rows = []
    for arch in archs:
        fix_random_seed(seed)
        nlp = speed.build_crossner(arch, "ai")
        train = [d for d in speed.load_docs(work, "ai", "train") if len(d)][:32]
        examples = speed.make_examples(nlp, train)
        nlp.initialize(lambda: examples)
        list(nlp.pipe(texts[:16]))  # warm-up
        for r in range(rounds):
            for bs in batch_sizes:
                for sort in ((True, False) if r % 2 == 0 else (False, True)):
                    apply_setting(nlp, {"trf_max_batch_items": 0, "crossner_sort": sort})
                    start = time.perf_counter()
                    docs = list(nlp.pipe(texts, batch_size=bs))
                    elapsed = time.perf_counter() - start
                    n_words = sum(len(d) for d in docs)
                    rows.append({"pipeline": arch, "variant": "fp32", "threads": 1, "round": r, "batch_size": bs,
                                 "trf_max_batch_items": None, "crossner_sort": sort, "words_s": n_words / elapsed,
                                 "seconds": elapsed, "n_docs": len(docs), "n_words": n_words})
                    print(f"{arch} round {r} bs {bs} crossner sort {sort}: {n_words / elapsed:,.0f} w/s",
                          file=sys.stderr, flush=True)
    return rows


# -- summary and report ---------------------------------------------------------------------------


def key_of(row: Dict) -> Tuple:
    return (row["threads"], row["batch_size"], row["trf_max_batch_items"], row["crossner_sort"])


def summarise(rows: List[Dict]) -> List[Dict]:
    """One row per (variant, threads, batch size, max_batch_items, crossner sort): the median
    words/s over rounds and the median over rounds of the ratio to the peer at the same threads,
    batch size and max_batch_items, measured in the same round."""
    peer = {(r["threads"], r["batch_size"], r["trf_max_batch_items"], r["round"]): r["words_s"]
            for r in rows if r["variant"] == "peer"}
    groups: Dict[Tuple, List[Dict]] = {}
    for r in rows:
        groups.setdefault((r["pipeline"], r["variant"]) + key_of(r), []).append(r)
    out = []
    for (pipeline, variant, *_), rs in groups.items():
        row = {k: v for k, v in rs[0].items() if k not in ("round", "seconds")}
        row["words_s"] = statistics.median(r["words_s"] for r in rs)
        ratios = [r["words_s"] / peer[(r["threads"], r["batch_size"], r["trf_max_batch_items"], r["round"])]
                  for r in rs if (r["threads"], r["batch_size"], r["trf_max_batch_items"], r["round"]) in peer]
        mine = pipeline == OURS and variant != "peer"
        row["ratio_to_spacy_ner_minilm"] = statistics.median(ratios) if ratios and mine else None
        row["rounds"] = len(rs)
        out.append(row)
    order = {"fp32": 0, "int8": 1, "peer": 2}
    return sorted(out, key=lambda r: (r["pipeline"] not in (OURS, PEER), r["pipeline"], r["threads"],
                                      r["batch_size"], r["trf_max_batch_items"] or 10 ** 12,
                                      r["crossner_sort"] is False, order[r["variant"]]))


def best(summary: List[Dict], variant: str, threads: int) -> Optional[Dict]:
    """The fastest setting of a variant at a thread count."""
    rows = [r for r in summary if r["variant"] == variant and r["threads"] == threads
            and r["pipeline"] in (OURS, PEER)]
    return max(rows, key=lambda r: r["words_s"]) if rows else None


def find(summary: List[Dict], variant: str, threads: int, batch_size: int, mbi: int,
         crossner_sort: Optional[bool]) -> Optional[Dict]:
    for r in summary:
        if r["pipeline"] not in (OURS, PEER):
            continue
        if (r["variant"], r["threads"], r["batch_size"], r["trf_max_batch_items"]) == (variant, threads, batch_size, mbi) \
                and (variant == "peer" or r["crossner_sort"] == crossner_sort):
            return r
    return None


def write_report(args, summary: List[Dict], total: float, load: str) -> str:
    import spacy
    import torch

    threads = sorted({r["threads"] for r in summary if r["pipeline"] in (OURS, PEER)})
    n_docs = summary[0]["n_docs"] if summary else 0
    n_words = summary[0]["n_words"] if summary else 0  # the same texts for every pipeline
    lines = [
        "# Throughput settings of the transformer pipelines on CPU (issue 50)",
        "",
        f"- Command (from the repository root): `python benchmarks/throughput.py {' '.join(args.argv)}`",
        f"- Machine: {os.cpu_count()} CPU cores, {cpu_model()}, no GPU; torch {torch.__version__}, "
        f"spaCy {spacy.__version__}, Python {platform.python_version()}; load average at start / end: "
        f"{load} (the benchmark's own process counts in it; the machine is shared, so read ratios "
        "measured side by side, not absolute words/s).",
        f"- Date: {utc_now()}; total {total / 60:.1f} min; {args.rounds} round(s), medians; raw rows in "
        f"`{Path(args.json).name}`.",
        f"- Pipelines: TransformerTagger (softmax head, as configs/trf_target.cfg) on the bundled MiniLM, "
        "fp32 and its int8 copy (`python -m spacy_crossner quantize`), and spaCy `ner` on the same MiniLM "
        "(peer); a few training steps each (throughput does not depend on training).",
        f"- Input: {n_docs} test sentences of the five CrossNER domains, shuffled, as text "
        f"({n_words:,} tokens); words/s of `list(nlp.pipe(texts, batch_size=B))`.",
        "- `max_batch_items`: the transformer component's padded-token budget per sub-batch "
        "(spacy-transformers sorts each batch by length into such sub-batches); 0 = no sorting "
        "(one sub-batch per batch, padded to its longest doc; the crossner component unsorted too). "
        f"crossner sort: our component's own length sub-batches (`CrossNER.max_batch_items` = {CROSSNER_SORTED}; "
        "off = None, its default).",
        "",
    ]
    for n in threads:
        lines += [
            f"## {n} thread(s)",
            "",
            "| batch size | max_batch_items | crossner sort | fp32 words/s | int8 words/s | peer words/s | "
            "fp32 x peer | int8 x peer |",
            "|---:|---:|---|---:|---:|---:|---:|---:|",
        ]
        settings = []
        for r in summary:
            if r["threads"] == n and r["variant"] == "fp32" and r["pipeline"] == OURS:
                settings.append((r["batch_size"], r["trf_max_batch_items"], r["crossner_sort"]))
        for bs, mbi, sort in settings:
            fp32 = find(summary, "fp32", n, bs, mbi, sort)
            int8 = find(summary, "int8", n, bs, mbi, sort)
            peer = find(summary, "peer", n, bs, mbi, None)

            def wps(r):
                return f"{r['words_s']:,.0f}" if r else ""

            def ratio(r):
                return f"{r['ratio_to_spacy_ner_minilm']:.2f}" if r and r["ratio_to_spacy_ner_minilm"] else ""

            lines.append(f"| {bs} | {mbi if mbi else '0 (no sort)'} | {'on' if sort else 'off'} | {wps(fp32)} | "
                         f"{wps(int8)} | {wps(peer) if sort or not mbi else ''} | {ratio(fp32)} | {ratio(int8)} |")
        lines.append("")
    lines += ["## Fastest setting", "", "| threads | variant | batch size | max_batch_items | crossner sort | words/s | "
              "x the same pipeline unsorted (same batch size) |", "|---:|---|---:|---:|---|---:|---:|"]
    for n in threads:
        for variant in ("fp32", "int8", "peer"):
            b = best(summary, variant, n)
            if not b:
                continue
            unsorted = find(summary, variant, n, b["batch_size"], 0, False)
            gain = f"{b['words_s'] / unsorted['words_s']:.2f}" if unsorted else ""
            sort = "" if variant == "peer" else ("on" if b["crossner_sort"] else "off")
            lines.append(f"| {n} | {variant} | {b['batch_size']} | {b['trf_max_batch_items']} | {sort} | "
                         f"{b['words_s']:,.0f} | {gain} |")
    word_char = [r for r in summary if r["pipeline"] not in (OURS, PEER)]
    if word_char:
        lines += ["", "## The crossner component's own sorting, word/char architectures (1 thread)", "",
                  "Untrained, real size (the configs' models); no transformer. Sorted = `CrossNER.max_batch_items` "
                  f"= {CROSSNER_SORTED}; unsorted = None (its default: one prediction per batch).", "",
                  "| architecture | batch size | sorted words/s | unsorted words/s | sorted x unsorted |",
                  "|---|---:|---:|---:|---:|"]
        for arch in sorted({r["pipeline"] for r in word_char}):
            for bs in sorted({r["batch_size"] for r in word_char if r["pipeline"] == arch}):
                on = [r for r in word_char if (r["pipeline"], r["batch_size"], r["crossner_sort"]) == (arch, bs, True)]
                off = [r for r in word_char if (r["pipeline"], r["batch_size"], r["crossner_sort"]) == (arch, bs, False)]
                if on and off:
                    lines.append(f"| {arch} | {bs} | {on[0]['words_s']:,.0f} | {off[0]['words_s']:,.0f} | "
                                 f"{on[0]['words_s'] / off[0]['words_s']:.2f} |")
    text = "\n".join(lines) + "\n"
    Path(args.output).write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=160, help="test sentences (from the five domains)")
    parser.add_argument("--batch-sizes", default="32,64,256", help="nlp.pipe batch sizes (comma-separated)")
    parser.add_argument("--max-batch-items", default="1024,4096,16384,0",
                        help="transformer max_batch_items values (comma-separated; 0 = no sorting)")
    parser.add_argument("--threads", default="1,all", help="torch thread counts (comma-separated; all = every core)")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the whole grid (order reversed every other)")
    parser.add_argument("--steps", type=int, default=4, help="training steps of the pipelines")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sentence sample and the training")
    parser.add_argument("--word-char", default="bilstm_crf,multi_cell,pgn,moee",
                        help="word/char architectures whose crossner sorting on/off is measured too, 1 thread "
                             "(comma-separated of benchmarks/speed.py's; empty: none)")
    parser.add_argument("--quick", action="store_true", help="a check that it runs: 16 docs, two settings, 1 thread")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crossner_throughput"),
                        help="pipelines and converted corpora (kept between runs)")
    parser.add_argument("--output", default=str(RESULTS / "throughput.md"), help="markdown report")
    parser.add_argument("--json", default=str(RESULTS / "throughput.json"), help="raw rows as JSON")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    if args.quick:
        args.docs, args.batch_sizes, args.max_batch_items, args.threads, args.rounds = 16, "8", "4096,0", "1", 1
        args.word_char = "bilstm_crf"
        # a check: its report goes beside the pipelines, not over the committed results
        if args.output == str(RESULTS / "throughput.md"):
            args.output = str(args.work / "throughput_quick.md")
        if args.json == str(RESULTS / "throughput.json"):
            args.json = str(args.work / "throughput_quick.json")
    threads = sorted({(os.cpu_count() or 1) if t == "all" else int(t) for t in args.threads.split(",")})
    grid = settings_grid([int(b) for b in args.batch_sizes.split(",")],
                         [int(m) for m in args.max_batch_items.split(",")])
    if args.worker:
        job = json.loads(args.worker.read_text())
        rows = worker(job["paths"], job["threads"], job["grid"], job["rounds"])
        if job["threads"] == 1 and job["word_char"]:
            texts = json.loads(Path(job["paths"]["texts"]).read_text())
            rows += word_char_worker(Path(job["work"]), job["word_char"], sorted({g["batch_size"] for g in job["grid"]}),
                                     texts, job["rounds"], job["seed"])
        print(json.dumps(rows))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    paths = {k: str(v) for k, v in prepare(args.work, args.docs, args.steps, args.seed).items()}
    load_start = os.getloadavg()
    start = time.time()
    rows = []
    for n in threads:
        job = args.work / f"job_{n}.json"
        job.write_text(json.dumps({"paths": paths, "threads": n, "grid": grid, "rounds": args.rounds,
                                   "work": str(args.work), "seed": args.seed,
                                   "word_char": [a for a in args.word_char.split(",") if a]}))
        env = dict(os.environ, OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n),
                   TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
        proc = subprocess.run([sys.executable, __file__, "--worker", str(job)], stdout=subprocess.PIPE,
                              text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"the worker with {n} thread(s) failed (exit {proc.returncode}); its errors are above")
        rows += json.loads(proc.stdout.strip().splitlines()[-1])
    load = f"{load_start[0]:.1f} / {os.getloadavg()[0]:.1f}"
    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(write_report(args, summarise(rows), time.time() - start, load))


if __name__ == "__main__":
    main()
