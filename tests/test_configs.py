"""Every file in configs/ loads with validation, initializes and trains a few steps.

Pre-train configs feed the fine-tune configs, as in the project's two-stage runs.
"""
from pathlib import Path

import pytest
import spacy
from spacy.cli.train import train
from spacy.tokens import DocBin
from spacy.util import load_config

from util import AI, NEWS, TINY_TOK2VEC_WIDTH, make_doc, make_tok2vec_pipeline

CONFIGS = Path(__file__).parents[1] / "configs"
ALL_CONFIGS = sorted(p.name for p in CONFIGS.glob("*.cfg"))
# configs whose name does not start with ARCH_SETTING
SETTINGS = {"multi_cell_sda.cfg": "joint", "multi_cell_sda_trf.cfg": "joint", "multi_cell_uda.cfg": "zero",
            "pgn_sda.cfg": "joint", "pgn_sda_paper.cfg": "joint", "pgn_uda.cfg": "zero"}
STAGES = {"bilstm_finetune.cfg": "bilstm_pretrain.cfg", "trf_finetune.cfg": "trf_pretrain.cfg",
          **{f"trf_finetune_{part}.cfg": "trf_pretrain.cfg"
             for part in ("tuned", "warmup", "head_lr", "layer_decay", "mentions")},
          "label_aware_target.cfg": "label_aware_source.cfg"}
SETTINGS.update({"label_aware_source.cfg": "pretrain", "label_aware_target.cfg": "finetune"})
# *_sm.cfg: a pretrained spaCy tok2vec as features, sourced from a tiny stand-in pipeline
SETTINGS.update({"multi_cell_sda_sm.cfg": "joint", "pgn_sda_sm.cfg": "joint"})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    nlp = spacy.blank("en")
    paths = {}
    for name, sentences in (("source", NEWS), ("target", AI)):
        db = DocBin(store_user_data=True)
        for domain, words, ents in sentences:
            db.add(make_doc(nlp, words, ents, domain))
        paths[f"{name}_train"] = paths[f"{name}_dev"] = str(root / f"{name}.spacy")
        db.to_disk(root / f"{name}.spacy")
    # unsupervised adaptation: the target's text as raw text (the reader drops its entities)
    # and the shared entity dictionary
    paths["target_raw"] = paths["target_train"]
    paths["source_raw"] = paths["source_train"]
    paths["dictionary"] = str(Path(__file__).parents[2] / "shared" / "data" / "dictionaries" / "conll2003")
    return paths


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data):
    """Train configs on demand, once each: name -> output directory."""
    outputs = {}
    root = tmp_path_factory.mktemp("training")

    def get(name):
        if name not in outputs:
            overrides = {f"paths.{k}": v for k, v in data.items()}
            overrides.update({
                "training.max_steps": 2,
                "training.eval_frequency": 1,
                "vars.target_domain": "ai",
                "vars.target_upsample": 2,
            })
            if name in STAGES:
                overrides["paths.pretrained"] = str(get(STAGES[name]) / "model-last")
            if "spacy_crossner.warmup_linear.v1" in (CONFIGS / name).read_text():
                # the warm-up must end before max_steps (the schedule checks it)
                overrides["training.optimizer.learn_rate.warmup_steps"] = 1
            if name.endswith("_sm.cfg"):
                if not (root / "tok2vec_pipeline").exists():
                    make_tok2vec_pipeline(root / "tok2vec_pipeline")
                overrides["vars.tok2vec_pipeline"] = str(root / "tok2vec_pipeline")
                overrides["vars.tok2vec_width"] = TINY_TOK2VEC_WIDTH
            out = root / name.replace(".cfg", "")
            train(CONFIGS / name, out, overrides=overrides, use_gpu=-1)
            outputs[name] = out
        return outputs[name]

    return get


def test_there_are_configs_for_every_setting():
    for arch in ("bilstm", "trf"):
        for setting in ("target", "joint", "pretrain", "finetune"):
            assert f"{arch}_{setting}.cfg" in ALL_CONFIGS


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_config_loads_with_validation(name):
    config = load_config(CONFIGS / name, interpolate=False)
    assert config["nlp"]["pipeline"][-1] == "crossner"
    assert "gpu_id" not in config.to_str(), "GPU is the --gpu-id flag, never a config setting"
    text = (CONFIGS / name).read_text()
    assert text.startswith("# "), "a config starts with a comment saying what it is and how to run it"


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_config_initializes_and_trains(name, trained):
    out = trained(name)
    nlp = spacy.load(out / "model-best")
    pipe = nlp.get_pipe("crossner")
    setting = SETTINGS.get(name) or name.split("_")[1].replace(".cfg", "")
    expected_domains = {"target": {"ai"}, "joint": {"news", "ai"}, "pretrain": {"news"}, "finetune": {"news", "ai"},
                        "zero": {"conll2003"}, "sda": {"news", "ai"}, "uda": {"conll2003"}}
    assert set(pipe.domains) == expected_domains[setting]
    if setting in ("zero", "uda"):  # zero-resource / unsupervised: source only, targets tagged through domain_aliases
        assert pipe.cfg["domain_aliases"]["ai"] == "conll2003"
    elif setting != "pretrain":
        assert pipe.target_domain == "ai"
        assert "product" in pipe.label_data["ai"]
    doc = nlp("Google released TensorFlow .")
    # Entities carry the labels of the domain the doc is tagged with, and a probability each.
    assert {e.label_ for e in doc.ents} <= set(pipe.doc_labels(doc))
    scores = doc.spans["crossner"].attrs["scores"]
    assert len(scores) == len(doc.ents) and all(0 < p <= 1 for p in scores)
