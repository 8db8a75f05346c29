"""benchmarks/speed.py --int8 (issue 50) without running a model: which pipelines it finds, the
raw rows it computes from the measurements (ratio to the peer of the same round, F1 change
from fp32) and the targets of its report. The end-to-end run is slow (minutes of MiniLM on CPU):
it is checked by hand, with the command in the module docstring of speed.py."""
import argparse
import json
from pathlib import Path

import pytest

from util import load_script



@pytest.fixture(scope="module")
def speed():
    return load_script("benchmarks/speed.py")


def args_for(**kwargs):
    base = dict(trained=[], study_workdir=None, methods="trf_target,trf_finetune", seeds="",
                domains="ai,music", rounds=2, rounds_done=2, batch_size=256, infer_docs=0,
                max_batch_items=0, argv=["--int8"], calibration="")
    return argparse.Namespace(**{**base, **kwargs})


def pipeline_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.cfg").write_text("[nlp]\n")
    return path


def test_finds_the_study_pipelines(speed, tmp_path):
    for run in ("trf_target-ai-minilm-s555", "trf_target-ai-minilm-s666", "trf_finetune-music-minilm-s555",
                "trf_target-science-minilm-s555", "bilstm_target-ai-wordchar-s555"):
        pipeline_dir(tmp_path / run / "model-best")
    (tmp_path / "trf_joint-ai-minilm-s555").mkdir()  # not a method asked for
    (tmp_path / "trf_target-music-minilm-s777").mkdir()  # no model-best yet
    found = speed.int8_pipelines(args_for(study_workdir=tmp_path, seeds="555"))
    assert [(f["pipeline"], f["domain"]) for f in found] == [("trf_finetune-s555", "music"), ("trf_target-s555", "ai")]
    assert all(f["trained"] and f["path"].name == "model-best" for f in found)


def test_trained_pipelines_given_one_by_one(speed, tmp_path):
    path = pipeline_dir(tmp_path / "best")
    found = speed.int8_pipelines(args_for(trained=[f"mine/ai={path}"]))
    assert found == [{"pipeline": "mine", "domain": "ai", "path": path, "trained": True}]
    with pytest.raises(SystemExit, match="write NAME/DOMAIN=PATH"):
        speed.int8_pipelines(args_for(trained=[f"mine={path}"]))
    with pytest.raises(SystemExit, match="not a pipeline directory"):
        speed.int8_pipelines(args_for(trained=[f"mine/ai={tmp_path / 'nope'}"]))
    with pytest.raises(SystemExit, match="no such directory"):
        speed.int8_pipelines(args_for(study_workdir=tmp_path / "nope"))


def measured(words_s, f1, rss=100.0):
    return {"words_s": words_s, "test_f1": f1, "pipeline_rss_mb": rss, "peak_rss_mb": rss + 500,
            "n_docs": 10, "n_words": 100, "threads": 1, "int8_layers": 0}


def runs_of(rows):
    out = {}
    for pipeline, domain, variant, threads, values in rows:
        out[(pipeline, domain, variant, threads)] = [
            dict(measured(*v), pipeline=pipeline, domain=domain, variant=variant, threads=threads, trained=True)
            for v in values
        ]
    return out


def test_rows_ratio_per_round_and_f1_change(speed, tmp_path):
    runs = runs_of([
        ("p", "ai", "fp32", 1, [(100, 50.0), (120, 50.0)]),
        ("p", "ai", "int8", 1, [(220, 49.7), (210, 49.7)]),
        ("spacy_ner_minilm", "ai", "spacy_ner_minilm", 1, [(100, 3.0), (100, 3.0)]),
        ("p", "ai", "fp32", 2, [(150, 50.0), (150, 50.0)]),
        ("p", "ai", "int8", 2, [(240, 49.7), (240, 49.7)]),
        ("spacy_ner_minilm", "ai", "spacy_ner_minilm", 2, [(200, 3.0), (200, 3.0)]),
    ])
    rows = speed.int8_rows(runs)
    by = {(r["variant"], r["threads"]): r for r in rows}
    assert by[("int8", 1)]["words_s"] == 215 and by[("int8", 1)]["ratio_to_spacy_ner_minilm"] == pytest.approx(2.15)
    assert by[("fp32", 1)]["ratio_to_spacy_ner_minilm"] == pytest.approx(1.1)
    assert by[("int8", 1)]["test_f1_change"] == pytest.approx(-0.3)
    assert by[("fp32", 1)]["test_f1_change"] == 0
    peer = by[("spacy_ner_minilm", 1)]
    assert peer["test_f1"] is None and peer["test_f1_change"] is None and peer["ratio_to_spacy_ner_minilm"] == 1
    assert [(r["threads"], r["variant"]) for r in rows] == [
        (1, "fp32"), (1, "int8"), (1, "spacy_ner_minilm"), (2, "fp32"), (2, "int8"), (2, "spacy_ner_minilm")]
    json.dumps(rows)  # the raw rows are JSON

    args = args_for(output=str(tmp_path / "r.md"), json=str(tmp_path / "r.json"))
    speed.write_int8_report(args, rows, 60.0, "0.5 / 0.7", tiny=False)
    report = (tmp_path / "r.md").read_text()
    assert "| int8 inference >= 2.0x spaCy ner + MiniLM, 1 thread(s) | ai | 2.15 | yes |" in report
    assert "| int8 inference >= 1.5x spaCy ner + MiniLM, 2 thread(s) | ai | 1.20 | **no** |" in report
    assert "| int8 test F1 change >= -0.5 (mean over 1 pipeline(s)) | ai | -0.30 | yes |" in report
    assert "int8-smooth" not in report
    # hand-written notes after the tables survive a rerun, once
    (tmp_path / "r.md").write_text(report + "\n## Notes\n\nby hand\n")
    speed.write_int8_report(args, rows, 60.0, "0.5 / 0.7", tiny=False)
    again = (tmp_path / "r.md").read_text()
    assert again.count("by hand") == 1 and again.startswith(report)


def test_smoothed_variant_rows_and_targets(speed, tmp_path):
    """--calibration adds the int8-smooth variant: its own rows after int8, its own targets."""
    runs = runs_of([
        ("p", "ai", "fp32", 1, [(100, 50.0)]),
        ("p", "ai", "int8-smooth", 1, [(190, 49.9)]),
        ("p", "ai", "int8", 1, [(200, 49.0)]),
        ("spacy_ner_minilm", "ai", "spacy_ner_minilm", 1, [(100, 3.0)]),
    ])
    rows = speed.int8_rows(runs)
    assert [r["variant"] for r in rows] == ["fp32", "int8", "int8-smooth", "spacy_ner_minilm"]
    smooth = rows[2]
    assert smooth["test_f1_change"] == pytest.approx(-0.1) and smooth["ratio_to_spacy_ner_minilm"] == pytest.approx(1.9)
    args = args_for(output=str(tmp_path / "r.md"), json=str(tmp_path / "r.json"), rounds=1, rounds_done=1,
                    calibration="CORPUS/{domain}/train.spacy")
    speed.write_int8_report(args, rows, 60.0, "0.5 / 0.7", tiny=False)
    report = (tmp_path / "r.md").read_text()
    assert "int8-smooth = the same with `--calibration CORPUS/{domain}/train.spacy`" in report
    assert "| int8 test F1 change >= -0.5 (mean over 1 pipeline(s)) | ai | -1.00 | **no** |" in report
    assert "| int8-smooth test F1 change >= -0.5 (mean over 1 pipeline(s)) | ai | -0.10 | yes |" in report
    assert "| int8-smooth inference >= 2.0x spaCy ner + MiniLM, 1 thread(s) | ai | 1.90 | **no** |" in report
