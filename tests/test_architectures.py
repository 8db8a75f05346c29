"""What every architecture must do through the crossner component (one parametrized suite, in
the style of spaCy's tests/test_models.py): overfit two domains, keep its predictions and entity
probabilities through disk, bytes and pickle round trips, and give the same docs with
``nlp.pipe`` as with ``nlp()``. Architecture-specific behaviour is tested in each
architecture's own file."""
import pickle

import numpy
import pytest
import spacy
from spacy.tokens import Doc, DocBin
from thinc.api import Adam, fix_random_seed

from spacy_crossner import set_domain
from spacy_crossner.models.torch_layer import TorchModuleShim, torch_module
from util import AI, NEWS, TINY_FEATURES, blank_with, gold_ents, make_examples, predicted_ents, train

FEATURES = TINY_FEATURES
CRF_HEAD = {"@architectures": "spacy_crossner.CRFHead.v1"}
SOFTMAX_HEAD = {"@architectures": "spacy_crossner.SoftmaxHead.v1"}
# The head is chosen by ref (v2) or by v1's use_crf; test_v1_builds_its_v2_model proves the two
# spellings build the same model, so each architecture is trained here in one of them.
ARCHITECTURES = {
    "bilstm_crf": {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "dropout": 0.0},
    "bilstm_softmax": {
        "@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "dropout": 0.0, "use_crf": False,
    },
    "transformer_tagger_crf": {"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True, "dropout": 0.0},
    "multi_cell": {
        "@architectures": "spacy_crossner.MultiCellLSTM.v2", "hidden_size": 16, "dropout": 0.0, "head": CRF_HEAD,
    },
    "pgn": {
        "@architectures": "spacy_crossner.PGNBiLSTM.v2", "hidden_size": 16, "dropout": 0.0, "lm_samples": 5,
        "head": CRF_HEAD,
    },
    "moee": {
        "@architectures": "spacy_crossner.MoEE.v2", "hidden_size": 32, "depth": 1, "expert_width": 16,
        "dropout": 0.0, "head": CRF_HEAD,
    },
    "label_aware": {"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 16, "hidden_width": 16},
}
ALL = NEWS + AI


def as_v1(settings, use_crf):
    """An architecture's settings spelled for its v1, the head as ``use_crf``."""
    v1 = {k: v for k, v in settings.items() if k not in ("head", "task1_crf", "use_crf")}
    v1["@architectures"] = settings["@architectures"].replace(".v2", ".v1")
    return dict(v1, use_crf=use_crf)


def as_v2(settings, head):
    """A v1 architecture's settings spelled for its v2: the head by ref (MoEE's v1 use_crf
    also chooses its Task-1 loss, v2's task1_crf)."""
    v2 = {k: v for k, v in settings.items() if k != "use_crf"}
    v2["@architectures"] = settings["@architectures"].replace(".v1", ".v2")
    if "MoEE" in v2["@architectures"]:
        v2["task1_crf"] = settings["use_crf"]
    return dict(v2, head=head)


# (v1 settings, the same model's v2 settings), with a CRF and with a softmax head
V1_V2 = {
    f"{name}_{head_name}": (as_v1(ARCHITECTURES[name], head is CRF_HEAD),
                            as_v2(as_v1(ARCHITECTURES[name], head is CRF_HEAD), head))
    for name in ("bilstm_crf", "transformer_tagger_crf", "multi_cell", "pgn", "moee")
    for head_name, head in (("crf", CRF_HEAD), ("softmax", SOFTMAX_HEAD))
}


def make_nlp(name):
    return make_nlp_with(ARCHITECTURES[name])


def make_nlp_with(settings):
    return blank_with({"model": dict(settings, tok2vec=FEATURES), "target_domain": "ai"})


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def trained(request):
    fix_random_seed(0)
    nlp = make_nlp(request.param)
    train(nlp, make_examples(nlp, ALL), n_iter=60)
    return request.param, nlp


def docs_of(nlp, sentences):
    docs = []
    for domain, words, _ in sentences:
        doc = Doc(nlp.vocab, words=words)
        set_domain(doc, domain)
        docs.append(doc)
    return docs


def annotations(docs):
    """Entities and their probabilities, per doc."""
    return [
        ([(e.start, e.end, e.label_) for e in doc.ents],
         [round(float(p), 5) for p in doc.spans["crossner"].attrs["scores"]])
        for doc in docs
    ]


def test_overfits_two_domains(trained):
    _, nlp = trained
    assert predicted_ents(nlp, ALL) == gold_ents(ALL)
    assert nlp.evaluate(make_examples(nlp, ALL))["ents_f"] == 1.0


def test_entity_probabilities(trained):
    _, nlp = trained
    docs = list(nlp.pipe(docs_of(nlp, ALL)))
    for doc in docs:
        spans = doc.spans["crossner"]
        scores = spans.attrs["scores"]
        assert [(s.start, s.end, s.label_) for s in spans] == [(e.start, e.end, e.label_) for e in doc.ents]
        assert len(scores) == len(doc.ents)
        assert all(0.0 < p <= 1.0 for p in scores)
    # A confidently overfit pipeline is sure of its (gold) entities.
    all_scores = numpy.concatenate([d.spans["crossner"].attrs["scores"] for d in docs])
    assert all_scores.mean() > 0.9


def test_disk_and_bytes_round_trips(trained, tmp_path):
    name, nlp = trained
    expected = annotations(nlp.pipe(docs_of(nlp, ALL)))
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert annotations(loaded.pipe(docs_of(loaded, ALL))) == expected
    fresh = make_nlp(name)
    fresh.from_bytes(nlp.to_bytes())
    assert annotations(fresh.pipe(docs_of(fresh, ALL))) == expected


def test_pickle_round_trip(trained):
    _, nlp = trained
    expected = annotations(nlp.pipe(docs_of(nlp, ALL)))
    copy = pickle.loads(pickle.dumps(nlp))
    assert annotations(copy.pipe(docs_of(copy, ALL))) == expected


def test_pipe_equals_call(trained):
    _, nlp = trained
    texts = ["Google released TensorFlow .", "", "LSTM", "  ", "We report accuracy on ImageNet ."] * 3
    piped = [([(e.text, e.label_) for e in d.ents], list(d.spans["crossner"].attrs["scores"]))
             for d in nlp.pipe(texts, batch_size=4)]
    called = [([(e.text, e.label_) for e in d.ents], list(d.spans["crossner"].attrs["scores"]))
              for d in (nlp(t) for t in texts)]
    assert [p[0] for p in piped] == [c[0] for c in called]
    for (_, a), (_, b) in zip(piped, called):
        numpy.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_scores_survive_a_docbin(trained):
    _, nlp = trained
    docs = list(nlp.pipe(docs_of(nlp, ALL)))
    restored = list(DocBin(docs=docs, store_user_data=True).get_docs(nlp.vocab))
    assert annotations(restored) == annotations(docs)


def test_no_entity_on_whitespace(trained):
    _, nlp = trained
    assert list(nlp("   \n\t  ").ents) == []
    for text in ["Google  \n released TensorFlow", "\n Google released \n", "LSTM \n\n"]:
        for ent in nlp(text).ents:
            assert not ent[0].is_space and not ent[-1].is_space


def test_empty_one_token_and_long_docs(trained):
    _, nlp = trained
    assert nlp("").ents == () and len(nlp("").spans["crossner"].attrs["scores"]) == 0
    long_doc = nlp(" ".join(["Paris is in France ."] * 300))
    assert len(long_doc) == 1500
    assert {e.label_ for e in long_doc.ents} <= set(nlp.get_pipe("crossner").doc_labels(long_doc))


def model_state(model):
    """Every parameter of a model, thinc's and its torch modules', by layer and name."""
    state = {}
    for i, node in enumerate(model.walk()):
        for name in node.param_names:
            if node.has_param(name):
                state[f"{i}.{node.name}.{name}"] = numpy.asarray(node.get_param(name))
        for shim in node.shims:
            if isinstance(shim, TorchModuleShim):
                for name, tensor in shim.module.state_dict().items():
                    state[f"{i}.{node.name}.{name}"] = tensor.detach().cpu().numpy()
    return state


@pytest.mark.parametrize("name", sorted(V1_V2))
def test_v1_builds_its_v2_model(name):
    """A v1 architecture (head from ``use_crf``) and its v2 (head by ref) are the same model:
    with the same seed they initialise the same parameters, give the same losses over a few
    updates on a toy batch of two domains, then the same entities and probabilities."""
    runs = []
    for settings in V1_V2[name]:
        fix_random_seed(0)
        nlp = make_nlp_with(settings)
        examples = make_examples(nlp, ALL)
        nlp.initialize(lambda: examples)
        model = nlp.get_pipe("crossner").model
        initial = model_state(model)
        optimizer = Adam(0.01)
        losses = []
        for _ in range(3):
            step = {}
            nlp.update(examples, sgd=optimizer, losses=step)
            losses.append(step)
        kinds = [type(torch_module(model.get_ref(ref))).__name__ for ref in ("emitter", "head")]
        runs.append((kinds, initial, losses, model_state(model), annotations(nlp.pipe(docs_of(nlp, ALL)))))
    (kinds1, initial1, losses1, trained1, ents1), (kinds2, initial2, losses2, trained2, ents2) = runs
    assert kinds1 == kinds2
    assert initial1.keys() == initial2.keys() and len(initial1) > 0
    for key in initial1:
        numpy.testing.assert_array_equal(initial1[key], initial2[key], err_msg=key)
    assert losses1 == losses2 and all(step["crossner"] > 0 for step in losses1)
    for key in trained1:
        numpy.testing.assert_array_equal(trained1[key], trained2[key], err_msg=key)
    assert ents1 == ents2

