"""select-corpus: the CrossNER corpus levels, de-duplication, entity matching and bad input."""
import pytest
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.gazetteer import Gazetteer
from spacy_crossner.dapt.corpus import (
    DaptInputError,
    iter_lines,
    select_corpus,
    split_sentences,
    tokenize_words,
)

CORPUS = """\
Angela Merkel met Emmanuel Macron in Berlin. The weather was fine.
The Social Democratic Party won the vote in Bavaria.
The weather was fine.
Angela Merkel met Emmanuel Macron in Berlin.
Nothing happened here!   "Then Berlin called."
The Bundestag passed the law.

Macron spoke.
"""

ENTITIES = """\
Angela Merkel\tpolitician
Emmanuel Macron\tpolitician
Macron\tpolitician
Berlin\tlocation
Bavaria\tlocation
Social Democratic Party\tpoliticalparty
Social\tmisc
"""


@pytest.fixture
def files(tmp_path):
    corpus = tmp_path / "raw.txt"
    corpus.write_text(CORPUS, encoding="utf8")
    entities = tmp_path / "entities.txt"
    entities.write_text(ENTITIES, encoding="utf8")
    return corpus, entities


def _lines(path):
    return path.read_text(encoding="utf8").splitlines()


def test_split_and_tokenize():
    assert split_sentences('Nothing happened here!   "Then Berlin called."') == [
        "Nothing happened here!", '"Then Berlin called."'
    ]
    assert split_sentences("Dr. smith arrived. He left.") == ["Dr. smith arrived.", "He left."]
    assert tokenize_words("Merkel's well-known party (SPD).") == [
        "Merkel's", "well-known", "party", "(", "SPD", ")", "."
    ]


def test_gazetteer_leftmost_longest():
    gaz = Gazetteer()
    gaz.add("Social Democratic Party", ["party"])
    gaz.add("Social", ["misc"])
    gaz.add("Party", ["misc"])
    found = gaz.match(tokenize_words("The Social Democratic Party and the Social club"))
    assert [(s, e) for s, e, _ in found] == [(1, 4), (6, 7)]
    assert gaz.match(["social"]) == []
    assert Gazetteer(ignore_case=True).match(["x"]) == []
    ci = Gazetteer(ignore_case=True)
    ci.add("Berlin", ["location"])
    assert len(ci.match(["BERLIN"])) == 1


def test_levels_dedup_and_counts(files, tmp_path):
    corpus, entities = files
    out = tmp_path / "levels"
    summary = select_corpus(
        corpus=corpus, entities=[entities], output_dir=out, task_types=["politician", "politicalparty"]
    )
    domain = _lines(out / "domain.txt")
    # Two duplicates removed: the repeated weather and Merkel sentences.
    assert summary.duplicates_removed == 2
    assert len(domain) == len(set(domain)) == summary.levels["domain"].sentences == 7
    assert domain[0] == "Angela Merkel met Emmanuel Macron in Berlin."
    entity = _lines(out / "entity.txt")
    assert entity == [
        "Angela Merkel met Emmanuel Macron in Berlin.",
        "The Social Democratic Party won the vote in Bavaria.",
    ]
    task = _lines(out / "task.txt")
    assert task == [
        "Angela Merkel met Emmanuel Macron in Berlin.",
        "The Social Democratic Party won the vote in Bavaria.",
        "Macron spoke.",
    ]
    assert _lines(out / "integrated.txt") == entity + task + task
    assert summary.levels["integrated"].sentences == 2 + 2 * 3
    assert summary.levels["integrated"].tokens == summary.levels["entity"].tokens + 2 * summary.levels["task"].tokens
    assert summary.levels["domain"].tokens == sum(len(tokenize_words(s)) for s in domain)


def test_task_types_default_all_and_min_entities(files, tmp_path):
    corpus, entities = files
    summary = select_corpus(corpus=corpus, entities=[entities], output_dir=tmp_path / "o", min_entities=1)
    task = _lines(tmp_path / "o" / "task.txt")
    assert '"Then Berlin called."' in task  # a location counts when every type counts
    assert summary.levels["entity"].sentences == summary.levels["task"].sentences == 4


def test_untyped_entries_take_the_file_stem(tmp_path):
    (tmp_path / "person.txt").write_text("Ada Lovelace\n", encoding="utf8")
    (tmp_path / "raw.txt").write_text("Ada Lovelace wrote notes.\nNo one here.\n", encoding="utf8")
    summary = select_corpus(corpus=tmp_path / "raw.txt", entities=[tmp_path / "person.txt"],
                            output_dir=tmp_path / "o", task_types=["person"], min_entities=1)
    assert summary.levels["task"].sentences == 1


def test_no_split(files, tmp_path):
    corpus, entities = files
    summary = select_corpus(corpus=corpus, entities=[entities], output_dir=tmp_path / "o", split=False)
    assert summary.lines_read == 8  # one of them blank
    assert summary.sentences_read == 7 and summary.duplicates_removed == 0


def test_bad_input(files, tmp_path):
    corpus, entities = files
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf8")
    with pytest.raises(DaptInputError, match="empty"):
        select_corpus(corpus=empty, entities=[entities], output_dir=tmp_path / "o")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("Caf\u00e9 in M\u00fcnchen\n".encode("latin1"))
    with pytest.raises(DaptInputError, match="not UTF-8"):
        select_corpus(corpus=latin, entities=[entities], output_dir=tmp_path / "o")
    huge = tmp_path / "huge.txt"
    huge.write_text("word " * 50_000, encoding="utf8")
    with pytest.raises(DaptInputError, match="longer than"):
        select_corpus(corpus=huge, entities=[entities], output_dir=tmp_path / "o", max_line_chars=100_000)
    with pytest.raises(DaptInputError, match="not found"):
        select_corpus(corpus=tmp_path / "missing.txt", entities=[entities], output_dir=tmp_path / "o")
    with pytest.raises(DaptInputError, match="do not occur"):
        select_corpus(corpus=corpus, entities=[entities], output_dir=tmp_path / "o", task_types=["sport"])
    with pytest.raises(DaptInputError, match="No entity"):
        select_corpus(corpus=corpus, entities=[empty], output_dir=tmp_path / "o")


def test_iter_lines_limit_is_exact(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("a" * 10 + "\n" + "b" * 3 + "\r\n", encoding="utf8")
    assert list(iter_lines(path, max_line_chars=10)) == ["a" * 10, "bbb"]
    with pytest.raises(DaptInputError, match="line 1"):
        list(iter_lines(path, max_line_chars=9))


def test_cli(files, tmp_path):
    corpus, entities = files
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(app, ["select-corpus", str(corpus), str(out), "--entities", str(entities),
                                 "--task-types", "politician,politicalparty"])
    assert result.exit_code == 0, result.output
    assert "integrated" in result.output and "duplicate" in result.output
    assert (out / "integrated.txt").exists()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe broken\n")
    result = runner.invoke(app, ["select-corpus", str(bad), str(out), "-e", str(entities)])
    assert result.exit_code == 1
    assert "Error:" in result.output and "not UTF-8" in result.output
    assert "Traceback" not in result.output
