"""benchmarks/selection_mix.py traces a selection back to its corpus files and groups."""
import json

import pytest

from util import load_script

selection_mix = load_script("benchmarks/selection_mix.py")


def _corpora(tmp_path):
    speeches = tmp_path / "speeches.jsonl"
    speeches.write_text(
        json.dumps({"year": 1990, "text": "And that's a good thing. We will win."}) + "\n", encoding="utf8"
    )
    leads = tmp_path / "leads.jsonl"
    leads.write_text(
        json.dumps({"topic": "Arts", "text": "The novel won the Hugo Award."}) + "\n"
        + json.dumps({"topic": "People", "text": "She wrote three novels. And that's a good thing."}) + "\n",
        encoding="utf8",
    )
    plain = tmp_path / "plain.txt"
    plain.write_text("A line of plain text here.\n", encoding="utf8")
    return speeches, leads, plain


def test_sentences_go_to_the_first_corpus_and_record_group_holding_them(tmp_path):
    speeches, leads, plain = _corpora(tmp_path)
    sources = [selection_mix.Source(p, "text", "topic") for p in (speeches, leads, plain)]
    selected = [
        "The novel won the Hugo Award .",  # tokenised differently from the corpus
        "And that 's a good thing .",  # in both: the first corpus given wins
        "She wrote three novels .",
        "A line of plain text here .",
        "Nowhere to be found .",
        "won the Hugo Award . She wrote",  # spans two records: matches neither
    ]
    mix = selection_mix.trace(selected, sources)
    assert mix == {
        ("leads.jsonl", "Arts"): [1, 7],
        ("speeches.jsonl", "-"): [1, 7],
        ("leads.jsonl", "People"): [1, 5],
        ("plain.txt", "-"): [1, 7],
        (selection_mix.NOT_FOUND, "-"): [2, 12],
    }
    out = selection_mix.table(mix, "sel")
    assert "sel: 6 sentences, 38 word tokens" in out
    assert "| leads.jsonl | Arts | 1 | 7 | 18.4% |" in out
    assert "- leads.jsonl: 31.6% of the tokens" in out


def test_top_tokens_keeps_the_best_prefix_reaching_the_budget():
    selected = ["a b c", "d e", "f g h i", "j"]
    assert selection_mix.top_tokens(selected, 5) == ["a b c", "d e"]
    assert selection_mix.top_tokens(selected, 6) == ["a b c", "d e", "f g h i"]


def test_the_command_writes_the_table_and_names_bad_input(tmp_path, capsys):
    speeches, leads, _ = _corpora(tmp_path)
    selected = tmp_path / "selected.txt"
    selected.write_text("The novel won the Hugo Award .\nWe will win .\n", encoding="utf8")
    output = tmp_path / "mix.md"
    selection_mix.main([str(selected), str(speeches), str(leads), "--group-field", "topic",
                        "--top-tokens", "3", "--output", str(output)])
    assert output.read_text(encoding="utf8") == capsys.readouterr().out
    assert "| leads.jsonl | Arts | 1 | 7 | 100.0% |" in output.read_text(encoding="utf8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n', encoding="utf8")
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: no 'text' field"):
        selection_mix.main([str(selected), str(bad)])
    with pytest.raises(SystemExit, match="no such file"):
        selection_mix.main([str(tmp_path / "missing.txt"), str(bad)])
