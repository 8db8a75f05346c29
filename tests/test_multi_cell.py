"""spacy_crossner.MultiCellLSTM.v1: the spec's acceptance checks on the torch modules, SDA
overfitting through the component with round trips, and UDA from raw text + a dictionary."""
import itertools
import math
from pathlib import Path

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

from spacy_crossner import set_domain
from reference_decoders import viterbi_decode
from spacy_crossner.decoding import bio_tags
from spacy_crossner.models.base import get_emitter
from spacy_crossner.models.head import get_crf
from spacy_crossner.models.pytorch_heads import module_key
from spacy_crossner.models.pytorch_multi_cell import (
    TARGET_KEY,
    TYPES_KEY,
    MultiCellEmitter,
    cell_inventory,
    tag_type,
)
from util import AI, NEWS, blank_with, gold_ents, make_examples, predicted_ents, train

DICT_DIR = Path(__file__).parents[2] / "shared" / "data" / "dictionaries" / "conll2003"

SMALL_MC = {
    "@architectures": "spacy_crossner.MultiCellLSTM.v1",
    "hidden_size": 16,
    "dropout": 0.0,
    "tok2vec": {
        "@architectures": "spacy_crossner.WordCharEmbed.v1",
        "word_width": 32,
        "word_rows": 1000,
        "char_width": 8,
        "char_filters": 16,
        "dropout": 0.0,
    },
}
# news: location, organisation, person; ai: algorithm, misc, organisation, product
DOMAIN_TAGS = {
    "news": bio_tags(["location", "organisation", "person"]),
    "ai": bio_tags(["algorithm", "misc", "organisation", "product"]),
}


def make_emitter(domain_tags=DOMAIN_TAGS, n_in=12, width=8, target="ai", **kwargs):
    torch.manual_seed(0)
    emitter = MultiCellEmitter(width=width, dropout=0.0, **kwargs)
    sources = [d for d in domain_tags if d != target]
    config = {TYPES_KEY: cell_inventory(domain_tags, (), sources), TARGET_KEY: target}
    emitter.setup(n_in, domain_tags, config)
    return emitter


def random_init(emitter):
    # Break the code's identical init so that cells differ (as after training).
    torch.manual_seed(1)
    with torch.no_grad():
        for p in emitter.parameters():
            p.uniform_(-0.5, 0.5)


# -- acceptance checks on the modules ----------------------------------------------------------


def test_inventory_o_first_sources_then_target_only_types():
    emitter = make_emitter()
    assert emitter.types == ["O", "location", "organisation", "person", "algorithm", "misc", "product"]
    assert tag_type("B-person") == tag_type("I-person") == tag_type("S-person") == "person"
    assert tag_type("O") == "O"
    assert emitter.domain_cells == {"news": [0, 1, 2, 3], "ai": [0, 2, 4, 5, 6]}


def test_shapes_and_attention_sums_to_one():
    emitter = make_emitter()
    random_init(emitter)
    X = torch.randn(3, 5, 12)
    lengths = torch.tensor([5, 3, 4])
    domains = ["ai", "news", "ai"]
    out = emitter.encode(X, lengths, domains)
    l = out["cells"].shape[0]
    assert l == 7  # the union of both domains' cells, masked per sentence
    assert out["h"].shape == (2, 3, 5, 8)
    assert out["states"].shape == (2, 3, 5, l, 8)
    assert out["alpha"].shape == (2, 3, 5, l)
    alpha = out["alpha"]
    real = torch.arange(5)[None, :] < lengths[:, None]  # (B, T)
    for a in (alpha[0], alpha[1], alpha.mean(0)):
        assert torch.all(a >= 0)
        assert torch.allclose(a.sum(-1)[real], torch.ones(int(real.sum())), atol=1e-6)
        assert torch.all(a[~real] == 0)  # padding: no attention at all
    # a news sentence gives no weight to ai-only cells
    news_only = [i for i, k in enumerate(out["cells"].tolist()) if k not in emitter.domain_cells["news"]]
    assert torch.all(alpha[:, 1, :, news_only] == 0)
    # single-domain batch: only that domain's cells are gathered
    out = emitter.encode(X[:1], lengths[:1], ["news"])
    assert out["cells"].tolist() == emitter.domain_cells["news"]
    scores, losses = emitter(X, lengths, domains)
    assert scores.shape == (3, 5, len(DOMAIN_TAGS["ai"])) and losses == {}


def test_one_cell_attention_is_one_and_merges_that_cell():
    emitter = make_emitter({"only": ["O"]}, target="only")
    random_init(emitter)
    X = torch.randn(2, 4, 12)
    out = emitter.encode(X, torch.tensor([4, 2]), ["only", "only"])
    assert torch.all(out["alpha"][:, 0] == 1.0) and torch.all(out["alpha"][:, 1, :2] == 1.0)
    # with alpha = 1, m = c_1: the C cell's memory follows the single ET cell's
    h_ref, _ = reference_direction(emitter, X[0], 0, "only")
    assert torch.allclose(out["h"][0, 0], h_ref, atol=1e-5)


def reference_direction(emitter, x, direction, domain, memories=None):
    """The spec's equations, one sentence, one direction, a Python loop over cells (the cells'
    memories c_k of each step appended to ``memories`` if given)."""
    enc = emitter.encoder
    d = enc.width
    cells = emitter.domain_cells[domain]
    s = emitter.set_keys.index(module_key(domain)) if emitter.attention_sharing != "shared" else 0
    q_is_p = bool(emitter._q_is_p()[s])
    P, Q, v = enc.att_p[s, direction], enc.att_q[s, direction], enc.att_v[s, direction]
    if q_is_p:
        Q = P
    h = torch.zeros(d)
    c = torch.zeros(d)
    hs, alphas = [], []
    for x_t in x:
        cs = []
        for k in cells:
            g = x_t @ enc.et_in_w[direction, :, k] + enc.et_in_b[direction, k] + h @ enc.et_rec_w[direction, :, k]
            i = torch.sigmoid(g[:d])
            cs.append(i * torch.tanh(g[d:]) + (1 - i) * c)
        g = x_t @ enc.c_in_w[direction] + enc.c_in_b[direction] + h @ enc.c_rec_w[direction]
        ci, co, cbar = torch.sigmoid(g[:d]), torch.sigmoid(g[d : 2 * d]), torch.tanh(g[2 * d :])
        scores = torch.stack([v @ torch.tanh(P @ cbar + Q @ ck) for ck in cs])
        alpha = torch.softmax(scores, 0)
        m = sum(a * ck for a, ck in zip(alpha, cs))
        c = ci * m + (1 - ci) * c
        h = co * torch.tanh(c)
        hs.append(h)
        alphas.append(alpha)
        if memories is not None:
            memories.append(torch.stack(cs))
    return torch.stack(hs), torch.stack(alphas)


THREE_DOMAINS = dict(DOMAIN_TAGS, science=bio_tags(["protein", "person", "enzyme"]))


@pytest.mark.parametrize(
    "sharing,domain_tags,domains",
    [
        ("per_domain_code", DOMAIN_TAGS, ["news", "ai"]),  # two sets: one stacked GEMM
        ("shared", DOMAIN_TAGS, ["news", "ai"]),
        # three sets: each sentence's own set, per-sentence products
        ("per_domain_code", THREE_DOMAINS, ["news", "ai", "science", "ai"]),
    ],
)
def test_vectorised_encoder_equals_reference_equations_both_directions(sharing, domain_tags, domains):
    emitter = make_emitter(domain_tags=domain_tags, attention_sharing=sharing)
    random_init(emitter)
    emitter.eval()
    X = torch.randn(len(domains), 5, 12)
    lengths = torch.tensor([5, 3, 4, 1][: len(domains)])
    out = emitter.encode(X, lengths, domains)
    for b, dom in enumerate(domains):
        n = int(lengths[b])
        x = X[b, :n]
        cols = [out["cells"].tolist().index(k) for k in emitter.domain_cells[dom]]
        h_f, a_f = reference_direction(emitter, x, 0, dom)
        # backward module on x == its step function over reversed x, reversed back
        h_b, a_b = reference_direction(emitter, x.flip(0), 1, dom)
        h_b, a_b = h_b.flip(0), a_b.flip(0)
        assert torch.allclose(out["h"][0, b, :n], h_f, atol=1e-5)
        assert torch.allclose(out["h"][1, b, :n], h_b, atol=1e-5)
        assert torch.allclose(out["alpha"][0, b, :n][:, cols], a_f, atol=1e-5)
        assert torch.allclose(out["alpha"][1, b, :n][:, cols], a_b, atol=1e-5)


@pytest.mark.parametrize(
    "sharing,domain_tags,domains",
    [
        ("per_domain_code", DOMAIN_TAGS, ["news", "ai", "ai"]),
        ("shared", DOMAIN_TAGS, ["ai", "news", "news"]),
        ("per_domain_code", THREE_DOMAINS, ["science", "ai", "news"]),
    ],
)
def test_training_losses_and_gradients_equal_the_reference_equations(sharing, domain_tags, domains):
    # The vectorised emitter (each domain's sentences on their own cells, memories packed)
    # against the spec's equations sentence by sentence: NER scores, entity-type and attention
    # losses, and the gradient of every parameter.
    emitter = make_emitter(domain_tags=domain_tags, attention_sharing=sharing)
    random_init(emitter)
    X = torch.randn(len(domains), 5, 12)
    lengths = torch.tensor([5, 3, 4])
    gold = torch.full((3, 5), -1)
    rng = numpy.random.RandomState(0)
    for b, dom in enumerate(domains):
        gold[b, : lengths[b]] = torch.from_numpy(rng.randint(0, len(domain_tags[dom]), int(lengths[b])))
    scores, losses = emitter(X, lengths, domains, gold=gold)
    scores = scores * (torch.arange(5)[None, :] < lengths[:, None])[:, :, None]  # real tokens
    fast = scores.sum() + losses["mc_ent"] + losses["mc_att"]
    fast_grads = torch.autograd.grad(fast, list(emitter.parameters()), allow_unused=True)
    ref_scores, ent, att = [], 0.0, 0.0
    for b, dom in enumerate(domains):
        n = int(lengths[b])
        x = X[b, :n]
        mem_f, mem_b = [], []
        h_f, a_f = reference_direction(emitter, x, 0, dom, mem_f)
        h_b, a_b = reference_direction(emitter, x.flip(0), 1, dom, mem_b)
        h_b, a_b, mem_b = h_b.flip(0), a_b.flip(0), mem_b[::-1]
        hidden = torch.cat([h_f, h_b], -1)[None]  # (1, n, 2d)
        ref_scores.append(emitter.heads(hidden, [dom])[0].sum())
        cells = emitter.domain_cells[dom]
        types = [cells.index(emitter.domain_tag_types[dom][int(g)]) for g in gold[b, :n]]
        for t in range(n):
            C = torch.cat([mem_f[t], mem_b[t]], -1)  # (l, 2d)
            logits = (C * emitter.aux_w[cells]).sum(-1) + emitter.aux_b[cells]  # w_k^T C_k + b_k
            ent = ent - torch.log_softmax(logits, 0)[types[t]] / len(domains)
            att = att - torch.log_softmax((a_f[t] + a_b[t]) / 2, 0)[types[t]] / len(domains)
    reference = sum(ref_scores) + ent + att
    for got, expected in ((losses["mc_ent"], ent), (losses["mc_att"], att), (scores.sum(), sum(ref_scores))):
        assert math.isclose(float(got.detach()), float(expected.detach()), rel_tol=1e-5, abs_tol=1e-5)
    ref_grads = torch.autograd.grad(reference, list(emitter.parameters()), allow_unused=True)
    for (name, _), got, expected in zip(emitter.named_parameters(), fast_grads, ref_grads):
        got = torch.zeros(()) if got is None else got
        expected = torch.zeros(()) if expected is None else expected
        assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4), name


def test_fused_recurrence_backward_passes_gradcheck():
    # the hand-written backward through time of the packed recurrence, in double precision,
    # against finite differences: shrinking steps, two cells, every output used
    from spacy_crossner.models.pytorch_multi_cell import _Recurrence

    torch.manual_seed(0)
    d, a, l, steps = 3, 4, 2, [3, 2, 2, 1]
    G = 2 * d * l + 3 * d
    inputs = (
        torch.randn(2, sum(steps), G, dtype=torch.float64, requires_grad=True),
        torch.randn(2, d, G, dtype=torch.float64, requires_grad=True),
        torch.randn(2, d, a, dtype=torch.float64, requires_grad=True),
        torch.randn(2, d, a, dtype=torch.float64, requires_grad=True),
        torch.randn(2, a, dtype=torch.float64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(lambda *x: _Recurrence.apply(*x, steps, l), inputs)
    # outputs left out of the loss (no gradient) are fine
    h, _, _, _ = _Recurrence.apply(*inputs, steps, l)
    h.sum().backward()
    assert all(x.grad is not None for x in inputs)


def test_padding_invariance():
    emitter = make_emitter()
    random_init(emitter)
    emitter.eval()
    x = torch.randn(1, 3, 12)
    alone_scores, _ = emitter(x, torch.tensor([3]), ["ai"])
    alone = emitter.encode(x, torch.tensor([3]), ["ai"])
    padded = torch.cat([torch.randn(1, 6, 12), torch.cat([x, torch.randn(1, 3, 12) * 100], 1)])
    batch_scores, _ = emitter(padded, torch.tensor([6, 3]), ["ai", "ai"])
    batch = emitter.encode(padded, torch.tensor([6, 3]), ["ai", "ai"])
    assert torch.allclose(batch["h"][:, 1, :3], alone["h"][:, 0], atol=1e-6)
    assert torch.allclose(batch["alpha"][:, 1, :3], alone["alpha"][:, 0], atol=1e-6)
    assert torch.allclose(batch_scores[1, :3], alone_scores[0], atol=1e-6)


def test_source_batch_gives_exactly_zero_gradient_to_target_only_parts():
    emitter = make_emitter()
    random_init(emitter)
    X = torch.randn(2, 4, 12)
    gold = torch.tensor([[1, 2, 0, 5], [0, 3, 4, -1]])  # news tags
    scores, losses = emitter(X, torch.tensor([4, 3]), ["news", "news"], gold=gold)
    assert set(losses) == {"mc_ent", "mc_att"}
    (scores.sum() + sum(losses.values())).backward()
    enc = emitter.encoder
    ai_only = [k for k in emitter.domain_cells["ai"] if k not in emitter.domain_cells["news"]]
    news_only = [k for k in emitter.domain_cells["news"] if k not in emitter.domain_cells["ai"]]
    assert ai_only and news_only
    for grad, axis in ((enc.et_in_w.grad, 2), (enc.et_rec_w.grad, 2), (enc.et_in_b.grad, 1)):
        assert torch.all(grad.index_select(axis, torch.tensor(ai_only)) == 0)
        assert torch.any(grad.index_select(axis, torch.tensor(news_only)) != 0)
    assert torch.all(emitter.aux_w.grad[ai_only] == 0) and torch.all(emitter.aux_b.grad[ai_only] == 0)
    assert torch.any(emitter.aux_w.grad[news_only] != 0)
    ai_set = emitter.set_keys.index("ai")
    news_set = emitter.set_keys.index("news")
    for p in (enc.att_p, enc.att_q, enc.att_v):
        assert torch.all(p.grad[ai_set] == 0)
    assert torch.any(enc.att_p.grad[news_set] != 0)
    # code mode: the source domain's Q is never used (P stands in for it)
    assert torch.all(enc.att_q.grad[news_set] == 0)
    ai_head = emitter.heads.heads["ai"]
    for p in ai_head.parameters():  # never in the graph: no gradient at all
        assert p.grad is None or torch.all(p.grad == 0)
    # shared C cell learns from every domain
    assert torch.any(enc.c_in_w.grad != 0)


def test_target_batch_gives_zero_gradient_to_source_only_cells_and_uses_target_q():
    emitter = make_emitter()
    random_init(emitter)
    gold = torch.tensor([[1, 3, 0, 7]])
    scores, losses = emitter(torch.randn(1, 4, 12), torch.tensor([4]), ["ai"], gold=gold)
    (scores.sum() + sum(losses.values())).backward()
    news_only = [k for k in emitter.domain_cells["news"] if k not in emitter.domain_cells["ai"]]
    assert torch.all(emitter.encoder.et_in_w.grad[:, :, news_only] == 0)
    ai_set = emitter.set_keys.index("ai")
    assert torch.any(emitter.encoder.att_q.grad[ai_set] != 0)
    for p in emitter.heads.heads["news"].parameters():
        assert p.grad is None or torch.all(p.grad == 0)


def test_aux_labels_from_tags_pads_and_dictionary_misses_give_no_loss():
    emitter = make_emitter()
    random_init(emitter)
    X = torch.randn(2, 3, 12)
    lengths = torch.tensor([3, 2])
    # news tags: O, B-location, I-location, B-organisation, I-organisation, B-person, I-person
    gold = torch.tensor([[5, 6, 0], [-1, -1, -1]])  # second sentence: raw text
    dict_types = torch.tensor([[-1, -1, -1], [3, -1, -1]])  # raw token 0 -> person (id 3)
    raw = (gold < 0).all(1)
    # targets: positions among the domain's cells
    target = emitter._domain_targets("news", gold, raw, dict_types)
    pos = {k: i for i, k in enumerate(emitter.domain_cells["news"])}
    person, o = pos[emitter.types.index("person")], pos[0]
    assert target.tolist() == [[person, person, o], [person, -1, -1]]
    # a dictionary type the doc's domain does not own is ignored
    ai_type = emitter.types.index("product")
    target = emitter._domain_targets("news", gold, raw, torch.tensor([[-1] * 3, [ai_type, -1, -1]]))
    assert target[1].tolist() == [-1, -1, -1]
    # pads / misses contribute nothing: changing their positions' inputs only through the
    # recurrence, not the loss terms: a sentence with no labels at all gives zero aux loss
    _, losses = emitter(X, lengths, ["news", "news"], gold=torch.full((2, 3), -1))
    assert losses == {}


def test_code_init_gives_uniform_attention_before_training():
    emitter = make_emitter()
    out = emitter.encode(torch.randn(2, 6, 12), torch.tensor([6, 4]), ["ai", "news"])
    mask = out["mask"]
    for b, n in enumerate([6, 4]):
        a = out["alpha"][:, b, :n, mask[b]]
        assert torch.allclose(a, torch.full_like(a, 1.0 / int(mask[b].sum())), atol=1e-6)


def _paper_count(L, A, D=150, d=100, domain_tag_counts=()):
    encoder = 2 * (L * (2 * d * (D + d) + 2 * d) + 3 * d * (D + d) + 3 * d + A * (4 * d * d + 2 * d)) + L * (2 * d + 1)
    heads = sum((K + 2) * (2 * d + 1) + (K + 2) ** 2 for K in domain_tag_counts)
    return encoder, encoder + heads + 4550  # 4,550 = the char CNN (30*50*3 + 50)


@pytest.mark.parametrize("target_types,expected", [
    (["PER", "LOC", "ORG"], 826_847),  # CoNLL -> Broad Twitter
    (["PER", "LOC", "ORG", "MISC"], 827_795),  # CoNLL -> Twitter (OTHER mapped to MISC)
])
def test_parameter_count_formula_at_paper_sizes(target_types, expected):
    domain_tags = {"conll": bio_tags(["PER", "LOC", "ORG", "MISC"]), "tgt": bio_tags(target_types)}
    emitter = make_emitter(domain_tags, n_in=150, width=100, target="tgt")
    L = len(emitter.types)
    assert L == 5
    # BIOES tag counts of the paper: pad + O + 4 per type
    bioes = [2 + 4 * len(set(tag_type(t) for t in tags) - {"O"}) for tags in domain_tags.values()]
    encoder, total = _paper_count(L, A=2, domain_tag_counts=bioes)
    assert emitter.encoder_parameter_count() == encoder
    assert total == expected
    shared = make_emitter(domain_tags, n_in=150, width=100, target="tgt", attention_sharing="shared")
    assert shared.encoder_parameter_count() == _paper_count(L, A=1)[0]


# -- CRF ---------------------------------------------------------------------------------------


def test_crf_log_partition_and_viterbi_equal_brute_force(mc_trained):
    crf = get_crf(mc_trained.get_pipe("crossner").model, "news")
    tags = bio_tags(["location", "organisation", "person"])[:5]  # tiny: 5 of its tags
    rng = numpy.random.RandomState(0)
    n = 3
    crf.apply_constraints()
    trans = crf.transitions.detach().numpy()[:5, :5]
    start = crf.start_transitions.detach().numpy()[:5]
    end = crf.end_transitions.detach().numpy()[:5]
    emissions = rng.randn(n, 5).astype("float32")
    scores = {}
    for seq in itertools.product(range(5), repeat=n):
        s = start[seq[0]] + end[seq[-1]] + sum(emissions[t, k] for t, k in enumerate(seq))
        scores[seq] = s + sum(trans[a, b] for a, b in zip(seq, seq[1:]))
    log_z = numpy.logaddexp.reduce(numpy.array(list(scores.values()), dtype="float64"))
    small = type(crf)(tags)
    with torch.no_grad():
        small.transitions.copy_(torch.from_numpy(trans))
        small.start_transitions.copy_(torch.from_numpy(start))
        small.end_transitions.copy_(torch.from_numpy(end))
    em = torch.from_numpy(emissions)[None]
    mask = torch.ones(1, n, dtype=torch.bool)
    assert math.isclose(float(small.log_partition(em, mask).detach()), log_z, rel_tol=1e-5, abs_tol=1e-4)
    best = max(scores, key=scores.get)
    ok_start, ok_trans, ok_end = (small.allowed_start.numpy(), small.allowed_transitions.numpy(), small.allowed_end.numpy())
    assert tuple(viterbi_decode(emissions, trans, start, end, ok_start, ok_trans, ok_end)) == best
    for seq in [best, (0, 0, 0), (1, 2, 0)]:
        nll = -small(em, torch.tensor([seq]), mask=mask)
        assert float(nll.detach()) >= 0


# -- SDA through the component -----------------------------------------------------------------


@pytest.fixture(scope="module")
def mc_trained():
    fix_random_seed(0)
    nlp = blank_with({"model": SMALL_MC, "target_domain": "ai"})
    examples = make_examples(nlp, NEWS + AI)
    losses = train(nlp, examples, n_iter=40)
    assert {"crossner", "crossner_mc_ent", "crossner_mc_att"} <= set(losses)
    return nlp


def test_sda_overfits_two_domains(mc_trained):
    assert predicted_ents(mc_trained, NEWS + AI) == gold_ents(NEWS + AI)
    assert mc_trained.evaluate(make_examples(mc_trained, NEWS + AI))["ents_f"] == 1.0
    # target docs are decoded with the target's labels only
    pipe = mc_trained.get_pipe("crossner")
    words = "John Smith lives in London .".split()
    doc = Doc(mc_trained.vocab, words=words)
    set_domain(doc, "ai")
    assert {e.label_ for e in mc_trained(doc).ents} <= set(pipe.label_data["ai"])


def test_sda_paper_switches_and_domain_weights_train():
    fix_random_seed(0)
    model = dict(SMALL_MC, attention_sharing="shared", att_loss_on="scores_paper", domain_weights={"ai": 2.0})
    nlp = blank_with({"model": model, "target_domain": "ai"})
    examples = make_examples(nlp, NEWS + AI)
    first = train(nlp, examples, n_iter=1)
    last = train(nlp, examples, n_iter=30)
    assert last["crossner_mc_att"] < first["crossner_mc_att"]
    assert last["crossner"] < first["crossner"]
    assert get_emitter(nlp.get_pipe("crossner").model).set_keys == ["shared"]
    with pytest.raises(ValueError, match="attention_sharing must be one of"):
        blank_with({"model": dict(SMALL_MC, attention_sharing="both")})


# -- UDA: raw text + dictionary ----------------------------------------------------------------

RAW_AI = [
    "Curtis studied the Kiev data with FIFA support .",
    "Samira moved to Jamestown for a German project .",
    "Mustafa and Kaylan trained networks in Bulawayo .",
    "A Russian team at Hanwha built the system .",
]


def raw_examples(nlp, lines, domain="ai"):
    out = []
    for line in lines:
        words = line.split()
        predicted = Doc(nlp.vocab, words=words)
        set_domain(predicted, domain)
        out.append(Example(predicted, Doc(nlp.vocab, words=words)))
    return out


def test_uda_trains_from_raw_text_and_dictionary_alone():
    assert DICT_DIR.is_dir(), f"missing test data: {DICT_DIR}"
    fix_random_seed(0)
    model = dict(
        SMALL_MC,
        ent_weight=0.1,
        att_weight=0.5,
        lm_weight=0.5,
        lm_samples=5,
        dictionary=str(DICT_DIR),
        dictionary_label_map={"organization": "organisation"},
    )
    nlp = blank_with({"model": model, "target_domain": "ai", "domain_aliases": {"ai": "news"}})
    labelled = make_examples(nlp, NEWS)
    raw = raw_examples(nlp, RAW_AI)
    nlp.initialize(lambda: labelled + raw)
    pipe = nlp.get_pipe("crossner")
    assert pipe.domains == ("news",)
    assert pipe.model.attrs["uses_raw_text"]
    vocab = pipe.cfg["build_config"]["lm_vocab"]
    assert vocab[0] == "<unk>" and "Kiev" in vocab and "Smith" in vocab
    optimizer = Adam(0.01)
    history = []
    for _ in range(25):
        losses = {}
        nlp.update(raw, sgd=optimizer, losses=losses)  # raw text only: no NER loss
        history.append(losses)
    assert history[0]["crossner"] == 0.0
    for key in ("crossner_lm", "crossner_mc_ent", "crossner_mc_att"):
        assert history[-1][key] < history[0][key], key
    # the LM vocabulary is saved with the pipeline and rebuilds the LM's table at load
    data = nlp.to_bytes()
    copy = blank_with({"model": model, "target_domain": "ai", "domain_aliases": {"ai": "news"}})
    copy.from_bytes(data)
    assert copy.get_pipe("crossner").cfg["build_config"]["lm_vocab"] == vocab
    assert predicted_ents(copy, [("ai", w.split(), []) for w in RAW_AI]) == predicted_ents(
        nlp, [("ai", w.split(), []) for w in RAW_AI]
    )
    # the full UDA step: labelled source + raw target in one batch
    losses = {}
    nlp.update(labelled + raw, sgd=optimizer, losses=losses)
    assert losses["crossner"] > 0 and losses["crossner_lm"] > 0


def test_dictionary_without_matching_labels_is_a_clear_error():
    model = dict(SMALL_MC, dictionary=str(DICT_DIR))  # no label map: 'organization' only
    nlp = blank_with({"model": model, "target_domain": "ai", "domain_aliases": {"ai": "news"}})
    labelled = make_examples(nlp, [("news", ["Acme", "Corp"], [(0, 2, "organisation")])])
    nlp.initialize(lambda: labelled)
    with pytest.raises(ValueError, match="dictionary_label_map"):
        nlp.update(raw_examples(nlp, RAW_AI[:1]))


def test_domain_schedule_batcher_alternates_or_sums_domains():
    from spacy.util import registry

    nlp = spacy.blank("en")
    examples = make_examples(nlp, NEWS + AI + NEWS) + raw_examples(nlp, RAW_AI[:2])
    alternate = list(registry.batchers.get("spacy_crossner.domain_schedule.v1")(schedule="alternate", size=2)(examples))
    kinds = [{(eg.predicted._.domain, eg.reference.has_annotation("ENT_IOB")) for eg in b} for b in alternate]
    assert all(len(k) == 1 for k in kinds)  # single-domain batches
    assert [next(iter(k))[0] for k in kinds[:3]] == ["news", "ai", "ai"]  # news, ai, raw ai, ...
    assert sum(len(b) for b in alternate) == len(examples)
    summed = list(registry.batchers.get("spacy_crossner.domain_schedule.v1")(schedule="sum", size=2)(examples))
    assert len(summed[0]) == 6 and sum(len(b) for b in summed) == len(examples)
    with pytest.raises(ValueError, match="schedule must be one of"):
        registry.batchers.get("spacy_crossner.domain_schedule.v1")(schedule="mixed")


def test_new_domain_and_labels_grow_cells_keeping_old_ones(mc_trained):
    """Sourcing a trained pipe and adding a domain with a new label: new cells and attention
    set are appended, the existing cells keep their places and weights."""
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", source=mc_trained)
    pipe = nlp.get_pipe("crossner")
    emitter = get_emitter(pipe.model)
    types = list(emitter.types)
    before = emitter.encoder.et_in_w.detach().clone()
    pipe.add_label("gene", domain="bio")
    assert emitter.types == types + ["gene"]
    assert emitter.set_keys[-1] == "bio" and emitter.encoder.n_sets == len(emitter.set_keys)
    assert torch.equal(emitter.encoder.et_in_w[:, :, : len(types)], before)
    assert emitter.domain_cells["bio"] == [0, len(types)]
    words = "BRCA1 is a gene .".split()
    doc = Doc(nlp.vocab, words=words)
    set_domain(doc, "bio")
    assert all(e.label_ == "gene" for e in nlp(doc).ents)
    copy = spacy.blank("en")
    copy.add_pipe("crossner", config={"model": SMALL_MC, "target_domain": "ai"})
    copy.from_bytes(nlp.to_bytes())
    assert get_emitter(copy.get_pipe("crossner").model).types == types + ["gene"]


def test_labels_added_to_two_domains_keep_every_cell_in_place(tmp_path):
    """A target type, then a source type, added to a trained model: each trained cell keeps its
    type and weights, the new types are appended, and saving and loading keeps the mapping."""
    fix_random_seed(0)
    nlp = blank_with({"model": SMALL_MC, "target_domain": "ai"})
    train(nlp, make_examples(nlp, NEWS + AI), n_iter=3)
    pipe = nlp.get_pipe("crossner")
    emitter = get_emitter(pipe.model)
    before = list(emitter.types)
    cells = {t: emitter.encoder.et_in_w[:, :, i].detach().clone() for i, t in enumerate(before)}
    pipe.add_label("gene", domain="ai")
    pipe.add_label("chem", domain="news")
    assert emitter.types == before + ["gene", "chem"]
    assert pipe.cfg["build_config"][TYPES_KEY] == emitter.types
    # each growth rebuilt the cells and type heads under new names: new parameters to the
    # optimizer; the attention sets (same domains) keep theirs
    grown = {"et_in_w": 2, "et_rec_w": 2, "et_in_b": 2, "aux_w": 2, "aux_b": 2}
    assert pipe.cfg["build_config"]["multi_cell_generations"] == grown
    names = {n for n, _ in emitter.named_parameters()}
    assert {"encoder.et_in_w-g2", "aux_w-g2", "aux_b-g2", "encoder.att_p"} <= names
    assert not names & {"encoder.et_in_w", "aux_w", "encoder.et_in_w-g1"}
    for i, t in enumerate(before):
        assert torch.equal(emitter.encoder.et_in_w[:, :, i], cells[t]), t
    nlp.to_disk(tmp_path / "model")
    loaded = get_emitter(spacy.load(tmp_path / "model").get_pipe("crossner").model)
    assert loaded.types == emitter.types
    assert torch.equal(loaded.encoder.et_in_w, emitter.encoder.et_in_w)
