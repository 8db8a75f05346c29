"""Scale-out throughput: ``spacy apply`` with 1 and 2 processes and
``python -m spacy_crossner annotate`` on a local Dask cluster of 2 workers (issue 18).

Usage (from the repository root)::

    python benchmarks/scale_out.py [--steps 200] [--docs 4000] [--batch-size 64] \\
        [--shard-size 500] [--output benchmarks/results/scale_out.md]

1. CrossNER AI (``../shared/data/crossner/ai``) is converted with the project's converter.
2. Two pipelines at the component's real sizes are trained ``--steps`` batches of 16 on AI train
   (throughput does not depend on how well they are trained): ``spacy_crossner.BiLSTMCRF.v1``
   (the component's default model: hidden 128, WordCharEmbed defaults) and
   ``spacy_crossner.MultiCellLSTM.v1`` (hidden 100, the configs' size), and saved to disk.
3. The input is AI dev + test docs (with ``doc._.domain``) repeated to ``--docs`` docs, one
   ``.spacy`` file. Each command runs as a subprocess, as a user runs it, and is timed from
   start to end (wall); each also runs once on a one-doc input, whose time (interpreter start,
   imports, loading the pipeline, starting workers or the cluster) is the fixed cost, so
   "words/s after start-up" = words / (wall - fixed cost). ``annotate`` also prints its own
   words/s, from the first shard submitted to the last written.

Every process runs torch on one thread (``OMP_NUM_THREADS=1``; Dask's workers set it too).
"""
import argparse
import datetime
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
sys.path.insert(1, str(ROOT))  # this checkout's spacy_crossner, as in the subprocesses
from machine import cpu_model  # noqa: E402

CROSSNER = ROOT.parent / "shared" / "data" / "crossner"
DOMAIN = "ai"
ARCHITECTURES = {
    "BiLSTM-CRF": {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 128},
    "multi-cell LSTM": {"@architectures": "spacy_crossner.MultiCellLSTM.v1", "hidden_size": 100},
}


def prepare(work: Path, n_docs: int) -> Dict[str, Path]:
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    from spacy_crossner.convert import convert

    corpus = work / "corpus"
    if not (corpus / "test.spacy").exists():
        convert(CROSSNER / DOMAIN, corpus, domain=DOMAIN)
    vocab = Vocab()
    docs = [d for split in ("dev", "test") for d in DocBin().from_disk(corpus / f"{split}.spacy").get_docs(vocab)]
    repeated = [docs[i % len(docs)] for i in range(n_docs)]
    (work / "input").mkdir(exist_ok=True)
    (work / "tiny").mkdir(exist_ok=True)
    DocBin(docs=repeated, store_user_data=True).to_disk(work / "input" / "corpus.spacy")
    DocBin(docs=repeated[:1], store_user_data=True).to_disk(work / "tiny" / "corpus.spacy")
    return {"train": corpus / "train.spacy", "input": work / "input", "tiny": work / "tiny",
            "words": sum(len(d) for d in repeated)}


def train_pipeline(arch: Dict, train_path: Path, steps: int, seed: int, out: Path) -> None:
    import spacy
    from spacy.tokens import Doc, DocBin
    from spacy.training import Example
    from thinc.api import Adam, fix_random_seed

    from spacy_crossner import set_domain

    fix_random_seed(seed)
    nlp = spacy.blank("en")
    model = dict(arch, tok2vec={"@architectures": "spacy_crossner.WordCharEmbed.v1"})
    nlp.add_pipe("crossner", config={"model": model, "target_domain": DOMAIN})
    examples = []
    for doc in DocBin().from_disk(train_path).get_docs(nlp.vocab):
        pred = Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
        set_domain(pred, DOMAIN)
        examples.append(Example(pred, doc))
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.001)
    rng = random.Random(seed)
    for _ in range(steps):
        nlp.update(rng.sample(examples, 16), sgd=optimizer, drop=0.1)
    out.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(out)


def timed(args: List[str]) -> (float, str):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return seconds, result.stdout


def commands(model: Path, data: Path, out: Path, batch_size: int, shard_size: int) -> Dict[str, List[str]]:
    return {
        "spacy apply, 1 process": ["spacy", "apply", str(model), str(data), str(out / "apply1.spacy"),
                                   "--n-process", "1", "--batch-size", str(batch_size), "--force"],
        "spacy apply, 2 processes": ["spacy", "apply", str(model), str(data), str(out / "apply2.spacy"),
                                     "--n-process", "2", "--batch-size", str(batch_size), "--force"],
        "annotate, 2 local Dask workers": [
            "spacy_crossner", "annotate", str(model), str(data), str(out / f"annotate_{time.time_ns()}"),
            "--scheduler", "local", "--workers", "2", "--shard-size", str(shard_size),
            "--batch-size", str(batch_size)],
    }


def after(row: Dict) -> str:
    return "n/a" if row["wps_after"] is None else f"{row['wps_after']:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="training batches per pipeline")
    parser.add_argument("--docs", type=int, default=4000, help="docs in the annotated corpus")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shard-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "scale_out.md")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    import dask
    import spacy
    import torch

    torch.set_num_threads(1)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    work = args.work or Path(tempfile.mkdtemp(prefix="scale_out_"))
    work.mkdir(parents=True, exist_ok=True)
    data = prepare(work, args.docs)
    (work / "out").mkdir(exist_ok=True)
    rows = []
    for name, arch in ARCHITECTURES.items():
        model = work / "models" / name.replace(" ", "_")
        print(f"training {name} ({args.steps} steps)", flush=True)
        train_pipeline(arch, data["train"], args.steps, args.seed, model)
        fixed = {label: timed(cmd)[0] for label, cmd in
                 commands(model, data["tiny"], work / "out", args.batch_size, args.shard_size).items()}
        for label, cmd in commands(model, data["input"], work / "out", args.batch_size, args.shard_size).items():
            seconds, stdout = timed(cmd)
            own = re.search(r"\(([\d,]+) words/s\)", stdout)
            rows.append({
                "pipeline": name, "command": label, "wall": seconds, "fixed": fixed[label],
                "wps": data["words"] / seconds,
                # None: the start-up run took as long as the whole one (noise of a loaded machine
                # or a corpus too small to measure; use more --docs)
                "wps_after": data["words"] / (seconds - fixed[label]) if seconds > fixed[label] + 1 else None,
                "own": own.group(1) if own else "",
            })
            print(f"{name:16} {label:32} {seconds:7.1f} s  {rows[-1]['wps']:8,.0f} words/s "
                  f"({after(rows[-1])} after start-up {fixed[label]:.1f} s)", flush=True)
    load_after = os.getloadavg()
    command = "python benchmarks/scale_out.py " + " ".join(sys.argv[1:])
    lines = [
        "# Scale-out throughput: spacy apply (1, 2 processes) and annotate (2 Dask workers)",
        "",
        f"- command: `{command.strip()}`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, spaCy {spacy.__version__}, torch {torch.__version__}, "
        f"dask {dask.__version__}",
        f"- load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)}",
        f"- corpus: CrossNER AI dev + test repeated to {args.docs:,} docs, {data['words']:,} words, one "
        f".spacy file; batch size {args.batch_size}; annotate shard size {args.shard_size}; pipelines "
        f"trained {args.steps} steps; torch on one thread per process",
        "",
        "Wall = the whole command as a subprocess; start-up = the same command on a one-doc corpus "
        "(interpreter, imports, loading the pipeline, worker processes or the Dask cluster); "
        "after start-up = words / (wall - start-up); annotate's own = what the command prints "
        "(first shard submitted to last shard written).",
        "",
        "| pipeline | command | wall s | words/s (wall) | start-up s | words/s after start-up | annotate's own words/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['pipeline']} | {r['command']} | {r['wall']:.1f} | {r['wps']:,.0f} | "
                     f"{r['fixed']:.1f} | {after(r)} | {r['own']} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
