"""Decoding: BIO tag sets, their transition constraints, spans, autoregressive beam search.

Everything here is a pure function of numpy arrays, tested on its own; the numpy reference
decoders the batched torch heads (``models/pytorch_heads.py``) are tested against live in
``tests/reference_decoders.py``. Invalid
sequences are made impossible by constraints, never patched after decoding: an ``I-X`` only
follows ``B-X`` or ``I-X``, and, as in spaCy's ``ner``, an entity neither starts nor ends on a
whitespace token (``token.is_space``).
"""
import functools
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

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


def tag_kinds(tags: Sequence[str]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Which tags begin (``B-``) and which continue (``I-``) an entity: two (K,) bool arrays."""
    is_begin = numpy.array([t.startswith("B-") for t in tags], dtype=bool)
    is_inside = numpy.array([t.startswith("I-") for t in tags], dtype=bool)
    return is_begin, is_inside


def iob2_spans(tags: Sequence[str]) -> List[Tuple[int, int, str]]:
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


class SpanTable(NamedTuple):
    """The entity spans of a batch of docs, one entry per span, ordered by doc then start."""

    rows: numpy.ndarray  # (S,) the doc of each span
    starts: numpy.ndarray  # (S,) first token
    ends: numpy.ndarray  # (S,) one past the last token
    labels: List[str]  # S labels

    def per_doc(self, n_docs: int) -> List[List[Tuple[int, int, str]]]:
        """Per doc, its spans ``(start, end, label)``, as :func:`iob2_spans` gives them."""
        spans = list(zip(self.starts.tolist(), self.ends.tolist(), self.labels))
        bounds = numpy.concatenate([[0], numpy.cumsum(numpy.bincount(self.rows, minlength=n_docs))]).tolist()
        return [spans[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


@functools.lru_cache(maxsize=64)
def _tag_labels(tags: Tuple[str, ...]) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray, Tuple[str, ...]]:
    """is_begin, is_inside and label code (-1 for O) of each tag, and the labels (sorted)."""
    labels = tuple(sorted({t[2:] for t in tags if t[:2] in ("B-", "I-")}))
    code = {label: i for i, label in enumerate(labels)}
    return (
        numpy.array([t.startswith("B-") for t in tags], dtype=bool),
        numpy.array([t.startswith("I-") for t in tags], dtype=bool),
        numpy.array([code.get(t[2:], -1) if t[:2] in ("B-", "I-") else -1 for t in tags], dtype="int64"),
        labels,
    )


def iob2_spans_batch(
    tag_ids: numpy.ndarray, lengths: Sequence[int], tag_sets: Sequence[Sequence[str]]
) -> SpanTable:
    """:func:`iob2_spans` of a padded batch of tag ids, vectorised over docs and tokens.

    tag_ids (ndarray): (B, T) ints, tag ids of each doc (past its length: ignored).
    lengths (Sequence[int]): B lengths.
    tag_sets (Sequence[Sequence[str]]): per doc, its tag list (the ids index it).
    RETURNS (SpanTable): the spans of every doc (``.per_doc(B)``: per doc, as iob2_spans).
    """
    B = len(lengths)
    if B == 0:
        none = numpy.zeros(0, dtype="int64")
        return SpanTable(none, none, none, [])
    T = tag_ids.shape[1]
    sets: Dict[int, int] = {}  # id of a tag list -> its index (docs of a domain share one list)
    unique: List[Sequence[str]] = []
    which = numpy.empty(B, dtype="int64")
    for b, tags in enumerate(tag_sets):
        if id(tags) not in sets:
            sets[id(tags)] = len(unique)
            unique.append(tags)
        which[b] = sets[id(tags)]
    kinds = [_tag_labels(tuple(tags)) for tags in unique]
    K = max(len(k[0]) for k in kinds)
    begin = numpy.zeros((len(kinds), K), dtype=bool)
    inside = numpy.zeros((len(kinds), K), dtype=bool)
    label = numpy.full((len(kinds), K), -1, dtype="int64")
    first_label = numpy.cumsum([0] + [len(k[3]) for k in kinds])  # codes across the tag sets
    for i, (is_b, is_i, code, _) in enumerate(kinds):
        begin[i, : len(is_b)], inside[i, : len(is_i)] = is_b, is_i
        label[i, : len(code)] = numpy.where(code >= 0, code + first_label[i], -1)
    ids = numpy.clip(tag_ids[:, :T], 0, K - 1)
    live = numpy.arange(T)[None, :] < numpy.asarray(lengths)[:, None]
    rows = which[:, None]
    is_b, is_i, lab = begin[rows, ids] & live, inside[rows, ids] & live, label[rows, ids]
    in_span = is_b | is_i
    # I-X continues the span of the token before when that token is B-X or I-X (same X)
    cont = numpy.zeros((B, T), dtype=bool)
    cont[:, 1:] = is_i[:, 1:] & in_span[:, :-1] & (lab[:, 1:] == lab[:, :-1])
    # a span ends at the first later token that does not continue it (or at the doc's end)
    brk = numpy.ones((B, T + 1), dtype=bool)
    brk[:, :T] = ~cont
    nxt = numpy.where(brk, numpy.arange(T + 1)[None, :], T + 1)
    nxt = numpy.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1]
    r, t = numpy.nonzero(in_span & ~cont)
    names = numpy.array([name for k in kinds for name in k[3]] or [""], dtype=object)
    return SpanTable(r, t, nxt[r, t + 1], names[lab[r, t]].tolist())


def autoregressive_beam_search(
    step: Callable[[int, numpy.ndarray, numpy.ndarray], numpy.ndarray],
    lengths: Sequence[int],
    allowed_start: numpy.ndarray,
    allowed_transitions: numpy.ndarray,
    beam_width: int = 1,
    allowed_tags: Optional[numpy.ndarray] = None,
    closed: Optional[numpy.ndarray] = None,
) -> Tuple[List[List[int]], List[List[int]]]:
    """Beam search (width 1 = greedy) for a model that scores one position at a time.

    Sequences are ranked by the sum of their log-probabilities; a move the BIO constraints
    forbid is never taken (it is not renormalised away: the model's probabilities are kept).
    The model keeps its own state (e.g. an LSTM state carried along) per doc and beam slot.

    step (Callable): ``step(t, parents, prev_tags) -> logp``. ``parents`` (N, W) ints: beam
        slot of the previous step each slot continues (the model reorders its state by it);
        ``prev_tags`` (N, W) ints: the tag each slot chose at ``t - 1`` (-1 at ``t = 0``);
        ``logp`` (N, W, K): log-probabilities of the tags at position ``t``.
    lengths (Sequence[int]): N sequence lengths; a doc's beams are frozen past its end.
    allowed_start (ndarray): (N, K) bool, tags a sequence may start with (False for padding).
    allowed_transitions (ndarray): (N, K, K) bool, indexed [doc, previous, next].
    beam_width (int): W.
    allowed_tags (Optional[ndarray]): (N, T, K) bool, the tags each position may take (the
        whitespace constraints of ``whitespace_masks`` in tests/reference_decoders.py); None = all.
    closed (Optional[ndarray]): (N, T, K, K) bool, moves into position t forbidden on top of
        ``allowed_transitions`` (``whitespace_masks`` there); None = none.
    RETURNS (Tuple[List[List[int]], List[List[int]]]): per doc, the best tag sequence, and per
        position the beam slot whose ``step`` scores produced its tag (to read the scores of
        the chosen path back).
    """
    if beam_width < 1:
        raise ValueError(f"beam_width must be at least 1, got {beam_width}")
    n_seqs = len(lengths)
    n_tags = allowed_start.shape[1]
    width = beam_width
    lengths_a = numpy.asarray(lengths, dtype="int64")
    scores = numpy.full((n_seqs, width), -numpy.inf)
    scores[:, 0] = 0.0  # one live beam at the start: the others would be its copies
    parents = numpy.zeros((n_seqs, width), dtype="int64")
    tags = numpy.full((n_seqs, width), -1, dtype="int64")
    keep = numpy.broadcast_to(numpy.arange(width), (n_seqs, width))
    doc_idx = numpy.arange(n_seqs)[:, None]
    hist_tags, hist_parents = [], []
    for t in range(int(lengths_a.max(initial=0))):
        logp = numpy.asarray(step(t, parents, tags), dtype="float64")
        if t == 0:
            allowed = numpy.broadcast_to(allowed_start[:, None, :], logp.shape)
        else:
            allowed = allowed_transitions[doc_idx, numpy.maximum(tags, 0)]
            if closed is not None:
                allowed = allowed & ~closed[doc_idx, t, numpy.maximum(tags, 0)]
        if allowed_tags is not None:
            allowed = allowed & allowed_tags[:, t][:, None, :]
        cand = numpy.where(allowed, scores[:, :, None] + logp, -numpy.inf)
        cand = cand.reshape(n_seqs, width * n_tags)
        # Stable sort: among equal scores the first wins, so width 1 is exactly argmax.
        order = numpy.argsort(-cand, axis=1, kind="stable")[:, :width]
        active = (t < lengths_a)[:, None]
        scores = numpy.where(active, numpy.take_along_axis(cand, order, axis=1), scores)
        parents = numpy.where(active, order // n_tags, keep)
        tags = numpy.where(active, order % n_tags, tags)
        hist_tags.append(tags)
        hist_parents.append(parents)
    best_tags, best_rows = [], []
    for i, length in enumerate(lengths_a):
        slot = int(numpy.argmax(scores[i]))
        seq, rows = [], []
        for t in range(int(length) - 1, -1, -1):
            seq.append(int(hist_tags[t][i, slot]))
            slot = int(hist_parents[t][i, slot])
            rows.append(slot)
        best_tags.append(seq[::-1])
        best_rows.append(rows[::-1])
    return best_tags, best_rows


