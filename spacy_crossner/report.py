"""Compare runs: a markdown report of F1 per entity type, a heatmap PNG and a JSON of all scores.

``python -m spacy_crossner report METRICS_JSON... --output reports/``

Writes ``report.md`` (overall P/R/F1 per run with each run's notes, F1 per type x run),
``f1_per_type.png`` (a heatmap of runs x types with the values printed) and ``report.json``
(every P/R/F1, the notes, the gold counts: what scripts and other documents read). The heatmap
needs matplotlib, an optional extra (``pip install "spacy_crossner[report]"``): without it the
report is the markdown and the JSON, and asking for the plot is a clear error.

Metrics of ``evaluate`` on a crossner pipeline carry the calibration of its entity probabilities
(``calibration``: ECE and reliability table per domain): the report then adds a calibration
section (ECE per run and domain, the reliability tables side by side) and ``reliability.png``
(accuracy against confidence per domain, a line per run: e.g. before and after
``python -m spacy_crossner calibrate``).

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
RELIABILITY_PLOT_NAME = "reliability.png"
JSON_NAME = "report.json"
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
        bad = next((label for label, v in per_type.items() if not isinstance(v, dict)), None)
        if bad is not None:
            raise ReportError(
                f"{path}: ents_per_type[{bad!r}] must be an object {{p, r, f}}, got {per_type[bad]!r}"
            )
        values = [scores.get(k) for k in ("ents_p", "ents_r", "ents_f")]
        values += [v.get(k) for v in per_type.values() for k in ("p", "r", "f")]
        if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in values):
            raise ReportError(f"{path}: scores must be numbers")
        # spaCy writes fractions; a file holding percentages is read as such
        scale = 1.0 if any(v is not None and v > 1.0 for v in values) else 100.0
        _check_range(path, scores, per_type, scale)
        self.overall = _prf(scores, "ents_", scale)
        self.per_type = {label: _prf(v, "", scale) for label, v in per_type.items()}
        self.support = {
            label: c.get("tp", 0) + c.get("fn", 0)
            for label, c in (data.get("counts_per_type") or {}).items()
        }
        self.domain = data.get("domain")
        self.mode = data.get("mode")
        self.labels_note = data.get("note")
        # gold types the model cannot predict (no such label in the domain it tags the docs with)
        self.unpredictable = sorted(data.get("unpredictable_labels") or {})
        self.calibration = _read_calibration(path, data.get("calibration"))

    def to_dict(self) -> Dict[str, Any]:
        """The run's scores (percent) and notes, as written to ``report.json``."""
        return {
            "name": self.name,
            "metrics_file": str(self.path),
            "domain": self.domain,
            "mode": self.mode,
            "overall": _prf_dict(self.overall),
            "per_type": {label: _prf_dict(prf) for label, prf in self.per_type.items()},
            "gold_per_type": self.support,
            "unpredictable_types": self.unpredictable,
            "note": self.labels_note,
            "calibration": self.calibration,
        }


def _read_calibration(path: Path, calibration: Any) -> Optional[Dict[str, Any]]:
    """The ``calibration`` of a metrics file (``evaluate``'s), checked: {"per_domain": {domain:
    {"ece", "n_entities", "bins": [{"lower", "upper", "count", "confidence", "accuracy"}]}}}."""
    if calibration is None:
        return None
    per_domain = calibration.get("per_domain") if isinstance(calibration, dict) else None
    if not isinstance(per_domain, dict):
        raise ReportError(f"{path}: calibration must be an object with per_domain {{domain: ...}}")
    for domain, summary in per_domain.items():
        bins = summary.get("bins") if isinstance(summary, dict) else None
        if not isinstance(bins, list) or not all(
            isinstance(b, dict) and {"lower", "upper", "count", "confidence", "accuracy"} <= set(b) for b in bins
        ):
            raise ReportError(
                f"{path}: calibration.per_domain[{domain!r}] needs bins with lower, upper, count, "
                "confidence and accuracy (what `python -m spacy_crossner evaluate` writes)"
            )
    return calibration


def _check_range(path: Path, scores: Dict[str, Any], per_type: Dict[str, Any], scale: float) -> None:
    """Every score is a fraction in [0, 1] or a percentage in [0, 100], and the overall F is
    the harmonic mean of P and R: a value above 1 switches the whole file to percentages, so a
    fraction beside percentages (or a typo) would otherwise be reported wrongly."""
    groups = [("ents_", scores)] + [
        (f"ents_per_type.{label}.", v) for label, v in per_type.items() if isinstance(v, dict)
    ]
    for prefix, group in groups:
        keys = ("ents_p", "ents_r", "ents_f") if prefix == "ents_" else ("p", "r", "f")
        values = [group.get(k) for k in keys]
        for key, value in zip(("p", "r", "f"), values):
            if value is not None and (math.isnan(value) or not 0 <= value <= 100):
                raise ReportError(
                    f"{path}: {prefix}{key} = {value:g} is not a score (fractions 0-1 as spaCy "
                    "writes them, or percentages 0-100)"
                )
        if prefix != "ents_" or any(v is None for v in values):
            continue  # per-type scores are only range-checked (hand-made files round them)
        p, r, f = (scale * float(v) for v in values)
        expected = 2 * p * r / (p + r) if p + r else 0.0
        if abs(f - expected) > 0.1:  # percentage points; files round to 4 decimals
            raise ReportError(
                f"{path}: {prefix}f = {values[2]:g} is not the harmonic mean of {prefix}p = "
                f"{values[0]:g} and {prefix}r = {values[1]:g} (read as "
                f"{'percentages' if scale == 1.0 else 'fractions'}, F would be {expected:.2f}%): "
                "write all scores as fractions (0-1) or all as percentages (0-100)"
            )


def _prf_dict(prf: Tuple[float, float, float]) -> Dict[str, Optional[float]]:
    return {k: None if math.isnan(v) else round(v, 4) for k, v in zip(("p", "r", "f"), prf)}


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


def _f1_cell(run: Run, label: str) -> str:
    """One cell of the F1 table: the value, × for a type the run cannot predict, – if unscored."""
    if label in run.unpredictable:
        return "×"
    prf = run.per_type.get(label)
    return format_percent(prf[2]) if prf else "–"


def markdown_report(runs: Sequence[Run], *, title: Optional[str] = None, plot_name: Optional[str] = PLOT_NAME) -> str:
    """The report as markdown: overall scores and notes per run, then F1 per type (rows) x run."""
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
    lines.append("| run | F1 | P | R | mode | metrics file |")
    lines.append("|---|---:|---:|---:|---|---|")
    for run in runs:
        p, r, f = run.overall
        lines.append(f"| {run.name} | {format_percent(f)} | {format_percent(p)} | {format_percent(r)} | {run.mode or '–'} | "
                     f"`{run.path}` |")
    noted = [run for run in runs if run.labels_note]
    if noted:
        lines += ["", "Notes:", ""]
        lines += [f"- **{run.name}**: {run.labels_note}." for run in noted]
    lines.append("")
    lines.append("## F1 per entity type")
    lines.append("")
    header = ["type"] + (["gold"] if any(run.support for run in runs) else []) + [run.name for run in runs]
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
            row.append(f"**{format_percent(run.overall[2])}**" if label not in labels else _f1_cell(run, label))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    legend = "– = the run has no score for the type"
    if any(run.unpredictable for run in runs):
        legend = ("× = the run cannot predict the type (no such label in the domain it tags the "
                  "docs with; its gold entities count as misses); " + legend)
    lines.append(f"{legend}. P and R per type: `{JSON_NAME}`.")
    if plot_name:
        lines += ["", f"![F1 per entity type and run]({plot_name})"]
    lines += calibration_markdown(runs, plot_name=RELIABILITY_PLOT_NAME if plot_name else None)
    return "\n".join(lines) + "\n"


def _ece_cell(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.4f}"


def calibration_markdown(runs: Sequence[Run], *, plot_name: Optional[str] = None) -> List[str]:
    """The calibration section: ECE per run and domain, then per domain the reliability table
    (confidence / accuracy / count per probability bin) of every run. No lines when no run has
    a calibration."""
    calibrated = [run for run in runs if run.calibration]
    if not calibrated:
        return []
    lines = ["", "## Calibration of the entity probabilities", ""]
    lines.append(
        "Expected calibration error (ECE) of the predicted entities: their probabilities in "
        "equal-width bins, the count-weighted mean of |accuracy - mean probability|; 0 is perfect."
    )
    lines += ["", "| run | domain | ECE | entities | accuracy | mean probability | temperature |",
              "|---|---|---:|---:|---:|---:|---|"]
    domains: List[str] = []
    for run in calibrated:
        temperatures = run.calibration.get("temperatures") or {}
        temps = ", ".join(f"{d} {t:.3g}" for d, t in sorted(temperatures.items())) or "1 (uncalibrated)"
        for domain, summary in run.calibration["per_domain"].items():
            if domain not in domains:
                domains.append(domain)
            acc, conf = summary.get("accuracy"), summary.get("mean_confidence")
            lines.append(
                f"| {run.name} | {domain} | {_ece_cell(summary.get('ece'))} | {summary.get('n_entities', 0)} | "
                f"{'–' if acc is None else f'{acc:.3f}'} | {'–' if conf is None else f'{conf:.3f}'} | {temps} |"
            )
    for domain in domains:
        having = [run for run in calibrated if domain in run.calibration["per_domain"]]
        tables = [run.calibration["per_domain"][domain]["bins"] for run in having]
        edges = sorted({(b["lower"], b["upper"]) for bins in tables for b in bins if b["count"]})
        lines += ["", f"Reliability, {domain} (confidence / accuracy / count per probability bin):", ""]
        lines.append("| probability | " + " | ".join(run.name for run in having) + " |")
        lines.append("|---|" + "---:|" * len(having))
        for lower, upper in edges:
            cells = []
            for bins in tables:
                row = next((b for b in bins if (b["lower"], b["upper"]) == (lower, upper) and b["count"]), None)
                cells.append("–" if row is None else
                             f"{row['confidence']:.3f} / {row['accuracy']:.3f} / {row['count']}")
            lines.append(f"| {lower:.2f}–{upper:.2f} | " + " | ".join(cells) + " |")
    if plot_name:
        lines += ["", f"![Reliability per domain and run]({plot_name})"]
    return lines


def plot_reliability(runs: Sequence[Run], path: Union[str, Path], *, title: Optional[str] = None) -> Path:
    """Write a PNG reliability diagram per domain: accuracy against mean probability of each
    probability bin, one line per run (marker area by the bin's count), the diagonal being
    perfect calibration. Raises ReportError when matplotlib is not installed (the ``report``
    extra) or no run has a calibration."""
    try:
        import matplotlib
    except ImportError as err:
        raise ReportError(MATPLOTLIB_MISSING.replace("F1 heatmap", "reliability plot")) from err

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    calibrated = [run for run in runs if run.calibration]
    if not calibrated:
        raise ReportError("No run has a calibration (metrics of `python -m spacy_crossner evaluate` "
                          "on a crossner pipeline): nothing to plot")
    domains: List[str] = []
    for run in calibrated:
        domains += [d for d in run.calibration["per_domain"] if d not in domains]
    fig, axes = plt.subplots(1, len(domains), figsize=(3.6 * len(domains) + 0.6, 3.9), squeeze=False)
    for ax, domain in zip(axes[0], domains):
        ax.plot([0, 1], [0, 1], ls="--", color="#999999", lw=1)
        for run in calibrated:
            summary = run.calibration["per_domain"].get(domain)
            if not summary:
                continue
            bins = [b for b in summary["bins"] if b["count"]]
            if not bins:
                continue
            total = sum(b["count"] for b in bins)
            x = [b["confidence"] for b in bins]
            y = [b["accuracy"] for b in bins]
            line, = ax.plot(x, y, marker=None, lw=1.2,
                            label=f"{run.name} (ECE {_ece_cell(summary.get('ece'))})")
            ax.scatter(x, y, s=[15 + 200 * b["count"] / total for b in bins], color=line.get_color(),
                       zorder=3, clip_on=False)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_xlabel("entity probability (bin mean)", fontsize=8)
        ax.set_ylabel("accuracy", fontsize=8)
        ax.set_title(domain, fontsize=10)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title or "Reliability of the entity probabilities", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


MATPLOTLIB_MISSING = ('the F1 heatmap needs matplotlib, which is not installed: pip install '
                      '"spacy_crossner[report]" (or leave the plot out: --no-plot)')


def can_plot() -> bool:
    """Whether matplotlib is installed (the optional ``report`` extra)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def plot_f1(runs: Sequence[Run], path: Union[str, Path], *, title: Optional[str] = None) -> Path:
    """Write a PNG heatmap of F1 for each run (row) and entity type (column), values printed.

    A type the run cannot predict is a hatched "×" cell, a type it has no score for an empty
    grey one; an F1 of 0 is left blank (its colour says it). Raises ReportError when matplotlib
    is not installed.
    """
    import textwrap

    try:
        import matplotlib
    except ImportError as err:
        raise ReportError(MATPLOTLIB_MISSING) from err

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy

    labels = entity_types(runs)
    columns = labels + ["overall"]
    values = numpy.full((len(runs), len(columns)), numpy.nan)
    for i, run in enumerate(runs):
        for j, label in enumerate(labels):
            if label in run.per_type and label not in run.unpredictable:
                values[i, j] = run.per_type[label][2]
        values[i, -1] = run.overall[2]
    name_width = max(len(run.name) for run in runs)
    width = max(6.0, 0.1 * name_width + 0.62 * len(columns) + 1.6)
    height = 1.6 + 0.42 * len(runs) + 0.09 * max(len(c) for c in columns)
    fig, ax = plt.subplots(figsize=(width, height))
    cmap = matplotlib.colormaps["YlGnBu"].with_extremes(bad="#eeeeee")
    image = ax.imshow(numpy.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for i, run in enumerate(runs):
        for j, label in enumerate(columns):
            value = values[i, j]
            if label in run.unpredictable:
                ax.add_patch(matplotlib.patches.Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#bbbbbb", lw=0))
                ax.text(j, i, "×", ha="center", va="center", fontsize=9, color="#777777")
            elif not math.isnan(value) and round(value, 1) > 0:
                ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=8,
                        color="white" if value > 55 else "black",
                        fontweight="bold" if label == "overall" else "normal")
    ax.axvline(len(labels) - 0.5, color="white", lw=3)  # overall apart from the types
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(columns, rotation=40, ha="right", fontsize=9)
    ax.set_yticks(range(len(runs)))
    ax.set_yticklabels([run.name for run in runs], fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    colorbar = fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    colorbar.set_label("F1 ×100 (entity-level exact match)", fontsize=8)
    colorbar.ax.tick_params(labelsize=8)
    domains = sorted({run.domain for run in runs if run.domain})
    text = title or "F1 per entity type" + (f" ({', '.join(domains)})" if domains else "")
    if any(run.unpredictable for run in runs):
        text += " — × = type the run cannot predict"
    ax.set_title("\n".join(textwrap.wrap(text, width=max(40, int(width * 11)))), fontsize=10, loc="left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # "tight" grows the canvas to what is drawn: no title or label is cut at the edges
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def report_json(runs: Sequence[Run], *, title: Optional[str] = None) -> Dict[str, Any]:
    """Everything the report shows, and P and R per type, for scripts and other documents."""
    return {
        "title": title,
        "types": entity_types(runs),
        "scale": "percent",
        "runs": [run.to_dict() for run in runs],
    }


def report(
    *,
    metrics: Sequence[Union[str, Path]],
    output_dir: Union[str, Path],
    title: Optional[str] = None,
    plot: Optional[bool] = None,
) -> Dict[str, Any]:
    """Write ``report.md``, ``report.json`` (and ``f1_per_type.png``) comparing the given runs.

    metrics (Sequence[Union[str, Path]]): metrics JSON files, each ``PATH`` or ``NAME=PATH``.
    output_dir (Union[str, Path]): folder for the report (created).
    title (Optional[str]): heading of the report and the plot.
    plot (Optional[bool]): also write the PNG; True without matplotlib is a ReportError, None
        plots where matplotlib is installed.
    RETURNS (Dict[str, Any]): ``markdown``, ``json`` (Path), ``plot`` (Path or None), ``runs``
        (List[Run]), ``plot_skipped`` (a note when None left the plot out, else None),
        ``reliability_plot`` (``reliability.png`` when plotting and a run has a calibration,
        else None).
    """
    skipped = None
    if plot is None:
        plot = can_plot()
        skipped = None if plot else MATPLOTLIB_MISSING.split(" (or")[0]
    elif plot and not can_plot():
        raise ReportError(MATPLOTLIB_MISSING)
    runs = load_runs(metrics)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    plot_path = plot_f1(runs, output_dir / PLOT_NAME, title=title) if plot else None
    calibrated = any(run.calibration for run in runs)
    reliability_path = (
        plot_reliability(runs, output_dir / RELIABILITY_PLOT_NAME, title=title) if plot and calibrated else None
    )
    md_path = output_dir / MARKDOWN_NAME
    md_path.write_text(
        markdown_report(runs, title=title, plot_name=PLOT_NAME if plot else None), encoding="utf8"
    )
    json_path = output_dir / JSON_NAME
    srsly.write_json(json_path, report_json(runs, title=title))
    return {"markdown": md_path, "json": json_path, "plot": plot_path, "runs": runs, "plot_skipped": skipped,
            "reliability_plot": reliability_path}
