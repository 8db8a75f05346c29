"""benchmarks/pgn_diagnosis.py: the training table it reads and the report it writes."""
import json

import pytest

from util import load_script

diag = load_script("benchmarks/pgn_diagnosis.py")

LOG = """E    #       LOSS TOK2VEC  LOSS CROSSNER  ENTS_F  ENTS_P  ENTS_R  SCORE
---  ------  -------------  -------------  ------  ------  ------  ------
  0       0           0.00         118.80    3.18    1.97    8.33    0.03
  1     200           2.26         199.22   25.26   25.00   25.56    0.25
  2     400           2.62         211.39   22.33   27.14   19.39    0.22
"""


def test_training_rows_reads_every_evaluation():
    rows = diag.training_rows("noise\n" + LOG + "✔ Saved pipeline\n")
    assert [r["step"] for r in rows] == [0, 200, 400]
    assert rows[1] == {"step": 200, "ents_f": 25.26, "score": 0.25, "losses": [2.26, 199.22]}


def test_report_from_fake_runs(tmp_path):
    results = tmp_path / "runs"
    results.mkdir()
    for variant, update in (("bilstm_joint", 0.01), ("pgn_sda", 0.04)):
        key = "lstm" if variant == "bilstm_joint" else "theta_ai_ner"
        record = {
            "variant": variant, "seed": 555, "config": "configs/x.cfg", "overrides": {"system.seed": 555},
            "target_curve": [{"step": r["step"], "ents_f": r["ents_f"], "losses": r["losses"]}
                             for r in diag.training_rows(LOG)],
            "source_curve": [{"step": 200, "source_dev_f": 0.61}, {"step": 400, "source_dev_f": 0.65}],
            "probes": [{"step": s, key: {"norm": 20.0, "rel_update": update * (2 if s >= 500 else 1)}}
                       for s in (0, 25, 500, 525)],
            "best_step": 200, "best_dev_f": 25.26, "last_step": 400, "wall_s": 60.0,
            "command": "python benchmarks/pgn_diagnosis.py run", "date": "d", "load_5min": 1.0,
        }
        (results / f"{variant}-ai-s555.json").write_text(json.dumps(record))
    out = tmp_path / "report.md"
    assert diag.main(["report", "--results", str(results), "--output", str(out)]) == 0
    text = out.read_text()
    assert "| bilstm_joint | 555 | 25.26 (200) | 400 | 61.00 | 1.00e-02 / 2.00e-02 | 1.0 | d, 1.0 |" in text
    assert "| pgn_sda | 555 | 25.26 (200) | 400 | 61.00 | 4.00e-02 / 8.00e-02 | 1.0 | d, 1.0 |" in text
    assert "- pgn_sda s555 (target / source): 0: 3.2, 200: 25.3 / 61.0, 400: 22.3 / 65.0" in text


def test_unknown_variant_and_empty_results(tmp_path):
    with pytest.raises(SystemExit, match="--variants"):
        diag.parse_args(["run", "--variants", "pgn_fast"])
    with pytest.raises(SystemExit, match="--results"):
        diag.main(["report", "--results", str(tmp_path)])


def test_amplification_measures_both_updates(capsys):
    args = diag.parse_args(["amplification", "--n-in", "6", "--hidden", "4", "--synthetic-steps", "3"])
    rows = diag.amplification(args)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["gen_rel"] > 0 and r["plain_rel"] > 0
        assert abs(r["ratio"] - r["gen_rel"] * r["gen_norm"] / (r["plain_rel"] * r["plain_norm"])) < 1e-6
    assert diag.main(["amplification", "--n-in", "6", "--hidden", "4", "--synthetic-steps", "2"]) == 0
    assert "| 1 |" in capsys.readouterr().out
