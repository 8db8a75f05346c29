"""Read a saved ``spacy train`` log: its evaluation table, and whether the dev score levelled.

    python scripts/training_log.py training/ai/bilstm_joint/train.log

A run has *levelled* when the best dev score was first reached after step 0 and before the last
evaluation, and at least two evaluations after it did not beat it (one lower score can be noise
in a run that is still rising; spaCy's ``patience`` of two or more evaluations gives as many). A
run whose best score is at one of its last two evaluations was still improving when it stopped,
and one whose best is step 0 learnt nothing: neither is a result.

The log is what ``scripts/timed.py --log`` writes: a ``$ command`` first line, the output of the
command (spaCy's table, and a ``[features]`` line from ``scripts/train.py``), and a
``[time] STEP: DURATION (N s)`` last line. ANSI colours are ignored.
"""
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DASHES = re.compile(r"^-+(?:\s+-+)+\s*$")
# printed by scripts/train.py when a config needs a spaCy pipeline that is not installed
SKIPPED = "[skipped]"
FEATURES = "[features]"
# printed by scripts/train.py --demo: a run the CPU-sized `all` gives a budget it is not meant to
# converge in (it shows the method runs end to end); its verdict says so instead of "not trained"
DEMO = "[demo]"
# evaluations after the best one that must not beat it for the run to count as levelled
EVALS_AFTER_BEST = 2


@dataclass
class TrainingLog:
    """What a training log says. Scores are dev F1 x100 (the ENTS_F column, else SCORE x100)."""

    path: Optional[Path] = None
    command: List[str] = field(default_factory=list)
    steps: List[int] = field(default_factory=list)
    scores: List[float] = field(default_factory=list)
    features: Optional[str] = None
    skipped: Optional[str] = None
    demo: Optional[str] = None  # why the run is a demo (the [demo] line), None for a real run
    seconds: Optional[float] = None

    @property
    def best_step(self) -> Optional[int]:
        """The first step with the best dev score (spaCy's patience counts from it)."""
        if not self.scores:
            return None
        best = max(self.scores)
        return self.steps[self.scores.index(best)]

    @property
    def best_score(self) -> Optional[float]:
        return max(self.scores) if self.scores else None

    @property
    def last_step(self) -> Optional[int]:
        return self.steps[-1] if self.steps else None

    @property
    def max_steps(self) -> Optional[int]:
        """``--training.max_steps`` of the command, if given there."""
        return option_value(self.command, "--training.max_steps", int)

    @property
    def evaluations_after_best(self) -> int:
        best = self.best_step
        return 0 if best is None else sum(1 for step in self.steps if step > best)

    @property
    def levelled(self) -> bool:
        best = self.best_step
        return best is not None and best > 0 and self.evaluations_after_best >= EVALS_AFTER_BEST

    def verdict(self) -> str:
        """One line a person reads: how the dev score moved and what that makes the run."""
        if self.skipped:
            return f"skipped: {self.skipped}"
        if not self.steps:
            return "no evaluation table in the log"
        best, last, score = self.best_step, self.last_step, self.best_score
        cap = f" of max {self.max_steps}" if self.max_steps else ""
        where = f"best dev F1 {score:.2f} at step {best}, last evaluation at step {last}{cap}"
        if self.levelled:
            return f"levelled: {where}"
        if self.demo:
            return f"demo run ({self.demo}): ran end to end; {where}"
        if best == 0:
            return f"not trained: {where} (no evaluation beat the untrained model)"
        if best == last:
            return f"not converged: {where} (still improving when it stopped)"
        return (f"not converged: {where} (only {self.evaluations_after_best} evaluation after the best: "
                f"too few to tell a level from noise)")


def option_value(command: List[str], option: str, cast=str):
    """The value after ``option`` in a command (``--opt value`` or ``--opt=value``), or None."""
    for i, token in enumerate(command):
        if token == option and i + 1 < len(command):
            value = command[i + 1]
        elif token.startswith(option + "="):
            value = token.split("=", 1)[1]
        else:
            continue
        try:
            return cast(value)
        except ValueError:
            return None
    return None


def _columns(dash_line: str, header: str) -> List[str]:
    """Column names of spaCy's table, cut from the header at the spans of the dashes line."""
    names = []
    for match in re.finditer(r"-+", dash_line):
        names.append(header[match.start():match.end()].strip())
    return names


def parse(text: str, path: Optional[Path] = None) -> TrainingLog:
    """Parse a training log's text."""
    log = TrainingLog(path=path)
    lines = [ANSI.sub("", line.rstrip("\n")) for line in text.splitlines()]
    score_col = None
    for i, line in enumerate(lines):
        if i == 0 and line.startswith("$ "):
            log.command = shlex.split(line[2:])
        elif line.startswith(FEATURES):
            log.features = line[len(FEATURES):].strip()
        elif line.startswith(DEMO):
            log.demo = line[len(DEMO):].strip() or "a demo budget"
        elif line.startswith(SKIPPED):
            log.skipped = line[len(SKIPPED):].strip()
        elif line.startswith("[time] ") and "(" in line and line.rstrip().endswith(" s)"):
            found = re.search(r"\(([\d.]+) s\)\s*$", line)
            if found:
                log.seconds = float(found.group(1))
        elif DASHES.match(line) and i > 0:
            names = _columns(line, lines[i - 1])
            if names[:2] == ["E", "#"] and "SCORE" in names:
                score_col = names.index("ENTS_F") if "ENTS_F" in names else names.index("SCORE")
                scale = 1.0 if "ENTS_F" in names else 100.0
                n_cols = len(names)
        elif score_col is not None:
            cells = line.split()
            if len(cells) == n_cols and cells[0].isdigit() and cells[1].isdigit():
                try:
                    score = float(cells[score_col]) * scale
                except ValueError:
                    continue
                log.steps.append(int(cells[1]))
                log.scores.append(score)
    return log


def read(path) -> TrainingLog:
    """Parse the log at ``path`` (a missing file is an error that names it)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"training log not found: {path} (it is written by the training step)")
    return parse(path.read_text(encoding="utf8", errors="replace"), path)


def summary(log: TrainingLog) -> Dict:
    """The log as plain values (for JSON)."""
    return {"levelled": log.levelled, "skipped": log.skipped, "best_dev_f": log.best_score,
            "best_step": log.best_step, "last_step": log.last_step, "max_steps": log.max_steps,
            "evaluations": len(log.steps), "evaluations_after_best": log.evaluations_after_best, "demo": log.demo, "features": log.features, "train_seconds": log.seconds,
            "verdict": log.verdict()}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/training_log.py LOG...")
    for arg in sys.argv[1:]:
        print(f"{arg}: {read(arg).verdict()}")
