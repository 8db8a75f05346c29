"""Tests of spacy_crossner.report: markdown content, PNG, run names, errors."""
import json

import pytest
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.report import ReportError, default_name, load_runs, report

OURS = {
    "ents_p": 0.5, "ents_r": 0.25, "ents_f": 1 / 3,
    "ents_per_type": {
        "algorithm": {"p": 1.0, "r": 0.5, "f": 2 / 3},
        "researcher": {"p": 0.0, "r": 0.0, "f": 0.0},
    },
    "counts_per_type": {"algorithm": {"tp": 1, "fp": 0, "fn": 1},
                        "researcher": {"tp": 0, "fp": 1, "fn": 5}},
    "mode": "sentence", "domain": "ai",
}
SPACY_EVALUATE = {  # what `spacy evaluate --output` writes (no counts)
    "token_acc": 1.0, "ents_p": 0.8, "ents_r": 0.6, "ents_f": 0.6857142857,
    "ents_per_type": {"algorithm": {"p": 0.8, "r": 0.6, "f": 0.6857142857},
                      "product": {"p": 0.5, "r": 0.5, "f": 0.5}},
    "speed": 1000.0,
}


@pytest.fixture
def files(tmp_path):
    a = tmp_path / "metrics" / "bilstm_target.json"
    a.parent.mkdir()
    a.write_text(json.dumps(OURS))
    b = tmp_path / "joint" / "metrics.json"
    b.parent.mkdir()
    b.write_text(json.dumps(SPACY_EVALUATE))
    return a, b


def test_markdown_json_and_png(files, tmp_path):
    a, b = files
    out = tmp_path / "reports"
    result = report(metrics=[str(a), f"spaCy joint={b}"], output_dir=out)
    md = (out / "report.md").read_text()
    assert result["markdown"] == out / "report.md"
    assert "target domain ai" in md
    # F1 only, one column per run; most frequent gold type first, missing types as a dash
    assert "| type | gold | bilstm_target | spaCy joint |" in md
    assert md.index("| researcher |") < md.index("| algorithm |")
    assert "| researcher | 5 | 0.00 | – |" in md
    assert "| algorithm | 2 | 66.67 | 68.57 |" in md
    assert "| **overall** | 7 | **33.33** | **68.57** |" in md
    assert "| product | – | – | 50.00 |" in md
    assert "| spaCy joint | 68.57 | 80.00 | 60.00 |" in md
    assert "Best overall F1: **spaCy joint** (68.57)" in md
    assert "![F1 per entity type and run](f1_per_type.png)" in md
    # P and R per type are in the JSON
    data = json.loads(result["json"].read_text())
    assert data["types"] == ["researcher", "algorithm", "product"]
    ours = data["runs"][0]
    assert ours["name"] == "bilstm_target" and ours["per_type"]["algorithm"] == {"p": 100.0, "r": 50.0, "f": 66.6667}
    assert data["runs"][1]["per_type"]["product"]["p"] == 50.0
    png = out / "f1_per_type.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_notes_name_their_run_and_unpredictable_types_are_marked(files, tmp_path):
    a, b = files
    zero = dict(OURS, unpredictable_labels={"researcher": 5},
                note="the model cannot predict these gold types of the data ... : researcher (5)")
    z = tmp_path / "zero" / "moee_zero.json"
    z.parent.mkdir()
    z.write_text(json.dumps(zero))
    result = report(metrics=[str(a), str(z), str(b)], output_dir=tmp_path / "r")
    md = result["markdown"].read_text()
    assert "- **moee_zero**: the model cannot predict these gold types" in md
    assert md.count("cannot predict these gold types") == 1  # on its run only
    assert "| researcher | 5 | 0.00 | × | – |" in md
    assert "× = the run cannot predict the type" in md
    data = json.loads(result["json"].read_text())
    assert [r["unpredictable_types"] for r in data["runs"]] == [[], ["researcher"], []]


def test_heatmap_size_follows_runs_and_types(tmp_path):
    # 11 runs x 14 types, as the `all` workflow: one readable picture, not a 3,000-pixel chart
    types = [f"type{i}" for i in range(14)]
    paths = []
    for n in range(11):
        scores = {"ents_p": 0.3, "ents_r": 0.3, "ents_f": 0.3,
                  "ents_per_type": {t: {"p": 0.5, "r": 0.5, "f": (i % 3) / 3} for i, t in enumerate(types)}}
        path = tmp_path / f"run_with_a_long_name_{n}.json"
        path.write_text(json.dumps(scores))
        paths.append(str(path))
    title = "A long title that used to be cut off at both edges of the figure " * 3
    png = report(metrics=paths, output_dir=tmp_path / "r", title=title)["plot"]
    from PIL import Image

    with Image.open(png) as image:
        width, height = image.size
    assert 900 < width < 2200 and 500 < height < 1400, (width, height)


def test_names_and_percent_scale(tmp_path):
    assert default_name(tmp_path / "metrics" / "trf.json") == "trf"
    assert default_name(tmp_path / "run1" / "model-best" / "meta.json") == "run1/model-best"
    meta = tmp_path / "run1" / "model-best" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"performance": {"ents_p": 40.0, "ents_r": 50.0, "ents_f": 44.4,
                                                "ents_per_type": {}}}))
    dup = tmp_path / "x.json"
    dup.write_text(json.dumps(OURS))
    runs = load_runs([str(meta), f"x={dup}", str(dup)])
    assert [r.name for r in runs] == ["run1/model-best", "x", "x (2)"]
    assert runs[0].overall == (40.0, 50.0, 44.4)  # already percent: kept
    assert runs[1].overall[0] == 50.0  # fractions: x100


def test_no_plot(files, tmp_path):
    a, _ = files
    result = report(metrics=[a], output_dir=tmp_path / "r", plot=False)
    assert result["plot"] is None and not (tmp_path / "r" / "f1_per_type.png").exists()
    assert "![" not in result["markdown"].read_text()


def test_errors(tmp_path):
    with pytest.raises(ReportError, match="not found"):
        load_runs([str(tmp_path / "nope.json")])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ReportError, match="not valid JSON"):
        load_runs([str(bad)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"accuracy": 0.9}))
    with pytest.raises(ReportError, match="no entity scores"):
        load_runs([str(other)])
    with pytest.raises(ReportError, match="NAME=PATH"):
        load_runs(["=x.json"])
    with pytest.raises(ReportError, match="at least one"):
        load_runs([])


def test_cli(files, tmp_path):
    a, b = files
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(a), str(b), "--output", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert "bilstm_target" in res.output and "joint" in res.output
    assert (tmp_path / "rep" / "report.md").exists() and (tmp_path / "rep" / "f1_per_type.png").exists()
    res = runner.invoke(app, ["report", str(tmp_path / "missing.json")])
    assert res.exit_code == 1 and "not found" in res.output and "Traceback" not in res.output


def test_without_matplotlib_the_report_is_markdown_and_json(files, tmp_path, monkeypatch):
    """matplotlib is an optional extra: without it the default report leaves the heatmap out and
    says why, and asking for it (--plot) is one clear error naming the extra."""
    import sys

    a, b = files
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    monkeypatch.setattr("spacy_crossner.report.can_plot", lambda: False)
    result = report(metrics=[a, b], output_dir=tmp_path / "r")
    assert result["plot"] is None and not (tmp_path / "r" / "f1_per_type.png").exists()
    assert "spacy_crossner[report]" in result["plot_skipped"]
    assert (tmp_path / "r" / "report.json").exists() and "![" not in result["markdown"].read_text()
    with pytest.raises(ReportError, match=r"spacy_crossner\[report\]"):
        report(metrics=[a], output_dir=tmp_path / "r2", plot=True)
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(a), "--output", str(tmp_path / "r3")])
    assert res.exit_code == 0 and "No heatmap" in res.output, res.output
    res = runner.invoke(app, ["report", str(a), "--plot", "--output", str(tmp_path / "r4")])
    assert res.exit_code == 1 and "spacy_crossner[report]" in res.output and "Traceback" not in res.output
