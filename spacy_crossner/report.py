"""Compare runs: a markdown table of P/R/F per entity type and a PNG of per-type F1.

``python -m spacy_crossner report METRICS_JSON... --output reports/``

Each input is a metrics JSON written by ``python -m spacy_crossner evaluate`` or
``spacy evaluate`` (keys ``ents_p/r/f`` and ``ents_per_type``, fractions in 0..1), or a trained
pipeline's ``meta.json`` (its ``performance``). A run is named after its file (``bilstm_joint``
for ``metrics/bilstm_joint.json``; a generic ``metrics.json``/``meta.json`` is named after its
folder) or explicitly with ``NAME=PATH``.
"""
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import srsly


MARKDOWN_NAME = "report.md"
PLOT_NAME = "f1_per_type.png"
_GENERIC_STEMS = {"metrics", "meta", "scores", "results", "evaluation"}


class ReportError(ValueError):
    """A user error: a missing or unreadable metrics file, a bad NAME=PATH."""


class Run:
    """The scores of one run: overall and per-type P/R/F in percent, and what it was."""

    def __init__(self, name: str, path: Path, data: Dict[str, Any]) -> None:
        self.name = name
        self.path = path
        scores = data
        if "ents_f" not in scores and isinstance(data.get("performance"), dict):
            scores = data["performance"]  # a pipeline's meta.json
        if "ents_f" not in scores:
            raise ReportError(
                f"{path}: no entity scores (expected the keys ents_p, ents_r, ents_f and "
                "ents_per_type of `python -m spacy_crossner evaluate` or `spacy evaluate`)"
            )
        per_type = scores.get("ents_per_type") or {}
        if not isinstance(per_type, dict):
            raise ReportError(f"{path}: ents_per_type must be an object {{label: {{p, r, f}}}}")
        values = [scores.get(k) for k in ("ents_p", "ents_r", "ents_f")]
        values += [v.get(k) for v in per_type.values() for k in ("p", "r", "f")]
        if any(v is not None and not isinstance(v, (int, float)) for v in values):
            raise ReportError(f"{path}: scores must be numbers")
        # spaCy writes fractions; a file holding percentages is read as such
        scale = 1.0 if any(v is not None and v > 1.0 for v in values) else 100.0
        self.overall = _prf(scores, "ents_", scale)
        self.per_type = {label: _prf(v, "", scale) for label, v in per_type.items()}
        self.support = {
            label: c.get("tp", 0) + c.get("fn", 0)
            for label, c in (data.get("counts_per_type") or {}).items()
        }
        self.domain = data.get("domain")
        self.mode = data.get("mode")
        self.labels_note = data.get("note")


def _prf(scores: Dict[str, Any], prefix: str, scale: float) -> Tuple[float, float, float]:
    return tuple(
        float("nan") if scores.get(prefix + k) is None else scale * float(scores[prefix + k])
        for k in ("p", "r", "f")
    )


def parse_run_arg(arg: str) -> Tuple[Optional[str], Path]:
    """Split ``NAME=PATH`` (or a bare ``PATH``) into the name (None if not given) and path."""
    if "=" in arg:
        name, _, path = arg.partition("=")
        if not name.strip() or not path.strip():
            raise ReportError(f"'{arg}': write NAME=PATH, both non-empty")
        return name.strip(), Path(path.strip())
    return None, Path(arg)


def default_name(path: Path) -> str:
    """The run name of a metrics file: its stem, or its folder's name for generic stems."""
    if path.stem.lower() in _GENERIC_STEMS and path.parent.name:
        parent = path.parent
        if parent.name.startswith("model-") and parent.parent.name:
            return f"{parent.parent.name}/{parent.name}"
        return parent.name
    return path.stem


def load_runs(inputs: Sequence[Union[str, Path]]) -> List[Run]:
    """Read the runs given as PATH or NAME=PATH strings (in order; names made unique)."""
    if not inputs:
        raise ReportError("Give at least one metrics JSON file")
    runs: List[Run] = []
    names: Dict[str, int] = {}
    for arg in inputs:
        name, path = parse_run_arg(str(arg))
        if not path.exists():
            raise ReportError(f"Metrics file not found: {path}")
        if not path.is_file():
            raise ReportError(f"Not a file: {path}")
        try:
            data = srsly.read_json(path)
        except ValueError as err:
            raise ReportError(f"{path} is not valid JSON: {err}") from err
        if not isinstance(data, dict):
            raise ReportError(f"{path}: expected a JSON object with entity scores")
        name = name or default_name(path)
        if name in names:
            names[name] += 1
            name = f"{name} ({names[name]})"
        else:
            names[name] = 1
        runs.append(Run(name, path, data))
    return runs


def format_percent(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.2f}"


def entity_types(runs: Sequence[Run]) -> List[str]:
    """All types of all runs, most frequent in the gold data first (then alphabetical)."""
    labels = sorted({label for run in runs for label in run.per_type})
    support = {label: max((run.support.get(label, 0) for run in runs), default=0) for label in labels}
    return sorted(labels, key=lambda label: (-support[label], label))


def markdown_report(runs: Sequence[Run], *, title: Optional[str] = None, plot_name: Optional[str] = PLOT_NAME) -> str:
    """The report as markdown: summary, then P/R/F per type (rows) and run (column groups)."""
    domains = sorted({run.domain for run in runs if run.domain})
    title = title or "NER results" + (f": target domain {', '.join(domains)}" if domains else "")
    labels = entity_types(runs)
    best = max(runs, key=lambda run: -1.0 if math.isnan(run.overall[2]) else run.overall[2])
    lines = [f"# {title}", ""]
    lines.append(
        f"{len(runs)} run(s), {len(labels)} entity types; entity-level exact match, "
        "P/R/F1 ×100. Best overall F1: "
        f"**{best.name}** ({format_percent(best.overall[2])})."
    )
    if len(runs) > 1:
        wins = {run.name: 0 for run in runs}
        for label in labels:
            scored = [(run.per_type[label][2], run.name) for run in runs if label in run.per_type]
            if scored:
                wins[max(scored)[1]] += 1
        lines.append("Types with the best F1 per run: "
                     + ", ".join(f"{name} {n}" for name, n in wins.items()) + ".")
    lines.append("")
    lines.append("| run | overall F1 | P | R | mode | metrics file |")
    lines.append("|---|---:|---:|---:|---|---|")
    for run in runs:
        p, r, f = run.overall
        lines.append(f"| {run.name} | {format_percent(f)} | {format_percent(p)} | {format_percent(r)} | {run.mode or '–'} | "
                     f"`{run.path}` |")
    notes = sorted({run.labels_note for run in runs if run.labels_note})
    for note in notes:
        lines.append(f"\nNote: {note}.")
    lines.append("")
    lines.append("## P / R / F1 per entity type")
    lines.append("")
    header = ["type"] + (["gold"] if any(run.support for run in runs) else [])
    for run in runs:
        header += [f"{run.name} P", f"{run.name} R", f"{run.name} F1"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * (len(header) - 1))
    for label in labels + ["**overall**"]:
        row = [label]
        if "gold" in header:
            known = [run.support[label] for run in runs if label in run.support]
            if label not in labels:
                known = [sum(run.support.values()) for run in runs if run.support]
            row.append(str(max(known)) if known else "–")
        for run in runs:
            prf = run.overall if label not in labels else run.per_type.get(label)
            cells = [format_percent(v) for v in prf] if prf else ["–"] * 3
            if label not in labels:
                cells = [f"**{c}**" for c in cells]
            row += cells
        lines.append("| " + " | ".join(row) + " |")
    if plot_name:
        lines += ["", f"![F1 per entity type]({plot_name})"]
    return "\n".join(lines) + "\n"


def plot_f1(runs: Sequence[Run], path: Union[str, Path], *, title: Optional[str] = None) -> Path:
    """Write a PNG bar chart of per-type F1 (and overall) for each run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = entity_types(runs) + ["OVERALL"]
    n_runs = len(runs)
    height = 0.8 / n_runs
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * len(labels) * max(1.0, n_runs / 2)))
    for i, run in enumerate(runs):
        values = [
            run.overall[2] if label == "OVERALL" else run.per_type.get(label, (0, 0, float("nan")))[2]
            for label in labels
        ]
        positions = [j + (i - (n_runs - 1) / 2) * height for j in range(len(labels))]
        bars = ax.barh(positions, [0.0 if math.isnan(v) else v for v in values], height=height,
                       label=run.name)
        for bar, value in zip(bars, values):
            text = "n/a" if math.isnan(value) else f"{value:.1f}"
            ax.text(bar.get_width() + 0.5, bar.get_y() + bar.get_height() / 2, text,
                    va="center", fontsize=6)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 105)
    ax.set_xlabel("F1 (entity-level exact match, ×100)")
    domains = sorted({run.domain for run in runs if run.domain})
    ax.set_title(title or "F1 per entity type" + (f" ({', '.join(domains)})" if domains else ""))
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def report(
    *,
    metrics: Sequence[Union[str, Path]],
    output_dir: Union[str, Path],
    title: Optional[str] = None,
    plot: bool = True,
) -> Dict[str, Any]:
    """Write ``report.md`` (and ``f1_per_type.png``) comparing the given runs.

    metrics (Sequence[Union[str, Path]]): metrics JSON files, each ``PATH`` or ``NAME=PATH``.
    output_dir (Union[str, Path]): folder for the report (created).
    title (Optional[str]): heading of the report and the plot.
    plot (bool): also write the PNG.
    RETURNS (Dict[str, Any]): ``markdown`` (Path), ``plot`` (Path or None), ``runs`` (List[Run]).
    """
    runs = load_runs(metrics)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    plot_path = plot_f1(runs, output_dir / PLOT_NAME, title=title) if plot else None
    md_path = output_dir / MARKDOWN_NAME
    md_path.write_text(
        markdown_report(runs, title=title, plot_name=PLOT_NAME if plot else None), encoding="utf8"
    )
    return {"markdown": md_path, "plot": plot_path, "runs": runs}
