"""Deploying a trained pipeline: both wheels install into a fresh environment and predict the same.

Runs ``project/scripts/package.py`` (the project's ``package`` step) on a tiny BiLSTM pipeline:
wheels of spacy_crossner and of the pipeline (``spacy package --build wheel``), then a new
virtual environment outside the checkout: the dependencies from the package index, the two wheels
only with ``pip install --no-index --find-links``, and ``spacy.load("en_crossner_tiny")`` there
must predict what the pipeline predicts here, without matplotlib or dask installed there or
imported by loading in either run (the library's light install). About two minutes (most of it pip).
"""
import subprocess
import sys
import zipfile
from pathlib import Path

from thinc.api import fix_random_seed

from test_pipeline import SMALL_BILSTM
from util import AI, NEWS, blank_with, make_examples, train

SCRIPT = Path(__file__).parents[1] / "project" / "scripts" / "package.py"


def test_pipeline_package_installs_and_predicts_the_same(tmp_path):
    fix_random_seed(0)
    nlp = blank_with({"model": SMALL_BILSTM, "target_domain": "ai"})
    train(nlp, make_examples(nlp, NEWS + AI), n_iter=20)
    nlp.to_disk(tmp_path / "model")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(" ".join(words) for _, words, _ in NEWS + AI) + "\n")
    assert any(nlp(" ".join(words)).ents for _, words, _ in AI)  # something to compare
    res = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "model"), str(tmp_path / "packages"),
         "--name", "crossner_tiny", "--version", "0.0.1", "--check", str(texts)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    assert "Checked: spacy.load('en_crossner_tiny') in a fresh environment predicts the same" in res.stdout
    # `pip install` of the wheels brings no plotting or cluster package, and loading needs none
    assert "Checked: none of matplotlib, dask, distributed is installed there or imported" in res.stdout
    wheel = tmp_path / "packages" / "en_crossner_tiny-0.0.1" / "dist" / "en_crossner_tiny-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("en_crossner_tiny-0.0.1.dist-info/METADATA").decode()
    assert "Requires-Dist: spacy_crossner" in meta.replace("spacy-crossner", "spacy_crossner")
    assert list((tmp_path / "packages" / "wheels").glob("spacy_crossner-0.1.0-*.whl"))


def test_bad_model_dir_is_one_clear_error(tmp_path):
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope"), str(tmp_path / "out"),
                          "--name", "x"], capture_output=True, text=True)
    assert res.returncode == 1 and "Not a pipeline directory (no config.cfg)" in res.stderr
    assert "Traceback" not in res.stderr
