"""DAPT throughput (word pieces per second) of the bundled MiniLM: one process vs two (torchrun).

Usage (from the repository root)::

    python benchmarks/dapt_throughput.py [--steps 10] [--max-length 128] [--batch-size 8]

Each configuration runs ``python -m spacy_crossner dapt`` in a fresh process (or ``torchrun
--standalone --nproc_per_node 2 -m spacy_crossner dapt``) for a fixed number of optimiser steps,
on raw text made from the CrossNER files (all domains and splits) when ``../shared/data`` is there (else on
synthetic sentences), and reads ``dapt_summary.json``: tokens seen over the time of the training
loop (model loading, tokenisation and the held-out evaluations excluded). ``--batch-size`` is per
process, so two processes see twice the tokens per step. Results go to
``benchmarks/results/dapt_throughput.md``.
"""
import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import cpu_model, utc_now  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "dapt_throughput.md"
CROSSNER = ROOT.parent / "shared" / "data" / "crossner"


def write_corpus(path: Path) -> str:
    """Raw text, one sentence per line; returns a description of its source."""
    files = sorted(CROSSNER.glob("*/*.txt"))
    if files:
        sentences = []
        for file_ in files:
            words = []
            for line in file_.read_text(encoding="utf8").splitlines() + [""]:
                if line.strip():
                    words.append(line.split("\t")[0])
                elif words:
                    sentences.append(" ".join(words))
                    words = []
        source = (f"text of every CrossNER file in ../shared/data/crossner ({len(files)} files, "
                  f"{len(sentences):,} sentences, tokens joined by spaces)")
    else:
        rng = random.Random(0)
        vocab = ["senator", "party", "election", "parliament", "votes", "the", "a", "law", "reform"]
        sentences = [" ".join(rng.choice(vocab) for _ in range(25)) + "." for _ in range(3000)]
        source = "synthetic sentences (../shared/data not found)"
    path.write_text("\n".join(sentences) + "\n", encoding="utf8")
    return source




def run(name, launcher, corpus, out, args, env_extra):
    command = launcher + ["-m", "spacy_crossner", "dapt", str(corpus), str(out)] + args
    load_before = _load()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **env_extra)
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    summary = json.loads((out / "dapt_summary.json").read_text(encoding="utf8"))
    shown = " ".join(f"{k}={v}" for k, v in env_extra.items())
    return {"name": name, "command": (shown + " " if shown else "") + " ".join(command),
            "load": f"{load_before} / {_load()}", **summary}


def _load() -> str:
    """The 1-minute load average: other work on a shared machine skews the figures."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="optimiser steps per configuration")
    parser.add_argument("--max-length", type=int, default=128, help="block length in word pieces")
    parser.add_argument("--batch-size", type=int, default=8, help="blocks per process and step")
    parser.add_argument("--masking", default="span", help="span or token")
    opts = parser.parse_args()
    python = sys.executable
    torchrun = shutil.which("torchrun", path=str(Path(python).parent)) or "torchrun"
    nproc = os.cpu_count() or 1
    args = ["--max-steps", str(opts.steps), "--max-length", str(opts.max_length), "--batch-size",
            str(opts.batch_size), "--masking", opts.masking, "--no-progress", "--held-out", "0.02",
            "--max-held-out-blocks", "8", "--save-steps", "100000", "--logging-steps", "1000"]
    configs = [
        ("1 process, all cores", [python], {}),
        ("1 process, 1 thread", [python], {"OMP_NUM_THREADS": "1"}),
        ("2 processes (torchrun, gloo), 1 thread each", [torchrun, "--standalone", "--nproc_per_node", "2"], {}),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        source = write_corpus(corpus)
        for i, (name, launcher, env_extra) in enumerate(configs):
            row = run(name, launcher, corpus, Path(tmp) / f"out{i}", args, env_extra)
            print(f"{name}: {row['tokens_per_second']:.0f} tokens/s", flush=True)
            rows.append(row)
    import torch
    import transformers

    base = rows[0]["tokens_per_second"]
    lines = [
        "# DAPT throughput: bundled MiniLM, one process vs two",
        "",
        f"- Date: {utc_now()}",
        f"- Machine: {nproc} CPU(s) (`nproc`), {cpu_model()}, no GPU; Python {platform.python_version()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}",
        f"- Benchmark command: `python benchmarks/dapt_throughput.py --steps {opts.steps} --max-length "
        f"{opts.max_length} --batch-size {opts.batch_size} --masking {opts.masking}`",
        f"- Corpus: {source}",
        f"- Model: bundled MiniLM (6 layers, 384 hidden, 22.7M parameters + masked-LM head), "
        f"{opts.masking}-level masking p=0.2, blocks of {opts.max_length} pieces, batch "
        f"{opts.batch_size} per process, {opts.steps} steps.",
        "- tokens/s = word pieces fed to the model in training (all processes) / time of the training "
        "loop (model loading, tokenisation, held-out evaluation excluded; the first, slower steps included).",
        "",
        "| configuration | processes | steps | tokens seen | seconds | tokens/s | vs 1 process | load before / after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['world_size']} | {row['steps']} | {row['tokens_seen']:,} | "
            f"{row['train_seconds']:.1f} | {row['tokens_per_second']:,.0f} | "
            f"{row['tokens_per_second'] / base:.2f}x | {row['load']} |"
        )
    lines += [
        "",
        "The load column is the 1-minute load average (/proc/loadavg) before and after each run: "
        f"with {nproc} CPU(s), a load above {nproc} means other work shared the cores.",
        "",
        "Exact commands run:",
        "",
    ]
    lines += [f"- {row['name']}: `{row['command']}`" for row in rows]
    lines.append("")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines), encoding="utf8")
    print(f"Wrote {RESULTS}")


if __name__ == "__main__":
    main()
