"""spacy_crossner.torch_threads.v1: a saved pipeline sets torch's thread count when loaded."""
import subprocess
import sys

import pytest
import spacy
import torch
from thinc.api import ConfigValidationError

from spacy_crossner.torch_threads import make_torch_threads


def save_pipeline(path, n_threads):
    callback = {"@callbacks": "spacy_crossner.torch_threads.v1", "n_threads": n_threads}
    nlp = spacy.blank("en", config={"nlp": {"before_creation": callback}})
    nlp.to_disk(path)
    return path


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_load_sets_threads(tmp_path, restore_threads):
    path = save_pipeline(tmp_path / "model", 3)
    torch.set_num_threads(1)
    nlp = spacy.load(path)
    assert torch.get_num_threads() == 3
    assert nlp.config["nlp"]["before_creation"]["n_threads"] == 3


def test_null_leaves_torch_alone(tmp_path, restore_threads):
    path = save_pipeline(tmp_path / "model", None)
    torch.set_num_threads(2)
    spacy.load(path)
    assert torch.get_num_threads() == 2


def test_fresh_process_finds_the_callback_by_entry_point(tmp_path):
    # no import of spacy_crossner: spaCy finds the callback through setup.py's entry point
    path = save_pipeline(tmp_path / "model", 2)
    code = ("import spacy, torch; spacy.load(r'%s'); print(torch.get_num_threads())" % path)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "", "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-1] == "2"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_setting_names_itself(bad):
    with pytest.raises(ValueError, match=r"\[nlp.before_creation\] n_threads"):
        make_torch_threads(bad)


def test_bad_setting_in_a_config_fails_on_load(tmp_path):
    nlp = spacy.blank("en")
    nlp.to_disk(tmp_path / "model")
    cfg = (tmp_path / "model" / "config.cfg").read_text().replace(
        "[nlp.before_creation]", "")
    cfg = cfg.replace("before_creation = null", "")
    cfg += '\n[nlp.before_creation]\n@callbacks = "spacy_crossner.torch_threads.v1"\nn_threads = 0\n'
    (tmp_path / "model" / "config.cfg").write_text(cfg)
    with pytest.raises((ValueError, ConfigValidationError), match="n_threads"):
        spacy.load(tmp_path / "model")
