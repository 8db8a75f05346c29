"""Scale-out of every architecture: ``nlp.pipe(n_process=2)`` under the ``spawn`` start method
(the default on macOS and Windows) gives the docs of one process.

Spawned workers start a fresh interpreter, unpickle the pipeline and re-import spacy_crossner,
so this checks that every registered function and Doc extension resolves there by import.
"""
import multiprocessing

import numpy
import pytest
import spacy.language
from thinc.api import fix_random_seed

from test_architectures import ALL, ARCHITECTURES, annotations, docs_of, make_nlp
from util import make_examples, train

TEXTS = ["Google released TensorFlow .", "", "John Smith lives in London .", "LSTM"] * 3


@pytest.fixture
def spawn_pipe(monkeypatch):
    """spaCy's ``Language.pipe`` takes Queue, Pipe and Process from ``spacy.language.mp`` (the
    ``multiprocessing`` module, i.e. the platform's default start method); a spawn context has
    the same attributes, so patching it there forces spawn for this test only."""
    monkeypatch.setattr(spacy.language, "mp", multiprocessing.get_context("spawn"))


def assert_same(got, expected):
    assert [ents for ents, _ in got] == [ents for ents, _ in expected]
    for (_, a), (_, b) in zip(got, expected):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_spawned_workers_equal_one_process(name, spawn_pipe):
    fix_random_seed(0)
    nlp = make_nlp(name)
    train(nlp, make_examples(nlp, ALL), n_iter=10)
    # Docs carry their domain (doc._.domain travels in the doc's bytes); texts take the
    # target's. One stream of both: each spawn costs a fresh import of torch and spaCy.
    def inputs():
        return docs_of(nlp, ALL) + TEXTS

    expected = annotations(nlp.pipe(inputs(), batch_size=2))
    assert any(ents for ents, _ in expected), "the pipeline predicts nothing"
    got = annotations(nlp.pipe(inputs(), batch_size=2, n_process=2))
    assert_same(got, expected)
