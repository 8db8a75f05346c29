"""The block that initialization prints: domains, mix, target, features, vectors."""
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.training.initialize import init_nlp
from spacy.util import load_config
from spacy.vectors import Vectors

from spacy_crossner.training_summary import TITLE, print_training_summary, vector_case
from util import AI, NEWS, TINY_FEATURES, blank_with, make_examples, write_corpus

CONFIGS = Path(__file__).parents[1] / "configs"


def init(config_name, paths, capsys, **overrides):
    overrides = {**{f"paths.{k}": v for k, v in paths.items()}, **overrides}
    config = load_config(CONFIGS / config_name, overrides=overrides, interpolate=False)
    nlp = init_nlp(config)
    out = capsys.readouterr().out
    assert TITLE in out
    return nlp, out[out.index(TITLE):].splitlines()


def line(lines, start):
    found = [text.strip() for text in lines if text.strip().startswith(start)]
    assert found, f"no line starting with {start!r} in {lines}"
    return found[0]


def test_joint_config_prints_domains_mix_target_and_features(tmp_path, capsys):
    paths = write_corpus(tmp_path)
    nlp, lines = init(
        "bilstm_joint.cfg", {k: paths[k] for k in ("source_train", "target_train", "target_dev")},
        capsys,
    )
    assert line(lines, "Training corpus") == (
        "Training corpus (from [corpora.train]): one pass = 33 docs; share = of the labelled docs of a pass"
    )
    # the configs' v1 reader: target x10 -> 30 of 33 docs per pass
    assert line(lines, "ai").split() == ["ai", "3", "6", "30", "x10.00", "90.9%"]
    assert line(lines, "news").split() == ["news", "3", "6", "3", "x1.00", "9.1%"]
    assert line(lines, "labels of ai") == (
        "labels of ai (6): algorithm 1, metrics 1, misc 1, organisation 1, product 1, researcher 1"
    )
    assert line(lines, "labels of news") == "labels of news (3): location 3, organisation 1, person 2"
    assert line(lines, "Target domain") == (
        "Target domain (docs without doc._.domain): ai, inferred from the target corpus "
        "(set --vars.target_domain to choose another)"
    )
    assert line(lines, "Model:").startswith("Model: spacy_crossner.BiLSTMCRF.v1 (hidden_size=128")
    assert "include_static_vectors=False" in line(lines, "tok2vec: spacy_crossner.WordCharEmbed.v1")
    assert line(lines, "Vectors") == "Vectors: none"


def test_v2_mix_raw_text_and_vectors_coverage(tmp_path, capsys):
    paths = write_corpus(tmp_path)
    (tmp_path / "raw.txt").write_text("LSTM is an algorithm\n", encoding="utf8")
    words = ["lstm", "london", "paris", "google", "."]
    nlp = spacy.blank("en")
    vectors = Vectors(strings=nlp.vocab.strings, data=numpy.ones((len(words), 4), dtype="f"), keys=words)
    for row, word in enumerate(words):  # "." has no other forms: 5 + 4 + 4 keys
        nlp.vocab.strings.add(word.upper())
        nlp.vocab.strings.add(word.title())
        vectors.add(word.upper(), row=row)
        vectors.add(word.title(), row=row)
    vectors.name = "tiny"
    nlp.vocab.vectors = vectors
    nlp.to_disk(tmp_path / "vectors")
    overrides = {
        "corpora.train.@readers": "spacy_crossner.MultiDomainCorpus.v2",
        "corpora.train.domains": {
            "source": {"path": paths["source_train"]},
            "target": {"path": paths["target_train"], "share": 0.5},
            "raw": {"path": str(tmp_path / "raw.txt"), "raw": True, "domain": "ai", "upsample": 2},
        },
        "components.crossner.model.tok2vec.include_static_vectors": True,
    }
    _, lines = init(
        "bilstm_joint.cfg",
        {"target_dev": paths["target_dev"], "vectors": str(tmp_path / "vectors")},
        capsys, **overrides,
    )
    assert line(lines, "ai ").split()[:6] == ["ai", "3", "6", "3", "x1.00", "50.0%"]
    assert line(lines, "ai (raw text)").split() == ["ai", "(raw", "text)", "1", "-", "2", "x2.00", "-"]
    assert line(lines, "Vectors") == "Vectors: tiny, 5 rows x 4, 13 keys, read by the features"
    assert line(lines, "case:") == (
        "case: uncased table, Title-case and UPPER forms read their lowercase word's row"
    )
    # tokens: NEWS 3 sentences (6+6+5 = 17), AI (7+6+4 = 17), raw 4 = 38; with a vector:
    # London, Paris, ".", ".", LSTM (x2, AI and raw), Google, "." x2 more
    covered = sum(
        t in {"lstm", "london", "paris", "google", ".", "LSTM", "London", "Paris", "Google"}
        for _, ws, _ in NEWS + AI for t in ws
    ) + 1
    assert line(lines, "coverage") == (
        f"coverage of the training tokens: {100 * covered / 38:.1f}% of 38 tokens, "
        f"5 of {len({t for _, ws, _ in NEWS + AI for t in ws} | {'is', 'an', 'algorithm'})} distinct words"
    )


def test_pipeline_built_in_code_reads_one_pass_of_get_examples(capsys):
    nlp = blank_with({"model": {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 8,
                                "tok2vec": TINY_FEATURES}})
    examples = make_examples(nlp, NEWS + AI + AI)
    nlp.initialize(lambda: examples)
    out = capsys.readouterr().out
    assert "Training corpus (from the training examples): one pass = 9 docs" in out
    ai = [text.split() for text in out.splitlines() if text.strip().startswith("ai ")][0]
    # built in code, the six AI examples are distinct docs
    assert ai == ["ai", "6", "12", "6", "x1.00", "66.7%"]
    assert "Target domain: none (every doc must carry its doc._.domain)" in out


def test_vector_case_of_a_cased_table():
    nlp = spacy.blank("en")
    vectors = Vectors(strings=nlp.vocab.strings, data=numpy.ones((2, 3), dtype="f"), keys=["apple", "Apple"])
    assert vector_case(vectors) == "keys as in the table: a token reads the row of its exact text"
