"""Issue 48: nothing lost, every message clear. One regression test per case of the issue
(numbered as there), then the inputs of the sweep that needed a fix."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_crossner.cli import app

REPO = Path(__file__).parents[1]


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


# -- vectors ------------------------------------------------------------------------------------


def test_1_vectors_cr_only_line_endings(tmp_path):
    source = tmp_path / "cr.txt"
    source.write_bytes(b"the 0.1 0.2 0.3\rcat 0.4 0.5 0.6\r\rsat 0.7 0.8 0.9\r")
    result = cli("vectors", source, tmp_path / "v", "--no-progress", "--case", "cased")
    assert result.exit_code == 0, result.output
    assert "Read 3 rows of width 3" in result.output
    import spacy

    nlp = spacy.load(tmp_path / "v")
    assert nlp.vocab.vectors.n_keys == 3
    assert list(nlp.vocab["sat"].vector) == pytest.approx([0.7, 0.8, 0.9])


def test_1_vectors_cr_only_bad_line_is_numbered(tmp_path):
    source = tmp_path / "cr.txt"
    source.write_bytes(b"a 1 2\r\rb 3\r")
    result = cli("vectors", source, tmp_path / "v", "--no-progress")
    assert result.exit_code == 1
    assert f"{source}, line 3: 1 values, expected 2" in result.output


@pytest.mark.parametrize("damage", ["truncated", "not_gzip_after_magic"])
def test_9_vectors_damaged_gzip_is_a_clear_error(tmp_path, damage):
    good = gzip.compress(b"the 0.1 0.2 0.3\ncat 0.4 0.5 0.6\n" * 200)
    data = good[: len(good) // 2] if damage == "truncated" else b"\x1f\x8b" + b"garbage" * 10
    source = tmp_path / "g.txt.gz"
    source.write_bytes(data)
    result = cli("vectors", source, tmp_path / "v", "--no-progress")
    assert result.exit_code == 1
    assert "Aborted" not in result.output
    assert f"Error: {source}, line " in result.output
    assert "gzip stream is damaged or truncated" in result.output


def test_10_vectors_output_parents_are_created(tmp_path):
    source = tmp_path / "g.txt"
    source.write_text("the 0.1 0.2 0.3\n", encoding="utf8")
    out = tmp_path / "no" / "such" / "out"
    result = cli("vectors", source, out, "--no-progress", "--case", "cased")
    assert result.exit_code == 0, result.output
    assert (out / "meta.json").exists()
    (tmp_path / "afile").write_text("x", encoding="utf8")
    result = cli("vectors", source, tmp_path / "afile", "--no-progress", "--case", "cased")
    assert result.exit_code == 1
    assert f"Output {tmp_path / 'afile'} is a file" in result.output


# -- raw-text, convert, evaluate, dapt input, report ---------------------------------------------


def test_5_raw_text_refuses_a_file_mixing_tag_lines_and_text(tmp_path):
    source = tmp_path / "x.txt"
    source.write_text("Alice\tB-person\nworks\tO\n\nplain sentence\n", encoding="utf8")
    out = tmp_path / "r.txt"
    result = cli("raw-text", source, "-o", out, "-d", "ai")
    assert result.exit_code == 1
    assert f"{source}, line 1 is a token/tag line" in result.output
    assert "line 4 is not ('plain sentence')" in result.output
    assert not out.exists()
    # told how to read it, the user gets every field as a word
    result = cli("raw-text", source, "-o", out, "-d", "ai", "--input-format", "text")
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf8").splitlines() == ["Alice B-person", "works O", "plain sentence"]


def test_5_plain_text_with_a_tag_like_word_is_still_text(tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("Vitamin B-12 helps\nplain sentence\n", encoding="utf8")
    result = cli("raw-text", source, "-o", tmp_path / "r.txt", "-d", "ai")
    assert result.exit_code == 0, result.output


def test_11_evaluate_on_a_column_file_suggests_our_convert(tmp_path):
    from spacy_crossner.evaluate import EvaluationError, _load_docs
    from spacy.vocab import Vocab

    data = tmp_path / "c.txt"
    data.write_text("Alice\tB-person\nworks\tO\n", encoding="utf8")
    with pytest.raises(EvaluationError) as err:
        _load_docs(data, Vocab())
    assert f"python -m spacy_crossner convert {data} OUTPUT_DIR --domain DOMAIN" in str(err.value)
    assert "spacy convert file.json" not in str(err.value)


def test_13_no_break_space_token_in_a_tab_file(tmp_path):
    source = tmp_path / "nb.txt"
    source.write_bytes(b"\xc2\xa0\tO\nAlice\tB-person\n\n")
    result = cli("convert", source, tmp_path / "o", "-d", "ai")
    assert result.exit_code == 0, result.output
    tagged = tmp_path / "nb2.txt"
    tagged.write_bytes(b"\xc2\xa0\tB-person\nAlice\tB-person\n\n")
    for sep in ("auto", "tab"):
        result = cli("convert", tagged, tmp_path / f"o_{sep}", "-d", "ai", "--sep", sep)
        assert result.exit_code == 1
        assert f"{tagged}, line 1: the entity 'person' begins on the token '\\xa0'" in result.output


def test_14_dapt_input_names_the_line_of_the_bad_byte(tmp_path):
    from spacy_crossner.dapt.corpus import DaptInputError, iter_lines

    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\rsecond\nbad \xff here\n")
    with pytest.raises(DaptInputError, match=r"bad.txt, line 3: not UTF-8 text .*byte 0xff at byte 4"):
        list(iter_lines(path))


@pytest.mark.parametrize("scores,message", [
    ({"ents_p": 1.5, "ents_r": 50, "ents_f": 2}, "ents_f = 2 is not the harmonic mean"),
    ({"ents_p": 150, "ents_r": 50, "ents_f": 75}, "ents_p = 150 is not a score"),
    ({"ents_p": -0.1, "ents_r": 0.5, "ents_f": 0.5}, "ents_p = -0.1 is not a score"),
    ({"ents_p": 0.5, "ents_r": 0.5, "ents_f": 0.5, "ents_per_type": {"x": {"p": 0.5, "r": 250, "f": 0.5}}},
     "ents_per_type.x.r = 250 is not a score"),
])
def test_15_report_checks_the_range_of_scores(tmp_path, scores, message):
    from spacy_crossner.report import ReportError, load_runs

    path = tmp_path / "m.json"
    path.write_text(json.dumps(scores), encoding="utf8")
    with pytest.raises(ReportError, match=message):
        load_runs([path])


def test_15_report_still_reads_fractions_and_percentages(tmp_path):
    from spacy_crossner.report import load_runs

    (tmp_path / "f.json").write_text(json.dumps({"ents_p": 0.5, "ents_r": 0.25, "ents_f": 1 / 3}))
    (tmp_path / "p.json").write_text(json.dumps({"ents_p": 50, "ents_r": 25, "ents_f": 33.33}))
    runs = load_runs([tmp_path / "f.json", tmp_path / "p.json"])
    assert [round(r.overall[2], 2) for r in runs] == [33.33, 33.33]
