"""TransformerTagger on the bundled MiniLM: the BERT-tagger and BERT-CRF baselines."""
import pytest
import spacy
from thinc.api import Adam, fix_random_seed

from spacy_crossner.misc import bundled_transformer, transformer_name
from util import AI, NEWS, gold_ents, make_examples, minilm_pipeline, predicted_ents, train_more


def make_nlp(use_crf: bool):
    return minilm_pipeline({"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": use_crf,
                            "dropout": 0.0})


def test_transformer_name_defaults_to_bundled_minilm():
    assert transformer_name(None) == bundled_transformer()
    assert transformer_name("") == bundled_transformer()
    assert transformer_name("some/dir") == "some/dir"


@pytest.mark.parametrize("use_crf", [False, True])
def test_overfits_and_roundtrips(use_crf, tmp_path):
    fix_random_seed(0)
    nlp = make_nlp(use_crf)
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    train_more(nlp, examples, 30, Adam(0.0005))
    expected = predicted_ents(nlp, NEWS + AI)
    assert expected == gold_ents(NEWS + AI)
    assert nlp.evaluate(make_examples(nlp, NEWS + AI))["ents_f"] == 1.0
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert predicted_ents(loaded, NEWS + AI) == expected
    fresh = make_nlp(use_crf)
    fresh.from_bytes(nlp.to_bytes())
    assert predicted_ents(fresh, NEWS + AI) == expected
    texts = ["Google released TensorFlow .", "", "LSTM"]
    piped = [[(e.text, e.label_) for e in d.ents] for d in loaded.pipe(texts)]
    called = [[(e.text, e.label_) for e in loaded(t).ents] for t in texts]
    assert piped == called
