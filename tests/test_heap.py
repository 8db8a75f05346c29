"""Freed heap memory goes back to the OS during training: an LM objective otherwise grew
``multi_cell_uda.cfg`` by ~9 MB per update on CPU until it was killed (spacy_crossner.heap)."""
import ctypes
import ctypes.util
import platform

import pytest

from thinc.api import fix_random_seed

import spacy_crossner.heap
import spacy_crossner.pipeline
from spacy_crossner.heap import trim_every_from_env
from util import AI, NEWS, TINY_FEATURES, blank_with, make_examples, train

BILSTM = {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 8, "dropout": 0.0,
          "tok2vec": TINY_FEATURES}


def test_release_freed_memory_calls_malloc_trim_where_the_c_library_has_it():
    name = ctypes.util.find_library("c")
    has_trim = name is not None and hasattr(ctypes.CDLL(name), "malloc_trim")
    assert spacy_crossner.heap.release_freed_memory() is has_trim
    if platform.libc_ver()[0] == "glibc":  # Linux with glibc (this project's machines)
        assert has_trim


def test_release_freed_memory_is_a_no_op_without_malloc_trim(monkeypatch):
    monkeypatch.setattr(spacy_crossner.heap, "_MALLOC_TRIM", None)
    assert spacy_crossner.heap.release_freed_memory() is False


def test_update_trims_the_heap_every_trim_every_updates(monkeypatch):
    calls = []
    monkeypatch.setattr(spacy_crossner.pipeline, "TRIM_EVERY", 3)
    monkeypatch.setattr(spacy_crossner.pipeline, "release_freed_memory", lambda: calls.append(1) or True)
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    examples = make_examples(nlp, NEWS + AI)
    train(nlp, examples, n_iter=7)  # one batch per iteration: 7 updates
    updates = nlp.get_pipe("crossner")._n_updates
    assert updates >= 7
    assert len(calls) == updates // 3 and calls


def test_trim_every_comes_from_the_environment_and_bad_values_name_the_variable():
    assert trim_every_from_env(None) == 50
    assert trim_every_from_env("") == 50
    assert trim_every_from_env("0") == 0
    assert trim_every_from_env("200") == 200
    for bad in ("-1", "often", "2.5"):
        with pytest.raises(ValueError, match="SPACY_CROSSNER_TRIM_EVERY='" + bad):
            trim_every_from_env(bad)


def test_trim_every_zero_never_trims(monkeypatch):
    calls = []
    monkeypatch.setattr(spacy_crossner.pipeline, "TRIM_EVERY", 0)
    monkeypatch.setattr(spacy_crossner.pipeline, "release_freed_memory", lambda: calls.append(1) or True)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    train(nlp, make_examples(nlp, NEWS + AI), n_iter=3)
    assert nlp.get_pipe("crossner")._n_updates >= 3 and not calls
