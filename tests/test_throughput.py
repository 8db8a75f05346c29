"""Inference tuned for throughput (issue 50): ``CrossNER.pipe`` predicts each batch in
sub-batches of docs of similar length (``spacy_crossner.batching.length_batches``) and gives the
same docs, in the same order, as one prediction per batch.

Tolerance: entities are compared exactly; entity probabilities within the tolerance of
test_architectures.py's ``nlp.pipe`` == ``nlp()`` check (a doc padded to another length goes
through other matrix shapes, which may change the last bits of a float).
"""
import random

import numpy
import pytest
from spacy.tokens import Doc
from thinc.api import fix_random_seed

from spacy_crossner import set_domain
from spacy_crossner.batching import length_batches
from spacy_crossner.pipeline import CrossNER
from test_architectures import ARCHITECTURES, make_nlp
from util import AI, MINILM_LISTENER, MINILM_TRANSFORMER, NEWS, load_script, make_examples, train

ALL = NEWS + AI


# -- length_batches ---------------------------------------------------------------------------


def test_length_batches_sorts_and_bounds_the_padding():
    lengths = [30, 2, 0, 17, 2, 120, 5, 30, 9, 1]
    batches = length_batches(lengths, 64)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every item once
    assert [lengths[i] for i in flat] == sorted(lengths)  # ascending, across and within batches
    assert flat.index(1) < flat.index(4)  # ties keep their order (2 at 1 and at 4)
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        # within the budget, or one item too long for it on its own
        assert len(batch) * longest <= 64 or len(batch) == 1
    assert batches[-1] == [5]  # 120 tokens > 64: alone
    # the greedy split: 0, 1, 2, 2, 5, 9 fill 6 x 9 = 54 positions; 17 and 30 fill 2 x 30 = 60
    assert batches == [[2, 9, 1, 4, 6, 8], [3, 0], [7], [5]]


def test_length_batches_without_a_budget_keeps_the_batch():
    assert length_batches([5, 1, 3], None) == [[0, 1, 2]]
    assert length_batches([5, 1, 3], 0) == [[0, 1, 2]]
    assert length_batches([], 4096) == [] and length_batches([], None) == []
    assert length_batches([0, 0, 0], 1) == [[0], [1], [2]]  # empty docs count as 1 position
    assert length_batches([3, 1, 2], 10 ** 9) == [[1, 2, 0]]


@pytest.mark.parametrize("bad", [-1, 2.5, "64", True])
def test_length_batches_rejects_a_bad_budget(bad):
    with pytest.raises(ValueError, match="max_items must be a whole number >= 0"):
        length_batches([1, 2], bad)


# -- CrossNER.pipe ----------------------------------------------------------------------------


def mixed_docs(nlp, n=40, seed=0):
    """Docs of 0 to ~250 tokens from both domains' sentences, in a shuffled order."""
    rng = random.Random(seed)
    docs = []
    for k in range(n):
        domain, words, _ = ALL[k % len(ALL)]
        repeat = rng.choice([0, 1, 1, 1, 2, 3, 8, 40])
        words = list(words) * repeat if repeat else []
        if k % 13 == 5:
            words = words[:1]  # one token
        doc = Doc(nlp.vocab, words=words)
        set_domain(doc, domain)
        docs.append(doc)
    return docs


def results(docs):
    """Per doc, in the order given: its words, entities and entity probabilities."""
    return [([t.text for t in d], [(e.start, e.end, e.label_) for e in d.ents],
             numpy.asarray(d.spans["crossner"].attrs["scores"], dtype="float64")) for d in docs]


def assert_same(a, b):
    assert [x[0] for x in a] == [y[0] for y in b]  # the same docs, in the same order
    assert [x[1] for x in a] == [y[1] for y in b]
    for x, y in zip(a, b):
        numpy.testing.assert_allclose(x[2], y[2], rtol=1e-4, atol=1e-5)


def sorted_and_unsorted(nlp, docs_fn, batch_size, max_batch_items, monkeypatch):
    """The component's results on the same docs with sorting (recording every predicted
    sub-batch's lengths) and without it (one prediction per batch, spaCy's TrainablePipe.pipe)."""
    pipe = nlp.get_pipe("crossner")
    seen = []
    predict = CrossNER.predict

    def recording(self, docs):
        seen.append([len(d) for d in docs])
        return predict(self, docs)

    monkeypatch.setattr(CrossNER, "predict", recording)
    monkeypatch.setattr(pipe, "max_batch_items", max_batch_items)
    with_sort = results(nlp.pipe(docs_fn(), batch_size=batch_size))
    sub_batches = list(seen)
    seen.clear()
    monkeypatch.setattr(pipe, "max_batch_items", None)
    without = results(nlp.pipe(docs_fn(), batch_size=batch_size))
    assert [len(s) for s in seen] == [min(batch_size, len(without) - i) for i in range(0, len(without), batch_size)]
    return with_sort, without, sub_batches


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def trained(request):
    fix_random_seed(0)
    nlp = make_nlp(request.param)
    train(nlp, make_examples(nlp, ALL), n_iter=30)
    return nlp


def test_sorted_sub_batches_give_the_same_docs_in_input_order(trained, monkeypatch):
    nlp = trained
    with_sort, without, sub_batches = sorted_and_unsorted(
        nlp, lambda: mixed_docs(nlp), batch_size=16, max_batch_items=128, monkeypatch=monkeypatch)
    assert len({len(x[0]) for x in without}) > 8  # mixed lengths
    assert sum(len(x[1]) for x in without) > 10  # entities to compare
    assert_same(with_sort, without)
    # the sorting happened: each sub-batch ascending and within the budget (or one long doc),
    # more sub-batches than batches
    assert len(sub_batches) > 3
    for lengths in sub_batches:
        assert lengths == sorted(lengths)
        assert len(lengths) * max(max(lengths), 1) <= 128 or len(lengths) == 1
    # and the same as one doc at a time
    assert_same(with_sort, results(nlp(d) for d in mixed_docs(nlp)))


def test_an_error_in_a_sub_batch_reaches_the_error_handler(trained, monkeypatch):
    nlp = trained
    pipe = nlp.get_pipe("crossner")
    failed = []

    def fail(self, docs):
        raise RuntimeError("boom")

    monkeypatch.setattr(CrossNER, "predict", fail)
    pipe.set_error_handler(lambda name, proc, docs, e: failed.append((name, len(docs), str(e))))
    try:
        assert list(nlp.pipe(mixed_docs(nlp, n=10), batch_size=4)) == []
    finally:
        pipe.set_error_handler(None)  # spaCy's default again: raise
    assert failed == [("crossner", 4, "boom"), ("crossner", 4, "boom"), ("crossner", 2, "boom")]


def test_minilm_pipeline_sorted_and_unsorted_agree(monkeypatch):
    """The bundled MiniLM (real size, its crossner head barely trained): the transformer
    component batches as it does (spacy-transformers sorts by length itself); the crossner
    component's sorting changes none of its docs."""
    import spacy

    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("transformer", config=MINILM_TRANSFORMER)
    nlp.add_pipe("crossner", config={"target_domain": "ai", "model": {
        "@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True, "dropout": 0.0,
        "tok2vec": MINILM_LISTENER}})
    train(nlp, make_examples(nlp, ALL), n_iter=2, lr=0.001)
    with_sort, without, sub_batches = sorted_and_unsorted(
        nlp, lambda: mixed_docs(nlp, n=24, seed=1), batch_size=12, max_batch_items=96, monkeypatch=monkeypatch)
    assert sum(len(x[1]) for x in without) > 0
    assert_same(with_sort, without)
    assert len(sub_batches) > 2 and all(lengths == sorted(lengths) for lengths in sub_batches)


# -- benchmarks/throughput.py, without running a model ------------------------------------------


@pytest.fixture(scope="module")
def throughput():
    return load_script("benchmarks/throughput.py")


def measured(variant, words_s, batch_size=64, mbi=4096, sort=True, threads=1, rnd=0):
    return {"pipeline": "spacy_ner_minilm" if variant == "peer" else "transformer_tagger",
            "variant": variant, "threads": threads, "round": rnd, "batch_size": batch_size,
            "trf_max_batch_items": mbi, "crossner_sort": None if variant == "peer" else sort,
            "words_s": words_s, "seconds": 1.0, "n_docs": 10, "n_words": 100}


def test_the_grid_pairs_every_setting_with_the_peer_but_crossner_sorting(throughput):
    grid = throughput.settings_grid([32, 256], [4096, 0])
    assert [(g["batch_size"], g["trf_max_batch_items"], g["crossner_sort"], g["peer"]) for g in grid] == [
        (32, 4096, True, True), (32, 0, False, True), (32, 4096, False, False),
        (256, 4096, True, True), (256, 0, False, True), (256, 4096, False, False)]


def test_ratios_are_to_the_peer_of_the_same_setting_and_round(throughput):
    rows = [
        measured("fp32", 1000, rnd=0), measured("peer", 500, rnd=0), measured("int8", 2000, rnd=0),
        measured("fp32", 1200, rnd=1), measured("peer", 1200, rnd=1), measured("int8", 2400, rnd=1),
        measured("fp32", 900, sort=False, rnd=0), measured("fp32", 600, mbi=0, sort=False, rnd=0),
        measured("peer", 300, mbi=0, rnd=0), measured("fp32", 700, threads=2, rnd=0),
    ]
    summary = throughput.summarise(rows)
    fp32 = throughput.find(summary, "fp32", 1, 64, 4096, True)
    assert fp32["words_s"] == 1100 and fp32["rounds"] == 2
    assert fp32["ratio_to_spacy_ner_minilm"] == pytest.approx((2.0 + 1.0) / 2)  # per round, then the median
    assert throughput.find(summary, "int8", 1, 64, 4096, True)["ratio_to_spacy_ner_minilm"] == pytest.approx(3.0)
    assert throughput.find(summary, "fp32", 1, 64, 0, False)["ratio_to_spacy_ner_minilm"] == pytest.approx(2.0)
    # crossner sorting off: to the peer at the same transformer setting; 2 threads has no peer here
    assert throughput.find(summary, "fp32", 1, 64, 4096, False)["ratio_to_spacy_ner_minilm"] == pytest.approx(1.8)
    assert throughput.find(summary, "fp32", 2, 64, 4096, True)["ratio_to_spacy_ner_minilm"] is None
    assert throughput.find(summary, "peer", 1, 64, 4096, None)["ratio_to_spacy_ner_minilm"] is None
    assert throughput.best(summary, "fp32", 1)["words_s"] == 1100
    assert throughput.best(summary, "int8", 3) is None


def test_the_report_says_command_machine_load_and_the_fastest_setting(throughput, tmp_path):
    import argparse

    rows = [measured("fp32", 1000), measured("peer", 500), measured("int8", 2000),
            measured("fp32", 400, mbi=0, sort=False), measured("peer", 250, mbi=0), measured("int8", 800, mbi=0, sort=False),
            dict(measured("fp32", 30000, mbi=None), pipeline="bilstm_crf"),
            dict(measured("fp32", 20000, mbi=None, sort=False), pipeline="bilstm_crf")]
    args = argparse.Namespace(argv=["--docs", "10"], rounds=1, json=str(tmp_path / "t.json"),
                              output=str(tmp_path / "t.md"))
    text = throughput.write_report(args, throughput.summarise(rows), 90.0, "1.0 / 2.0")
    assert text == (tmp_path / "t.md").read_text()
    assert "`python benchmarks/throughput.py --docs 10`" in text and "load average at start / end: 1.0 / 2.0" in text
    assert "| 64 | 4096 | on | 1,000 | 2,000 | 500 | 2.00 | 4.00 |" in text
    assert "| 64 | 0 (no sort) | off | 400 | 800 | 250 | 1.60 | 3.20 |" in text
    # the fastest setting, and its gain over no sorting at the same batch size
    assert "| 1 | int8 | 64 | 4096 | on | 2,000 | 2.50 |" in text
    assert "| 1 | peer | 64 | 4096 |  | 500 | 2.00 |" in text
    # the word/char architectures in their own table only
    assert text.count("30,000") == 1 and "| bilstm_crf | 64 | 30,000 | 20,000 | 1.50 |" in text


def test_speed_report_rewrites_keep_the_deploy_notes(tmp_path):
    """benchmarks/speed.py rewrites speed.md on every run; the deploy notes at its end stay."""
    import argparse

    speed = load_script("benchmarks/speed.py")
    out = tmp_path / "speed.md"
    args = argparse.Namespace(argv=["--quick"], rounds=1, rounds_done=1, train_docs=8, infer_docs=8,
                              trf_train_docs=4, trf_infer_docs=4, output=str(out))
    speed.write_report(args, [], 1.0, "0.1 / 0.2")
    assert speed.DEPLOY_NOTES not in out.read_text()
    notes = "\n## Deploy settings (issue 50)\n\n- batch size 64\n"
    out.write_text(out.read_text() + notes)
    speed.write_report(args, [], 2.0, "0.3 / 0.4")
    text = out.read_text()
    assert text.endswith(notes) and text.count(speed.DEPLOY_NOTES) == 1 and "0.3 / 0.4" in text
