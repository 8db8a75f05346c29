"""Reference decoders in numpy, one sequence at a time: what the batched torch heads
(``spacy_crossner/models/pytorch_heads.py``) are tested against. They are not part of the
library: only the tests use them."""
import itertools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy

from spacy_crossner.decoding import allowed_moves, autoregressive_beam_search, tag_kinds


def whitespace_masks(
    tags: Sequence[str], whitespace: Sequence[bool]
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The position-dependent constraints that keep entities off whitespace tokens.

    A whitespace token may not begin an entity, and may only be inside one if the entity goes
    on after it (so the last token, if whitespace, is ``O``).
    tags (Sequence[str]): the K IOB2 tags.
    whitespace (Sequence[bool]): T flags, True for a whitespace token.
    RETURNS (Tuple[ndarray, ndarray]): ``allowed`` (T, K) bool, the tags each position may
        take; ``closed`` (T, K, K) bool, True where the move from tag i at t-1 to tag j at t is
        forbidden because token t-1 is whitespace inside an entity that would end there (row
        0 is all False).
    """
    ws = numpy.asarray(whitespace, dtype=bool)
    is_begin, is_inside = tag_kinds(tags)
    allowed = ~(ws[:, None] & is_begin[None, :])
    if len(ws):
        allowed[-1] &= ~(ws[-1] & is_inside)
    closed = numpy.zeros((len(ws), len(tags), len(tags)), dtype=bool)
    closed[1:] = ws[:-1, None, None] & is_inside[None, :, None] & ~is_inside[None, None, :]
    return allowed, closed


def viterbi_decode(
    emissions: numpy.ndarray,
    transitions: numpy.ndarray,
    start_scores: numpy.ndarray,
    end_scores: numpy.ndarray,
    allowed_start: numpy.ndarray,
    allowed_transitions: numpy.ndarray,
    allowed_end: numpy.ndarray,
    *,
    tags: Optional[Sequence[str]] = None,
    whitespace: Optional[Sequence[bool]] = None,
) -> List[int]:
    """The highest-scoring tag sequence that respects the allowed moves.

    emissions (ndarray): (T, K) scores of each tag at each token.
    transitions (ndarray): (K, K) scores of moving from tag i to tag j.
    start_scores, end_scores (ndarray): (K,) scores of starting / ending with each tag.
    allowed_start, allowed_transitions, allowed_end (ndarray): boolean masks of the same shapes.
    tags (Optional[Sequence[str]]): the K tags; needed with ``whitespace``.
    whitespace (Optional[Sequence[bool]]): T flags; entities may not start or end on a True
        token (:func:`whitespace_masks`).
    RETURNS (List[int]): T tag indices ([] for an empty sequence).
    """
    emissions = numpy.asarray(emissions, dtype="float64")
    n_tokens, n_tags = emissions.shape
    if n_tokens == 0:
        return []
    closed = numpy.zeros((n_tokens, n_tags, n_tags), dtype=bool)
    if whitespace is not None:
        if tags is None:
            raise ValueError("viterbi_decode: whitespace constraints need the tags")
        allowed, closed = whitespace_masks(tags, whitespace)
        emissions = numpy.where(allowed, emissions, -numpy.inf)
    trans = numpy.where(allowed_transitions, transitions, -numpy.inf)
    score = numpy.where(allowed_start, start_scores, -numpy.inf) + emissions[0]
    history = numpy.zeros((n_tokens, n_tags), dtype="int64")
    for t in range(1, n_tokens):
        # candidates[i, j]: best path ending in i at t-1, then moving to j.
        candidates = numpy.where(closed[t], -numpy.inf, score[:, None] + trans)
        history[t] = candidates.argmax(axis=0)
        score = candidates.max(axis=0) + emissions[t]
    score = score + numpy.where(allowed_end, end_scores, -numpy.inf)
    best = [int(score.argmax())]
    for t in range(n_tokens - 1, 0, -1):
        best.append(int(history[t, best[-1]]))
    best.reverse()
    return best


def constrained_argmax(
    emissions: numpy.ndarray, tags: Sequence[str], whitespace: Optional[Sequence[bool]] = None
) -> List[int]:
    """Best valid BIO sequence under per-token scores alone (no learnt transitions).

    The reference of heads without a CRF: it equals the plain argmax whenever that is valid.
    emissions (ndarray): (T, K) per-token scores, e.g. log-probabilities.
    tags (Sequence[str]): the K IOB2 tags.
    whitespace (Optional[Sequence[bool]]): T flags of whitespace tokens (no entity starts or
        ends on one).
    RETURNS (List[int]): T tag indices.
    """
    n_tags = len(tags)
    start, trans, end = allowed_moves(tags)
    zeros = numpy.zeros((n_tags,))
    return viterbi_decode(
        emissions, numpy.zeros((n_tags, n_tags)), zeros, zeros, start, trans, end,
        tags=tags, whitespace=whitespace,
    )


def autoregressive_greedy(
    step: Callable[[int, numpy.ndarray, numpy.ndarray], numpy.ndarray],
    lengths: Sequence[int],
    allowed_start: numpy.ndarray,
    allowed_transitions: numpy.ndarray,
    allowed_tags: Optional[numpy.ndarray] = None,
    closed: Optional[numpy.ndarray] = None,
) -> Tuple[List[List[int]], List[List[int]]]:
    """Greedy autoregressive decoding: :func:`autoregressive_beam_search` with width 1 (the
    best allowed tag at each position, fed back to the model)."""
    return autoregressive_beam_search(
        step, lengths, allowed_start, allowed_transitions, 1, allowed_tags, closed
    )


def crf_to_host(extra: Dict[str, Any]) -> Dict[str, numpy.ndarray]:
    """The CRF lattice of :meth:`CRFHead.decode` on the host, with its full forward and backward
    scores: the input of the per-span reference :func:`crf_span_log_prob`."""
    lattice = extra["lattice"]
    alpha, beta, log_z = lattice.forward_backward()
    return {
        "alpha": alpha.double().cpu().numpy(),
        "beta": beta.double().cpu().numpy(),
        "log_z": log_z.double().cpu().numpy(),
        "emissions": lattice.emissions.detach().double().cpu().numpy(),
        "trans": lattice.trans.detach().double().cpu().numpy(),
        "end": lattice.end.detach().double().cpu().numpy(),
        "inside": lattice.is_inside.cpu().numpy(),
    }


def crf_span_log_prob(
    host: Dict[str, numpy.ndarray], row: int, length: int, whitespace: numpy.ndarray,
    start: int, end: int, begin_id: int, inside_id: int,
) -> float:
    """Log marginal probability that tokens ``start:end`` are one entity (``B-X I-X ...``
    followed by anything but ``I-X``) under the CRF lattice of doc ``row``."""
    E = host["emissions"][row]
    trans = host["trans"][row]

    inside = host["inside"][row]

    def move(t: int, prev: int) -> numpy.ndarray:
        # scores of moving from `prev` at t-1 into every tag at t (whitespace rule included)
        scores = trans[prev].copy()
        if whitespace[t - 1] and inside[prev]:
            scores[~inside] = -numpy.inf
        return scores

    score = host["alpha"][row, start, begin_id]
    prev = begin_id
    for t in range(start + 1, end):
        score += move(t, prev)[inside_id] + E[t, inside_id]
        prev = inside_id
    if end < length:
        nxt = move(end, prev) + E[end] + host["beta"][row, end]
        nxt[inside_id] = -numpy.inf
        top = nxt.max()
        score += top + numpy.log(numpy.exp(nxt - top).sum()) if numpy.isfinite(top) else -numpy.inf
    else:
        score += host["end"][row, prev]
    return float(score - host["log_z"][row])


def crf_reference(
    emissions: numpy.ndarray, tags: Sequence[int], start: numpy.ndarray, trans: numpy.ndarray,
    end: numpy.ndarray,
) -> Tuple[float, numpy.ndarray]:
    """A linear-chain CRF on one sequence, in float64 log space: the log-likelihood of
    ``tags`` and the token marginals (T, K), by the forward-backward algorithm.

    emissions (T, K); tags (T,); start, end (K,); trans (K, K) [previous, next].
    """
    E = numpy.asarray(emissions, dtype="float64")
    T, K = E.shape
    lse = numpy.logaddexp.reduce
    alpha = numpy.zeros((T, K))
    alpha[0] = start + E[0]
    for t in range(1, T):
        alpha[t] = lse(alpha[t - 1][:, None] + trans, axis=0) + E[t]
    beta = numpy.zeros((T, K))
    beta[T - 1] = end
    for t in range(T - 2, -1, -1):
        beta[t] = lse(trans + (E[t + 1] + beta[t + 1])[None, :], axis=1)
    log_z = lse(alpha[T - 1] + end)
    score = start[tags[0]] + end[tags[-1]] + sum(E[t, k] for t, k in enumerate(tags))
    score += sum(trans[i, j] for i, j in zip(tags, tags[1:]))
    return float(score - log_z), numpy.exp(alpha + beta - log_z)


def crf_partial_log_likelihood(
    emissions: numpy.ndarray, observed: Sequence[int], tags: Sequence[str], start: numpy.ndarray,
    trans: numpy.ndarray, end: numpy.ndarray,
) -> float:
    """Log-likelihood of a partial annotation under a BIO-constrained linear-chain CRF, by
    enumerating every tag sequence (K ** T of them: tiny lattices only).

    log sum over the valid paths that agree with ``observed`` wherever it is >= 0 (-1: missing,
    any tag) minus log sum over all valid paths; a path is valid when it makes no move that
    :func:`~spacy_crossner.decoding.allowed_moves` forbids (``O -> I-X``, ``B-X -> I-Y`` ...).
    emissions (T, K); observed (T,) tag ids or -1; tags: the K IOB2 tags; start, end (K,);
    trans (K, K) [previous, next]. RETURNS: the log-likelihood (-inf if no valid path agrees).
    """
    E = numpy.asarray(emissions, dtype="float64")
    T, K = E.shape
    ok_start, ok_trans, ok_end = allowed_moves(tags)
    everything, agreeing = [], []
    for path in itertools.product(range(K), repeat=T):
        if not (ok_start[path[0]] and ok_end[path[-1]] and all(ok_trans[i, j] for i, j in zip(path, path[1:]))):
            continue
        score = start[path[0]] + end[path[-1]] + sum(E[t, k] for t, k in enumerate(path))
        score += sum(trans[i, j] for i, j in zip(path, path[1:]))
        everything.append(score)
        if all(o < 0 or o == k for o, k in zip(observed, path)):
            agreeing.append(score)
    lse = numpy.logaddexp.reduce
    if not agreeing:
        return -numpy.inf
    return float(lse(numpy.asarray(agreeing)) - lse(numpy.asarray(everything)))


def is_bio(tags):
    """Whether a tag sequence is valid BIO: an I-X only after B-X or I-X."""
    prev = "O"
    for tag in tags:
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            return False
        prev = tag
    return True
