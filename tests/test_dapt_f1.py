"""benchmarks/dapt_f1.py reads a training log's best step the way the study does."""

from util import load_script

dapt_f1 = load_script("benchmarks/dapt_f1.py")


def test_best_step_of_a_log_breaks_score_ties_by_f1(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("""E    #       LOSS TRANSFORMER  LOSS CROSSNER  ENTS_F  ENTS_P  ENTS_R  SCORE
---  ------  -------------  -------------  ------  ------  ------  ------
  0       0           0.86         118.80    3.18    1.97    8.33    0.03
  1     200           2.26         199.22   49.70    5.00    5.56    0.50
  2     400           2.62         211.39   49.72    7.14    1.39    0.50
  3     600           2.62         211.39   40.00    7.14    1.39    0.40
""")
    assert dapt_f1.best_step(log) == (400, 49.72)
    assert dapt_f1.best_step(tmp_path / "missing.log") is None
