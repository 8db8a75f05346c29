"""Where a multi-cell LSTM training step spends its time at 22 cells (issue 14).

Usage (from the repository root)::

    python benchmarks/profile_multi_cell.py [--steps 20] [--output benchmarks/results/multi_cell_profile.md]

The cells: O + CoNLL's four types renamed to CoNLL's own labels (PER, LOC, ORG, MISC, so they
are not merged with science's lowercase types) + CrossNER science's 17 types = 22 cells;
batches of 16 sentences, half CoNLL and half science (two domains, two attention sets). Runs
``nlp.update`` under the torch profiler and prints the top operators by self CPU time, and the
share of the encoder's forward and backward in the step. torch on one thread.
"""
import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spacy_crossner
from speed import CONLL_RENAME, build_crossner, load_docs, make_examples  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="profiled training steps")
    parser.add_argument("--work", default="/tmp/h14", help="folder for the converted corpora")
    parser.add_argument("--output", default=None, help="markdown summary to write")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(0)
    conll = load_docs(Path(args.work), "conll2003", "train", rename=CONLL_RENAME)
    science = load_docs(Path(args.work), "science", "train")
    docs = rng.sample(conll, 8 * (args.steps + 5)) + rng.sample(science, 8 * (args.steps + 5))
    nlp = build_crossner("multi_cell", target="science")
    examples = make_examples(nlp, docs)
    nlp.initialize(lambda: examples)
    from spacy_crossner.models.base import get_emitter

    cells = get_emitter(nlp.get_pipe("crossner").model).types
    from thinc.api import Adam

    opt = Adam(0.001)
    half = len(examples) // 2
    batches = [examples[i * 8 : i * 8 + 8] + examples[half + i * 8 : half + i * 8 + 8] for i in range(args.steps + 5)]
    for b in batches[:5]:
        nlp.update(b, sgd=opt, drop=0.1)
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for b in batches[5:]:
            nlp.update(b, sgd=opt, drop=0.1)
    wall = time.perf_counter() - start
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    words = sum(len(eg) for b in batches[5:] for eg in b)
    summary = [
        f"cells: {len(cells)} ({', '.join(cells)})",
        f"steps: {args.steps}, words: {words}, wall (profiled): {wall:.2f} s, {words / wall:.0f} words/s",
    ]
    print("\n".join(summary))
    print(table)
    if args.output:
        Path(args.output).write_text("\n".join(["```"] + summary + [table, "```", ""]))


if __name__ == "__main__":
    main()
