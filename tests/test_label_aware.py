"""spacy_crossner.LabelAwareTagger.v1: the spec's acceptance checks on the torch module, the
autoregressive decoders, and the architecture behind the crossner component (overfitting,
round trips, two-stage label transfer, the bundled MiniLM)."""
import itertools

import numpy
import pytest
import spacy
import torch
from thinc.api import Adam, fix_random_seed

from reference_decoders import autoregressive_greedy
from spacy_crossner.decoding import allowed_moves, autoregressive_beam_search, bio_tags
from spacy_crossner.models.base import get_emitter
from spacy_crossner.models.pytorch_label_aware import INVENTORY_KEY, LabelAwareEmitter
from util import (AI, NEWS, blank_with, gold_ents, make_examples, minilm_pipeline, predicted_ents, train,
                  train_more)

NEWS_TAGS = bio_tags(["location", "organisation", "person"])
AI_TAGS = bio_tags(["algorithm", "organisation", "person", "product"])
DOMAIN_TAGS = {"news": NEWS_TAGS, "ai": AI_TAGS}
N_IN = 12


def make_emitter(seed=0, **kwargs):
    torch.manual_seed(seed)
    options = dict(label_width=6, hidden_width=5)
    options.update(kwargs)
    emitter = LabelAwareEmitter(**options)
    emitter.setup(N_IN, DOMAIN_TAGS, {})
    return emitter


def batch(lengths=(5, 1, 7, 3), domains=("news", "ai", "ai", "news"), seed=1):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    X = torch.randn((len(lengths), n, N_IN), generator=gen)
    gold = torch.full((len(lengths), n), -1, dtype=torch.long)
    for b, (L, d) in enumerate(zip(lengths, domains)):
        gold[b, :L] = torch.randint(0, len(DOMAIN_TAGS[d]), (L,), generator=gen)
    return X, torch.tensor(lengths, dtype=torch.long), list(domains), gold


def valid_mask(lengths, n):
    return torch.arange(n)[None, :] < torch.as_tensor(lengths)[:, None]


FLAGS = [dict(use_lb=True, use_lc=True), dict(use_lb=False, use_lc=True),
         dict(use_lb=True, use_lc=False), dict(use_lb=False, use_lc=False)]


# -- spec §9, the model alone ---------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
def test_vectorised_equals_per_position_reference(flags):
    emitter = make_emitter(**flags)
    X, lengths, domains, gold = batch()
    idx, _ = emitter.domain_index(domains, X.device)
    inputs = emitter.shifted_inputs(gold, idx)
    mask = valid_mask(lengths, X.shape[1])
    results = []
    for fn in (emitter.chain_logits, emitter.reference_logits):
        emitter.zero_grad()
        H = X.clone().requires_grad_(True)
        logits = fn(H, lengths, inputs)
        weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
        (logits * weights)[mask].sum().backward()
        grads = {n: p.grad.clone() for n, p in emitter.named_parameters() if p.grad is not None}
        results.append((logits[mask].detach(), H.grad.clone(), grads))
    (fast, dh_fast, g_fast), (ref, dh_ref, g_ref) = results
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dh_fast, dh_ref, atol=1e-5, rtol=1e-5)
    assert g_fast.keys() == g_ref.keys() and len(g_fast) > 5
    for name in g_fast:
        torch.testing.assert_close(g_fast[name], g_ref[name], atol=1e-5, rtol=1e-5, msg=name)


def test_reference_bilstm_is_one_bidirectional_lstm():
    emitter = make_emitter()
    bi = torch.nn.LSTM(6, 5, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(bi, name).copy_(getattr(emitter.lstm_fwd, name))
            getattr(bi, name + "_reverse").copy_(getattr(emitter.lstm_bwd, name))
    S = torch.randn(1, 4, 6)
    fwd, _ = emitter.lstm_fwd(S)
    bwd, _ = emitter.lstm_bwd(S.flip(1))
    torch.testing.assert_close(torch.cat([fwd, bwd.flip(1)], -1), bi(S)[0])


def test_causality():
    emitter = make_emitter()
    X, lengths, domains, gold = batch(lengths=(7,), domains=("ai",))
    before, _ = emitter(X, lengths, domains, gold)
    for j in range(6):
        changed = gold.clone()
        changed[0, j] = (gold[0, j] + 1) % len(AI_TAGS)
        after, _ = emitter(X, lengths, domains, changed)
        torch.testing.assert_close(after[0, : j + 1], before[0, : j + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(after[0, j + 1 :], before[0, j + 1 :], atol=1e-6)


def test_greedy_reproduces_teacher_forcing():
    emitter = make_emitter()
    X, lengths, domains, _ = batch()
    tags, step_logits = emitter.decode(X, lengths, domains, beam_width=1)
    fed = torch.full(X.shape[:2], -1, dtype=torch.long)
    for b, ids in enumerate(tags):
        assert len(ids) == int(lengths[b])
        fed[b, : len(ids)] = torch.tensor(ids)
    forced, _ = emitter(X, lengths, domains, fed)
    for b, (ids, d) in enumerate(zip(tags, domains)):
        k = len(DOMAIN_TAGS[d])
        torch.testing.assert_close(step_logits[b], forced[b, : len(ids), :k], atol=1e-5, rtol=1e-5)
        # The decoder's choice is the best tag the BIO constraints allow after the previous one.
        start, trans, _ = allowed_moves(DOMAIN_TAGS[d])
        for i, tag in enumerate(ids):
            allowed = start if i == 0 else trans[ids[i - 1]]
            masked = numpy.where(allowed, forced[b, i, :k].detach().numpy(), -numpy.inf)
            assert tag == int(masked.argmax())


def test_batch_invariance():
    emitter = make_emitter()
    X, lengths, domains, gold = batch(lengths=(3, 9, 6), domains=("news", "ai", "news"))
    together, _ = emitter(X, lengths, domains, gold)
    tags, logits = emitter.decode(X, lengths, domains, beam_width=3)
    for b in range(3):
        n = int(lengths[b])
        alone, _ = emitter(X[b : b + 1, :n], lengths[b : b + 1], domains[b : b + 1], gold[b : b + 1, :n])
        torch.testing.assert_close(alone[0], together[b, :n, : alone.shape[2]], atol=1e-5, rtol=1e-5)
        tags_alone, logits_alone = emitter.decode(X[b : b + 1, :n], lengths[b : b + 1], domains[b : b + 1], beam_width=3)
        assert tags_alone[0] == tags[b]
        torch.testing.assert_close(logits_alone[0], logits[b], atol=1e-5, rtol=1e-5)


def naive_greedy(emitter, X, lengths, domains):
    """Greedy decoding by re-running teacher forcing on each prefix (no carried state)."""
    out = []
    for b, d in enumerate(domains):
        n = int(lengths[b])
        start, trans, _ = allowed_moves(DOMAIN_TAGS[d])
        ids = []
        for i in range(n):
            gold = torch.tensor([ids + [0] * (n - i)])
            logits, _ = emitter(X[b : b + 1, :n], lengths[b : b + 1], [d], gold)
            allowed = start if i == 0 else trans[ids[-1]]
            ids.append(int(numpy.where(allowed, logits[0, i].detach().numpy(), -numpy.inf).argmax()))
        out.append(ids)
    return out


@pytest.mark.parametrize("flags", FLAGS)
def test_beam_one_is_greedy(flags):
    emitter = make_emitter(**flags)
    X, lengths, domains, _ = batch()
    greedy, _ = emitter.decode(X, lengths, domains, beam_width=1)
    assert greedy == naive_greedy(emitter, X, lengths, domains)
    emitter.beam_width = 1
    assert emitter.decode(X, lengths, domains)[0] == greedy


def sequence_logprob(emitter, X, n, domain, ids):
    logits, _ = emitter(X[:, :n], torch.tensor([n]), [domain], torch.tensor([ids]))
    logp = torch.log_softmax(logits[0], dim=-1)
    return float(sum(logp[i, t] for i, t in enumerate(ids)).detach())


def test_wide_beam_finds_the_best_valid_sequence():
    emitter = make_emitter(seed=4)
    X, lengths, domains, _ = batch(lengths=(4,), domains=("news",), seed=5)
    tags = NEWS_TAGS
    start, trans, _ = allowed_moves(tags)
    valid = [
        list(seq)
        for seq in itertools.product(range(len(tags)), repeat=4)
        if start[seq[0]] and all(trans[a, b] for a, b in zip(seq, seq[1:]))
    ]
    best = max(valid, key=lambda s: sequence_logprob(emitter, X, 4, "news", s))
    wide, _ = emitter.decode(X, lengths, domains, beam_width=len(tags) ** 3)
    assert wide[0] == best
    greedy, _ = emitter.decode(X, lengths, domains, beam_width=1)
    beam, _ = emitter.decode(X, lengths, domains, beam_width=3)
    lp = [sequence_logprob(emitter, X, 4, "news", s[0]) for s in (greedy, beam, wide)]
    assert lp[0] <= lp[1] + 1e-6 and lp[1] <= lp[2] + 1e-6


def test_shapes_and_parameter_count_of_the_paper_head():
    # spec §8.9: K = 29 (AI), d1 = 768, d2 = 100 -> 676,841 in the code, which also counts the
    # frozen O row and the unused row K of its embedding table (2 x 100) that we do not store.
    tags = bio_tags([f"l{i}" for i in range(14)])
    emitter = LabelAwareEmitter(label_width=100, hidden_width=100)
    emitter.setup(768, {"ai": tags}, {})
    assert len(tags) == 29
    assert sum(p.numel() for p in emitter.parameters()) == 676_841 - 200
    assert emitter.embedding_table().shape == (30, 100)
    Wo, bo = emitter.output_layer()
    assert Wo.shape == (29, 768 + 768 + 200) and bo.shape == (29,)
    assert emitter.w2.weight.shape == (768, 200) and emitter.w3.weight.shape == (200, 1536)
    no_lb = LabelAwareEmitter(label_width=100, hidden_width=100, use_lb=False)
    no_lb.setup(768, {"ai": tags}, {})
    assert no_lb.w3.weight.shape == (200, 768) and no_lb.output_layer()[0].shape == (29, 968)
    X, lengths, domains, gold = batch(lengths=(3, 2), domains=("ai", "ai"))
    probs = torch.softmax(make_emitter()(X, lengths, domains, gold)[0], dim=-1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:2]))


def test_o_embedding_stays_zero_after_an_update():
    emitter = make_emitter()
    X, lengths, domains, gold = batch()
    gold[gold < 0] = 0
    optimizer = torch.optim.Adam(emitter.parameters(), lr=0.1)
    logits, _ = emitter(X, lengths, domains, gold)
    logits.sum().backward()
    optimizer.step()
    assert torch.equal(emitter.embedding_table()[0], torch.zeros(6))
    assert "t0" not in emitter.tag_embed
    thawed = make_emitter(freeze_o_zero=False)
    assert "t0" in thawed.tag_embed and thawed.embedding_table()[0].abs().sum() > 0


def test_missing_gold_is_fed_as_x():
    emitter = make_emitter()
    X, lengths, domains, gold = batch(lengths=(4,), domains=("ai",))
    gold[0, 1] = -1
    idx, _ = emitter.domain_index(domains, X.device)
    inputs = emitter.shifted_inputs(gold, idx)
    assert inputs[0, 0] == emitter.x_id and inputs[0, 2] == emitter.x_id
    assert inputs[0, 3] == emitter.domain_globals["ai"][int(gold[0, 2])]


def test_remap_keeps_shared_tags_and_adds_fresh_ones():
    torch.manual_seed(0)
    emitter = LabelAwareEmitter(label_width=6, hidden_width=5)
    config = {}
    emitter.setup(N_IN, {"news": NEWS_TAGS}, config)
    assert config[INVENTORY_KEY] == NEWS_TAGS
    table, (Wo, bo) = emitter.embedding_table().detach().clone(), [t.detach().clone() for t in emitter.output_layer()]
    emitter.setup(N_IN, {"news": NEWS_TAGS, "ai": AI_TAGS}, config)
    names = config[INVENTORY_KEY]
    assert names[: len(NEWS_TAGS)] == NEWS_TAGS
    assert set(names) == set(NEWS_TAGS) | set(AI_TAGS) and len(names) == len(set(names))
    new_table = emitter.embedding_table().detach()
    new_Wo, new_bo = emitter.output_layer()
    k = len(NEWS_TAGS)
    assert torch.equal(new_table[:k], table[:k]) and torch.equal(new_table[-1], table[-1])  # X kept
    assert torch.equal(new_Wo[:k], Wo) and torch.equal(new_bo[:k], bo)
    assert torch.equal(new_table[0], torch.zeros(6))
    assert new_table[k:-1].abs().sum() > 0 and new_Wo[k:].abs().max() <= 1 / emitter.n_u ** 0.5
    # Shared names share rows: ai's B-person is news's B-person.
    assert emitter.domain_globals["ai"][AI_TAGS.index("B-person")] == NEWS_TAGS.index("B-person")
    # A fresh module rebuilt from the saved inventory has the same layout (loading weights).
    fresh = LabelAwareEmitter(label_width=6, hidden_width=5)
    fresh.setup(N_IN, {"ai": AI_TAGS, "news": NEWS_TAGS}, dict(config))
    assert fresh.tag_names == names
    fresh.load_state_dict(emitter.state_dict())


def test_without_lb_and_lc_logits_do_not_depend_on_labels():
    emitter = make_emitter(use_lb=False, use_lc=False)
    X, lengths, domains, gold = batch()
    a, _ = emitter(X, lengths, domains, gold)
    b, _ = emitter(X, lengths, domains, torch.zeros_like(gold))
    torch.testing.assert_close(a, b)


def test_config_errors_name_the_setting():
    with pytest.raises(ValueError, match="label_width"):
        LabelAwareEmitter(label_width=0)
    emitter = make_emitter()
    with pytest.raises(ValueError, match="width 12"):
        emitter.setup(7, DOMAIN_TAGS, {})


# -- the decoders on their own ----------------------------------------------------------------


def markov_step(table, first):
    """A toy autoregressive model: log p(y_t | y_{t-1}) from a table, state = previous tag."""

    def step(t, parents, prev_tags):
        if t == 0:
            return numpy.broadcast_to(first, parents.shape + first.shape[-1:]).copy()
        return table[prev_tags]

    return step


def test_beam_search_is_exact_with_full_width_and_respects_bio():
    rng = numpy.random.default_rng(0)
    tags = bio_tags(["a", "b"])
    K = len(tags)
    start, trans, _ = allowed_moves(tags)
    table = numpy.log(rng.dirichlet(numpy.ones(K), size=K))
    first = numpy.log(rng.dirichlet(numpy.ones(K)))
    T = 5

    def logprob(seq):
        return first[seq[0]] + sum(table[a, b] for a, b in zip(seq, seq[1:]))

    valid = [s for s in itertools.product(range(K), repeat=T)
             if start[s[0]] and all(trans[a, b] for a, b in zip(s, s[1:]))]
    best = list(max(valid, key=logprob))
    args = ([T], start[None], trans[None])
    found, rows = autoregressive_beam_search(markov_step(table, first), *args, beam_width=K ** 2)
    assert found[0] == best and len(rows[0]) == T
    greedy, _ = autoregressive_greedy(markov_step(table, first), *args)
    assert greedy == autoregressive_beam_search(markov_step(table, first), *args, beam_width=1)[0]
    for seq in (greedy[0], found[0]):
        assert start[seq[0]] and all(trans[a, b] for a, b in zip(seq, seq[1:]))


def test_beam_search_handles_lengths_and_padding_columns():
    tags = bio_tags(["a"])
    start, trans, _ = allowed_moves(tags)
    K = 5  # two padding columns the decoder must never pick
    allowed_start = numpy.zeros((3, K), bool)
    allowed_trans = numpy.zeros((3, K, K), bool)
    allowed_start[:, :3] = start
    allowed_trans[:, :3, :3] = trans
    logp = numpy.log(numpy.full((K,), 1 / K))
    logp[1] = numpy.log(0.3)
    logp[2] = 0.0  # I-a would win everywhere if it were allowed
    logp[3:] = 1.0  # padding columns score best of all

    def step(t, parents, prev_tags):
        return numpy.broadcast_to(logp, parents.shape + (K,)).copy()

    for width in (1, 2, 7):
        found, _ = autoregressive_beam_search(step, [3, 1, 0], allowed_start, allowed_trans, width)
        assert found[0] == [1, 2, 2] and found[1] == [1] and found[2] == []


def test_beam_search_rejects_width_zero():
    with pytest.raises(ValueError, match="beam_width"):
        autoregressive_beam_search(lambda *a: None, [1], numpy.ones((1, 1), bool), numpy.ones((1, 1, 1), bool), 0)


# -- through the crossner component -------------------------------------------------------------

TINY_TOK2VEC = {
    "@architectures": "spacy_crossner.WordCharEmbed.v1",
    "word_width": 32,
    "word_rows": 1000,
    "char_width": 8,
    "char_filters": 16,
    "dropout": 0.0,
}


def tiny_nlp(**overrides):
    model = {
        "@architectures": "spacy_crossner.LabelAwareTagger.v1",
        "label_width": 16,
        "hidden_width": 16,
        "tok2vec": TINY_TOK2VEC,
    }
    model.update(overrides)
    return blank_with({"model": model, "target_domain": "ai"})


@pytest.fixture(scope="module")
def trained():
    fix_random_seed(0)
    nlp = tiny_nlp()
    examples = make_examples(nlp, NEWS + AI)
    train(nlp, examples, n_iter=40)
    return nlp


def test_overfits_two_domains(trained):
    assert predicted_ents(trained, NEWS + AI) == gold_ents(NEWS + AI)
    assert trained.evaluate(make_examples(trained, NEWS + AI))["ents_f"] == 1.0
    pipe = trained.get_pipe("crossner")
    names = pipe.cfg["build_config"][INVENTORY_KEY]
    assert set(names) == {t for tags in pipe.domain_tags().values() for t in tags}


def test_beam_width_from_config_and_valid_output(trained):
    nlp = tiny_nlp(beam_width=4)
    nlp.from_bytes(trained.to_bytes())
    assert get_emitter(nlp.get_pipe("crossner").model).beam_width == 4
    # The model overfits: the beam finds the same (gold) entities.
    assert predicted_ents(nlp, NEWS + AI) == gold_ents(NEWS + AI)
    pipe = nlp.get_pipe("crossner")
    docs = [nlp.make_doc("a b c d e f g h i j k l " * 5), nlp.make_doc("x")]
    for doc, decoded in zip(docs, pipe.predict(docs)):
        tags = pipe.domain_tags()[pipe.default_domain()]
        ids = [tags.index(t) for t in decoded.tags]
        assert len(ids) == len(doc)
        start, trans, _ = allowed_moves(tags)
        assert start[ids[0]] and all(trans[a, b] for a, b in zip(ids, ids[1:]))
    assert pipe.predict([]) == [] and [list(d.ents) for d in nlp.pipe(["", ""])] == [[], []]


def test_two_stages_carry_shared_label_embeddings():
    fix_random_seed(0)
    nlp = tiny_nlp()
    train(nlp, make_examples(nlp, NEWS), n_iter=20)
    pipe = nlp.get_pipe("crossner")
    emitter = get_emitter(pipe.model)
    before = {name: emitter.embedding_table()[i].detach().clone() for i, name in enumerate(emitter.tag_names)}
    out_before = {name: emitter.output_layer()[0][i].detach().clone() for i, name in enumerate(emitter.tag_names)}
    pipe.target_domain = "ai"
    pipe.add_label("product", domain="ai")  # growth before any target update
    pipe.add_label("person", domain="ai")
    table = emitter.embedding_table().detach()
    for name, row in before.items():
        assert torch.equal(table[emitter.tag_names.index(name)], row)
        assert torch.equal(emitter.output_layer()[0][emitter.tag_names.index(name)].detach(), out_before[name])
    assert "B-product" in emitter.tag_names and "B-product" not in before
    assert pipe.cfg["build_config"][INVENTORY_KEY] == emitter.tag_names
    # Fine-tune on the target: the remaining AI labels show up during update and grow the model.
    train_more(nlp, make_examples(nlp, AI), 30, Adam(0.01))
    assert predicted_ents(nlp, AI) == gold_ents(AI)
    assert set(pipe.domains) == {"news", "ai"}
    reloaded = tiny_nlp()
    reloaded.from_bytes(nlp.to_bytes())
    assert predicted_ents(reloaded, AI) == gold_ents(AI)


def test_domain_aliases_predict_with_the_aliased_domains_labels():
    fix_random_seed(0)
    model = {"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 16,
             "hidden_width": 16, "tok2vec": TINY_TOK2VEC}
    nlp = blank_with({"model": model, "target_domain": "ai", "domain_aliases": {"ai": "news"}})
    train(nlp, make_examples(nlp, NEWS), n_iter=40)
    assert nlp.get_pipe("crossner").domains == ("news",)
    as_ai = [("ai", words, ents) for _, words, ents in NEWS]
    assert predicted_ents(nlp, as_ai) == gold_ents(NEWS)


def make_minilm_nlp():
    return minilm_pipeline({"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 32,
                            "hidden_width": 32})


def test_bundled_minilm_learns_and_roundtrips(tmp_path):
    fix_random_seed(0)
    nlp = make_minilm_nlp()
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.0005)
    first = train_more(nlp, examples, 1, optimizer)["crossner"]
    last = train_more(nlp, examples, 17, optimizer)["crossner"]
    assert last < first / 5, (first, last)
    expected = predicted_ents(nlp, NEWS + AI)
    assert expected == gold_ents(NEWS + AI)
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert predicted_ents(loaded, NEWS + AI) == expected
    texts = ["Google released TensorFlow .", "", "LSTM"]
    assert [[(e.text, e.label_) for e in d.ents] for d in loaded.pipe(texts)] == [
        [(e.text, e.label_) for e in loaded(t).ents] for t in texts
    ]


@pytest.mark.parametrize("width", [1, 2, 4, 25])
def test_torch_beam_search_equals_numpy_reference(width):
    """The on-device search (tensors in and out) gives the reference's tags and slots, with
    lengths, padding columns, two tag sets and whitespace constraints."""
    from reference_decoders import whitespace_masks
    from spacy_crossner.models.pytorch_label_aware import beam_search

    rng = numpy.random.default_rng(width)
    tag_sets = [bio_tags(["a", "b"]), bio_tags(["a"])]
    K, T = len(tag_sets[0]), 6
    lengths = [6, 3, 1, 5]
    sets = [0, 1, 0, 1]
    allowed_start = numpy.zeros((4, K), bool)
    allowed_trans = numpy.zeros((4, K, K), bool)
    allowed_tags = numpy.zeros((4, T, K), bool)
    closed = numpy.zeros((4, T, K, K), bool)
    ws = rng.random((4, T)) < 0.3
    for b, (s, n) in enumerate(zip(sets, lengths)):
        tags = tag_sets[s]
        k = len(tags)
        start, trans, _ = allowed_moves(tags)
        allowed_start[b, :k], allowed_trans[b, :k, :k] = start, trans
        ok, shut = whitespace_masks(tags, ws[b, :n])
        allowed_tags[b, :n, :k], closed[b, :n, :k, :k] = ok, shut
    # log-probabilities from the previous tag and the step; ties on purpose (rounded values)
    table = numpy.round(numpy.log(rng.dirichlet(numpy.ones(K), size=(T, K + 1))), 1)

    def step_np(t, parents, prev_tags):
        return table[t][prev_tags]  # prev -1 reads row K

    def step_torch(t, parents, prev_tags):
        return torch.from_numpy(table[t])[prev_tags]

    expected_tags, expected_rows = autoregressive_beam_search(
        step_np, lengths, allowed_start, allowed_trans, width, allowed_tags, closed
    )
    got_tags, got_rows = beam_search(
        step_torch, torch.tensor(lengths), torch.from_numpy(allowed_start),
        torch.from_numpy(allowed_trans), width, torch.from_numpy(allowed_tags), torch.from_numpy(closed),
    )
    for b, n in enumerate(lengths):
        assert got_tags[b, :n].tolist() == expected_tags[b]
        assert got_rows[b, :n].tolist() == expected_rows[b]


def test_decode_flattens_the_lstm_weights_it_calls_directly(monkeypatch):
    """The beam decoder calls the LSTMs step by step: after thinc's optimizer has replaced the
    weights, cuDNN needs them flattened again first (the GPU check saw torch's "not part of
    single contiguous chunk of memory" warning at prediction time). On the CPU the call is a
    no-op, so the calls themselves are counted."""
    emitter = make_emitter()
    X, lengths, domains, _ = batch()
    flattened = []
    original = torch.nn.LSTM.flatten_parameters

    def counting(self):
        flattened.append(self)
        return original(self)

    monkeypatch.setattr(torch.nn.LSTM, "flatten_parameters", counting)
    with torch.no_grad():
        emitter.decode(X, lengths, domains, beam_width=3)
    assert any(m is emitter.lstm_fwd for m in flattened)
    assert any(m is emitter.lstm_bwd for m in flattened)
