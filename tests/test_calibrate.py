"""Calibrated entity probabilities (issue 47 part 6): ECE on hand-made entities, tempered CRF and
softmax probabilities against brute force with decoding unchanged, T = 1 giving today's scores,
calibration lowering dev ECE on a toy over-confident model, the temperature saved and loaded,
the thresholds reading calibrated values, evaluate's and report's calibration, and the
command's errors."""
import json
import math
from types import SimpleNamespace

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc, DocBin, Span, SpanGroup
from thinc.api import NumpyOps, fix_random_seed
from typer.testing import CliRunner
from util import AI, NEWS, TINY_FEATURES, blank_with, make_doc, make_examples, train

from spacy_crossner.calibrate import (
    CalibrationError,
    calibrate,
    calibration_summary,
    expected_calibration_error,
    fit_temperature,
    log_loss,
    reliability_table,
    scored_entities,
)
from spacy_crossner.cli import app
from spacy_crossner.decoding import iob2_spans
from spacy_crossner.domains import set_domain
from spacy_crossner.evaluate import evaluate
from spacy_crossner.models.head import _head_layer, decode, decode_crf, decode_softmax
from spacy_crossner.models.pytorch_heads import Lattice, SoftmaxHead
from spacy_crossner.report import ReportError, load_runs, plot_reliability, report
from spacy_crossner.self_train import choose_threshold, load_teacher
from test_head import DOMAINS, random_crf_head, sequence_scores

# -- ECE ----------------------------------------------------------------------------------------

HAND_MADE = [(0.95, True), (0.95, False), (0.85, True), (0.85, True), (0.25, False)]


def test_ece_and_reliability_of_hand_made_entities():
    # bins [0.9, 1.0]: conf 0.95, acc 0.5; [0.8, 0.9): 0.85, 1.0; [0.2, 0.3): 0.25, 0.0
    expected = 2 / 5 * 0.45 + 2 / 5 * 0.15 + 1 / 5 * 0.25
    assert expected_calibration_error(HAND_MADE) == pytest.approx(expected) == pytest.approx(0.29)
    table = reliability_table(HAND_MADE)
    assert [row["count"] for row in table] == [0, 0, 1, 0, 0, 0, 0, 0, 2, 2]
    assert table[9] == {"lower": 0.9, "upper": 1.0, "count": 2, "confidence": 0.95, "accuracy": 0.5}
    assert table[2]["accuracy"] == 0.0 and table[0]["confidence"] is None
    # one bin: |mean accuracy - mean probability|; probability 1.0 falls in the last bin
    assert expected_calibration_error(HAND_MADE, n_bins=1) == pytest.approx(abs(0.6 - 0.77))
    assert reliability_table([(1.0, True), (0.0, False)], n_bins=4)[3]["count"] == 1
    assert expected_calibration_error([(0.7, True), (0.7, True), (0.7, False)], n_bins=10) == pytest.approx(
        abs(2 / 3 - 0.7))
    summary = calibration_summary(HAND_MADE)
    assert summary["n_entities"] == 5 and summary["n_correct"] == 3 and summary["accuracy"] == 0.6
    assert calibration_summary([])["ece"] is None
    with pytest.raises(ValueError, match="no predicted entities"):
        expected_calibration_error([])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error([(1.5, True)])
    assert log_loss([(0.5, True), (0.5, False)]) == pytest.approx(math.log(2))


def test_ece_of_the_entities_in_doc_spans():
    nlp = spacy.blank("en")
    words = "Alan Turing met Grace Hopper in London".split()
    gold = make_doc(nlp, words, [(0, 2, "person"), (3, 5, "person"), (6, 7, "location")])
    predicted = Doc(nlp.vocab, words=words)
    spans = [Span(predicted, 0, 2, "person"), Span(predicted, 3, 4, "person"), Span(predicted, 6, 7, "misc")]
    group = SpanGroup(predicted, name="crossner", spans=spans)
    group.attrs["scores"] = numpy.asarray([0.9, 0.8, 0.6], dtype="float32")
    predicted.spans["crossner"] = group
    scored = scored_entities(gold, predicted, "crossner")
    assert [c for _, c in scored] == [True, False, False]
    assert scored_entities(gold, predicted, "crossner", labels=["misc"]) == [(pytest.approx(0.6), False)]
    assert scored_entities(gold, predicted, "other") == []
    assert expected_calibration_error(scored) == pytest.approx((0.1 + 0.8 + 0.6) / 3)
    del group.attrs["scores"]
    with pytest.raises(CalibrationError, match="attrs"):
        scored_entities(gold, predicted, "crossner")


def test_fit_temperature_finds_the_minimum_of_a_smooth_loss():
    assert fit_temperature(lambda t: (math.log(t) - math.log(3.7)) ** 2) == pytest.approx(3.7, rel=1e-4)
    assert fit_temperature(lambda t: -t) == pytest.approx(20.0)  # at the bound


# -- tempered probabilities of the heads ------------------------------------------------------


def _model(layer, temperatures=None):
    attrs = {"domain_tags": DOMAINS}
    if temperatures is not None:
        attrs["temperatures"] = temperatures
    return SimpleNamespace(get_ref=lambda name: layer, ops=NumpyOps(), attrs=attrs)


def test_crf_probabilities_at_a_temperature_are_the_tempered_marginals_and_decoding_is_unchanged():
    head = random_crf_head(8)
    rng = numpy.random.RandomState(9)
    domains, lengths = ["a", "b", "a", "b"], [4, 3, 0, 4]
    emissions = rng.randn(4, 4, 7).astype("float32") * 3
    whitespace = [[False, False, True, False], [False, True, False], [], [False] * 4]
    layer = _head_layer(head, decode_crf)
    output = SimpleNamespace(scores=emissions, lengths=lengths, domains=domains)
    plain = decode(_model(layer), output, whitespace)
    temperatures = {"a": 2.5, "b": 0.4}
    tempered = decode(_model(layer, temperatures), output, whitespace)
    n_spans = 0
    for b in (0, 1, 3):
        assert tempered[b].tags == plain[b].tags and tempered[b].spans == plain[b].spans
        tags = DOMAINS[domains[b]]
        n = lengths[b]
        scores = sequence_scores(head, domains[b], emissions[b, :n, : len(tags)].astype("float64"), whitespace[b])
        T = temperatures[domains[b]]
        log_z = numpy.logaddexp.reduce(numpy.array(list(scores.values())) / T)
        for (s, e, label), p in zip(tempered[b].spans, tempered[b].probs):
            expected = sum(
                math.exp(score / T - log_z) for seq, score in scores.items()
                if (s, e, label) in iob2_spans([tags[k] for k in seq])
            )
            assert math.isclose(p, expected, rel_tol=1e-7, abs_tol=1e-12)
            n_spans += 1
    assert n_spans >= 3
    assert any(p != q for d, e in zip(plain, tempered) for p, q in zip(d.probs, e.probs))
    # T = 1 is today's computation, to the bit
    same = decode(_model(layer, {"a": 1.0, "b": 1.0}), output, whitespace)
    assert [d.probs for d in same] == [d.probs for d in plain] and [d.tags for d in same] == [d.tags for d in plain]


def test_tempered_lattice_with_several_temperatures_in_a_group_equals_a_table_per_doc():
    head = random_crf_head(6)
    rng = numpy.random.RandomState(7)
    domains, lengths = ["b", "a", "b", "b", "a", "b"], [5, 3, 6, 1, 6, 2]
    emissions = torch.from_numpy(rng.randn(6, 6, 7) * 2)
    ws = torch.from_numpy(rng.rand(6, 6) < 0.3)
    lattice = head.lattice(emissions, torch.tensor(lengths), domains, ws)
    inv = torch.tensor([0.5, 2.0, 0.5, 3.0, 2.0, 1.0], dtype=torch.float64)
    tempered = lattice.tempered(inv)
    assert tempered.group_trans.shape[0] == 4  # (b, 0.5), (b, 3), (b, 1), (a, 2)
    reference = Lattice(
        lattice.emissions * inv[:, None, None], lattice.lengths, lattice.start * inv[:, None],
        lattice.trans * inv[:, None, None], lattice.end * inv[:, None], lattice.whitespace,
        lattice.is_inside, torch.arange(6),
    )
    assert torch.equal(tempered.viterbi(), lattice.viterbi())
    for got, expected in zip(tempered.forward_backward(), reference.forward_backward()):
        assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_softmax_probabilities_at_a_temperature_and_decoding_unchanged():
    head = SoftmaxHead()
    head.setup(DOMAINS)
    layer = _head_layer(head, decode_softmax)
    rng = numpy.random.RandomState(3)
    emissions = rng.randn(2, 5, 7).astype("float32") * 4
    output = SimpleNamespace(scores=emissions, lengths=[5, 4], domains=["b", "a"])
    whitespace = [[False] * 5, [False] * 4]
    plain = decode(_model(layer), output, whitespace)
    tempered = decode(_model(layer, {"b": 3.0}), output, whitespace)
    assert [d.tags for d in plain] == [d.tags for d in tempered]
    assert tempered[1].probs == plain[1].probs  # domain a has no temperature
    tags = DOMAINS["b"]
    logits = emissions[0, :, : len(tags)].astype("float64") / 3.0
    logp = logits - numpy.logaddexp.reduce(logits, axis=1, keepdims=True)
    for (s, e, label), p in zip(tempered[0].spans, tempered[0].probs):
        ids = [tags.index(t) for t in plain[0].tags[s:e]]
        assert p == pytest.approx(math.exp(sum(logp[t, k] for t, k in zip(range(s, e), ids))), rel=1e-5)
    assert tempered[0].spans and tempered[0].probs != plain[0].probs


# -- a toy over-confident pipeline --------------------------------------------------------------

# The training sentences with a third of their gold labels changed: the model, which learnt
# them, is confident (p ~ 0.99) and right about half the time.
DEV = [
    ("ai", "LSTM networks were proposed by Hochreiter .".split(), [(0, 1, "algorithm"), (5, 6, "organisation")]),
    ("ai", "We report accuracy on ImageNet .".split(), [(2, 3, "misc"), (4, 5, "misc")]),
    ("ai", "Google released TensorFlow .".split(), [(0, 1, "organisation"), (2, 3, "algorithm")]),
    ("news", "John Smith lives in London .".split(), [(0, 2, "person"), (4, 5, "organisation")]),
    ("news", "Acme Corp hired Mary Jones .".split(), [(0, 2, "organisation"), (3, 5, "location")]),
    ("news", "Paris is in France .".split(), [(0, 1, "location"), (3, 4, "location")]),
]
MODEL = {
    "@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "depth": 1, "dropout": 0.0,
    "use_crf": True, "tok2vec": TINY_FEATURES,
}


def write_docbin(path, sentences, nlp=None):
    nlp = nlp or spacy.blank("en")
    db = DocBin(store_user_data=True)
    for domain, words, ents in sentences:
        db.add(make_doc(nlp, words, ents, domain))
    db.to_disk(path)
    return path


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("calibrate")
    fix_random_seed(0)
    nlp = blank_with({"model": MODEL})
    train(nlp, make_examples(nlp, AI + NEWS), 40)
    nlp.to_disk(root / "model")
    dev = write_docbin(root / "dev.spacy", DEV)
    result = calibrate(model=root / "model", dev=dev, output=root / "calibrated")
    return {"root": root, "model": root / "model", "dev": dev, "calibrated": root / "calibrated", "result": result}


def entities_and_scores(nlp, sentences=DEV):
    out = []
    for domain, words, _ in sentences:
        doc = nlp(make_doc(nlp, words, domain=domain))
        group = doc.spans["crossner"]
        out.append(([(s.start, s.end, s.label_) for s in group], group.attrs["scores"].tolist()))
    return out


def test_calibration_lowers_dev_ece_of_an_over_confident_model(toy):
    domains = toy["result"]["domains"]
    assert sorted(domains) == ["ai", "news"]
    for domain, r in domains.items():
        before, after = r["before"], r["after"]
        assert before["mean_confidence"] > 0.95 and before["accuracy"] < 0.8  # over-confident
        assert after["ece"] < before["ece"] and r["log_loss_after"] < r["log_loss_before"]
        assert r["temperature"] > 1.5 and r["previous_temperature"] == 1.0 and not r["at_bound"]
        assert after["mean_confidence"] < before["mean_confidence"]
        assert after["n_entities"] == before["n_entities"] == 6
    nlp = spacy.load(toy["calibrated"])
    assert nlp.meta["crossner_calibration"]["temperatures"] == {d: r["temperature"] for d, r in domains.items()}


def test_calibrated_pipeline_predicts_the_same_entities_and_keeps_its_temperature(toy):
    plain, calibrated = spacy.load(toy["model"]), spacy.load(toy["calibrated"])
    pipe = calibrated.get_pipe("crossner")
    temperatures = {d: r["temperature"] for d, r in toy["result"]["domains"].items()}
    assert pipe.cfg["temperatures"] == pytest.approx(temperatures)
    assert pipe.model.attrs["temperatures"] == pipe.cfg["temperatures"]
    assert plain.get_pipe("crossner").cfg["temperatures"] == {}
    before, after = entities_and_scores(plain), entities_and_scores(calibrated)
    assert [e for e, _ in before] == [e for e, _ in after]
    assert all(a < b for (_, sb), (_, sa) in zip(before, after) for a, b in zip(sa, sb))
    # to_bytes / from_bytes and to_disk / from_disk keep it too
    copy = spacy.blank("en")
    copy.add_pipe("crossner", config={"model": MODEL})
    copy.from_bytes(calibrated.to_bytes())
    assert copy.get_pipe("crossner").cfg["temperatures"] == pipe.cfg["temperatures"]
    assert entities_and_scores(copy) == after
    calibrated.to_disk(toy["root"] / "again")
    assert entities_and_scores(spacy.load(toy["root"] / "again")) == after


def test_temperature_one_gives_todays_scores_and_bad_temperatures_are_refused(toy):
    nlp = spacy.load(toy["model"])
    pipe = nlp.get_pipe("crossner")
    today = entities_and_scores(nlp)
    pipe.set_temperatures({"ai": 1.0, "news": 1.0})
    assert pipe.cfg["temperatures"] == {} and entities_and_scores(nlp) == today
    pipe.model.attrs["temperatures"] = {"ai": 1.0}  # as a head reads it
    assert entities_and_scores(nlp) == today
    pipe.set_temperatures({"ai": 0.2})  # the emissions and transitions x 5: sharper
    sharp = entities_and_scores(nlp)
    assert [e for e, _ in sharp] == [e for e, _ in today]
    assert all(ss != ts for (d, _, _), (_, ss), (_, ts) in zip(DEV, sharp, today) if d == "ai")
    assert [s for (d, _, _), (_, s) in zip(DEV, sharp) if d == "news"] == [
        s for (d, _, _), (_, s) in zip(DEV, today) if d == "news"]
    with pytest.raises(ValueError, match=r"\[components.crossner\] temperature of 'music'.*labelled domains"):
        pipe.set_temperatures({"music": 2.0})
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="positive finite"):
            pipe.set_temperatures({"ai": bad})
    # a re-initialized component starts uncalibrated
    pipe.initialize(lambda: make_examples(nlp, AI + NEWS), nlp=None)
    assert pipe.cfg["temperatures"] == {} and pipe.model.attrs["temperatures"] == {}


def test_the_component_threshold_and_self_training_read_calibrated_probabilities(toy):
    plain = spacy.load(toy["model"])
    calibrated = spacy.load(toy["calibrated"], config={"components": {"crossner": {"threshold": 0.9}}})
    # uncalibrated every entity passes 0.9; calibrated (probabilities near the dev accuracy) fewer do
    plain_scores = entities_and_scores(plain)
    assert all(p >= 0.9 for _, s in plain_scores for p in s)
    kept_plain = sum(len(e) for e, _ in plain_scores)
    scores = entities_and_scores(spacy.load(toy["calibrated"]))
    expected = [[span for span, p in zip(e, s) if numpy.float32(p) >= 0.9] for e, s in scores]
    got = [
        [(x.start, x.end, x.label_) for x in calibrated(make_doc(calibrated, w, domain=d)).ents]
        for d, w, _ in DEV
    ]
    assert got == expected and sum(map(len, got)) < kept_plain
    # pseudo-label --threshold-from-dev: the smallest threshold reaching the precision is among
    # the calibrated dev probabilities
    teacher, name = load_teacher(toy["calibrated"])
    choice = choose_threshold(teacher, name, toy["dev"], "ai", min_precision=0.0)
    ai_scores = [p for (d, _, _), (_, s) in zip(DEV, scores) if d == "ai" for p in s]
    news_scores = [p for (d, _, _), (_, s) in zip(DEV, scores) if d == "news" for p in s]
    assert choice.threshold == pytest.approx(min(ai_scores + news_scores))
    teacher_plain, _ = load_teacher(toy["model"])
    assert choose_threshold(teacher_plain, name, toy["dev"], "ai", min_precision=0.0).threshold > 0.9 > choice.threshold


def test_evaluate_reports_ece_per_domain_and_the_report_plots_it(toy, tmp_path):
    before = evaluate(model=toy["model"], data=toy["dev"], output=tmp_path / "before.json")
    after = evaluate(model=toy["calibrated"], data=toy["dev"], output=tmp_path / "after.json")
    for result, which in ((before, "before"), (after, "after")):
        cal = result["calibration"]
        assert sorted(cal["per_domain"]) == ["ai", "news"]
        for domain, summary in cal["per_domain"].items():
            assert summary["ece"] == pytest.approx(toy["result"]["domains"][domain][which]["ece"], abs=1e-6)
            assert sum(b["count"] for b in summary["bins"]) == summary["n_entities"] == 6
        assert result["ents_ece"] == pytest.approx(cal["overall"]["ece"])
    assert after["ents_ece"] < before["ents_ece"]
    assert after["calibration"]["temperatures"] and not before["calibration"]["temperatures"]
    assert after["ents_f"] == before["ents_f"]
    res = CliRunner().invoke(app, ["evaluate", str(toy["calibrated"]), str(toy["dev"])])
    assert res.exit_code == 0, res.output
    assert "temperatures ai" in res.output and "ECE" in res.output and "accuracy" in res.output
    out = tmp_path / "report"
    rep = report(metrics=[f"uncalibrated={tmp_path / 'before.json'}", f"calibrated={tmp_path / 'after.json'}"],
                 output_dir=out)
    md = rep["markdown"].read_text()
    assert "## Calibration of the entity probabilities" in md
    ece = before["calibration"]["per_domain"]["ai"]["ece"]
    assert f"| uncalibrated | ai | {ece:.4f} | 6 |" in md and "Reliability, news" in md
    assert "![Reliability per domain and run](reliability.png)" in md
    png = rep["reliability_plot"]
    assert png == out / "reliability.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(rep["json"].read_text())
    assert data["runs"][1]["calibration"]["per_domain"]["ai"]["ece"] == pytest.approx(
        after["calibration"]["per_domain"]["ai"]["ece"])
    # without plots: no PNG; a metrics file without calibration: no section
    assert report(metrics=[tmp_path / "after.json"], output_dir=tmp_path / "r2", plot=False)["reliability_plot"] is None
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in before.items() if k not in ("calibration", "ents_ece")}))
    rep = report(metrics=[plain], output_dir=tmp_path / "r3")
    assert rep["reliability_plot"] is None and "Calibration" not in rep["markdown"].read_text()
    with pytest.raises(ReportError, match="no run has a calibration|No run has a calibration"):
        plot_reliability(load_runs([plain]), tmp_path / "x.png")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**before, "calibration": {"per_domain": {"ai": {"bins": [{"count": 1}]}}}}))
    with pytest.raises(ReportError, match=r"bad.json: calibration.per_domain\['ai'\] needs bins"):
        load_runs([bad])


def test_the_reliability_plot_needs_the_report_extra(toy, tmp_path, monkeypatch):
    import sys

    evaluate(model=toy["model"], data=toy["dev"], output=tmp_path / "m.json")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ReportError, match=r"reliability plot needs matplotlib.*spacy_crossner\[report\]"):
        plot_reliability(load_runs([tmp_path / "m.json"]), tmp_path / "x.png")
    monkeypatch.setattr("spacy_crossner.report.can_plot", lambda: False)
    rep = report(metrics=[tmp_path / "m.json"], output_dir=tmp_path / "r")
    assert rep["reliability_plot"] is None and "Calibration" in rep["markdown"].read_text()


# -- the command ----------------------------------------------------------------------------------


def test_the_command_prints_temperatures_and_ece_and_writes_the_pipeline(toy, tmp_path):
    res = CliRunner().invoke(app, ["calibrate", str(toy["model"]), str(toy["dev"]), str(tmp_path / "out"),
                                   "--domain", "ai"])
    assert res.exit_code == 0, res.output
    assert "ai: temperature" in res.output and "ECE" in res.output and "news" not in res.output.split("Wrote")[0]
    assert "conf before" in res.output
    pipe = spacy.load(tmp_path / "out").get_pipe("crossner")
    assert list(pipe.cfg["temperatures"]) == ["ai"]
    # a domain without labels of its own is calibrated through the domain it is an alias of
    aliased = spacy.load(toy["model"], config={"components": {"crossner": {"domain_aliases": {"music": "ai"}}}})
    aliased.to_disk(tmp_path / "aliased")
    res = CliRunner().invoke(app, ["calibrate", str(tmp_path / "aliased"), str(toy["dev"]), str(tmp_path / "out2"),
                                   "--domain", "music"])
    assert res.exit_code == 0, res.output
    assert "dev docs of music, which domain_aliases maps to ai" in res.output
    assert list(spacy.load(tmp_path / "out2").get_pipe("crossner").cfg["temperatures"]) == ["ai"]


def test_the_command_errors_name_the_file_or_setting(toy, tmp_path):
    blank = spacy.blank("en")
    blank.add_pipe("sentencizer")
    blank.to_disk(tmp_path / "blank")
    empty = tmp_path / "empty.spacy"
    DocBin().to_disk(empty)
    no_ents = write_docbin(tmp_path / "no_ents.spacy", [(d, w, []) for d, w, _ in DEV])
    unannotated = tmp_path / "raw.spacy"
    raw = DocBin(store_user_data=True)
    doc = Doc(spacy.blank("en").vocab, words=DEV[0][1])
    set_domain(doc, "ai")
    raw.add(doc)
    raw.to_disk(unannotated)
    music = write_docbin(tmp_path / "music.spacy", [("music", w, e) for _, w, e in DEV[:1]])
    quiet = write_docbin(tmp_path / "quiet.spacy", [("ai", "the weather was nice and quiet today .".split(), [(1, 2, "misc")])])
    not_docbin = tmp_path / "dev.txt"
    not_docbin.write_text("LSTM B-algorithm\n")
    out = str(tmp_path / "out")
    cases = [
        (tmp_path / "blank", toy["dev"], "has no crossner component"),
        (toy["model"], empty, f"{empty} holds no docs"),
        (toy["model"], no_ents, f"{no_ents} has no gold entities"),
        (toy["model"], unannotated, f"{unannotated} has no entity annotation"),
        (toy["model"], music, "Unknown domain 'music'"),
        (toy["model"], quiet, "predicts no entity on the 1 dev docs of domain 'ai'"),
        (toy["model"], tmp_path / "missing.spacy", "Dev corpus not found"),
        (toy["model"], not_docbin, f"Cannot read {not_docbin} as a .spacy DocBin"),
        (tmp_path / "nope", toy["dev"], "Model not found"),
    ]
    for model, dev, message in cases:
        with pytest.raises(CalibrationError, match=None) as err:
            calibrate(model=model, dev=dev, output=out)
        assert message in str(err.value)
        res = CliRunner().invoke(app, ["calibrate", str(model), str(dev), out])
        assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output
    assert "blank" in str(pytest.raises(CalibrationError, calibrate, model=tmp_path / "blank", dev=toy["dev"],
                                        output=out).value)
    file_out = tmp_path / "file"
    file_out.write_text("x")
    with pytest.raises(CalibrationError, match="OUTPUT .* is a file"):
        calibrate(model=toy["model"], dev=toy["dev"], output=file_out)
    res = CliRunner().invoke(app, ["calibrate", str(toy["model"]), str(toy["dev"]), out, "--bins", "0"])
    assert res.exit_code == 1 and "--bins" in res.output


HEADS = {
    "softmax": {**MODEL, "use_crf": False},
    "label_aware": {"@architectures": "spacy_crossner.LabelAwareTagger.v1", "label_width": 16,
                    "hidden_width": 16, "tok2vec": TINY_FEATURES},
}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_every_head_keeps_its_entities_at_any_temperature(head):
    fix_random_seed(0)
    nlp = blank_with({"model": HEADS[head]})
    train(nlp, make_examples(nlp, AI + NEWS), 15)
    pipe = nlp.get_pipe("crossner")
    today = entities_and_scores(nlp)
    assert sum(len(e) for e, _ in today) >= 4
    for temperature in (0.3, 4.0):
        pipe.set_temperatures({"ai": temperature, "news": temperature})
        now = entities_and_scores(nlp)
        assert [e for e, _ in now] == [e for e, _ in today]
        assert [s for _, s in now] != [s for _, s in today]
    pipe.set_temperatures({"ai": 1.0, "news": 1.0})
    assert entities_and_scores(nlp) == today
