"""A pretrained spaCy tok2vec as features (configs/*_sm.cfg), and the context-free check of the
architectures with language-model objectives.

The sourced pipeline is a tiny one built here (util.make_tok2vec_pipeline), standing in for
en_core_web_sm through vars.tok2vec_pipeline.
"""
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.cli.train import train as spacy_train
from spacy.lang.en import English
from spacy.util import load_config, registry

from spacy_crossner.models.embed import contextual_reason, require_context_free
from spacy_crossner.vectors import make_vectors

from util import AI, NEWS, TINY_TOK2VEC_WIDTH, make_tok2vec_pipeline, write_corpus

CONFIGS = Path(__file__).parents[1] / "configs"
SM_CONFIGS = sorted(p.name for p in CONFIGS.glob("*_sm.cfg"))
WORD_CHAR = {"@architectures": "spacy_crossner.WordCharEmbed.v1", "word_width": 8, "word_rows": 100,
             "char_width": 4, "char_filters": 4, "dropout": 0.0}
LISTENER = {"@architectures": "spacy.Tok2VecListener.v1", "width": 16, "upstream": "tok2vec"}
SPACY_TOK2VEC = {
    "@architectures": "spacy.Tok2Vec.v2",
    "embed": {"@architectures": "spacy.MultiHashEmbed.v2", "width": 16, "attrs": ["NORM"], "rows": [100],
              "include_static_vectors": False},
    "encode": {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": 16, "depth": 1, "window_size": 1,
               "maxout_pieces": 2},
}


def resolve(config):
    return registry.resolve({"x": config})["x"]


@pytest.mark.parametrize("config,found", [
    (WORD_CHAR, None),
    (dict(WORD_CHAR, include_static_vectors=True), None),
    (SPACY_TOK2VEC["embed"], None),  # hashed embeddings only: context-free
    (SPACY_TOK2VEC, "expand_window"),
    (dict(SPACY_TOK2VEC, encode={"@architectures": "spacy.TorchBiLSTMEncoder.v1", "width": 16, "depth": 1,
                                 "dropout": 0.0}), "PyTorch"),
    (LISTENER, "listener of a tok2vec component"),
    ({"@layers": "concatenate.v1", "*": {"a": LISTENER, "b": WORD_CHAR}}, "listener of a tok2vec component"),
])
def test_contextual_features_are_recognised(config, found):
    reason = contextual_reason(resolve(config))
    assert reason is None if found is None else found in reason


def small_model(architecture, **settings):
    return {"@architectures": architecture, "hidden_size": 8, "tok2vec": LISTENER, **settings}


@pytest.mark.parametrize("config,message", [
    (small_model("spacy_crossner.PGNBiLSTM.v1"),
     r"spacy_crossner.PGNBiLSTM: lm_weight_source = 1, lm_weight_target = 2 trains language models"),
    (small_model("spacy_crossner.PGNBiLSTM.v1", lm_weight_source=0.0),
     r"lm_weight_source = 0, lm_weight_target = 2 trains"),
    (small_model("spacy_crossner.MultiCellLSTM.v1", lm_weight=0.5),
     r"spacy_crossner.MultiCellLSTM: lm_weight = 0.5 trains language models"),
])
def test_language_models_refuse_contextual_features(config, message):
    if "PGN" in config["@architectures"]:
        config = dict(config, lm_weight_target=config.get("lm_weight_target", 2.0))
    with pytest.raises(ValueError, match=message) as err:
        resolve(config)
    text = str(err.value)
    assert "listener of a tok2vec component" in text and "spacy_crossner.WordCharEmbed.v1" in text
    assert "to 0" in text


@pytest.mark.parametrize("config", [
    small_model("spacy_crossner.PGNBiLSTM.v1", lm_weight_source=0.0, lm_weight_target=0.0),
    small_model("spacy_crossner.MultiCellLSTM.v1", lm_weight=0.0),
    dict(small_model("spacy_crossner.MultiCellLSTM.v1", lm_weight=0.5), tok2vec=WORD_CHAR),
    dict(small_model("spacy_crossner.PGNBiLSTM.v1"), tok2vec=dict(WORD_CHAR, include_static_vectors=True)),
])
def test_context_free_features_or_no_language_model_build(config):
    assert resolve(config).name in ("pgn_bilstm", "multi_cell_lstm")


def test_require_context_free_checks_only_when_a_weight_is_on():
    listener = resolve(LISTENER)
    require_context_free(listener, architecture="x", lm_weights={"lm_weight": 0.0})
    with pytest.raises(ValueError, match="x: lm_weight = 0.1"):
        require_context_free(listener, architecture="x", lm_weights={"lm_weight": 0.1})


def test_a_config_with_a_listener_and_language_models_fails_at_load():
    config = load_config(CONFIGS / "pgn_sda_sm.cfg", overrides={"components.crossner.model.lm_weight_target": 1.0},
                         interpolate=True)
    with pytest.raises(ValueError, match="lm_weight_target = 1 trains language models"):
        resolve(config["components"]["crossner"]["model"])


# What a *_sm.cfg changes in its word/char counterpart; everything else must stay equal.
SM_CHANGES = {
    "bilstm_target_sm.cfg": "bilstm_target.cfg", "bilstm_joint_sm.cfg": "bilstm_joint.cfg",
    "multi_cell_sda_sm.cfg": "multi_cell_sda.cfg", "moee_zero_sm.cfg": "moee_zero.cfg",
    "pgn_sda_sm.cfg": "pgn_sda.cfg",
}


def test_there_is_an_sm_config_for_every_word_level_architecture():
    assert set(SM_CONFIGS) == set(SM_CHANGES)


@pytest.mark.parametrize("name", SM_CONFIGS)
def test_sm_config_differs_from_its_base_only_in_the_features(name):
    sm = load_config(CONFIGS / name, interpolate=False)
    base = load_config(CONFIGS / SM_CHANGES[name], interpolate=False)
    assert sm["components"].pop("tok2vec") == {"source": "${vars.tok2vec_pipeline}"}
    assert sm["components"]["crossner"]["model"].pop("tok2vec") == {
        "@architectures": "spacy.Tok2VecListener.v1", "width": "${vars.tok2vec_width}", "upstream": "tok2vec"}
    base["components"]["crossner"]["model"].pop("tok2vec")
    assert sm["vars"].pop("tok2vec_pipeline") == "en_core_web_sm"
    assert sm["vars"].pop("tok2vec_width") == 96
    assert sm["nlp"]["pipeline"] == ["tok2vec"] + base["nlp"]["pipeline"]
    assert sm["initialize"].pop("after_init") == {
        "@callbacks": "spacy_crossner.check_listener_widths.v1", "setting": "vars.tok2vec_width"}
    assert base["initialize"].pop("after_init") is None
    sm["nlp"]["pipeline"] = base["nlp"]["pipeline"]
    if name.startswith("pgn"):  # the LMs are off: a listener is contextual
        model = sm["components"]["crossner"]["model"]
        assert (model.pop("lm_weight_source"), model.pop("lm_weight_target")) == (0.0, 0.0)
        base["components"]["crossner"]["model"].pop("lm_weight_source")
        base["components"]["crossner"]["model"].pop("lm_weight_target")
    assert sm == base
    header = (CONFIGS / name).read_text().splitlines()[:6]
    assert any("frozen_components" in line and "annotating_components" in line for line in header)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sm")
    paths = write_corpus(root)
    make_tok2vec_pipeline(root / "tiny_tok2vec")
    return root, paths


def train_sm(root, paths, name, out, **extra):
    overrides = {f"paths.{k}": v for k, v in paths.items()}
    overrides.update({
        "training.max_steps": 3, "training.eval_frequency": 1, "vars.target_upsample": 1,
        "vars.tok2vec_pipeline": str(root / "tiny_tok2vec"), "vars.tok2vec_width": TINY_TOK2VEC_WIDTH,
        **extra,
    })
    spacy_train(CONFIGS / name, root / out, overrides=overrides, use_gpu=-1)
    return spacy.load(root / out / "model-last")


def ents(doc):
    return [(e.start, e.end, e.label_) for e in doc.ents]


def test_a_listener_of_the_wrong_width_is_refused_naming_the_setting(setup):
    root, paths = setup
    with pytest.raises(ValueError, match=(
        f"The listener of 'crossner' expects 24-wide vectors, but the tok2vec component 'tok2vec' gives "
        f"{TINY_TOK2VEC_WIDTH}: set vars.tok2vec_width = {TINY_TOK2VEC_WIDTH}"
    )):
        train_sm(root, paths, "bilstm_target_sm.cfg", "wrong_width", **{"vars.tok2vec_width": 24})


@pytest.mark.parametrize("frozen", [False, True])
def test_sourced_tok2vec_is_updated_or_frozen(setup, frozen):
    root, paths = setup
    extra = {"training.frozen_components": ["tok2vec"], "training.annotating_components": ["tok2vec"]} if frozen else {}
    nlp = train_sm(root, paths, "bilstm_target_sm.cfg", f"target_sm_{frozen}", **extra)
    source = spacy.load(root / "tiny_tok2vec")
    assert nlp.pipe_names == ["tok2vec", "crossner"]
    unchanged = nlp.get_pipe("tok2vec").model.to_bytes() == source.get_pipe("tok2vec").model.to_bytes()
    assert unchanged == frozen
    # the listener is wired to the sourced tok2vec and sized by vars.tok2vec_width
    assert nlp.get_pipe("tok2vec").listening_components == ["crossner"]
    assert nlp.get_pipe("crossner").model.get_ref("features").get_dim("nO") == TINY_TOK2VEC_WIDTH
    texts = [" ".join(words) for _, words, _ in AI + NEWS]
    expected = [ents(nlp(t)) for t in texts]
    assert [ents(d) for d in nlp.pipe(texts)] == expected
    reloaded = English.from_config(nlp.config).from_bytes(nlp.to_bytes())
    assert [ents(reloaded(t)) for t in texts] == expected
    tensors = [reloaded(t).tensor for t in texts[:1]]
    numpy.testing.assert_array_equal(tensors[0], nlp(texts[0]).tensor)


def test_sourced_tok2vec_and_static_vectors_together(setup):
    """The "both" inputs of benchmarks/pretrained_inputs.py: the listener concatenated with
    WordCharEmbed reading static vectors."""
    root, paths = setup
    words = sorted({w.lower() for _, sentence, _ in NEWS + AI for w in sentence})
    table = root / "glove.txt"
    rng = numpy.random.default_rng(0)
    table.write_text("".join(f"{w} " + " ".join(f"{x:.3f}" for x in rng.uniform(-1, 1, 4)) + "\n" for w in words))
    make_vectors(str(table), root / "vectors", case="uncased")
    config = load_config(CONFIGS / "bilstm_joint_sm.cfg", interpolate=False)
    listener = config["components"]["crossner"]["model"]["tok2vec"]
    config["components"]["crossner"]["model"]["tok2vec"] = {
        "@layers": "concatenate.v1",
        "*": {"listener": listener, "word_char": dict(WORD_CHAR, include_static_vectors=True)},
    }
    config.to_disk(root / "both.cfg")
    overrides = {f"paths.{k}": v for k, v in paths.items()}
    overrides.update({
        "paths.vectors": str(root / "vectors"), "training.max_steps": 3, "training.eval_frequency": 1,
        "vars.tok2vec_pipeline": str(root / "tiny_tok2vec"), "vars.tok2vec_width": TINY_TOK2VEC_WIDTH,
    })
    spacy_train(root / "both.cfg", root / "both", overrides=overrides, use_gpu=-1)
    nlp = spacy.load(root / "both" / "model-last")
    features = nlp.get_pipe("crossner").model.get_ref("features")
    assert nlp.get_pipe("crossner").model.get_dim("nI") == TINY_TOK2VEC_WIDTH + 8 + 4 + 8
    assert features.layers[1].get_ref("static_vectors").get_dim("nM") == 4
    assert nlp.vocab.vectors.find(key="Hochreiter") == nlp.vocab.vectors.find(key="hochreiter") >= 0
    assert nlp.get_pipe("tok2vec").listening_components == ["crossner"]
