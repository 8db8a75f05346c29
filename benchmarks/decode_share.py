"""Share of the head's decoding in crossner inference on CrossNER AI test (issue 14).

Usage (from the repository root)::

    python benchmarks/decode_share.py [--arch bilstm_crf] [--rounds 3] [--profile]

Builds ``--arch`` from its config (benchmarks/speed.py's builders), trains it a few steps on
AI train, then times ``nlp.pipe(batch_size=256)`` over the 431 AI test sentences and the time
spent inside ``spacy_crossner.models.head.decode`` (Viterbi, CRF forward-backward, entity
probabilities), median share over ``--rounds``. ``--profile`` adds a cProfile of the decoding
functions. Target: decoding <= 10% of BiLSTM-CRF inference time. torch on one thread.
"""
import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spacy_crossner
from speed import build_crossner, load_docs, make_examples  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="bilstm_crf", help="a crossner architecture of speed.py")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/crossner_speed"), help="converted corpora")
    parser.add_argument("--profile", action="store_true", help="cProfile the decoding functions")
    args = parser.parse_args()
    import torch
    from spacy.tokens import Doc
    from thinc.api import fix_random_seed

    import spacy_crossner.pipeline as pipeline
    from spacy_crossner import set_domain

    torch.set_num_threads(1)
    fix_random_seed(0)
    train = load_docs(args.work, "ai", "train")[:64]
    test = load_docs(args.work, "ai", "test")
    nlp = build_crossner(args.arch, "ai")
    examples = make_examples(nlp, train)
    optimizer = nlp.initialize(lambda: examples)
    for i in range(0, len(examples), 16):
        nlp.update(examples[i : i + 16], sgd=optimizer)

    def fresh():
        out = []
        for doc in test:
            new = Doc(nlp.vocab, words=[t.text for t in doc])
            set_domain(new, "ai")
            out.append(new)
        return out

    spent = [0.0]
    original = pipeline.head_decode

    def timed(*a, **k):
        start = time.perf_counter()
        result = original(*a, **k)
        spent[0] += time.perf_counter() - start
        return result

    pipeline.head_decode = timed
    list(nlp.pipe(fresh()[:16]))
    shares, totals = [], []
    for _ in range(args.rounds):
        spent[0] = 0.0
        docs = fresh()
        start = time.perf_counter()
        list(nlp.pipe(docs, batch_size=256))
        total = time.perf_counter() - start
        shares.append(spent[0] / total)
        totals.append(total)
    pipeline.head_decode = original
    words = sum(len(d) for d in test)
    print(f"{args.arch} on AI test ({len(test)} sentences, {words} words): inference "
          f"{words / statistics.median(totals):,.0f} words/s, decoding {100 * statistics.median(shares):.1f}% "
          f"of inference (rounds: {', '.join(f'{100 * s:.1f}%' for s in shares)})")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        list(nlp.pipe(fresh(), batch_size=256))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumtime").print_stats("pytorch_heads|head.py|decoding", 15)


if __name__ == "__main__":
    main()
