"""The output heads as registered layers: each is an entry of the architectures registry,
chosen in the config by ref, and owns its loss, decoding and probabilities."""
import numpy
import pytest
import torch
from spacy.util import registry
from confection import ConfigValidationError
from reference_decoders import is_bio
from thinc.api import Config, fix_random_seed

from spacy_crossner.models import head as heads
from spacy_crossner.models.head import HeadInput, get_head
from spacy_crossner.models.pytorch_heads import CRFHead, SoftmaxHead
from spacy_crossner.models.torch_layer import torch_module
from util import AI, NEWS, TINY_FEATURES, blank_with, make_examples, train

HEADS = {
    "spacy_crossner.CRFHead.v1": (heads.build_crf_head, CRFHead),
    "spacy_crossner.SoftmaxHead.v1": (heads.build_softmax_head, SoftmaxHead),
    "spacy_crossner.AutoregressiveHead.v1": (heads.build_autoregressive_head, SoftmaxHead),
}
# an architecture per head, the head given by ref
MODELS = {
    "spacy_crossner.CRFHead.v1": {
        "@architectures": "spacy_crossner.BiLSTMCRF.v2", "hidden_size": 16, "dropout": 0.0,
        "tok2vec": TINY_FEATURES, "head": {"@architectures": "spacy_crossner.CRFHead.v1"},
    },
    "spacy_crossner.SoftmaxHead.v1": {
        "@architectures": "spacy_crossner.TransformerTagger.v2", "dropout": 0.0,
        "tok2vec": TINY_FEATURES, "head": {"@architectures": "spacy_crossner.SoftmaxHead.v1"},
    },
    "spacy_crossner.AutoregressiveHead.v1": {
        "@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 8, "hidden_width": 8,
        "tok2vec": TINY_FEATURES,
    },
}


@pytest.mark.parametrize("name", list(HEADS))
def test_heads_are_registered_architectures(name):
    builder, module_type = HEADS[name]
    assert registry.architectures.get(name) is builder
    layer = registry.resolve(Config({"head": {"@architectures": name}}))["head"]
    assert isinstance(torch_module(layer), module_type)
    assert layer.attrs["decode"] in (heads.decode_crf, heads.decode_softmax, heads.decode_autoregressive)
    assert "decoder" not in layer.attrs  # no decoder strings to branch on


# every architecture that takes its head by ref, with tiny settings
BY_REF = {
    "spacy_crossner.BiLSTMCRF.v2": {"hidden_size": 8},
    "spacy_crossner.TransformerTagger.v2": {},
    "spacy_crossner.MultiCellLSTM.v2": {"hidden_size": 8},
    "spacy_crossner.PGNBiLSTM.v2": {"hidden_size": 8, "lm_samples": 5},
    "spacy_crossner.MoEE.v2": {"hidden_size": 8, "depth": 1, "expert_width": 8},
}


@pytest.mark.parametrize("arch", list(BY_REF))
@pytest.mark.parametrize("name", ["spacy_crossner.CRFHead.v1", "spacy_crossner.SoftmaxHead.v1"])
def test_the_config_chooses_the_head(arch, name):
    config = {"@architectures": arch, **BY_REF[arch], "tok2vec": TINY_FEATURES, "head": {"@architectures": name}}
    model = registry.resolve(Config({"model": config}))["model"]
    assert isinstance(torch_module(get_head(model)), HEADS[name][1])
    assert get_head(model).attrs["decode"] is {"spacy_crossner.CRFHead.v1": heads.decode_crf}.get(
        name, heads.decode_softmax
    )
    with pytest.raises(ConfigValidationError, match="head"):
        registry.resolve(Config({"model": {k: v for k, v in config.items() if k != "head"}}))




@pytest.mark.parametrize("name", list(HEADS))
def test_every_head_gives_a_finite_loss_valid_tags_and_normalised_probabilities(name):
    """On CPU: the loss and its gradient are finite (and the gradient not all zero), decoding
    gives BIO-valid tags with entity probabilities in [0, 1], and the probabilities the head
    computes them from sum to 1 at every token (CRF: the marginals of the forward-backward;
    softmax: the tokens' distributions)."""
    fix_random_seed(0)
    nlp = blank_with({"model": MODELS[name], "target_domain": "ai"})
    examples = make_examples(nlp, NEWS + AI)
    losses = train(nlp, examples, n_iter=2)
    assert numpy.isfinite(losses["crossner"])
    pipe = nlp.get_pipe("crossner")
    assert get_head(pipe.model).attrs["decode"] is HEADS[name][0]().attrs["decode"]
    inputs = pipe.make_input([eg.predicted for eg in examples])
    gold = pipe._gold(examples, inputs.domains)
    output, backprop = pipe.model.begin_update(inputs._replace(gold=gold))
    loss, d_scores = heads.get_loss(pipe.model, output, gold)
    assert numpy.isfinite(loss) and loss > 0
    assert numpy.isfinite(d_scores).all() and numpy.abs(d_scores).sum() > 0
    backprop(d_scores)
    docs = [eg.predicted for eg in examples]
    for doc, decoded in zip(docs, pipe.predict(docs)):
        assert len(decoded.tags) == len(doc) and is_bio(decoded.tags)
        assert all(0.0 <= p <= 1.0 for p in decoded.probs)
    output = pipe.model.predict(inputs)
    head = get_head(pipe.model)
    whitespace = torch.zeros(output.scores.shape[:2], dtype=torch.bool)
    tags, extra = head.predict(HeadInput(output.scores, output.lengths, output.domains, None, whitespace))
    assert tags.shape == output.scores.shape[:2]
    mask = torch.arange(output.scores.shape[1])[None, :] < torch.tensor(output.lengths)[:, None]
    if "lattice" in extra:
        alpha, beta, log_z = extra["lattice"].forward_backward()
        marginals = torch.exp(alpha + beta - log_z[:, None, None]).sum(dim=-1)
    else:
        marginals = torch.exp(extra["logp"]).sum(dim=-1)
    assert torch.allclose(marginals[mask], torch.ones_like(marginals[mask]), atol=1e-6)
