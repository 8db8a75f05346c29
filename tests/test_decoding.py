import itertools

import numpy
import pytest

from reference_decoders import constrained_argmax, is_bio, viterbi_decode
from spacy_crossner.decoding import allowed_moves, bio_tags, iob2_spans, iob2_spans_batch

TAGS = bio_tags(["A", "B"])  # O, B-A, I-A, B-B, I-B




def brute_force(emissions, trans, start, end, tags):
    best, best_score = None, -numpy.inf
    for seq in itertools.product(range(len(tags)), repeat=emissions.shape[0]):
        if not is_bio([tags[i] for i in seq]):
            continue
        score = start[seq[0]] + end[seq[-1]] + sum(emissions[t, i] for t, i in enumerate(seq))
        score += sum(trans[a, b] for a, b in zip(seq, seq[1:]))
        if score > best_score:
            best, best_score = list(seq), score
    return best


def test_bio_tags_order():
    assert bio_tags(["x", "y"]) == ["O", "B-x", "I-x", "B-y", "I-y"]
    assert bio_tags([]) == ["O"]


def test_allowed_moves():
    start, trans, end = allowed_moves(TAGS)
    assert start.tolist() == [True, True, False, True, False]
    assert end.all()
    # I-A only after B-A or I-A
    assert trans[:, 2].tolist() == [False, True, True, False, False]
    assert trans[:, 4].tolist() == [False, False, False, True, True]
    assert trans[:, [0, 1, 3]].all()


@pytest.mark.parametrize("seed", range(20))
def test_viterbi_matches_brute_force(seed):
    rng = numpy.random.RandomState(seed)
    n = rng.randint(1, 5)
    emissions = rng.randn(n, len(TAGS)) * 3
    trans = rng.randn(len(TAGS), len(TAGS))
    start = rng.randn(len(TAGS))
    end = rng.randn(len(TAGS))
    ok_start, ok_trans, ok_end = allowed_moves(TAGS)
    got = viterbi_decode(emissions, trans, start, end, ok_start, ok_trans, ok_end)
    assert got == brute_force(emissions, trans, start, end, TAGS)
    assert is_bio([TAGS[i] for i in got])


def test_viterbi_never_starts_inside_an_entity():
    emissions = numpy.full((3, len(TAGS)), -5.0)
    emissions[:, 2] = 10.0  # I-A everywhere is what the scores want
    ok_start, ok_trans, ok_end = allowed_moves(TAGS)
    zeros = numpy.zeros(len(TAGS))
    got = viterbi_decode(emissions, numpy.zeros((5, 5)), zeros, zeros, ok_start, ok_trans, ok_end)
    assert [TAGS[i] for i in got] == ["B-A", "I-A", "I-A"]


def test_viterbi_empty_and_long():
    ok_start, ok_trans, ok_end = allowed_moves(TAGS)
    zeros = numpy.zeros(len(TAGS))
    assert viterbi_decode(numpy.zeros((0, 5)), numpy.zeros((5, 5)), zeros, zeros, ok_start, ok_trans, ok_end) == []
    rng = numpy.random.RandomState(0)
    long = rng.randn(5000, 5)
    got = viterbi_decode(long, rng.randn(5, 5), zeros, zeros, ok_start, ok_trans, ok_end)
    assert len(got) == 5000 and is_bio([TAGS[i] for i in got])


def test_constrained_argmax_equals_argmax_when_valid():
    emissions = numpy.log(numpy.array([
        [0.1, 0.8, 0.05, 0.03, 0.02],
        [0.1, 0.1, 0.7, 0.05, 0.05],
        [0.9, 0.02, 0.03, 0.03, 0.02],
    ]))
    assert constrained_argmax(emissions, TAGS) == emissions.argmax(axis=1).tolist()


def test_constrained_argmax_repairs_by_constraint():
    # argmax says O, I-B: invalid; the best valid sequence is chosen instead.
    emissions = numpy.log(numpy.array([
        [0.6, 0.1, 0.1, 0.1, 0.1],
        [0.1, 0.1, 0.1, 0.3, 0.4],
    ]))
    assert [TAGS[i] for i in constrained_argmax(emissions, TAGS)] == ["O", "B-B"]


def test_iob2_spans():
    assert iob2_spans(["B-A", "I-A", "O", "B-B", "B-B", "I-B"]) == [(0, 2, "A"), (3, 4, "B"), (4, 6, "B")]
    assert iob2_spans([]) == []
    assert iob2_spans(["O", "O"]) == []
    # conlleval reading of a stray I-: it opens an entity
    assert iob2_spans(["O", "I-A", "I-B"]) == [(1, 2, "A"), (2, 3, "B")]


def test_iob2_spans_batch_equals_iob2_spans():
    # any sequences (invalid ones too), docs of two tag sets and lengths 0..7 in one batch
    rng = numpy.random.RandomState(0)
    other = bio_tags(["B", "X-Y", "C"])  # "B" is a label here too; labels may hold "-"
    sets, lengths = [], []
    for _ in range(60):
        sets.append(TAGS if rng.rand() < 0.5 else other)
        lengths.append(int(rng.randint(0, 8)))
    ids = rng.randint(0, len(other), (60, 8))
    for b, tags in enumerate(sets):
        ids[b] %= len(tags)
    ids[0, :3] = [2, 2, 1]  # I-A I-A B-A
    got = iob2_spans_batch(ids, lengths, sets).per_doc(60)
    expected = [iob2_spans([tags[k] for k in ids[b, :n]]) for b, (tags, n) in enumerate(zip(sets, lengths))]
    assert got == expected
    assert sum(len(spans) for spans in expected) > 60
    assert iob2_spans_batch(numpy.zeros((0, 0), dtype=int), [], []).per_doc(0) == []
