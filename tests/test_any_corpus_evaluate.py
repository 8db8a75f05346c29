"""`python -m spacy_crossner evaluate` on data with other label names (--label-map) and with the
keys of `spacy evaluate --output` (issue 12)."""
import json

import pytest
from spacy.cli.evaluate import evaluate as spacy_evaluate
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.evaluate import EvaluationError, evaluate
from util import ruler_pipeline_and_data

SENTENCES = [
    ("Turing met Hinton in London".split(), [(0, 1, "PER"), (2, 3, "PER"), (4, 5, "LOC")]),
    ("Google hired Hinton".split(), [(0, 1, "ORG"), (2, 3, "PER")]),
]


@pytest.fixture(scope="module")
def ruler_and_per_data(tmp_path_factory):
    """A pipeline predicting person/location/organisation and gold data saying PER/LOC/ORG."""
    patterns = [
        {"label": "person", "pattern": "Turing"},
        {"label": "person", "pattern": "Hinton"},
        {"label": "location", "pattern": "London"},
        {"label": "organisation", "pattern": "Google"},
    ]
    return ruler_pipeline_and_data(tmp_path_factory.mktemp("eval_map"), patterns, SENTENCES, "news")


def test_label_map_renames_gold_labels(ruler_and_per_data, tmp_path):
    model, data = ruler_and_per_data
    assert evaluate(model=model, data=data)["ents_f"] == 0.0  # other names: nothing matches
    mapping = {"PER": "person", "LOC": "location", "ORG": "organisation", "GPE": "location"}
    result = evaluate(model=model, data=data, label_map=json.dumps(mapping))
    assert result["ents_f"] == 1.0
    assert set(result["ents_per_type"]) == {"person", "location", "organisation"}
    assert result["label_map"] == mapping
    assert "GPE" in result["note"]  # an entry that matched nothing is reported, not dropped
    map_file = tmp_path / "map.json"
    map_file.write_text(json.dumps({"PER": "person"}))
    result = evaluate(model=model, data=data, label_map=str(map_file))
    assert result["ents_per_type"]["person"]["f"] == 1.0 and result["ents_per_type"]["LOC"]["r"] == 0.0


@pytest.mark.parametrize("value,message", [
    ('{"PER": ', "--label-map: the inline JSON is not valid JSON"),
    ('{"PER": ["person"]}', "--label-map: the inline JSON maps 'PER' to ['person']"),
    ("nowhere.json", "--label-map: 'nowhere.json' is neither an existing JSON file"),
])
def test_bad_label_map_is_one_clear_error(ruler_and_per_data, value, message):
    model, data = ruler_and_per_data
    with pytest.raises(EvaluationError, match="--label-map"):
        evaluate(model=model, data=data, label_map=value)
    res = CliRunner().invoke(app, ["evaluate", str(model), str(data), "--label-map", value])
    assert res.exit_code == 1
    assert message in res.output
    assert "Traceback" not in res.output


def test_output_has_the_keys_of_spacy_evaluate(ruler_and_per_data, tmp_path):
    model, data = ruler_and_per_data
    ours_path, theirs_path = tmp_path / "ours.json", tmp_path / "theirs.json"
    res = CliRunner().invoke(app, ["evaluate", str(model), str(data), "--output", str(ours_path),
                                   "--label-map", '{"PER": "person"}'])
    assert res.exit_code == 0, res.output
    for label in ("TOK", "NER P", "NER R", "NER F", "SPEED"):  # spaCy's printed table
        assert label in res.output
    spacy_evaluate(str(model), data, output=theirs_path)
    ours, theirs = json.loads(ours_path.read_text()), json.loads(theirs_path.read_text())
    assert set(theirs) <= set(ours), set(theirs) - set(ours)
    assert ours["speed"] > 0 and ours["token_acc"] == 1.0
    for label, prf in theirs["ents_per_type"].items():
        assert set(prf) == set(ours["ents_per_type"].get(label, prf))
