"""Partial annotation (issue 47 part 4, mode "missing"): a token whose gold tag is missing is
marginalised by the CRF loss (log Z of all paths - log Z of the paths through the observed
tags), gives no loss in the softmax head, and is fed as the unknown symbol to the label-aware
tagger; the component's ``missing_as`` setting ("o" by default, as before) chooses it."""
import math

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import fix_random_seed

from reference_decoders import crf_partial_log_likelihood, crf_reference
from spacy_crossner.decoding import bio_tags
from spacy_crossner.domains import set_domain
from spacy_crossner.models.head import HeadInput, get_head
from spacy_crossner.models.pytorch_heads import ConstrainedCRF, CRFHead, SoftmaxHead
from spacy_crossner.models.torch_layer import torch_module
from spacy_crossner.pipeline import MISSING, _gold_tag_ids
from test_self_train import CONFIGS, TINY, data  # noqa: F401  (data: the module's teacher fixture)
from util import TINY_FEATURES, blank_with, make_examples, train

TAGS = bio_tags(["X", "Y"])  # O B-X I-X B-Y I-Y
O, BX, IX, BY, IY = range(5)
M = MISSING


def random_crf(seed=0, tags=TAGS):
    torch.manual_seed(seed)
    crf = ConstrainedCRF(tags)
    with torch.no_grad():
        for p in crf.parameters():
            p.uniform_(-2, 2)
    return crf


def allowed_parameters(crf):
    """start, trans, end as the likelihood uses them (forbidden moves at FORBIDDEN)."""
    crf.apply_constraints()
    return [p.detach().double().numpy() for p in (crf.start_transitions, crf.transitions, crf.end_transitions)]


def llh(crf, emissions, tags, lengths=None):
    tags = torch.tensor(tags, dtype=torch.long)
    mask = None
    if lengths is not None:
        mask = torch.arange(tags.shape[1])[None, :] < torch.tensor(lengths)[:, None]
    return crf(emissions, tags, mask=mask, reduction="none")


# -- the CRF's partial likelihood ---------------------------------------------------------------


def test_with_nothing_missing_the_partial_likelihood_is_the_full_one():
    crf = random_crf()
    emissions = torch.randn(3, 5, 5, dtype=torch.float64)
    gold = torch.tensor([[BX, IX, O, BY, IY], [O, O, O, O, O], [BY, BX, IX, IX, O]])
    lattice = crf.lattice(emissions)
    # the consistent-paths pass with every tag observed is the gold path's score
    assert torch.allclose(lattice.observed_log_partition(gold), lattice.path_scores(gold), atol=1e-9)
    start, trans, end = allowed_parameters(crf)
    for row in range(3):
        expected, _ = crf_reference(emissions[row].numpy(), gold[row].tolist(), start, trans, end)
        assert float(crf(emissions[row : row + 1], gold[row : row + 1]).detach()) == pytest.approx(expected, abs=1e-8)


def test_with_every_tag_missing_the_likelihood_is_zero():
    crf = random_crf(1)
    emissions = torch.randn(2, 4, 5)
    out = llh(crf, emissions, [[M, M, M, M], [M, M, M, 0]], lengths=[4, 3])
    assert out.tolist() == [0.0, 0.0]  # the padding after the second doc's 3 tokens is not a tag


@pytest.mark.parametrize("observed", [
    [BX, M, M, O],      # a missing continuation of an entity
    [M, IX, M, M],      # I-X observed: its predecessor must be B-X or I-X
    [M, M, M, M],
    [O, M, BY, M],
    [M, M, M, IY],
    [BX, IX, O, BY],    # nothing missing
    [M, O, M, O],
])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_partial_likelihood_matches_brute_force_enumeration(observed, seed):
    crf = random_crf(seed)
    torch.manual_seed(seed + 10)
    emissions = torch.randn(1, 4, 5, dtype=torch.float64) * 2
    start, trans, end = allowed_parameters(crf)
    expected = crf_partial_log_likelihood(emissions[0].numpy(), observed, TAGS, start, trans, end)
    assert float(llh(crf, emissions, [observed])[0].detach()) == pytest.approx(expected, abs=1e-6)


def test_a_batch_of_several_lengths_matches_each_doc_alone():
    crf = random_crf(2)
    emissions = torch.randn(3, 4, 5, dtype=torch.float64)
    tags = [[BX, M, M, M], [M, O, M, M], [O, BY, IY, O]]
    lengths = [4, 2, 4]
    batch = llh(crf, emissions, tags, lengths)
    start, trans, end = allowed_parameters(crf)
    for row, n in enumerate(lengths):
        alone = crf_partial_log_likelihood(emissions[row, :n].numpy(), tags[row][:n], TAGS, start, trans, end)
        assert float(batch[row].detach()) == pytest.approx(alone, abs=1e-6)


def test_gradients_are_finite_and_missing_tags_pull_towards_every_consistent_path():
    crf = random_crf(4)
    emissions = torch.randn(2, 5, 5, requires_grad=True)
    loss = -llh(crf, emissions, [[BX, M, M, M, O], [M, M, M, M, M]], lengths=[5, 3]).sum()
    loss.backward()
    grads = [emissions.grad] + [p.grad for p in crf.parameters()]
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    # a fully missing doc gives no gradient at all
    assert bool((emissions.grad[1] == 0).all())
    # an observed token: the gradient is model marginal - 1 at the observed tag, marginal elsewhere
    g = emissions.grad[0, 0]
    assert float(g[BX]) < 0 and all(float(g[k]) >= 0 for k in (O, IX, BY, IY))
    # a missing token: d(-llh)/d emission = p(tag) - p(tag | observed), summing to 0
    assert float(emissions.grad[0, 2].sum()) == pytest.approx(0.0, abs=1e-5)


def test_gradients_match_brute_force():
    crf = random_crf(5)
    emissions = torch.randn(1, 3, 5, dtype=torch.float64, requires_grad=True)
    observed = [M, IX, M]
    (-llh(crf, emissions, [observed]).sum()).backward()
    start, trans, end = allowed_parameters(crf)
    E = emissions.detach()[0].numpy()
    eps = 1e-6
    for t in range(3):
        for k in range(5):
            up, down = E.copy(), E.copy()
            up[t, k] += eps
            down[t, k] -= eps
            numeric = -(crf_partial_log_likelihood(up, observed, TAGS, start, trans, end)
                        - crf_partial_log_likelihood(down, observed, TAGS, start, trans, end)) / (2 * eps)
            assert float(emissions.grad[0, t, k]) == pytest.approx(numeric, abs=1e-5)


# -- the heads -----------------------------------------------------------------------------------

DOMAINS = {"a": bio_tags(["X"]), "b": TAGS}


def test_crf_head_marginalises_missing_tags_and_skips_raw_rows():
    torch.manual_seed(0)
    head = CRFHead()
    head.setup(DOMAINS)
    emissions = torch.randn(3, 4, 5)
    lengths = torch.tensor([4, 3, 4])
    domains = ["b", "a", "b"]
    gold = torch.tensor([[BX, M, M, O], [M, 1, 2, -1], [-1, -1, -1, -1]])  # the last: raw text
    loss = head.loss(emissions, lengths, domains, gold)
    first = -head.get("b")(emissions[:1], gold[:1])
    second = -head.get("a")(emissions[1:2, :3, :3], gold[1:2, :3])
    assert float(loss.detach()) == pytest.approx(float((first + second).detach()) / 2, rel=1e-5)  # 2 labelled docs
    # under missing_as "o" the same doc is one whole sequence: a different loss
    as_o = head.loss(emissions, lengths, domains, torch.tensor([[BX, O, O, O], [O, 1, 2, -1], [-1] * 4]))
    assert float(as_o.detach()) != pytest.approx(float(loss.detach()))


def test_softmax_head_gives_no_loss_at_missing_tokens():
    torch.manual_seed(0)
    head = SoftmaxHead()
    head.setup(DOMAINS)
    emissions = torch.randn(2, 4, 5, requires_grad=True)
    gold = torch.tensor([[BX, M, M, O], [M, M, M, M]])
    loss = head.loss(emissions, torch.tensor([4, 4]), ["b", "b"], gold)
    logp = torch.log_softmax(emissions.detach(), dim=-1)
    assert float(loss.detach()) == pytest.approx(-float(logp[0, 0, BX] + logp[0, 3, O]), rel=1e-5)  # one labelled doc
    loss.backward()
    assert bool((emissions.grad[0, 1:3] == 0).all()) and bool((emissions.grad[1] == 0).all())


def test_the_label_aware_tagger_is_fed_the_unknown_symbol_after_a_missing_tag():
    """Teacher forcing needs the previous tag: after a missing one the chain reads X, the
    start / unknown symbol (the one it reads at the first token), not a guessed tag."""
    nlp = blank_with({"target_domain": "ai", "missing_as": "missing", "model": {
        "@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 8, "hidden_width": 8,
        "tok2vec": TINY_FEATURES}})
    examples = make_examples(nlp, [("ai", "Google released TensorFlow today .".split(), [(0, 1, "org"), (2, 3, "product")])])
    nlp.initialize(lambda: examples)
    pipe = nlp.get_pipe("crossner")
    emitter = torch_module(pipe.model.get_ref("emitter"))
    idx, _ = emitter.domain_index(["ai"], torch.device("cpu"))
    inputs = emitter.shifted_inputs(torch.tensor([[1, M, 3, 0, M]]), idx)
    x = emitter.x_id
    assert inputs[0, 0] == x and inputs[0, 2] == x  # first token, and after the missing one
    assert inputs[0, 1] == idx[0, 1] and inputs[0, 3] == idx[0, 3] and inputs[0, 4] == idx[0, 0]
    # and through the component: no gradient on the scores of the missing tokens
    ref = Doc(nlp.vocab, words="Google released TensorFlow today .".split(), ents=["B-org", "", "B-product", "", "O"])
    pred = Doc(nlp.vocab, words=[t.text for t in ref])
    for doc in (ref, pred):
        set_domain(doc, "ai")
    eg = Example(pred, ref)
    gold = pipe._gold([eg], ["ai"])
    assert gold == [[pipe.domain_tags()["ai"].index("B-org"), M, pipe.domain_tags()["ai"].index("B-product"), M, 0]]
    output, _ = pipe.model.begin_update(pipe.make_input([pred], gold=gold))
    loss, d_scores = pipe.get_loss([eg], output)
    d = pipe.model.ops.to_numpy(d_scores)
    assert loss > 0 and numpy.abs(d[0, [1, 3]]).sum() == 0 and numpy.abs(d[0, [0, 2, 4]]).sum() > 0


# -- the component's setting -------------------------------------------------------------------

BILSTM_CRF = {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 16, "depth": 1,
              "dropout": 0.0, "use_crf": True, "tok2vec": TINY_FEATURES}


def example(nlp, words, iob, domain="ai", predicted_words=None):
    ref = Doc(nlp.vocab, words=words, ents=iob)
    pred = Doc(nlp.vocab, words=predicted_words or words)
    for doc in (ref, pred):
        set_domain(doc, domain)
    return Example(pred, ref)


def test_gold_ids_read_a_missing_token_as_o_or_as_missing():
    nlp = spacy.blank("en")
    tags = bio_tags(["org", "product"])  # O B-org I-org B-product I-product
    eg = example(nlp, "Google released Tensor Flow today".split(), ["B-org", "", "B-product", "I-product", "O"])
    assert _gold_tag_ids(eg, tags) == [1, 0, 3, 4, 0]
    assert _gold_tag_ids(eg, tags, MISSING) == [1, M, 3, 4, 0]
    # another tokenization: what spaCy's alignment cannot tell (None) is missing too: the
    # pieces of an unannotated token, a token across an entity's boundary
    other = example(nlp, "Google released Tensor Flow today".split(), ["B-org", "", "B-product", "I-product", "O"],
                    predicted_words="Google re leased TensorFlowtoday".split())
    assert other.get_aligned_ner() == ["U-org", None, None, None]
    assert _gold_tag_ids(other, tags) == [1, 0, 0, 0]
    assert _gold_tag_ids(other, tags, MISSING) == [1, M, M, M]


def test_missing_as_is_checked_kept_and_overridable_at_load(tmp_path):
    with pytest.raises(ValueError, match=r"\[components.crossner\] missing_as = 'none': choose \"o\""):
        blank_with({"missing_as": "none", "model": BILSTM_CRF})
    nlp = blank_with({"model": BILSTM_CRF})
    assert nlp.get_pipe("crossner").missing_as == "o"  # the default: every config trains as before
    nlp = blank_with({"missing_as": "missing", "target_domain": "ai", "model": BILSTM_CRF})
    nlp.initialize(lambda: make_examples(nlp, [("ai", "Google released TensorFlow .".split(), [(0, 1, "org")])]))
    nlp.to_disk(tmp_path / "p")
    assert spacy.load(tmp_path / "p").get_pipe("crossner").missing_as == "missing"
    loaded = spacy.load(tmp_path / "p", config={"components": {"crossner": {"missing_as": "o"}}})
    assert loaded.get_pipe("crossner").missing_as == "o"
    pipe = loaded.get_pipe("crossner")
    pipe.missing_as = "missing"  # what a callback does to a sourced component
    assert pipe.cfg["missing_as"] == "missing"
    with pytest.raises(ValueError, match="missing_as = 'O'"):
        pipe.missing_as = "O"


@pytest.mark.parametrize("missing_as", ["o", "missing"])
def test_raw_text_and_unannotated_docs_give_no_loss(missing_as):
    fix_random_seed(0)
    nlp = blank_with({"missing_as": missing_as, "target_domain": "ai", "model": BILSTM_CRF})
    nlp.initialize(lambda: make_examples(nlp, [("ai", "Google released TensorFlow .".split(), [(0, 1, "org")])]))
    words = "We like TensorFlow .".split()
    losses = nlp.update([example(nlp, words, [""] * 4)], losses={})
    assert losses["crossner"] == 0.0
    partial = nlp.update([example(nlp, words, ["O", "", "", "O"])], losses={})["crossner"]
    full = nlp.update([example(nlp, words, ["O", "O", "O", "O"])], losses={})["crossner"]
    assert partial > 0 and full > 0
    if missing_as == "missing":
        assert partial < full  # fewer observed tags: a larger set of consistent paths


def product_marginal(nlp, words, at):
    """The CRF's marginal probability of B-product at token ``at`` (forward-backward)."""
    pipe = nlp.get_pipe("crossner")
    doc = Doc(nlp.vocab, words=words)
    set_domain(doc, "ai")
    output = pipe.model.predict(pipe.make_input([doc]))
    whitespace = torch.zeros((1, len(words)), dtype=torch.bool)
    _, extra = get_head(pipe.model).predict(HeadInput(output.scores, output.lengths, output.domains, None, whitespace))
    alpha, beta, log_z = extra["lattice"].forward_backward()
    k = pipe.domain_tags()["ai"].index("B-product")
    return math.exp(float(alpha[0, at, k] + beta[0, at, k] - log_z[0]))


@pytest.mark.parametrize("missing_as,decoded,low,high", [
    ("o", [], 0.1, 0.5),  # read as O 3 times in 4: it learns P(product) near 1/4
    ("missing", [("Keras", "product")], 0.9, 1.0),  # only the annotated copy says anything
])
def test_a_token_annotated_once_and_unannotated_thrice_is_learnt_as_o_only_under_o(missing_as, decoded, low, high):
    """A tiny BiLSTM-CRF; "Keras" is a product in one doc and unannotated (the rest O) in three
    copies of it, as a teacher's pseudo-labels leave an entity it was unsure of."""
    fix_random_seed(0)
    nlp = blank_with({"missing_as": missing_as, "target_domain": "ai", "model": BILSTM_CRF})
    words = "We like Keras .".split()
    examples = make_examples(nlp, [("ai", words, [(2, 3, "product")]),
                                   ("ai", "Google hired Hinton .".split(), [(0, 1, "org")])])
    examples += [example(nlp, words, ["O", "O", "", "O"]) for _ in range(3)]
    train(nlp, examples, n_iter=30, lr=0.03)
    doc = Doc(nlp.vocab, words=words)
    set_domain(doc, "ai")
    assert [(e.text, e.label_) for e in nlp(doc).ents] == decoded
    assert low < product_marginal(nlp, words, 2) < high


# -- self-training sets it -----------------------------------------------------------------------


def test_self_train_sets_missing_as_in_a_factory_block_or_the_sourced_components_callback():
    from spacy_crossner.self_train import PseudoLabelError, set_missing_as

    joint = spacy.util.load_config(CONFIGS / "bilstm_joint.cfg", interpolate=False)
    assert set_missing_as(joint, "missing") == ["crossner"]
    assert joint["components"]["crossner"]["missing_as"] == "missing"
    finetune = spacy.util.load_config(CONFIGS / "trf_finetune.cfg", interpolate=False)
    assert "factory" not in finetune["components"]["crossner"]  # sourced: its block cannot say it
    assert set_missing_as(finetune, "missing") == ["crossner"]
    assert finetune["initialize"]["after_init"]["missing_as"] == "missing"
    del finetune["initialize"]["after_init"]
    with pytest.raises(PseudoLabelError, match=r"no crossner component whose missing_as .* \[initialize.after_init\]"):
        set_missing_as(finetune, "missing")
    with pytest.raises(PseudoLabelError, match="--missing-as 'O': choose one of missing, o"):
        set_missing_as(joint, "O")


def test_the_configure_callback_sets_a_sourced_components_missing_as():
    from spacy_crossner.callbacks import make_configure_callback

    nlp = blank_with({"target_domain": "ai", "model": BILSTM_CRF})
    nlp.initialize(lambda: make_examples(nlp, [("ai", "Google released TensorFlow .".split(), [(0, 1, "org")])]))
    make_configure_callback(missing_as="missing")(nlp)
    assert nlp.get_pipe("crossner").missing_as == "missing"
    make_configure_callback()(nlp)  # no missing_as: kept
    assert nlp.get_pipe("crossner").missing_as == "missing"


def test_self_train_missing_mode_trains_the_student_with_missing_tokens_marginalised(data, tmp_path):
    from spacy_crossner.self_train import PseudoLabelError, self_train

    overrides = {**TINY, "training.max_steps": 6, "training.eval_frequency": 3,
                 **{f"paths.{k}": data[k] for k in ("source_train", "target_train", "target_dev")}}
    summary = self_train(teacher=data["teacher"], config=CONFIGS / "bilstm_joint.cfg", text=data["text"],
                         output_dir=tmp_path / "st", threshold=0.5, mode="missing", overrides=overrides)
    pseudo = list(DocBin().from_disk(tmp_path / "st" / "round1" / "pseudo.spacy").get_docs(spacy.blank("en").vocab))
    assert any("" in [t.ent_iob_ for t in doc] and doc.has_annotation("ENT_IOB") for doc in pseudo)
    cfg = spacy.util.load_config(tmp_path / "st" / "round1" / "config.cfg", interpolate=False)
    assert cfg["components"]["crossner"]["missing_as"] == "missing"
    student = spacy.load(summary.student).get_pipe("crossner")
    assert student.missing_as == "missing"
    # the pseudo docs' unannotated tokens reach the loss as missing (-1), not O
    eg = Example(Doc(student.vocab, words=[t.text for t in pseudo[0]]), pseudo[0])
    set_domain(eg.predicted, "ai")
    gold = student._gold([eg], ["ai"])[0]
    assert [g == M for g in gold] == [t.ent_iob_ == "" for t in pseudo[0]]
    with pytest.raises(PseudoLabelError, match="give --missing-as o instead"):
        self_train(teacher=data["teacher"], config=CONFIGS / "bilstm_joint.cfg", text=data["text"],
                   output_dir=tmp_path / "st2", threshold=0.5,
                   overrides={**overrides, "components.crossner.missing_as": "o"})
    assert not (tmp_path / "st2").exists()


def test_self_train_sets_missing_as_of_a_sourced_student_through_its_callback(data, tmp_path):
    """configs/bilstm_finetune.cfg sources the component (here: from the teacher); the
    configure_crossner callback gives the student missing_as = "missing"."""
    from spacy_crossner.self_train import self_train

    overrides = {"training.max_steps": 4, "training.eval_frequency": 2, "vars.target_upsample": 1,
                 "paths.pretrained": str(data["teacher"]),
                 **{f"paths.{k}": data[k] for k in ("target_train", "target_dev")}}
    summary = self_train(teacher=data["teacher"], config=CONFIGS / "bilstm_finetune.cfg", text=data["text"],
                         output_dir=tmp_path / "st", threshold=0.5, mode="confident-o", overrides=overrides)
    cfg = spacy.util.load_config(tmp_path / "st" / "round1" / "config.cfg", interpolate=False)
    assert cfg["initialize"]["after_init"]["missing_as"] == "missing"
    assert spacy.load(data["teacher"]).get_pipe("crossner").missing_as == "o"
    assert spacy.load(summary.student).get_pipe("crossner").missing_as == "missing"
