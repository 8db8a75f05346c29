"""Decoding: BIO tag sets, their transition constraints, and constrained Viterbi.

Everything here is a pure function of numpy arrays, so it is tested on its own and shared by
every architecture. Invalid BIO sequences are made impossible by the constraints (an ``I-X`` can
only follow ``B-X`` or ``I-X``), never patched after decoding.
"""
from typing import List, Sequence, Tuple

import numpy

OUTSIDE = "O"
# Score given to a forbidden move; finite so that float arithmetic stays exact elsewhere.
FORBIDDEN = -1e4


def bio_tags(labels: Sequence[str]) -> List[str]:
    """The IOB2 tag set of an ordered label list: ``O``, then ``B-L``, ``I-L`` per label.

    labels (Sequence[str]): entity labels, in the order they were added.
    RETURNS (List[str]): the tags; tag ``1 + 2 * i`` is ``B-labels[i]``, ``2 + 2 * i`` is ``I-``.
    """
    tags = [OUTSIDE]
    for label in labels:
        tags.append(f"B-{label}")
        tags.append(f"I-{label}")
    return tags


def allowed_moves(tags: Sequence[str]) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """Which BIO moves are valid.

    tags (Sequence[str]): IOB2 tags (``O``, ``B-X``, ``I-X``).
    RETURNS (Tuple[ndarray, ndarray, ndarray]): boolean ``start`` (K,), ``transitions`` (K, K)
        indexed [previous, next], and ``end`` (K,). ``I-X`` may only start after ``B-X``/``I-X``.
    """
    n = len(tags)
    start = numpy.ones((n,), dtype=bool)
    end = numpy.ones((n,), dtype=bool)
    trans = numpy.ones((n, n), dtype=bool)
    for j, tag in enumerate(tags):
        if tag.startswith("I-"):
            label = tag[2:]
            start[j] = False
            for i, prev in enumerate(tags):
                trans[i, j] = prev in (f"B-{label}", f"I-{label}")
    return start, trans, end


def viterbi_decode(
    emissions: numpy.ndarray,
    transitions: numpy.ndarray,
    start_scores: numpy.ndarray,
    end_scores: numpy.ndarray,
    allowed_start: numpy.ndarray,
    allowed_transitions: numpy.ndarray,
    allowed_end: numpy.ndarray,
) -> List[int]:
    """The highest-scoring tag sequence that respects the allowed moves.

    emissions (ndarray): (T, K) scores of each tag at each token.
    transitions (ndarray): (K, K) scores of moving from tag i to tag j.
    start_scores, end_scores (ndarray): (K,) scores of starting / ending with each tag.
    allowed_start, allowed_transitions, allowed_end (ndarray): boolean masks of the same shapes.
    RETURNS (List[int]): T tag indices ([] for an empty sequence).
    """
    emissions = numpy.asarray(emissions, dtype="float64")
    n_tokens, n_tags = emissions.shape
    if n_tokens == 0:
        return []
    trans = numpy.where(allowed_transitions, transitions, -numpy.inf)
    score = numpy.where(allowed_start, start_scores, -numpy.inf) + emissions[0]
    history = numpy.zeros((n_tokens, n_tags), dtype="int64")
    for t in range(1, n_tokens):
        # candidates[i, j]: best path ending in i at t-1, then moving to j.
        candidates = score[:, None] + trans
        history[t] = candidates.argmax(axis=0)
        score = candidates.max(axis=0) + emissions[t]
    score = score + numpy.where(allowed_end, end_scores, -numpy.inf)
    best = [int(score.argmax())]
    for t in range(n_tokens - 1, 0, -1):
        best.append(int(history[t, best[-1]]))
    best.reverse()
    return best


def constrained_argmax(emissions: numpy.ndarray, tags: Sequence[str]) -> List[int]:
    """Best valid BIO sequence under per-token scores alone (no learnt transitions).

    Used by heads without a CRF: it equals the plain argmax whenever that is a valid sequence.
    emissions (ndarray): (T, K) per-token scores, e.g. log-probabilities.
    tags (Sequence[str]): the K IOB2 tags.
    RETURNS (List[int]): T tag indices.
    """
    n_tags = len(tags)
    start, trans, end = allowed_moves(tags)
    zeros = numpy.zeros((n_tags,))
    return viterbi_decode(
        emissions, numpy.zeros((n_tags, n_tags)), zeros, zeros, start, trans, end
    )


def tags_to_spans(tags: Sequence[str]) -> List[Tuple[int, int, str]]:
    """Entity spans ``(start, end_exclusive, label)`` of a valid IOB2 sequence.

    An ``I-X`` that does not continue an ``X`` opens a new entity (the conlleval reading), so
    the function is total; decoders never produce such sequences.
    """
    spans = []
    start = None
    label = None
    for i, tag in enumerate(list(tags) + [OUTSIDE]):
        prefix, _, tag_label = tag.partition("-")
        continues = prefix == "I" and label == tag_label
        if start is not None and not continues:
            spans.append((start, i, label))
            start, label = None, None
        if prefix in ("B", "I") and not continues:
            start, label = i, tag_label
    return spans
