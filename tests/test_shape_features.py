"""Each token's shape beside the token features (``spacy_crossner.WithShape.v1``, init-config's
``--features transformer_shape``): the case and digits an uncased transformer lowercases away."""
import sys
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.cli.train import train
from spacy.util import registry
from spacy.ml.featureextractor import FeatureExtractor
from thinc.api import HashEmbed, Model, chain, concatenate, with_array

import spacy_crossner  # noqa: F401  (registers the architecture)
from spacy_crossner.init_config import FineTune, InitConfigError, compose, config_text
from util import write_corpus

WITH_SHAPE = registry.architectures.get("spacy_crossner.WithShape.v1")


def table(model):
    """The one hash table (param E) under ``model``."""
    tables = [node for node in model.walk() if node.has_param("E")]
    assert len(tables) == 1
    return tables[0]


def uncased_tok2vec(width=8):
    """A stand-in for an uncased encoder: an embedding of the lowercase form only."""
    model = chain(FeatureExtractor(["LOWER"]), with_array(HashEmbed(nO=width, nV=50, column=0, seed=3)))
    model.set_dim("nO", width)
    return model


def test_shape_tells_apart_what_an_uncased_encoder_cannot():
    nlp = spacy.blank("en")
    docs = [nlp("Apple bought apple farms in the US for us"), nlp("ok 1999")]
    plain = uncased_tok2vec()
    plain.initialize(X=docs)
    model = WITH_SHAPE(uncased_tok2vec(), width=4, rows=100)
    model.initialize(X=docs)
    assert model.get_dim("nO") == 8 + 4
    plain_out, out = plain.predict(docs), model.predict(docs)
    assert [o.shape for o in out] == [(9, 12), (2, 12)]
    words = [t.text for t in docs[0]]
    apple, Apple, US, us = words.index("apple"), words.index("Apple"), words.index("US"), words.index("us")
    # the uncased features are the same for the two forms of a word ...
    numpy.testing.assert_array_equal(plain_out[0][Apple], plain_out[0][apple])
    numpy.testing.assert_array_equal(plain_out[0][US], plain_out[0][us])
    # ... the features with the shape are not, and the first part is still the uncased ones
    assert not numpy.allclose(out[0][Apple], out[0][apple])
    assert not numpy.allclose(out[0][US], out[0][us])
    numpy.testing.assert_array_equal(out[0][Apple, :8], out[0][apple, :8])
    # tokens of one shape ("Xxxxx": Apple, and "xxxx": bought, apple, farms) share the shape part
    bought, farms = words.index("bought"), words.index("farms")
    numpy.testing.assert_array_equal(out[0][bought, 8:], out[0][farms, 8:])
    numpy.testing.assert_array_equal(out[0][apple, 8:], out[0][farms, 8:])


def test_the_gradient_reaches_both_parts():
    nlp = spacy.blank("en")
    docs = [nlp("Apple bought apple farms")]
    model = WITH_SHAPE(uncased_tok2vec(), width=4, rows=100)
    model.initialize(X=docs)
    out, backprop = model.begin_update(docs)
    backprop([model.ops.alloc2f(*out[0].shape) + 1.0])
    assert numpy.abs(table(model.get_ref("shape")).get_grad("E")).sum() > 0
    assert numpy.abs(table(model.get_ref("tok2vec")).get_grad("E")).sum() > 0


def listener_like(width=8):
    """uncased_tok2vec, but an empty doc gets a (0, 0) array, as a transformer listener gives one
    (spacy-transformers' trfs2arrays), and takes back a gradient of that shape."""
    inner = uncased_tok2vec(width)

    def forward(model, docs, is_train):
        out, bp = inner(docs, is_train)
        out = [o if len(doc) else model.ops.alloc2f(0, 0) for o, doc in zip(out, docs)]

        def backprop(d_out):
            for d, doc in zip(d_out, docs):
                assert d.shape == ((0, 0) if not len(doc) else (len(doc), width))
            return bp([d if len(doc) else model.ops.alloc2f(0, width) for d, doc in zip(d_out, docs)])

        return out, backprop

    return Model("listener_like", forward, layers=[inner], init=lambda model, X=None, Y=None: inner.initialize(X=X))


def test_empty_docs_beside_others_keep_their_place_and_width():
    nlp = spacy.blank("en")
    docs = [nlp("Apple"), nlp(""), nlp("in the US")]
    model = WITH_SHAPE(listener_like(), width=4, rows=100)
    model.initialize(X=docs)
    out, backprop = model.begin_update(docs)
    assert [o.shape for o in out] == [(1, 12), (0, 12), (3, 12)]
    assert backprop([o + 1.0 for o in out]) is docs
    # only empty docs: the width is the tok2vec's where it has one
    alone, _ = model.begin_update([nlp("")])
    assert alone[0].shape[0] == 0


def test_a_concatenated_tok2vec_is_wrapped_not_changed():
    both = concatenate(uncased_tok2vec(), uncased_tok2vec())
    layers = list(both.layers)
    model = WITH_SHAPE(both, width=4, rows=100)
    assert both.layers == layers and model.get_ref("tok2vec") is both and model.name == "with_shape"


@pytest.mark.parametrize("settings", [{"width": 0}, {"rows": 0}])
def test_sizes_below_one_are_errors_naming_them(settings):
    with pytest.raises(ValueError, match="WithShape.v1: width and rows must be >= 1"):
        WITH_SHAPE(uncased_tok2vec(), **settings)


def test_init_config_wraps_the_listener_and_keeps_the_transformer_combos():
    config = compose(arch="trf", features="transformer_shape", setting="pretrain")
    tok2vec = config["components"]["crossner"]["model"]["tok2vec"]
    assert tok2vec["@architectures"] == "spacy_crossner.WithShape.v1"
    plain = compose(arch="trf", features="transformer", setting="pretrain")
    assert tok2vec["tok2vec"] == plain["components"]["crossner"]["model"]["tok2vec"]
    assert tok2vec["tok2vec"]["grad_factor"] == 1.0
    # MoEE's pieces for a fine-tuned transformer (no BiLSTM, no CRF) apply to it as well
    moee = compose(arch="moee", features="transformer_shape", setting="zero")["components"]["crossner"]["model"]
    assert (moee["depth"], moee["use_crf"]) == (0, False)
    # and the fine-tune's group rates, which refuse features without a fine-tuned transformer
    tune = FineTune(head_lr_multiplier=10.0)
    grouped = compose(arch="trf", features="transformer_shape", setting="finetune", fine_tune=tune)
    assert grouped["training"]["optimizer"]["head_lr_multiplier"] == 10.0
    with pytest.raises(InitConfigError, match="transformer or transformer_shape"):
        compose(arch="trf", features="transformer_frozen", setting="finetune", fine_tune=tune)


def test_minilm_with_shape_pretrains_fine_tunes_saves_and_loads(tmp_path):
    """Stage 1 with the shape features, stage 2 sourcing it (as trf_finetune_shape trains), a few
    steps each; the loaded pipeline has the shape table and tags as the saved one did."""
    paths = {f"paths.{key}": path for key, path in write_corpus(tmp_path).items()}
    short = {"training.max_steps": 3, "training.eval_frequency": 1}
    pretrain = tmp_path / "pretrain.cfg"
    pretrain.write_text(config_text(arch="trf", features="transformer_shape", setting="pretrain", overrides=short))
    # another seed than stage 2's: a table drawn afresh in stage 2 would not be stage 1's
    train(pretrain, tmp_path / "stage1", overrides={**paths, "system.seed": 1}, use_gpu=-1)
    finetune = tmp_path / "finetune.cfg"
    finetune.write_text(config_text(arch="trf", features="transformer", setting="finetune", overrides=short))
    train(finetune, tmp_path / "stage2", use_gpu=-1, overrides={
        **paths, "paths.pretrained": str(tmp_path / "stage1" / "model-last"), "vars.target_domain": "ai"})
    loaded = spacy.load(tmp_path / "stage2" / "model-last")
    tok2vec = loaded.get_pipe("crossner").model.get_ref("features")
    assert tok2vec.name == "with_shape"
    assert loaded.get_pipe("crossner").model.get_dim("nI") == 384 + 32
    stage1 = spacy.load(tmp_path / "stage1" / "model-last").get_pipe("crossner").model.get_ref("features")
    # stage 2 started from stage 1's shape table and trained it further
    shapes, shapes1 = table(tok2vec.get_ref("shape")).get_param("E"), table(stage1.get_ref("shape")).get_param("E")
    assert shapes.shape == (1000, 32) and not numpy.array_equal(shapes, shapes1)
    assert numpy.abs(shapes - shapes1).max() < 0.01  # 3 Adam steps of 5e-5; a fresh table differs by ~0.1
    text = "Google released TensorFlow in 2015 ."
    before = [(e.text, e.label_) for e in loaded(text).ents]
    # an empty text in a batch with others (the listener gives it a (0, 0) array)
    docs = list(loaded.pipe([text, "", "LSTM"]))
    assert [(e.text, e.label_) for e in docs[0].ents] == before and not docs[1].ents
    loaded.to_disk(tmp_path / "again")
    assert [(e.text, e.label_) for e in spacy.load(tmp_path / "again")(text).ents] == before


def test_the_training_log_names_the_shape_features():
    """project/scripts/train.py's [features] line: the transformer, and the shape beside it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "project" / "scripts"))
    import train as project_train

    plain = project_train.describe(dict(compose(arch="trf", features="transformer", setting="pretrain")))
    shaped = project_train.describe(dict(compose(arch="trf", features="transformer_shape", setting="pretrain")))
    assert shaped == plain + " + each token's shape (a 32-wide embedding)"
