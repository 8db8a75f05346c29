"""benchmarks/int8_smoothing.py and benchmarks/calibration.py without running a model: which
pipelines they find and the reports they write from measured rows (the runs themselves take
minutes of MiniLM on CPU and are checked by hand, with the commands in their docstrings)."""
import argparse

import pytest

from util import load_script



def load(name):
    return load_script(f"benchmarks/{name}.py", siblings=True)


def test_smoothing_finds_pipelines_and_reports_mean_changes(tmp_path):
    smoothing = load("int8_smoothing")
    for run in ("trf_finetune-ai-minilm-s555", "trf_finetune-music-minilm-s555",
                "trf_finetune-ai-minilm-s666", "trf_target-ai-minilm-s555"):
        (tmp_path / run / "model-best").mkdir(parents=True)
        (tmp_path / run / "model-best" / "config.cfg").write_text("[nlp]\n")
    (tmp_path / "trf_finetune-science-minilm-s555").mkdir()  # no model-best: not found
    found = smoothing.pipelines(tmp_path, ["trf_finetune"], ["ai", "music", "science"], ["555"])
    assert [(f["pipeline"], f["domain"]) for f in found] == [("trf_finetune-s555", "ai"), ("trf_finetune-s555", "music")]

    args = argparse.Namespace(study_workdir=tmp_path / "nope", methods="trf_finetune", domains="ai", seeds="")
    with pytest.raises(SystemExit, match="nope: no such directory"):
        smoothing.subjects_of(args)
    args.study_workdir = tmp_path
    assert len(smoothing.subjects_of(args)) == 2
    args.domains = "science"
    with pytest.raises(SystemExit, match="no trf_finetune-DOMAIN-minilm-sSEED/model-best for the domains science"):
        smoothing.subjects_of(args)

    rows = []
    for domain, values in (("ai", {"fp32": 60.0, "int8": 59.0, "int8-smooth0.8": 60.2}),
                           ("music", {"fp32": 62.0, "int8": 60.0, "int8-smooth0.8": 61.6})):
        for variant, f1 in values.items():
            rows.append({"pipeline": "p", "domain": domain, "variant": variant, "dev_f1": f1,
                         "dev_f1_change": f1 - values["fp32"]})
    out = tmp_path / "r.md"
    smoothing.write_report(argparse.Namespace(argv=["--x"], output=str(out)), rows, 1.0)
    text = out.read_text()
    assert "| int8 | -1.00 | -2.00 | -1.50 |" in text
    assert "| int8-smooth0.8 | +0.20 | -0.40 | -0.10 |" in text
    assert "| p | music | 62.00 | 60.00 | 61.60 |" in text


def test_calibration_report_keeps_its_notes(tmp_path):
    calibration = load("calibration")

    def summary(conf, acc):
        return {"bins": [{"lower": 0.9, "upper": 1.0, "count": 4, "confidence": conf, "accuracy": acc},
                         {"lower": 0.0, "upper": 0.1, "count": 0, "confidence": None, "accuracy": None}]}

    row = {"pipeline": "p", "domain": "ai", "temperature": {"ai": 1.8}, "at_bound": {"ai": False},
           "dev_ece_before": {"ai": 0.3}, "dev_ece_after": {"ai": 0.05}, "test_ece_before": 0.28,
           "test_ece_after": 0.06, "test_f1_before": 59.9, "test_f1_after": 59.9,
           "test_before": summary(0.98, 0.7), "test_after": summary(0.91, 0.87)}
    out = tmp_path / "c.md"
    out.write_text("# old\n\n## Notes\n\nmine, by hand\n")
    args = argparse.Namespace(argv=["--y"], output=str(out))
    calibration.write_report(args, [row], 1.0)
    calibration.write_report(args, [row], 1.0)  # a second write keeps them once
    text = out.read_text()
    assert "| p | ai | 1.80 | 0.300 | 0.050 | 0.280 | 0.060 | 59.90 | 59.90 |" in text
    assert "- p ai, before: 0.9-1.0: 0.98/0.70 (4)" in text and "- p ai, after: 0.9-1.0: 0.91/0.87 (4)" in text
    assert text.count("mine, by hand") == 1 and text.startswith("# Entity probabilities")
    # matplotlib is a test dependency (setup.py [test]): the reliability diagram is drawn
    assert (tmp_path / "c.png").stat().st_size > 0 and "![reliability on test, before and after](c.png)" in text
