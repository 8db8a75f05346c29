"""Scale-out: ``nlp.pipe(n_process=2)`` under the ``spawn`` start method (the default on macOS
and Windows) and ``spacy apply --n-process 2`` give the docs of one process for every
architecture; ``python -m spacy_crossner annotate`` on a local Dask cluster gives them too,
shard by shard, names a failed shard and skips finished ones on a rerun.

Spawned workers start a fresh interpreter, unpickle the pipeline and re-import spacy_crossner,
so this checks that every registered function and Doc extension resolves there by import.
"""
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import spacy
import spacy.language
from spacy.tokens import DocBin
from thinc.api import fix_random_seed
from typer.testing import CliRunner

from spacy_crossner import set_domain
from spacy_crossner.annotate import AnnotateError, annotate, read_output
from spacy_crossner.cli import app
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


# -- spacy apply and the annotate command -------------------------------------------------------

REPO = Path(__file__).parents[1]
JSONL = [{"text": "Paris is in France .", "domain": "news"}, {"text": "Google released TensorFlow ."}]
LINES = ["Google released TensorFlow .", "", "John Smith lives in London ."]


def run(*args, cwd):
    # The subprocess imports this checkout's package, whatever the installed one is.
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True)


def write_corpus(nlp, folder: Path) -> Path:
    folder.mkdir()
    DocBin(docs=docs_of(nlp, ALL), store_user_data=True).to_disk(folder / "a.spacy")
    (folder / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in JSONL), encoding="utf8")
    (folder / "c.txt").write_text("\n".join(LINES) + "\n", encoding="utf8")
    return folder


def trained_model(name, folder: Path, n_iter=10):
    fix_random_seed(0)
    nlp = make_nlp(name)
    train(nlp, make_examples(nlp, ALL), n_iter=n_iter)
    nlp.to_disk(folder)
    return spacy.load(folder)


def with_domains(docs):
    return [(doc._.domain, ents, scores) for doc, (ents, scores) in zip(docs, annotations(docs))]


def assert_same_docs(got, expected):
    assert [(d, e) for d, e, _ in got] == [(d, e) for d, e, _ in expected]
    for (_, _, a), (_, _, b) in zip(got, expected):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_spacy_apply_with_two_processes(name, tmp_path):
    nlp = trained_model(name, tmp_path / "model")
    corpus = write_corpus(nlp, tmp_path / "corpus")
    result = run("spacy", "apply", tmp_path / "model", corpus, tmp_path / "out.spacy",
                 "--n-process", 2, "--batch-size", 2, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    got = with_domains(list(DocBin().from_disk(tmp_path / "out.spacy").get_docs(nlp.vocab)))
    # spacy apply reads .spacy docs (which keep their domain), then the "text" of each JSONL
    # record and each other file as one text: these have no domain and get the target's labels.
    texts = [r["text"] for r in JSONL] + ["\n".join(LINES) + "\n"]
    expected = with_domains(list(nlp.pipe(docs_of(nlp, ALL) + texts, batch_size=2)))
    assert [d for d, _, _ in got] == [d for d, _, _ in ALL] + [None] * len(texts)
    assert_same_docs(got, expected)
    target_labels = set(nlp.get_pipe("crossner").label_data["ai"])
    assert {label for _, ents, _ in got[len(ALL):] for _, _, label in ents} <= target_labels
    assert any(scores for _, _, scores in got), "no entity, so no score was checked"


def annotate_reference(nlp):
    """What the annotate command must write, from one process: .spacy docs with their own
    domain, JSONL records with theirs (else the target's), one doc per text line."""
    docs = docs_of(nlp, ALL)
    for record in JSONL:
        doc = nlp.make_doc(record["text"])
        set_domain(doc, record.get("domain"))
        docs.append(doc)
    docs.extend(nlp.make_doc(line) for line in LINES)
    return with_domains(list(nlp.pipe(docs, batch_size=2)))


def test_annotate_on_a_local_cluster_equals_one_process(tmp_path):
    nlp = trained_model("bilstm_crf", tmp_path / "model", n_iter=20)
    corpus = write_corpus(nlp, tmp_path / "corpus")
    args = ("spacy_crossner", "annotate", tmp_path / "model", corpus, tmp_path / "out",
            "--scheduler", "local", "--workers", 2, "--shard-size", 2, "--batch-size", 2)
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # a.spacy: 6 docs in 3 shards, b.jsonl: 2 docs in 1, c.txt: 3 lines in 2.
    shards = sorted(p.name for p in (tmp_path / "out").glob("*.spacy"))
    assert shards == ["a.spacy.00000.spacy", "a.spacy.00001.spacy", "a.spacy.00002.spacy",
                      "b.jsonl.00000.spacy", "c.txt.00000.spacy", "c.txt.00001.spacy"]
    assert "6 shards: 6 annotated, 0 already done" in result.stdout
    got = with_domains(read_output(tmp_path / "out", nlp.vocab))
    expected = annotate_reference(nlp)
    assert [d for d, _, _ in got] == [d for d, _, _ in ALL] + ["news", None, None, None, None]
    assert_same_docs(got, expected)
    assert any(scores for _, _, scores in got), "no entity, so no score was checked"
    again = run(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "6 shards: 0 annotated, 6 already done" in again.stdout


def test_failed_shard_is_named_others_kept_and_rerun_finishes(tmp_path):
    nlp = trained_model("bilstm_crf", tmp_path / "model")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = [{"text": f"Paris is in France {i} ."} for i in range(4)]
    bad = good[:2] + [{"text": "Paris is in France .", "domain": "unknown_domain"}] + good[3:]
    (corpus / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad), encoding="utf8")
    settings = dict(model=tmp_path / "model", inputs=corpus, output_dir=tmp_path / "out",
                    scheduler="local", workers=1, shard_size=2, progress=False)
    with pytest.raises(AnnotateError) as err:
        annotate(**settings)
    message = str(err.value)
    assert "1 of 2 shards failed" in message
    assert f"shard x.jsonl.00001 ({corpus / 'x.jsonl'}, docs 2-3)" in message
    assert "Unknown domain 'unknown_domain'" in message
    assert sorted(p.name for p in (tmp_path / "out").glob("*.spacy")) == ["x.jsonl.00000.spacy"]
    kept = (tmp_path / "out" / "x.jsonl.00000.spacy").stat().st_mtime_ns
    (corpus / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good), encoding="utf8")
    summary = annotate(**settings)
    assert (summary.done, summary.skipped, summary.failed) == (1, 1, [])
    assert (tmp_path / "out" / "x.jsonl.00000.spacy").stat().st_mtime_ns == kept
    assert [d.text for d in read_output(tmp_path / "out", nlp.vocab)] == [r["text"] for r in good]


@pytest.mark.parametrize("make_args,expected", [
    (lambda t: ["model", t / "missing", t / "out"], "does not exist"),
    (lambda t: ["model", t / "c.jsonl", t / "out", "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"],
     "--workers sets the size of a local cluster"),
    (lambda t: ["model", t / "c.jsonl", t / "out", "--shard-size", "0"], "--shard-size must be at least 1"),
    (lambda t: ["model", t / "bad.jsonl", t / "out"], "bad.jsonl line 2: no \"text\" string field"),
    (lambda t: ["model", t / "notes.md", t / "out"], "unknown suffix '.md'"),
    (lambda t: ["model", t / "broken.spacy", t / "out"], "broken.spacy: not a readable .spacy DocBin"),
    (lambda t: ["model", t, t / "out"], "is inside the input folder"),
])
def test_annotate_user_errors(tmp_path, make_args, expected):
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n', encoding="utf8")
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"body": "b"}\n', encoding="utf8")
    (tmp_path / "notes.md").write_text("text\n", encoding="utf8")
    (tmp_path / "broken.spacy").write_bytes(b"not a docbin")
    result = CliRunner().invoke(app, ["annotate", *map(str, make_args(tmp_path))])
    assert result.exit_code == 1
    assert expected in result.output
    assert "Traceback" not in result.output


def test_a_pipeline_no_worker_can_load_is_one_clear_error(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("Paris is in France .\n", encoding="utf8")
    with pytest.raises(AnnotateError, match=r"Worker tcp://127\.0\.0\.1:\d+ cannot load the pipeline "
                       r".*no_such_pipeline.*install the packaged pipeline on the workers"):
        annotate(model="no_such_pipeline", inputs=corpus, output_dir=tmp_path / "out",
                 scheduler="local", workers=1, progress=False)
    assert not list((tmp_path / "out").glob("*.spacy"))


def test_every_shard_selects_the_gpu_in_its_own_thread(monkeypatch):
    """thinc's current ops are per thread: a Dask worker running shards in several threads
    selects the GPU in each shard call, not only in the thread that loaded the pipeline."""
    import threading

    from spacy_crossner import annotate as annotate_module

    calls = []
    monkeypatch.setattr(spacy, "require_gpu", lambda gpu_id=0: calls.append((threading.get_ident(), gpu_id)))
    monkeypatch.setitem(annotate_module._PIPELINES, ("blank-for-test", 0), spacy.blank("en"))
    results = []

    def shard():
        results.append(annotate_module.annotate_shard("blank-for-test", "texts", [("John Smith", "ai")], 8, gpu_id=0))

    threads = [threading.Thread(target=shard) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ident for ident, _ in calls) == sorted(t.ident for t in threads)
    assert {gpu for _, gpu in calls} == {0}
    assert [(n_docs, n_words) for _, n_docs, n_words in results] == [(1, 2), (1, 2)]
