"""Tests of spacy_crossner.evaluate: both scoring modes, label restriction, the CLI."""
import json

import pytest
import spacy
from spacy.tokens import Doc, DocBin, Span
from typer.testing import CliRunner

from spacy_crossner import set_domain
from spacy_crossner.cli import app
from spacy_crossner.evaluate import EvaluationError, doc_tags, evaluate, score_tags
from util import ruler_pipeline_and_data


def test_sentence_mode_known_prf():
    gold = [["B-person", "I-person", "O", "B-location"], ["B-misc", "O"]]
    pred = [["B-person", "I-person", "O", "B-organisation"], ["B-misc", "O"]]
    s = score_tags(gold, pred, mode="sentence")
    # tp: person, misc; fp: organisation; fn: location
    assert s["counts"] == {"tp": 2, "fp": 1, "fn": 1}
    assert s["ents_p"] == pytest.approx(2 / 3)
    assert s["ents_r"] == pytest.approx(2 / 3)
    assert s["ents_f"] == pytest.approx(2 / 3)
    assert s["ents_per_type"]["person"] == {"p": 1.0, "r": 1.0, "f": 1.0}
    assert s["ents_per_type"]["location"] == {"p": 0.0, "r": 0.0, "f": 0.0}
    assert s["ents_per_type"]["organisation"]["p"] == 0.0
    assert s["counts_per_type"]["location"] == {"tp": 0, "fp": 0, "fn": 1}


def test_boundary_error_counts_as_fp_and_fn():
    s = score_tags([["B-x", "I-x", "I-x"]], [["B-x", "I-x", "O"]])
    assert s["counts"] == {"tp": 0, "fp": 1, "fn": 1}
    assert s["ents_f"] == 0.0


def test_compat_mode_joins_sentences():
    # a predicted I-X opening sentence 2 is a new entity per sentence, but continues the X
    # ending sentence 1 when the split is one stream (the authors' scoring)
    gold = [["O", "B-x"], ["B-x", "O"]]
    pred = [["O", "B-x"], ["I-x", "O"]]
    sentence = score_tags(gold, pred, mode="sentence")
    assert sentence["counts"] == {"tp": 2, "fp": 0, "fn": 0}
    assert sentence["ents_f"] == 1.0
    compat = score_tags(gold, pred, mode="crossner-compat")
    assert compat["counts"] == {"tp": 0, "fp": 1, "fn": 2}
    assert compat["ents_f"] == 0.0
    # the authors' script swaps P and R
    assert compat["authors_p"] == compat["ents_r"] and compat["authors_r"] == compat["ents_p"]


def test_compat_mode_equals_sentence_mode_on_b_opened_entities():
    gold = [["B-a", "I-a"], ["B-a", "O", "B-b"], ["O"]]
    pred = [["B-a", "O"], ["B-a", "O", "B-a"], ["B-b"]]
    a = score_tags(gold, pred, mode="sentence")
    b = score_tags(gold, pred, mode="crossner-compat")
    assert a["counts"] == b["counts"] == {"tp": 1, "fp": 3, "fn": 2}
    assert a["ents_f"] == pytest.approx(b["ents_f"]) == pytest.approx(2 / 7)


def test_labels_restriction_counts_others_as_o():
    gold = [["B-person", "O", "B-location"]]
    pred = [["B-person", "O", "B-organisation"]]
    s = score_tags(gold, pred, labels=["person"])
    assert s["counts"] == {"tp": 1, "fp": 0, "fn": 0}
    assert set(s["ents_per_type"]) == {"person"}
    # O-ing a type before chunking: I-person after a removed B-location opens a new entity
    s = score_tags([["B-location", "I-location"]], [["B-location", "I-location"]], labels=["x"])
    assert s["counts"] == {"tp": 0, "fp": 0, "fn": 0} and s["ents_f"] == 0.0


def test_bad_inputs():
    with pytest.raises(EvaluationError, match="Unknown mode"):
        score_tags([["O"]], [["O"]], mode="conll")
    with pytest.raises(EvaluationError, match="sentence 0"):
        score_tags([["O", "O"]], [["O"]])
    with pytest.raises(EvaluationError, match="1 gold"):
        score_tags([["O"]], [])


# -- a pipeline on disk: an entity ruler that finds some of the gold entities --------------------

SENTENCES = [
    ("Turing invented the Turing machine".split(), [(0, 1, "researcher"), (3, 5, "misc")]),
    ("Hinton works at Google".split(), [(0, 1, "researcher"), (3, 4, "organisation")]),
    ("Google uses TensorFlow".split(), [(0, 1, "organisation"), (2, 3, "product")]),
]


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    patterns = [
        {"label": "researcher", "pattern": "Turing"},   # also fires on "Turing machine"
        {"label": "organisation", "pattern": "Google"},
        {"label": "person", "pattern": "Hinton"},       # wrong type
    ]
    return ruler_pipeline_and_data(tmp_path_factory.mktemp("eval"), patterns, SENTENCES, "ai")


def test_evaluate_pipeline(model_and_data, tmp_path):
    model, data = model_and_data
    out = tmp_path / "m" / "metrics.json"
    result = evaluate(model=model, data=data, output=out)
    # predicted: Turing/researcher (tp), Turing/researcher in "Turing machine" (fp),
    # Hinton/person (fp), Google/organisation x2 (tp); gold 6
    assert result["counts"] == {"tp": 3, "fp": 2, "fn": 3}
    assert result["ents_p"] == pytest.approx(3 / 5)
    assert result["ents_r"] == pytest.approx(3 / 6)
    assert result["domain"] == "ai" and result["n_docs"] == 3 and result["n_words"] == 12
    saved = json.loads(out.read_text())
    assert saved["ents_f"] == pytest.approx(result["ents_f"])
    assert saved["ents_per_type"]["organisation"]["f"] == 1.0
    assert saved["mode"] == "sentence"
    # the ruler has no misc or product label: the output says so instead of failing
    assert result["unpredictable_labels"] == {"misc": 1, "product": 1}
    assert "cannot predict these gold types" in result["note"] and "product (1)" in result["note"]
    compat = evaluate(model=model, data=data, mode="crossner-compat")
    assert compat["counts"] == result["counts"]

    only = evaluate(model=model, data=data, labels=["organisation"])
    assert only["ents_f"] == 1.0 and set(only["ents_per_type"]) == {"organisation"}
    assert "count as O" in only["note"]
    assert only["unpredictable_labels"] == {}


def test_doc_tags():
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words="a b c d".split())
    doc.ents = [Span(doc, 1, 3, label="x")]
    assert doc_tags(doc) == ["O", "B-x", "I-x", "O"]


def test_cli(model_and_data, tmp_path):
    model, data = model_and_data
    runner = CliRunner()
    out = tmp_path / "metrics.json"
    res = runner.invoke(app, ["evaluate", str(model), str(data), "--output", str(out),
                              "--mode", "crossner-compat"])
    assert res.exit_code == 0, res.output
    assert "OVERALL" in res.output and "organisation" in res.output
    assert json.loads(out.read_text())["mode"] == "crossner-compat"
    res = runner.invoke(app, ["evaluate", str(model), str(data), "--labels", "researcher,misc"])
    assert res.exit_code == 0 and "Note:" in res.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["missing_model", "DATA"], "Model not found"),
        (["MODEL", "missing.spacy"], "Data not found"),
        (["MODEL", "DATA", "--mode", "strict"], "Unknown mode"),
        (["MODEL", "DATA", "--labels", "nonsense"], "not a label"),
        (["MODEL", "DATA", "--labels", ","], "--labels is empty"),
        (["MODEL", "MODEL"], "No .spacy files"),
    ],
)
def test_cli_errors(model_and_data, tmp_path, args, message):
    model, data = model_and_data
    args = [str(model) if a == "MODEL" else str(data) if a == "DATA" else
            str(tmp_path / a) if a.startswith("missing") else a for a in args]
    res = CliRunner().invoke(app, ["evaluate"] + args)
    assert res.exit_code == 1
    assert message in res.output
    assert "Traceback" not in res.output


def test_cli_bad_data_file(model_and_data, tmp_path):
    model, _ = model_and_data
    bad = tmp_path / "bad.spacy"
    bad.write_text("not a docbin")
    res = CliRunner().invoke(app, ["evaluate", str(model), str(bad)])
    assert res.exit_code == 1 and "Cannot read" in res.output


@pytest.mark.parametrize("pipe_name", ["crossner", "my_ner"])
def test_zero_shot_model_lists_the_types_it_cannot_predict(tmp_path, pipe_name):
    """A crossner model that tags ai docs with news labels (domain_aliases) says what it misses,
    whatever the pipe is called."""
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", name=pipe_name, config={"target_domain": "news", "domain_aliases": {"ai": "news"}})
    train = []
    from spacy.training import Example
    for words, ents in [("John lives in Paris".split(), [(0, 1, "person"), (3, 4, "location")])]:
        doc = Doc(nlp.vocab, words=words)
        doc.ents = [Span(doc, s, e, label=l) for s, e, l in ents]
        set_domain(doc, "news")
        pred = Doc(nlp.vocab, words=words)
        set_domain(pred, "news")
        train.append(Example(pred, doc))
    nlp.initialize(lambda: train)
    nlp.to_disk(tmp_path / "model")
    db = DocBin(store_user_data=True)
    for words, ents in SENTENCES:
        doc = Doc(nlp.vocab, words=words)
        doc.ents = [Span(doc, s, e, label=l) for s, e, l in ents]
        set_domain(doc, "ai")
        db.add(doc)
    db.to_disk(tmp_path / "ai.spacy")
    result = evaluate(model=tmp_path / "model", data=tmp_path / "ai.spacy")
    assert result["domain"] == "ai"
    assert result["unpredictable_labels"] == {"misc": 1, "organisation": 2, "product": 1, "researcher": 2}
    assert "cannot predict" in result["note"]


def test_source_only_model_on_target_data_takes_its_only_domain(tmp_path):
    """A model labelled on news only, scored on ai docs: they are tagged as news (its one way
    to tag anything), and the output says so."""
    from spacy.training import Example

    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", config={"target_domain": "news"})
    doc = Doc(nlp.vocab, words="John lives in Paris".split())
    doc.ents = [Span(doc, 0, 1, label="person"), Span(doc, 3, 4, label="location")]
    set_domain(doc, "news")
    pred = Doc(nlp.vocab, words=[t.text for t in doc])
    set_domain(pred, "news")
    nlp.initialize(lambda: [Example(pred, doc)])
    nlp.to_disk(tmp_path / "model")
    db = DocBin(store_user_data=True)
    for words, ents in SENTENCES:
        gold = Doc(nlp.vocab, words=words)
        gold.ents = [Span(gold, s, e, label=l) for s, e, l in ents]
        set_domain(gold, "ai")
        db.add(gold)
    db.to_disk(tmp_path / "ai.spacy")
    res = CliRunner().invoke(app, ["evaluate", str(tmp_path / "model"), str(tmp_path / "ai.spacy")])
    assert res.exit_code == 0, res.output
    assert "docs of the domain 'ai' (3 docs) were tagged with the labels of 'news'" in " ".join(res.output.split())
    assert "domain news" in res.output
    ok = CliRunner().invoke(app, ["evaluate", str(tmp_path / "model"), str(tmp_path / "ai.spacy"),
                                  "--domain", "news"])
    assert ok.exit_code == 0, ok.output
    assert "domain news" in ok.output
