"""Defaults and messages of evaluate and convert for data sets of one's own: the only labelled
domain taken by default, --domain options ranked for a joint model, dev == test warnings,
--label-map warnings scoped to the whole call."""
import shutil
from pathlib import Path

import pytest
import spacy
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Example
from spacy.training.initialize import init_nlp
from spacy.util import load_config

from spacy_crossner import set_domain
from spacy_crossner.convert import convert
from spacy_crossner.evaluate import EvaluationError, evaluate
from util import write_corpus

CONFIGS = Path(__file__).parents[1] / "configs"
PEOPLE = [("Mary met John in Paris".split(), [(0, 1, "person"), (2, 3, "person"), (4, 5, "location")])]


def write_docs(path, vocab, sentences, domain):
    db = DocBin(store_user_data=True)
    for words, ents in sentences:
        doc = Doc(vocab, words=words)
        doc.ents = [Span(doc, s, e, label=l) for s, e, l in ents]
        set_domain(doc, domain)
        db.add(doc)
    db.to_disk(path)
    return path


def joint_model(path):
    """A model with labels for news (person, location) and ai (algorithm), target ai."""
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", config={"target_domain": "ai"})
    examples = []
    for domain, words, ents in (
        ("news", "Mary lives in Paris".split(), [(0, 1, "person"), (3, 4, "location")]),
        ("ai", "LSTM is an algorithm".split(), [(0, 1, "algorithm")]),
    ):
        gold = Doc(nlp.vocab, words=words)
        gold.ents = [Span(gold, s, e, label=l) for s, e, l in ents]
        set_domain(gold, domain)
        pred = Doc(nlp.vocab, words=words)
        set_domain(pred, domain)
        examples.append(Example(pred, gold))
    nlp.initialize(lambda: examples)
    nlp.to_disk(path)
    return nlp


def test_joint_model_ranks_the_domain_options_by_the_data_labels(tmp_path):
    """Zero-shot on the source's types: the source's domain is suggested first."""
    nlp = joint_model(tmp_path / "model")
    data = write_docs(tmp_path / "bio.spacy", nlp.vocab, PEOPLE, "bio")
    with pytest.raises(EvaluationError) as err:
        evaluate(model=tmp_path / "model", data=data)
    message = str(err.value)
    assert "Unknown domain 'bio'" in message
    assert message.index("--domain news (its labels cover 3 of the data's 3 gold entities)") < message.index(
        "--domain ai (its labels cover 0 of the data's 3 gold entities)"
    )
    result = evaluate(model=tmp_path / "model", data=data, domain="news")
    assert result["domain"] == "news"
    assert "tagged with" not in result.get("note", "")


def test_only_labelled_domain_is_the_default_and_says_so(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner")
    gold = Doc(nlp.vocab, words="Mary met John in Paris".split())
    gold.ents = [Span(gold, 0, 1, label="person"), Span(gold, 4, 5, label="location")]
    set_domain(gold, "news")
    nlp.initialize(lambda: [Example(Doc(nlp.vocab, words=[t.text for t in gold]), gold)])
    data = write_docs(tmp_path / "bio.spacy", nlp.vocab, PEOPLE, "bio")
    result = evaluate(model=None, nlp=nlp, data=data)
    assert result["domain"] == "news"
    assert "docs of the domain 'bio' (1 docs) were tagged with the labels of 'news'" in result["note"]
    # docs of its own domain: nothing to say
    own = write_docs(tmp_path / "news.spacy", nlp.vocab, PEOPLE, "news")
    assert "tagged with" not in evaluate(model=None, nlp=nlp, data=own).get("note", "")


@pytest.fixture
def trained_with_dev(tmp_path):
    """A pipeline initialized from configs/bilstm_target.cfg, its dev set the AI file."""
    paths = write_corpus(tmp_path)
    config = load_config(CONFIGS / "bilstm_target.cfg", interpolate=False, overrides={
        "paths.target_train": paths["target_train"], "paths.target_dev": paths["target_dev"],
    })
    nlp = init_nlp(config)
    nlp.to_disk(tmp_path / "model")
    return tmp_path, Path(paths["target_dev"])


def test_evaluating_on_the_dev_set_is_noted(trained_with_dev):
    root, dev = trained_with_dev
    result = evaluate(model=root / "model", data=dev)
    assert f"{dev} is the dev set the model was trained with ([corpora.dev] path = {dev})" in result["note"]
    copy = root / "test.spacy"
    shutil.copy(dev, copy)
    result = evaluate(model=root / "model", data=copy)
    assert f"{copy} has the same sentences and entities as the dev set" in result["note"]
    assert "not a held-out test score" in result["note"]
    # other data: no such note
    nlp = spacy.load(root / "model")
    other = write_docs(root / "other.spacy", nlp.vocab, [("LSTM is fast".split(), [(0, 1, "algorithm")])], "ai")
    assert "dev set" not in evaluate(model=root / "model", data=other).get("note", "")


def test_convert_warns_when_dev_and_test_are_the_same(tmp_path):
    text = "Mary B-PER\nlives O\n\nParis B-LOC\n"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.txt").write_text("John B-PER\n", encoding="utf8")
    (tmp_path / "in" / "dev.txt").write_text(text, encoding="utf8")
    (tmp_path / "in" / "test.txt").write_text(text.replace("\n", "\r\n"), encoding="utf8")
    summary = convert(tmp_path / "in", tmp_path / "out", domain="news")
    same = [w for w in summary.warnings if "hold the same" in w]
    assert len(same) == 1
    assert "dev.txt and " in same[0] and "test.txt hold the same 2 sentences" in same[0]
    assert "early stopping on dev selects the model on the test set" in same[0]
    (tmp_path / "in" / "test.txt").write_text(text + "\nLondon B-LOC\n", encoding="utf8")
    assert not [w for w in convert(tmp_path / "in", tmp_path / "out2", domain="news").warnings if "hold the same" in w]


def test_label_map_warning_is_scoped_to_every_file_of_the_call(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.txt").write_text("Mary B-PER\n", encoding="utf8")
    (tmp_path / "in" / "test.txt").write_text("Paris B-LOC\n", encoding="utf8")
    # PER only in train, LOC only in test: both used by the call, no warning
    summary = convert(tmp_path / "in", tmp_path / "out", domain="news",
                      label_map={"PER": "person", "LOC": "location"})
    assert not [w for w in summary.warnings if "--label-map" in w]
    summary = convert(tmp_path / "in", tmp_path / "out", domain="news",
                      label_map={"PER": "person", "GENE": "gene"})
    [warning] = [w for w in summary.warnings if "--label-map" in w]
    assert "matched no label of the 2 files converted in this call: GENE (labels found: LOC, PER)" in warning
    assert "ignore this if the map is shared with other data sets" in warning
