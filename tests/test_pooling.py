"""spacy_crossner.reduce_first.v1: the first word piece of each token, zeros for a token the
word-piece tokenizer drops (U+2060 WORD JOINER in Wikipedia text crashed every transformer
pipeline with thinc's reduce_first.v1), and a pipeline saved with thinc's layer loads with ours."""
import copy

import numpy
import pytest
import spacy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Adam, Ragged, fix_random_seed

from util import AI, NEWS, MINILM_LISTENER, make_examples, minilm_pipeline, predicted_ents, train_more

OURS = "spacy_crossner.reduce_first.v1"


def pool(layer, lengths, width=3):
    X = numpy.arange(sum(lengths) * width, dtype="f").reshape(-1, width)
    return X, layer(Ragged(X, numpy.asarray(lengths, dtype="i")), is_train=True)


def test_tokens_with_pieces_pool_as_thinc_does():
    ours, thinc = registry.layers.get(OURS)(), registry.layers.get("reduce_first.v1")()
    X, (Y, backprop) = pool(ours, [2, 1, 3])
    _, (Y_thinc, backprop_thinc) = pool(thinc, [2, 1, 3])
    numpy.testing.assert_array_equal(Y, Y_thinc)
    dY = numpy.random.default_rng(0).normal(size=Y.shape).astype("f")
    numpy.testing.assert_array_equal(backprop(dY).dataXd, backprop_thinc(dY).dataXd)
    assert ours.name == thinc.name == "reduce_first"


def test_a_token_without_pieces_gets_zeros_and_no_gradient():
    layer = registry.layers.get(OURS)()
    X, (Y, backprop) = pool(layer, [2, 0, 3, 1, 0])
    numpy.testing.assert_array_equal(Y, [X[0], [0, 0, 0], X[2], X[5], [0, 0, 0]])
    dY = numpy.arange(15, dtype="f").reshape(5, 3) + 1
    dX = backprop(dY).dataXd
    assert dX.shape == X.shape
    numpy.testing.assert_array_equal(dX, [dY[0], [0, 0, 0], dY[2], [0, 0, 0], [0, 0, 0], dY[3]])
    with pytest.raises(ValueError, match="lengths must be > 0"):  # what thinc's layer does
        pool(registry.layers.get("reduce_first.v1")(), [2, 0, 3, 1, 0])
    # no token has a piece
    Y, _ = layer(Ragged(numpy.zeros((0, 3), dtype="f"), numpy.asarray([0, 0], dtype="i")), is_train=False)
    numpy.testing.assert_array_equal(Y, numpy.zeros((2, 3), dtype="f"))


def tagger(pooling: str):
    listener = copy.deepcopy(MINILM_LISTENER)
    listener["pooling"] = {"@layers": pooling}
    nlp = minilm_pipeline({"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True,
                           "dropout": 0.0})
    nlp.replace_pipe("crossner", "crossner", config={
        "target_domain": "ai",
        "model": {"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True, "dropout": 0.0,
                  "tok2vec": listener}})
    return nlp


def test_a_pipeline_tags_text_with_a_word_joiner_and_loads_from_thincs_layer(tmp_path):
    fix_random_seed(0)
    old = tagger("reduce_first.v1")
    examples = make_examples(old, NEWS + AI)
    old.initialize(lambda: examples)
    train_more(old, examples, 20, Adam(0.0005))
    words = ["Google", "\u2060\u2060", "released", "TensorFlow", "."]
    with pytest.raises(ValueError, match="lengths must be > 0"):
        old(Doc(old.vocab, words=words))
    expected = predicted_ents(old, NEWS + AI)
    old.to_disk(tmp_path / "model")
    # the saved pipeline with our layer named in its config: same weights, same entities
    config = tmp_path / "model" / "config.cfg"
    config.write_text(config.read_text().replace('"reduce_first.v1"', f'"{OURS}"'))
    loaded = spacy.load(tmp_path / "model")
    assert predicted_ents(loaded, NEWS + AI) == expected
    doc = loaded(Doc(loaded.vocab, words=words))
    assert len(doc) == 5 and all(e.end <= 5 for e in doc.ents)
    # the training path too: a batch with the token updates the weights, its loss finite
    joined = [("ai", words, [(0, 1, "organisation"), (3, 4, "product")])]
    losses = loaded.update(make_examples(loaded, AI + joined), sgd=Adam(0.0001))
    assert numpy.isfinite(losses["crossner"]) and losses["crossner"] > 0
