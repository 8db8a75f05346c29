"""spacy_crossner.PGNBiLSTM.v1: the spec's acceptance checks (../shared/specs/pgn.md §8) on the
torch modules, and the component's overfitting, round-trip and unsupervised-adaptation tests."""
import pytest
import torch
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

from spacy_crossner import set_domain
from spacy_crossner.models.base import get_emitter
from spacy_crossner.models.pgn import get_generated_weights
from spacy_crossner.models.pytorch_pgn import (
    LM,
    NER,
    ParameterGenerator,
    PGNEmitter,
    lstm_param_size,
    fused_lstm_layout,
    place_lstm_params,
    run_bilstm,
    split_lstm_params,
)
from util import AI, NEWS, blank_with, gold_ents, make_examples, predicted_ents, train

TOK2VEC = {
    "@architectures": "spacy_crossner.WordCharEmbed.v1",
    "word_width": 32,
    "word_rows": 1000,
    "char_width": 8,
    "char_filters": 16,
    "dropout": 0.0,
}
SMALL_PGN = {
    "@architectures": "spacy_crossner.PGNBiLSTM.v1",
    "hidden_size": 16,
    "dropout": 0.0,
    "lm_samples": 5,
    "tok2vec": TOK2VEC,
}


def make_nlp(**overrides):
    config = {"model": dict(SMALL_PGN, **overrides.pop("model", {})), "target_domain": "ai"}
    config.update(overrides)
    return blank_with(config)


def make_emitter(n_in=6, hidden=5, domains=("src", "tgt"), vocab_size=30, **kwargs):
    settings = dict(
        hidden_size=hidden, domain_width=8, task_width=8, dropout=0.0, n_samples=5,
        logq_correction=True, lm_sampled=True, lm_on_labelled=True,
        ner_weights={"source": 1.0, "target": 1.0}, lm_weights={"source": 1.0, "target": 1.0},
    )
    settings.update(kwargs)
    emitter = PGNEmitter(**settings)
    vocab = ["<unk>"] + [f"w{i}" for i in range(vocab_size - 1)]
    emitter.setup(n_in, {d: ["O", "B-X", "I-X"] for d in domains}, {"lm_vocab": vocab})
    return emitter


def row(gen, domain):
    from spacy_crossner.models.pytorch_heads import module_key
    return gen.domain_embeddings[module_key(domain)]


# -- §8.1, 8.2, 8.11: generation -------------------------------------------------------------


def test_generation_is_bilinear_and_sized_as_the_spec():
    assert lstm_param_size(150, 100) == 201_600
    torch.manual_seed(0)
    gen = ParameterGenerator(7, 5)
    gen.add_domain("src")
    assert gen.W.numel() == 64 * lstm_param_size(7, 5)
    theta = gen([("src", NER)])[0]
    ref = torch.einsum("v,u,vup->p", gen.task_embeddings[NER], row(gen, "src"), gen.W)
    assert torch.allclose(theta, ref, atol=1e-6)
    with torch.no_grad():
        row(gen, "src").mul_(2.0)
    assert torch.allclose(gen([("src", NER)])[0], 2 * theta, atol=1e-5)


def test_changing_a_domain_row_changes_only_that_domains_weights():
    torch.manual_seed(0)
    gen = ParameterGenerator(7, 5)
    for d in ("src", "tgt"):
        gen.add_domain(d)
    pairs = [("src", NER), ("src", LM), ("tgt", NER), ("tgt", LM)]
    before = gen(pairs).detach()
    with torch.no_grad():
        row(gen, "src").add_(0.1)
    after = gen(pairs).detach()
    assert not torch.allclose(before[0], after[0]) and not torch.allclose(before[1], after[1])
    assert torch.equal(before[2], after[2]) and torch.equal(before[3], after[3])
    with torch.no_grad():
        gen.task_embeddings[LM].add_(0.1)
    again = gen(pairs).detach()
    assert torch.equal(after[0], again[0]) and torch.equal(after[2], again[2])
    assert not torch.allclose(after[1], again[1]) and not torch.allclose(after[3], again[3])
    with torch.no_grad():
        row(gen, "tgt").copy_(row(gen, "src"))
    same = gen(pairs).detach()
    assert torch.equal(same[0], same[2]) and torch.equal(same[1], same[3])


def test_init_scale_matches_the_spec():
    torch.manual_seed(0)
    gen = ParameterGenerator(10, 100)
    gen.add_domain("src")
    with torch.no_grad():
        theta = gen([("src", NER)])[0]
        expected = 0.1 / 3**0.5 * gen.task_embeddings[NER].norm() * row(gen, "src").norm()
    assert abs(float(theta.std()) / float(expected) - 1) < 0.1


def test_meta_scale_keeps_the_function_and_shortens_adams_step_on_the_generated_weights():
    thetas, moves = {}, {}
    for scale in (1.0, 0.125):
        torch.manual_seed(0)
        gen = ParameterGenerator(10, 20, meta_scale=scale)
        gen.add_domain("src")
        theta = gen([("src", NER)])[0]
        thetas[scale] = theta.detach()
        torch.manual_seed(1)
        grad = torch.randn_like(theta)
        # Adam on W alone: its first step moves every entry by lr in the sign of its gradient
        opt = torch.optim.Adam([gen.W], lr=1e-3)
        (theta * grad).sum().backward()
        opt.step()
        moves[scale] = float((gen([("src", NER)])[0].detach() - thetas[scale]).norm())
    assert torch.allclose(thetas[1.0], thetas[0.125], atol=1e-6)
    assert moves[0.125] / moves[1.0] == pytest.approx(0.125, rel=1e-3)
    with pytest.raises(ValueError, match="meta_scale"):
        ParameterGenerator(10, 20, meta_scale=0.0)


# -- §8.3, 8.7: the fused LSTM with generated weights -----------------------------------------


def test_generated_lstm_equals_nn_lstm_with_the_same_weights():
    torch.manual_seed(0)
    d, H = 6, 5
    gen = ParameterGenerator(d, H)
    gen.add_domain("src")
    weights = split_lstm_params(gen([("src", NER)])[0], d, H)
    lstm = torch.nn.LSTM(d, H, bidirectional=True, batch_first=True)
    with torch.no_grad():
        for param, w in zip(lstm._flat_weights, weights):
            param.copy_(w)
    X = torch.randn(3, 7, d)
    lengths = torch.tensor([7, 2, 5])
    ours = run_bilstm(X, lengths, weights, training=False)
    packed = torch.nn.utils.rnn.pack_padded_sequence(X, lengths, batch_first=True, enforce_sorted=False)
    ref, _ = torch.nn.utils.rnn.pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=7)
    assert torch.allclose(ours, ref, atol=1e-6)
    assert torch.all(ours[1, 2:] == 0)
    # gradients reach the meta tensor through the fused kernel
    ours.sum().backward()
    assert gen.W.grad is not None and gen.W.grad.abs().sum() > 0


def test_placed_weights_share_one_buffer_at_the_layouts_offsets_and_keep_the_lstms_function():
    # a layout with gaps and the directions swapped, as a fused kernel might want it
    torch.manual_seed(0)
    d, H = 4, 3
    gen = ParameterGenerator(d, H)
    gen.add_domain("src")
    theta = gen([("src", NER)])[0]
    sizes = [w.numel() for w in split_lstm_params(theta.detach(), d, H)]
    offsets, end = [0] * 8, 0
    for i in [4, 5, 6, 7, 0, 1, 2, 3]:
        offsets[i] = end + 4  # 4 elements of padding before each tensor
        end = offsets[i] + sizes[i]
    layout = (tuple(offsets), end + 8)
    placed = place_lstm_params(theta, d, H, layout=layout)
    plain = split_lstm_params(theta.detach(), d, H)
    storage = placed[0].untyped_storage()
    assert storage.nbytes() == (end + 8) * placed[0].element_size()
    for w, ref, offset in zip(placed, plain, offsets):
        assert w.untyped_storage().data_ptr() == storage.data_ptr()
        assert w.storage_offset() == offset and w.shape == ref.shape and w.is_contiguous()
        assert torch.equal(w.detach(), ref)
    X = torch.randn(2, 5, d)
    lengths = torch.tensor([5, 3])
    ours = run_bilstm(X, lengths, placed, training=False)
    assert torch.allclose(ours, run_bilstm(X, lengths, plain, training=False), atol=1e-6)
    ours.sum().backward()  # gradients reach the meta tensor through the buffer
    assert gen.W.grad is not None and gen.W.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="overlaps"):
        place_lstm_params(theta, d, H, layout=((0,) * 8, end))
    with pytest.raises(ValueError, match="needs"):
        place_lstm_params(theta, d, H, layout=(tuple(offsets), end - 1))


def test_on_the_cpu_each_pair_gets_its_own_storage_in_torchs_order():
    assert fused_lstm_layout(4, 3, "cpu", torch.float32) is None
    torch.manual_seed(0)
    gen = ParameterGenerator(4, 3)
    gen.add_domain("src")
    theta = gen([("src", NER)])[0]
    placed = place_lstm_params(theta, 4, 3)
    assert placed[0].untyped_storage().data_ptr() != theta.untyped_storage().data_ptr()
    assert [w.storage_offset() for w in placed] == [
        sum(w.numel() for w in placed[:i]) for i in range(8)
    ]


def test_forward_states_do_not_see_later_tokens():
    torch.manual_seed(0)
    gen = ParameterGenerator(4, 3)
    gen.add_domain("src")
    weights = split_lstm_params(gen([("src", LM)])[0].detach(), 4, 3)
    X = torch.randn(1, 6, 4)
    Y = X.clone()
    Y[0, 3:] = torch.randn(3, 4)
    lengths = torch.tensor([6])
    a, b = run_bilstm(X, lengths, weights, False), run_bilstm(Y, lengths, weights, False)
    assert torch.equal(a[0, :3, :3], b[0, :3, :3])
    assert not torch.allclose(a[0, :3, 3:], b[0, :3, 3:])


# -- §8.4, 8.5: gradients and the coupling of pairs --------------------------------------------


def test_gradient_of_one_pair_reaches_only_its_rows():
    torch.manual_seed(0)
    gen = ParameterGenerator(4, 3)
    for d in ("src", "tgt"):
        gen.add_domain(d)
    theta = gen([("src", NER)])[0]
    g = torch.randn_like(theta)
    (theta * g).sum().backward()
    assert gen.W.grad.abs().sum() > 0
    assert row(gen, "src").grad.abs().sum() > 0 and gen.task_embeddings[NER].grad.abs().sum() > 0
    assert row(gen, "tgt").grad is None or torch.all(row(gen, "tgt").grad == 0)
    assert gen.task_embeddings[LM].grad is None or torch.all(gen.task_embeddings[LM].grad == 0)
    code = torch.kron(gen.task_embeddings[NER], row(gen, "src")).detach()
    assert torch.allclose(gen.W.grad.reshape(64, -1), code[:, None] * g[None, :], atol=1e-6)


def test_uda_coupling_moves_the_untrained_target_ner_pair():
    """With embeddings frozen, an SGD step on W moves theta(tgt, ner) by the spec's formula."""
    torch.manual_seed(0)
    gen = ParameterGenerator(4, 3)
    for d in ("src", "tgt"):
        gen.add_domain(d)
    trained = [("src", NER), ("src", LM), ("tgt", LM)]
    thetas = gen(trained)
    grads = torch.randn_like(thetas)
    (thetas * grads).sum().backward()
    lr = 0.5
    before = gen([("tgt", NER)])[0].detach()
    with torch.no_grad():
        gen.W -= lr * gen.W.grad
    after = gen([("tgt", NER)])[0].detach()
    t = {k: v.detach() for k, v in gen.task_embeddings.items()}
    expected = torch.zeros_like(before)
    for (dom, task), g in zip(trained, grads):
        expected -= lr * float(t[NER] @ t[task]) * float(row(gen, "tgt").detach() @ row(gen, dom).detach()) * g.detach()
    assert not torch.allclose(before, after)
    assert torch.allclose(after - before, expected, atol=1e-5)


def test_uda_through_the_component_never_runs_the_target_ner_pair():
    fix_random_seed(0)
    nlp = make_nlp(model={"setting": "unsupervised"}, domain_aliases={"ai": "news"})
    labelled = make_examples(nlp, NEWS)
    raw = [Example(eg.predicted, Doc(nlp.vocab, words=[t.text for t in eg.reference]))
           for eg in make_examples(nlp, AI)]
    for eg in raw:
        set_domain(eg.reference, "ai")
    examples = labelled + raw
    optimizer = nlp.initialize(lambda: examples)
    pipe = nlp.get_pipe("crossner")
    emitter = get_emitter(pipe.model)
    assert pipe.domains == ("news",)  # the target has no head or CRF of its own (tied)
    seen = []
    generate = emitter._generate
    emitter._generate = lambda pairs: seen.append(list(pairs)) or generate(pairs)
    theta_before = get_generated_weights(pipe.model, "ai", NER)[0].clone()
    seen.clear()
    for _ in range(3):
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses)
        assert losses["crossner_lm"] > 0
    assert len(seen) == 3  # one generation per training step
    for pairs in seen:
        assert ("ai", NER) not in pairs
        assert set(pairs) == {("news", NER), ("news", LM), ("ai", LM)}
    theta_after = get_generated_weights(pipe.model, "ai", NER)[0]
    assert not torch.allclose(theta_before, theta_after)
    # target docs are tagged with the source's labels through their own generated weights
    doc = nlp("Google released TensorFlow .")
    assert all(e.label_ in ("person", "location", "organisation") for e in doc.ents)


def test_combined_setting_trains_ner_and_lms_on_labelled_and_raw_text():
    fix_random_seed(0)
    nlp = make_nlp(model={"setting": "combined", "lm_on_labelled": False})
    raw = [Example(eg.predicted, Doc(nlp.vocab, words=[t.text for t in eg.reference]))
           for eg in make_examples(nlp, AI)]
    examples = make_examples(nlp, NEWS + AI) + raw
    optimizer = nlp.initialize(lambda: examples)
    emitter = get_emitter(nlp.get_pipe("crossner").model)
    seen = []
    generate = emitter._generate
    emitter._generate = lambda pairs: seen.append(set(pairs)) or generate(pairs)
    losses = nlp.update(examples, sgd=optimizer)
    assert losses["crossner"] > 0 and losses["crossner_lm"] > 0
    # raw target text runs only the target LM; lm_on_labelled = false: no source LM
    assert seen == [{("news", NER), ("ai", NER), ("ai", LM)}]


def test_setting_is_checked_against_the_data():
    nlp = make_nlp(model={"setting": "unsupervised"})
    with pytest.raises(ValueError, match="unsupervised.*domain_aliases"):
        nlp.initialize(lambda: make_examples(nlp, NEWS + AI))
    nlp = make_nlp(model={"setting": "supervised"}, domain_aliases={"ai": "news"})
    with pytest.raises(ValueError, match="supervised.*unsupervised"):
        nlp.initialize(lambda: make_examples(nlp, NEWS))
    nlp = make_nlp(model={"setting": "combined"})
    with pytest.raises(ValueError, match="combined.*raw text"):
        nlp.initialize(lambda: make_examples(nlp, NEWS + AI))
    with pytest.raises(ValueError, match="setting"):
        make_nlp(model={"setting": "transfer"})


# -- §8.6, 8.8, 8.9: language model, batching, losses -----------------------------------------


def test_lm_loss_decreases_on_a_tiny_corpus():
    for sampled in (True, False):
        torch.manual_seed(0)
        emitter = make_emitter(n_in=8, hidden=16, vocab_size=12, lm_sampled=sampled)
        emb = torch.nn.Embedding(12, 8)  # context-free input features of the word ids
        ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, -1], [10, 11, 3, -1, -1]])
        lengths = torch.tensor([5, 4, 3])
        gold = torch.full(ids.shape, -1)
        params = list(emitter.parameters()) + list(emb.parameters())
        opt = torch.optim.Adam(params, lr=0.02)

        def full_lm_loss():
            emitter.lm_sampled = False
            with torch.no_grad():
                _, losses = emitter(emb(ids.clamp(min=0)), lengths, ["src"] * 3, gold,
                                    own_domains=["src"] * 3, word_ids=ids)
            emitter.lm_sampled = sampled
            return float(losses["lm"])

        start = full_lm_loss()
        for _ in range(100):
            opt.zero_grad()
            _, losses = emitter(emb(ids.clamp(min=0)), lengths, ["src"] * 3, gold,
                                own_domains=["src"] * 3, word_ids=ids)
            losses["lm"].backward()
            opt.step()
        assert full_lm_loss() < 0.5 * start


def test_mixed_domain_batch_equals_per_domain_runs_and_lm_weights_scale():
    torch.manual_seed(0)
    emitter = make_emitter(lm_sampled=False).eval()
    X = torch.randn(4, 5, 6)
    lengths = torch.tensor([5, 3, 4, 2])
    own = ["src", "tgt", "tgt", "src"]
    with torch.no_grad():
        mixed, _ = emitter(X, lengths, own, own_domains=own)
        for i in range(4):
            alone, _ = emitter(X[i : i + 1, : lengths[i]], lengths[i : i + 1], [own[i]], own_domains=[own[i]])
            assert torch.allclose(mixed[i, : lengths[i]], alone[0], atol=1e-6)
    ids = torch.randint(0, 30, (4, 5))
    gold = torch.full((4, 5), -1)
    _, one = emitter(X, lengths, own, gold, own_domains=own, word_ids=ids, target_domain="tgt")
    emitter.lm_weights = {"source": 2.0, "target": 2.0}
    _, two = emitter(X, lengths, own, gold, own_domains=own, word_ids=ids, target_domain="tgt")
    assert torch.allclose(two["lm"], 2 * one["lm"])
    emitter.lm_weights = {"source": 0.0, "target": 1.0}
    _, tgt_only = emitter(X, lengths, own, gold, own_domains=own, word_ids=ids, target_domain="tgt")
    assert 0 < float(tgt_only["lm"].detach()) < float(one["lm"].detach())


def test_ner_weight_scales_the_gradient_not_the_scores():
    torch.manual_seed(0)
    emitter = make_emitter()
    X = torch.randn(2, 4, 6)
    lengths = torch.tensor([4, 4])
    own = ["src", "tgt"]
    gold = torch.zeros((2, 4), dtype=torch.long)
    grads = []
    for w in (1.0, 3.0):
        emitter.ner_weights = {"source": 1.0, "target": w}
        Xg = X.clone().requires_grad_()
        scores, _ = emitter(Xg, lengths, own, gold, own_domains=own, word_ids=None, target_domain="tgt")
        scores.sum().backward()
        grads.append((scores.detach(), Xg.grad))
    assert torch.allclose(grads[0][0], grads[1][0])
    assert torch.allclose(grads[1][1][1], 3 * grads[0][1][1], atol=1e-6)
    assert torch.allclose(grads[1][1][0], grads[0][1][0], atol=1e-6)


def test_generation_is_cached_at_prediction_and_refreshed_after_an_update(trained):
    nlp, examples = trained
    pipe = nlp.get_pipe("crossner")
    emitter = get_emitter(pipe.model)
    docs = [eg.predicted for eg in examples]
    pipe.predict(docs)
    count = emitter.n_generated
    pipe.predict(docs)
    pipe.predict(docs[:2])
    assert emitter.n_generated == count  # cached across predict calls
    assert not any("cache" in key for key in emitter.state_dict())
    old = get_generated_weights(pipe.model, "ai", NER)[0].clone()
    nlp.update(examples, sgd=Adam(0.01))
    cached = get_generated_weights(pipe.model, "ai", NER)[0]
    with torch.no_grad():
        fresh = emitter.generator([("ai", NER)])[0]
    assert not torch.allclose(old, cached)
    assert torch.allclose(cached.flatten(), fresh[: cached.numel()])
    # loading other weights refreshes the cache too
    other = make_nlp()
    other.initialize(lambda: examples)
    before_load = get_generated_weights(other.get_pipe("crossner").model, "ai", NER)[0].clone()
    other.from_bytes(nlp.to_bytes())
    loaded = get_generated_weights(other.get_pipe("crossner").model, "ai", NER)[0]
    assert torch.allclose(loaded, cached) and not torch.allclose(loaded, before_load)


# -- the component: overfitting, round trips ---------------------------------------------------


@pytest.fixture(scope="module")
def trained():
    fix_random_seed(0)
    nlp = make_nlp()
    examples = make_examples(nlp, NEWS + AI)
    train(nlp, examples, n_iter=40)
    return nlp, examples


def test_overfits_two_domains_supervised(trained):
    nlp, _ = trained
    assert predicted_ents(nlp, NEWS + AI) == gold_ents(NEWS + AI)
    assert nlp.evaluate(make_examples(nlp, NEWS + AI))["ents_f"] == 1.0
    cfg = nlp.get_pipe("crossner").cfg["build_config"]
    assert cfg["pgn_domains"] == ["news", "ai"] and cfg["lm_vocab"][0] == "<unk>"
