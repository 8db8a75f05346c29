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
