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
from thinc.api import fix_random_seed

from spacy_crossner import set_domain
from util import AI, NEWS, TINY_FEATURES, blank_with, gold_ents, make_examples, predicted_ents, train

FEATURES = TINY_FEATURES
ARCHITECTURES = {
    "bilstm_crf": {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "dropout": 0.0},
    "bilstm_softmax": {
        "@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "dropout": 0.0, "use_crf": False,
    },
    "transformer_tagger_crf": {"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True, "dropout": 0.0},
    "multi_cell": {"@architectures": "spacy_crossner.MultiCellLSTM.v1", "hidden_size": 16, "dropout": 0.0},
    "pgn": {"@architectures": "spacy_crossner.PGNBiLSTM.v1", "hidden_size": 16, "dropout": 0.0, "lm_samples": 5},
    "moee": {"@architectures": "spacy_crossner.MoEE.v1", "hidden_size": 32, "depth": 1, "expert_width": 16, "dropout": 0.0},
    "label_aware": {"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 16, "hidden_width": 16},
}
ALL = NEWS + AI


def make_nlp(name):
    model = dict(ARCHITECTURES[name], tok2vec=FEATURES)
    return blank_with({"model": model, "target_domain": "ai"})


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
