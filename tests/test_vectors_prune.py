"""`vectors --prune-to`: a table cut to the rows the corpora's tokens read."""
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.tokens import DocBin
from spacy.util import fix_random_seed
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.vectors import VectorsError, make_vectors
from util import AI, NEWS, TINY_FEATURES, blank_with, make_doc, make_examples, predicted_ents, train

WIDTH = 4
# lowercase like GloVe 6B, many words no corpus of the test uses
TABLE = ["the", "hinton", "google", "lstm", "networks", "hochreiter", "imagenet", "london",
         "paris", "france", ".", "zebra", "quokka", "xylophone", "apple", "Apple"]


def write_table(path: Path) -> dict:
    rng = numpy.random.default_rng(0)
    table = {w: rng.uniform(-1, 1, WIDTH).round(4) for w in TABLE}
    path.write_text("\n".join(w + " " + " ".join(f"{x:g}" for x in v) for w, v in table.items()) + "\n",
                    encoding="utf8")
    return table


@pytest.fixture
def corpus(tmp_path):
    nlp = spacy.blank("en")
    db = DocBin(store_user_data=True)
    for domain, words, ents in NEWS + AI:
        db.add(make_doc(nlp, words, ents, domain))
    (tmp_path / "corpus").mkdir()
    db.to_disk(tmp_path / "corpus" / "train.spacy")
    (tmp_path / "raw.txt").write_text("APPLE and the zebra\n", encoding="utf8")
    return tmp_path


def corpus_words():
    return {w for _, words, _ in NEWS + AI for w in words}


def test_pruned_table_reads_the_same_vectors_for_every_corpus_token(tmp_path, corpus):
    table = write_table(tmp_path / "glove.txt")
    make_vectors(str(tmp_path / "glove.txt"), tmp_path / "full", case="uncased")
    summary = make_vectors(
        str(tmp_path / "glove.txt"), tmp_path / "pruned", case="uncased",
        prune_to=[corpus / "corpus", corpus / "raw.txt"],
    )
    full = spacy.load(tmp_path / "full").vocab
    pruned = spacy.load(tmp_path / "pruned").vocab
    words = corpus_words() | {"APPLE", "and", "the", "zebra"}
    for word in words:
        assert pruned.has_vector(word) == full.has_vector(word), word
        numpy.testing.assert_array_equal(pruned[word].vector, full[word].vector)
    # rows read by the corpora: Hochreiter, LSTM, Google, London, Paris, France, networks, "."
    # and, from the raw text, APPLE (row of "apple"), the, zebra; "ImageNet" reads no row of
    # either table (mixed case)
    kept = {"hochreiter", "lstm", "google", "london", "paris", "france", "networks",
            ".", "apple", "the", "zebra"}
    # ... plus the table's last row ("Apple"), kept last: spaCy's StaticVectors reads row -1
    # in the backward pass of tokens without a vector
    assert pruned.vectors.shape == (len(kept) + 1, WIDTH)
    numpy.testing.assert_array_equal(pruned.vectors.data[-1], full.vectors.data[-1])
    assert not pruned.has_vector("quokka") and not pruned.has_vector("Hinton")
    # a kept row keeps all its keys, so other case forms of a corpus word read it too
    numpy.testing.assert_allclose(pruned["ZEBRA"].vector, table["zebra"], rtol=1e-6)
    assert summary.kept_rows == len(kept) + 1 and summary.rows == len(TABLE)
    assert summary.corpus_words == len(words)
    assert summary.covered_words == sum(full.has_vector(w) for w in words)
    assert summary.keys == len(pruned.vectors.key2row) < summary.pruned_from
    # the saved strings are the pruned table's, not the whole table's
    assert "quokka" not in spacy.load(tmp_path / "pruned").vocab.strings


def test_a_model_predicts_the_same_with_the_pruned_table(tmp_path, corpus):
    write_table(tmp_path / "glove.txt")
    make_vectors(str(tmp_path / "glove.txt"), tmp_path / "full", case="uncased")
    make_vectors(str(tmp_path / "glove.txt"), tmp_path / "pruned", case="uncased",
                 prune_to=[corpus / "corpus"])
    results, weights = [], []
    for table in ("full", "pruned"):
        fix_random_seed(0)
        nlp = blank_with({"model": {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 16,
                                    "tok2vec": {**TINY_FEATURES, "include_static_vectors": True,
                                                "dropout": 0.2}}})
        nlp.vocab.vectors = spacy.load(tmp_path / table).vocab.vectors
        # with dropout, and tokens without a vector ("ImageNet", "John") in every batch
        train(nlp, make_examples(nlp, NEWS + AI), n_iter=30, seed=1, drop=0.2)
        static = [node for node in nlp.get_pipe("crossner").model.walk() if node.name == "static_vectors"]
        weights.append(static[0].get_param("W").copy())
        nlp.to_disk(tmp_path / f"pipeline_{table}")
        loaded = spacy.load(tmp_path / f"pipeline_{table}")
        results.append(predicted_ents(loaded, NEWS + AI))
    # training is the same step for step: the projection of the vectors ends up identical
    numpy.testing.assert_array_equal(weights[0], weights[1])
    assert results[0] == results[1]


def test_cli_prune_to_and_its_errors(tmp_path, corpus):
    write_table(tmp_path / "glove.txt")
    runner = CliRunner()
    result = runner.invoke(app, ["vectors", str(tmp_path / "glove.txt"), str(tmp_path / "out"),
                                 "--prune-to", str(corpus / "corpus"), "--prune-to", str(corpus / "raw.txt"),
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "Pruned to the corpora" in result.output and "kept 12 of 16 rows" in result.output
    result = runner.invoke(app, ["vectors", str(tmp_path / "glove.txt"), str(tmp_path / "out2"),
                                 "--prune-to", str(tmp_path / "missing.spacy")])
    assert result.exit_code == 1
    assert f"--prune-to {tmp_path / 'missing.spacy'}: no such file or folder" in result.output
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(VectorsError, match="latin1.txt: not UTF-8"):
        make_vectors(str(tmp_path / "glove.txt"), tmp_path / "out3", prune_to=[tmp_path / "latin1.txt"])


def test_vectors_help_has_no_literal_backslashes():
    result = CliRunner().invoke(app, ["vectors", "--help"])
    assert result.exit_code == 0
    assert "\\" not in result.output
    assert 'spacy_crossner[vectors]' in result.output and "[initialize] vectors" in " ".join(result.output.split())
