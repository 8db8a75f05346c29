"""Tests of spacy_crossner.convert: DocBins, summaries, raw text and the CLI."""
from pathlib import Path

import pytest
from spacy.tokens import DocBin
from spacy.vocab import Vocab
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.convert import (
    ConversionError,
    convert,
    list_data_files,
    summary_table,
    write_raw_text,
)
from spacy_crossner.domains import get_domain
from spacy_crossner.formats import FormatError

TRAIN = (
    "EU\tB-organisation\nrejects\tO\nGerman\tB-misc\ncall\tO\n\n"
    "Peter\tB-person\nBlackburn\tI-person\n\n"
    "nothing\tO\nhere\tO\n\n"
)
DEV = "stray\tI-person\nname\tI-person\n\nTuring\tB-researcher\n"  # no final empty line


def read_docs(path: Path):
    # a bare Vocab: spacy.blank() would load every installed factory entry point (slow)
    return list(DocBin().from_disk(path).get_docs(Vocab()))


@pytest.fixture
def data_dir(tmp_path) -> Path:
    directory = tmp_path / "ai"
    directory.mkdir()
    (directory / "train.txt").write_text(TRAIN, encoding="utf-8")
    (directory / "dev.txt").write_bytes(DEV.replace("\n", "\r\n").encode("utf-8"))
    (directory / ".hidden.txt").write_text("x\tO\n", encoding="utf-8")
    (directory / "README.md").write_text("not data\n", encoding="utf-8")
    (directory / "notes.json").write_text("{}", encoding="utf-8")
    (directory / "sub").mkdir()
    return directory


def test_list_data_files(data_dir):
    assert [p.name for p in list_data_files(data_dir)] == ["dev.txt", "train.txt"]


def test_convert_directory(data_dir, tmp_path):
    out = tmp_path / "corpus"
    summary = convert(data_dir, out)
    assert sorted(p.name for p in out.iterdir()) == ["dev.spacy", "train.spacy"]
    train = summary["train.txt"]
    assert (train.sentences, train.tokens, train.docs, train.n_entities) == (3, 8, 3, 3)
    assert train.entities == {"organisation": 1, "misc": 1, "person": 1}
    assert train.domain == "ai" and train.scheme == "IOB2" and train.sep == "tab"
    assert train.repairs == {}
    dev = summary["dev"]
    assert (dev.sentences, dev.tokens, dev.n_entities) == (2, 3, 2)
    assert dev.repairs == {"inside_without_begin": 1}

    docs = read_docs(out / "train.spacy")
    assert len(docs) == 3
    assert [t.text for t in docs[0]] == ["EU", "rejects", "German", "call"]
    assert docs[0].text == "EU rejects German call"
    assert [(e.start, e.end, e.label_) for e in docs[0].ents] == [
        (0, 1, "organisation"), (2, 3, "misc"),
    ]
    assert [(e.text, e.label_) for e in docs[1].ents] == [("Peter Blackburn", "person")]
    # no entities, but the annotation is there: every token is O
    assert docs[2].ents == () and docs[2].has_annotation("ENT_IOB")
    assert all(t.ent_iob_ == "O" for t in docs[2])
    assert all(get_domain(doc) == "ai" for doc in docs)

    dev_docs = read_docs(out / "dev.spacy")
    assert [(e.text, e.label_) for e in dev_docs[0].ents] == [("stray name", "person")]
    assert dev_docs[1].text == "Turing"

    table = summary_table(summary)
    assert "train.txt" in table and "inside_without_begin" in table and "organisation" in table


def test_convert_file_domain_and_options(data_dir, tmp_path):
    summary = convert(data_dir / "train.txt", tmp_path / "out", domain="science")
    assert summary.files[0].domain == "science"
    docs = read_docs(tmp_path / "out" / "train.spacy")
    assert {get_domain(d) for d in docs} == {"science"}
    # default domain of a file: its parent directory
    summary = convert(data_dir / "train.txt", tmp_path / "out2")
    assert summary.files[0].domain == "ai"


def test_convert_by_document(tmp_path):
    path = tmp_path / "train.bmes"
    path.write_text(
        "-DOCSTART- O\n\nEU S-ORG\nrejects O\n\nPeter B-PER\nBlackburn E-PER\n\n"
        "-DOCSTART- O\n\nParis S-LOC\n",
        encoding="utf-8",
    )
    summary = convert(path, tmp_path / "out", domain="news", by_document=True)
    item = summary.files[0]
    assert (item.sentences, item.documents, item.docs, item.scheme) == (3, 2, 2, "BIOES")
    docs = read_docs(tmp_path / "out" / "train.spacy")
    assert [d.text for d in docs] == ["EU rejects Peter Blackburn", "Paris"]
    assert [s.text for s in docs[0].sents] == ["EU rejects", "Peter Blackburn"]
    assert [(e.text, e.label_) for e in docs[0].ents] == [("EU", "ORG"), ("Peter Blackburn", "PER")]
    assert [s.text for s in docs[1].sents] == ["Paris"]
    # default: one doc per sentence
    convert(path, tmp_path / "out2", domain="news")
    assert len(read_docs(tmp_path / "out2" / "train.spacy")) == 3


def test_split_suffix_output_names(tmp_path):
    directory = tmp_path / "btc"
    directory.mkdir()
    for split in ("train", "eval", "test"):
        (directory / f"broad_twitter_BIOES.{split}").write_text("a S-PER\n", encoding="utf-8")
    convert(directory, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "broad_twitter_BIOES.eval.spacy",
        "broad_twitter_BIOES.test.spacy",
        "broad_twitter_BIOES.train.spacy",
    ]


def test_convert_user_errors(data_dir, tmp_path):
    with pytest.raises(ConversionError, match="Input not found"):
        convert(tmp_path / "missing", tmp_path / "out")
    with pytest.raises(ConversionError, match="No data files"):
        convert(data_dir / "sub", tmp_path / "out")
    with pytest.raises(ConversionError, match="Unknown tag scheme"):
        convert(data_dir, tmp_path / "out", scheme="xyz")
    with pytest.raises(ConversionError, match="Unknown column separator"):
        convert(data_dir, tmp_path / "out", sep="comma")
    (data_dir / "zzz.txt").write_text("a\tO\nb\tPER\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"zzz\.txt, line 2"):
        convert(data_dir, tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()  # every input is checked before writing
    (data_dir / "zzz.txt").unlink()
    (data_dir / "train.bio").write_text("a\tO\n", encoding="utf-8")
    with pytest.raises(ConversionError, match="would both be written"):
        convert(data_dir, tmp_path / "out")


# --- raw text -----------------------------------------------------------------------------


@pytest.fixture
def raw_inputs(data_dir, tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("Deep learning  is fun .\n\n   \nPeter Blackburn\nnothing here\n",
                     encoding="utf-8")
    return [data_dir / "train.txt", plain]


def test_raw_text_txt(raw_inputs, tmp_path):
    out = tmp_path / "raw" / "ai.txt"
    summary = write_raw_text(raw_inputs, out, domain="ai")
    assert out.read_text(encoding="utf-8").splitlines() == [
        "EU rejects German call", "Peter Blackburn", "nothing here",
        "Deep learning is fun .", "Peter Blackburn", "nothing here",
    ]
    assert (summary.sentences, summary.tokens, summary.empty_lines, summary.duplicates) == (
        6, 17, 2, 0,
    )
    summary = write_raw_text(raw_inputs, out, domain="ai", dedup=True)
    assert (summary.sentences, summary.duplicates) == (4, 2)
    assert len(out.read_text(encoding="utf-8").splitlines()) == 4


def test_raw_text_spacy(raw_inputs, tmp_path):
    out = tmp_path / "ai.spacy"
    summary = write_raw_text(raw_inputs, out, domain="ai", fmt="spacy")
    docs = read_docs(out)
    assert len(docs) == summary.sentences == 6
    assert docs[3].text == "Deep learning is fun ."
    for doc in docs:
        assert get_domain(doc) == "ai"
        assert not doc.has_annotation("ENT_IOB")
        assert all(t.ent_iob == 0 for t in doc)


def test_raw_text_input_format(data_dir, tmp_path):
    # forced as text, the tags become words
    out = tmp_path / "x.txt"
    write_raw_text([data_dir / "train.txt"], out, domain="ai", input_format="text")
    assert out.read_text(encoding="utf-8").splitlines()[0] == "EU B-organisation"
    with pytest.raises(ConversionError, match="Unknown output format"):
        write_raw_text([data_dir / "train.txt"], out, domain="ai", fmt="json")
    bad = tmp_path / "bad.txt"
    bad.write_text("a\tO\nb\tc\tO\n", encoding="utf-8")
    with pytest.raises(FormatError, match="line 2"):
        write_raw_text([bad], out, domain="ai", input_format="columns")


# --- CLI ----------------------------------------------------------------------------------


def test_cli_convert(data_dir, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["convert", str(data_dir), str(out), "--domain", "ai2"])
    assert result.exit_code == 0, result.output
    assert "train.txt" in result.stdout and "sentences" in result.stdout
    assert "inside_without_begin" in result.stdout
    assert {get_domain(d) for d in read_docs(out / "train.spacy")} == {"ai2"}


def test_cli_convert_bad_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a\tO\nb\tPER\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["convert", str(bad), str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "Error:" in result.stderr
    assert f"{bad}, line 2: 'PER' is not a tag" in result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    "args,message",
    [
        (["convert", "MISSING", "OUT"], "Input not found"),
        (["convert", "IN", "OUT", "--scheme", "bogus"], "Unknown tag scheme 'bogus'"),
        (["raw-text", "IN", "--output", "o.txt", "--domain", "ai", "--format", "xml"],
         "Unknown output format"),
    ],
)
def test_cli_user_errors(data_dir, tmp_path, args, message):
    args = [
        str(tmp_path / "missing") if a == "MISSING" else str(data_dir) if a == "IN"
        else str(tmp_path / a) if a in ("OUT", "o.txt") else a
        for a in args
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_cli_raw_text(raw_inputs, tmp_path):
    out = tmp_path / "raw.spacy"
    args = ["raw-text", *map(str, raw_inputs), "--output", str(out), "--domain", "ai", "--dedup"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 4 sentences" in result.stdout and "2 duplicates" in result.stdout
    assert len(read_docs(out)) == 4


def test_cli_help_lists_every_option():
    result = CliRunner().invoke(app, ["convert", "--help"])
    assert result.exit_code == 0
    for option in ("--domain", "--scheme", "--sep", "--by-document", "--progress"):
        assert option in result.stdout
