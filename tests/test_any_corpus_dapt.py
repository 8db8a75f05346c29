"""`dapt` checks --model and the output path before any loading (issue 12): clear, fast errors."""
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.dapt.corpus import DaptInputError
from spacy_crossner.dapt.train import check_model_source, run_dapt
from spacy_crossner.misc import bundled_transformer


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"Sentence number {i} is here ." for i in range(50)) + "\n")
    return path


def dapt_error(corpus, out, *args) -> str:
    result = CliRunner().invoke(
        app, ["dapt", str(corpus), str(out), "--max-steps", "1", "--no-progress", *args])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return result.output


@pytest.mark.parametrize("model", ["./no_such_model", "../runs/missing", "runs/dapt/ai", "C:\\models\\x"])
def test_mistyped_local_path_fails_at_once(corpus, tmp_path, model, monkeypatch):
    """A path that looks local is checked on disk; the hub (and its retries) is never asked."""
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("the hub was contacted for a local path")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", no_network)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    output = dapt_error(corpus, tmp_path / "out", "--model", model)
    assert "the hub was contacted" not in output
    assert "Model directory not found" in output and model.split("/")[-1].split("\\")[-1] in output


def test_hub_name_in_offline_mode_is_not_looked_up(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("the hub was contacted in offline mode")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", no_network)
    with pytest.raises(DaptInputError, match="offline mode is set.*not in the local cache"):
        check_model_source("someone/not-cached-model")


def test_empty_model_dir_says_what_is_missing(corpus, tmp_path):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    output = dapt_error(corpus, tmp_path / "out", "--model", str(empty))
    assert str(empty) in output
    for missing in ("config.json", "weights", "tokenizer files"):
        assert missing in output
    assert "protobuf" not in output


def test_model_dir_without_weights(corpus, tmp_path):
    model = tmp_path / "no_weights"
    model.mkdir()
    source = Path(bundled_transformer())
    for name in os.listdir(source):
        if "safetensors" not in name and "pytorch_model" not in name and (source / name).is_file():
            os.symlink(source / name, model / name)
    with pytest.raises(DaptInputError, match=r"is incomplete: it has no weights \(model.safetensors"):
        run_dapt(corpus=corpus, output_dir=tmp_path / "out", model=str(model), max_steps=1)


@pytest.mark.parametrize("where", ["file", "inside_file"])
def test_output_path_that_is_a_file(corpus, tmp_path, where):
    a_file = tmp_path / "taken.txt"
    a_file.write_text("x")
    out = a_file if where == "file" else a_file / "sub"
    output = dapt_error(corpus, out)
    assert "output directory" in output and str(out) in output
    assert ("is a file" in output) if where == "file" else (f"inside {a_file}" in output)
