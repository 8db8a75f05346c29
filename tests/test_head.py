"""The output heads: batched decoding against the numpy reference, entity marginals against
brute-force enumeration, whitespace constraints, and the loss's gradient."""
import itertools
import math

import numpy
import pytest
import torch

from reference_decoders import (
    constrained_argmax, crf_reference, crf_span_log_prob, crf_to_host, viterbi_decode, whitespace_masks,
)
from spacy_crossner.decoding import allowed_moves, bio_tags, iob2_spans
from spacy_crossner.models import pytorch_heads
from spacy_crossner.models.pytorch_heads import STACKED_GROUPS, CRFHead, Lattice, SoftmaxHead

DOMAINS = {"a": bio_tags(["X"]), "b": bio_tags(["X", "Y", "Z"])}


def random_crf_head(seed=0):
    torch.manual_seed(seed)
    head = CRFHead()
    head.setup(DOMAINS)
    with torch.no_grad():
        for p in head.parameters():
            p.uniform_(-2, 2)
    return head


def valid(tags, ws):
    """A sequence the decoders may give: BIO-valid, no entity starting or ending on whitespace."""
    prev = "O"
    for t, tag in enumerate(tags):
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            return False
        if ws[t] and tag.startswith("B-"):
            return False
        nxt = tags[t + 1] if t + 1 < len(tags) else "O"
        if ws[t] and tag.startswith("I-") and not nxt.startswith("I-"):
            return False
        prev = tag
    return True


def sequence_scores(head, domain, emissions, ws):
    crf = head.get(domain)
    tags = DOMAINS[domain]
    trans = crf.transitions.detach().double().numpy()
    start = crf.start_transitions.detach().double().numpy()
    end = crf.end_transitions.detach().double().numpy()
    scores = {}
    for seq in itertools.product(range(len(tags)), repeat=len(emissions)):
        if not valid([tags[k] for k in seq], ws):
            continue
        s = start[seq[0]] + end[seq[-1]] + sum(emissions[t, k] for t, k in enumerate(seq))
        scores[seq] = s + sum(trans[i, j] for i, j in zip(seq, seq[1:]))
    return scores


@pytest.mark.parametrize("ws", [(0, 0, 0, 0), (0, 1, 0, 0), (1, 0, 1, 1), (0, 0, 0, 1)])
def test_span_marginals_equal_brute_force(ws):
    head = random_crf_head()
    rng = numpy.random.RandomState(sum(ws))
    emissions = rng.randn(4, 3)
    scores = sequence_scores(head, "a", emissions, ws)
    log_z = numpy.logaddexp.reduce(numpy.array(list(scores.values())))
    E = torch.from_numpy(emissions)[None]
    _, extra = head.decode(E, torch.tensor([4]), ["a"], torch.tensor([ws], dtype=torch.bool))
    host = crf_to_host(extra)
    assert math.isclose(host["log_z"][0], log_z, rel_tol=1e-9, abs_tol=1e-9)
    tags = DOMAINS["a"]
    for s in range(4):
        for e in range(s + 1, 5):
            expected = sum(
                math.exp(score - log_z)
                for seq, score in scores.items()
                if (s, e, "X") in iob2_spans([tags[k] for k in seq])
            )
            got = math.exp(crf_span_log_prob(host, 0, 4, numpy.array(ws, bool), s, e, 1, 2))
            assert math.isclose(got, expected, rel_tol=1e-7, abs_tol=1e-12)


@pytest.mark.parametrize("bio_from", [1, 1000])  # the BIO-split forward pass, the dense one
@pytest.mark.parametrize("domains", [["a", "b", "b", "a", "b"] * 3, ["b"] * 15])
def test_batched_viterbi_equals_reference_with_whitespace(domains, bio_from, monkeypatch):
    monkeypatch.setattr(pytorch_heads, "BIO_VITERBI_MIN_TAGS", bio_from)
    head = random_crf_head(1)
    rng = numpy.random.RandomState(0)
    lengths = [5, 1, 7, 3, 6, 7, 2, 4, 4, 1, 6, 5, 3, 7, 2]
    T, K = max(lengths), len(DOMAINS["b"])
    emissions = rng.randn(len(domains), T, K) * 3
    ws = rng.rand(len(domains), T) < 0.3
    tags, _ = head.decode(
        torch.from_numpy(emissions), torch.tensor(lengths), domains, torch.from_numpy(ws)
    )
    for b, (domain, n) in enumerate(zip(domains, lengths)):
        crf = head.get(domain)
        k = crf.num_tags
        start, trans, end = allowed_moves(DOMAINS[domain])
        expected = viterbi_decode(
            emissions[b, :n, :k], crf.transitions.detach().numpy(),
            crf.start_transitions.detach().numpy(), crf.end_transitions.detach().numpy(),
            start, trans, end, tags=DOMAINS[domain], whitespace=ws[b, :n],
        )
        assert tags[b, :n].tolist() == expected
        assert valid([DOMAINS[domain][i] for i in expected], ws[b, :n])


def test_reference_viterbi_is_the_best_valid_sequence_with_whitespace():
    head = random_crf_head(2)
    rng = numpy.random.RandomState(3)
    for ws in [(1, 0, 0, 1), (0, 1, 1, 0), (1, 1, 1, 1)]:
        emissions = rng.randn(4, 3) * 3
        scores = sequence_scores(head, "a", emissions, ws)
        crf = head.get("a")
        start, trans, end = allowed_moves(DOMAINS["a"])
        got = viterbi_decode(
            emissions, crf.transitions.detach().numpy(), crf.start_transitions.detach().numpy(),
            crf.end_transitions.detach().numpy(), start, trans, end, tags=DOMAINS["a"], whitespace=ws,
        )
        assert tuple(got) == max(scores, key=scores.get)
    assert viterbi_decode(
        numpy.zeros((2, 3)), numpy.zeros((3, 3)), numpy.zeros(3), numpy.zeros(3),
        *allowed_moves(DOMAINS["a"]), tags=DOMAINS["a"], whitespace=[True, True],
    ) == [0, 0]


def test_whitespace_masks():
    allowed, closed = whitespace_masks(DOMAINS["a"], [False, True, True])
    # O, B-X, I-X: no B on whitespace; the last (whitespace) token is O
    assert allowed.tolist() == [[True, True, True], [True, False, True], [True, False, False]]
    # I-X on whitespace token 1 must go on as I-X at 2
    assert closed[2, 2].tolist() == [True, True, False] and not closed[1].any()


def test_softmax_head_decodes_as_the_reference_and_its_loss_is_cross_entropy():
    torch.manual_seed(0)
    head = SoftmaxHead()
    head.setup(DOMAINS)
    rng = numpy.random.RandomState(1)
    domains = ["b", "a", "b"]
    lengths = [4, 6, 2]
    emissions = torch.from_numpy(rng.randn(3, 6, 7) * 2)
    ws = torch.from_numpy(rng.rand(3, 6) < 0.3)
    tags, extra = head.decode(emissions, torch.tensor(lengths), domains, ws)
    for b, (domain, n) in enumerate(zip(domains, lengths)):
        k = len(DOMAINS[domain])
        logp = torch.log_softmax(emissions[b, :n, :k], -1).numpy()
        expected = constrained_argmax(logp, DOMAINS[domain], ws[b, :n].numpy())
        assert tags[b, :n].tolist() == expected
        numpy.testing.assert_allclose(extra["logp"][b, :n, :k].numpy(), logp, rtol=1e-6)
    gold = torch.full((3, 6), -1, dtype=torch.long)
    gold[0, :4] = torch.tensor([0, 1, 2, 0])
    gold[1, :6] = torch.tensor([0, 0, 1, 2, 2, 0])  # doc 2 is raw text: no loss
    loss = head(emissions, torch.tensor(lengths), domains, gold)
    expected = -(
        torch.log_softmax(emissions[0, :4, :7], -1)[torch.arange(4), gold[0, :4]].sum()
        + torch.log_softmax(emissions[1, :6, :3], -1)[torch.arange(6), gold[1, :6]].sum()
    ) / 2
    assert math.isclose(float(loss), float(expected), rel_tol=1e-6)


def test_crf_loss_is_the_mean_negative_log_likelihood():
    head = random_crf_head(4)
    rng = numpy.random.RandomState(2)
    emissions = rng.randn(2, 4, 7)
    gold = torch.tensor([[0, 1, 2, 0], [1, -1, -1, -1]])
    gold[1, :1] = 1
    lengths = torch.tensor([4, 1])
    loss = head(torch.from_numpy(emissions), lengths, ["a", "b"], gold)
    no_ws = (0, 0, 0, 0)
    scores_a = sequence_scores(head, "a", emissions[0, :, :3], no_ws)
    nll_a = numpy.logaddexp.reduce(numpy.array(list(scores_a.values()))) - scores_a[(0, 1, 2, 0)]
    scores_b = sequence_scores(head, "b", emissions[1, :1, :7], (0,))
    nll_b = numpy.logaddexp.reduce(numpy.array(list(scores_b.values()))) - scores_b[(1,)]
    assert math.isclose(float(loss.detach()), (nll_a + nll_b) / 2, rel_tol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_crf_likelihood_equals_pytorch_crf_and_the_numpy_reference(dtype):
    """The one CRF (ConstrainedCRF on the Lattice) against the path it replaced (pytorch-crf's
    CRF, same parameters) and the numpy reference: the same log-likelihood, gradients with
    respect to the emissions and every parameter, and emission gradients that are the gold
    one-hot minus the reference's marginals; invalid gold moves stay finite (FORBIDDEN)."""
    from torchcrf import CRF

    from spacy_crossner.models.pytorch_heads import ConstrainedCRF

    torch.manual_seed(3)
    crf = ConstrainedCRF(bio_tags(["X", "Y"])).to(dtype)
    with torch.no_grad():
        for p in crf.parameters():
            p.uniform_(-2, 2)
    crf.apply_constraints()
    old = CRF(crf.num_tags, batch_first=True).to(dtype)
    old.load_state_dict(crf.state_dict())
    B, T, K = 5, 6, crf.num_tags
    emissions = torch.randn(B, T, K, dtype=dtype, requires_grad=True)
    tags = torch.randint(0, K, (B, T))
    lengths = torch.tensor([6, 1, 3, 6, 2])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    ours = crf(emissions, tags, mask=mask, reduction="none")
    theirs = old(emissions, tags, mask=mask, reduction="none")
    tol = dict(rtol=1e-10, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-3)
    assert ours.shape == (B,) and bool(torch.isfinite(ours).all())
    assert torch.allclose(ours, theirs, **tol)
    for one, other in zip(torch.autograd.grad(ours.sum(), [emissions, *crf.parameters()]),
                          torch.autograd.grad(theirs.sum(), [emissions, *old.parameters()])):
        assert torch.allclose(one, other, **tol)
    if dtype != torch.float64:
        return
    d_emissions = torch.autograd.grad(crf(emissions, tags, mask=mask), emissions)[0].numpy()
    E = emissions.detach().numpy()
    start, end, trans = (p.detach().numpy() for p in (crf.start_transitions, crf.end_transitions, crf.transitions))
    for b, n in enumerate(lengths.tolist()):
        llh, marginals = crf_reference(E[b, :n], tags[b, :n].numpy(), start, trans, end)
        assert math.isclose(float(ours[b].detach()), llh, rel_tol=1e-10, abs_tol=1e-8)
        one_hot = numpy.eye(K)[tags[b, :n].numpy()]
        assert numpy.allclose(d_emissions[b, :n], one_hot - marginals, atol=1e-10)
        assert numpy.allclose(marginals.sum(axis=1), 1.0)


def test_decoding_marginals_equal_the_numpy_reference():
    """The CRF head's decoding lattice (forbidden moves at -inf) has the reference's
    marginals (forbidden moves at FORBIDDEN: no mass either way)."""
    head = random_crf_head(5)
    rng = numpy.random.RandomState(6)
    emissions = torch.from_numpy(rng.randn(2, 5, 7) * 2)
    lengths = torch.tensor([5, 3])
    lattice = head.lattice(emissions, lengths, ["b", "b"], torch.zeros(2, 5, dtype=torch.bool))
    alpha, beta, log_z = lattice.forward_backward()
    crf = head.get("b")
    crf.apply_constraints()
    start, end, trans = (p.detach().double().numpy() for p in (crf.start_transitions, crf.end_transitions, crf.transitions))
    for b, n in enumerate(lengths.tolist()):
        _, marginals = crf_reference(emissions[b, :n].numpy(), numpy.zeros(n, dtype=int), start, trans, end)
        got = torch.exp(alpha[b, :n] + beta[b, :n] - log_z[b]).numpy()
        assert numpy.allclose(got, marginals, atol=1e-9)


@pytest.mark.parametrize("ws_rate", [0.0, 0.3])
def test_scaled_forward_backward_equals_log_space_reference(ws_rate):
    head = random_crf_head(2)
    rng = numpy.random.RandomState(3)
    domains = ["b", "a", "b", "b"]
    lengths = [6, 2, 9, 1]
    T, K = max(lengths), len(DOMAINS["b"])
    emissions = torch.from_numpy(rng.randn(len(domains), T, K) * 4)
    ws = torch.from_numpy(rng.rand(len(domains), T) < ws_rate)
    lattice = head.lattice(emissions, torch.tensor(lengths), domains, ws)
    fast = lattice.forward_backward()
    reference = lattice.forward_backward_log()
    # alpha and beta inside each doc (the reference also fills alpha past the end), log Z
    inside = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    for got, expected in zip(fast[:2], reference[:2]):
        got, expected = got[inside], expected[inside]
        assert torch.equal(torch.isfinite(got), torch.isfinite(expected))
        finite = torch.isfinite(expected)
        assert torch.allclose(got[finite], expected[finite], rtol=1e-10, atol=1e-9)
    assert torch.allclose(fast[2], reference[2], rtol=1e-12, atol=1e-10)
    assert torch.equal(fast[1], torch.where(inside[:, :, None], fast[1], lattice.end[:, None, :]))
    # the closed moves of the lattice are those of the numpy reference
    for b, (domain, n) in enumerate(zip(domains, lengths)):
        k = len(DOMAINS[domain])
        _, closed = whitespace_masks(DOMAINS[domain], ws[b, :n].numpy())
        assert numpy.array_equal(lattice.closed[b, :n, :k, :k].numpy(), closed)


@pytest.mark.parametrize("domains", [["b", "a", "b"], ["b", "b"], ["a", "b", "a", "b", "a", "b", "b"]])
def test_vectorised_span_log_probs_equal_the_per_span_reference(domains):
    # one domain (one GEMM per step), two (stacked GEMM) and more docs than STACKED_GROUPS
    head = random_crf_head(4)
    rng = numpy.random.RandomState(5)
    lengths = [7, 4, 1, 6, 2, 5, 3][: len(domains)]
    T, K = max(lengths), len(DOMAINS["b"])
    emissions = torch.from_numpy(rng.randn(len(domains), T, K) * 2)
    ws = rng.rand(len(domains), T) < 0.3
    _, extra = head.decode(emissions, torch.tensor(lengths), domains, torch.from_numpy(ws))
    host = crf_to_host(extra)
    rows, spans = [], []
    for row, (domain, n) in enumerate(zip(domains, lengths)):
        tags = DOMAINS[domain]
        for label in sorted({t[2:] for t in tags if t != "O"}):
            for s in range(n):
                for e in range(s + 1, n + 1):
                    rows.append(row)
                    spans.append((s, e, tags.index(f"B-{label}"), tags.index(f"I-{label}")))
    columns = torch.tensor([(r, *span) for r, span in zip(rows, spans)]).t()
    got = extra["lattice"].span_log_probs(*columns).numpy()
    expected = numpy.array([
        crf_span_log_prob(host, row, lengths[row], ws[row], *span) for row, span in zip(rows, spans)
    ])
    assert len(rows) > 50
    assert numpy.array_equal(numpy.isfinite(got), numpy.isfinite(expected))
    finite = numpy.isfinite(expected)
    assert numpy.allclose(got[finite], expected[finite], rtol=1e-10, atol=1e-10)
    # the spans of some docs only: the forward-backward runs over those docs, same values
    some = torch.tensor(rows) != 1
    part = extra["lattice"].span_log_probs(*columns[:, some]).numpy()
    assert numpy.allclose(part[finite[some]], got[some.numpy()][finite[some]], rtol=1e-12, atol=1e-12)
    assert len(extra["lattice"].span_log_probs(*columns[:, :0])) == 0


def test_lattice_with_a_table_per_doc_equals_the_grouped_lattice():
    # one transition table per doc (a group per doc) gives what one per domain gives
    head = random_crf_head(6)
    rng = numpy.random.RandomState(7)
    domains, lengths = ["b", "a", "b", "b", "a", "b"], [5, 3, 6, 1, 6, 2]  # more tables than STACKED_GROUPS
    emissions = torch.from_numpy(rng.randn(6, 6, 7) * 2)
    ws = torch.from_numpy(rng.rand(6, 6) < 0.3)
    grouped = head.lattice(emissions, torch.tensor(lengths), domains, ws)
    per_doc = Lattice(
        grouped.emissions, grouped.lengths, grouped.start, grouped.trans, grouped.end,
        grouped.whitespace, grouped.is_inside, torch.arange(6),
    )
    assert per_doc.group_trans.shape[0] == 6 > STACKED_GROUPS and grouped.group_trans.shape[0] == 2
    assert torch.equal(per_doc.viterbi(), grouped.viterbi())
    for got, expected in zip(per_doc.forward_backward(), grouped.forward_backward()):
        assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_crf_decode_gives_the_brute_force_entity_probabilities():
    # the whole decoding path of head.decode: Viterbi entities, each with its marginal
    from types import SimpleNamespace

    from thinc.api import NumpyOps

    from spacy_crossner.models.head import _head_layer, decode, decode_crf

    head = random_crf_head(8)
    rng = numpy.random.RandomState(9)
    domains, lengths = ["a", "b", "a"], [4, 3, 0]
    emissions = rng.randn(3, 4, 7).astype("float32") * 3
    whitespace = [[False, False, True, False], [False, True, False], []]
    layer = _head_layer(head, decode_crf)  # spacy_crossner.CRFHead.v1's layer, on this CRF
    model = SimpleNamespace(get_ref=lambda name: layer, ops=NumpyOps(), attrs={"domain_tags": DOMAINS})
    output = SimpleNamespace(scores=emissions, lengths=lengths, domains=domains)
    decoded = decode(model, output, whitespace)
    assert decoded[2] == ([], [], [])
    n_spans = 0
    for b in range(2):
        tags = DOMAINS[domains[b]]
        n = lengths[b]
        E = emissions[b, :n, : len(tags)].astype("float64")
        scores = sequence_scores(head, domains[b], E, whitespace[b])
        log_z = numpy.logaddexp.reduce(numpy.array(list(scores.values())))
        best = max(scores, key=scores.get)
        assert decoded[b].tags == [tags[k] for k in best]
        assert decoded[b].spans == iob2_spans(decoded[b].tags)
        for (s, e, label), p in zip(decoded[b].spans, decoded[b].probs):
            expected = sum(
                math.exp(score - log_z) for seq, score in scores.items()
                if (s, e, label) in iob2_spans([tags[k] for k in seq])
            )
            assert math.isclose(p, expected, rel_tol=1e-7, abs_tol=1e-12)
            n_spans += 1
    assert n_spans >= 2
