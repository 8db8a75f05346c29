"""The ``report`` command."""
from pathlib import Path
from typing import List, Optional

import typer

from ..report import ReportError, format_percent, report
from ._util import app, fail


@app.command("report")
def report_cli(
    metrics: List[str] = typer.Argument(
        ..., help="Metrics JSON files (from `python -m spacy_crossner evaluate` or `spacy "
        "evaluate`), each PATH or NAME=PATH; a run is named after its file unless NAME is given."
    ),
    output_dir: Path = typer.Option(
        Path("reports"), "--output", "-o", help="Folder for report.md, report.json, f1_per_type.png (and "
        "reliability.png when the metrics carry a calibration)."
    ),
    title: Optional[str] = typer.Option(None, "--title", "-t", help="Heading of the report."),
    plot: Optional[bool] = typer.Option(
        None, "--plot/--no-plot", help="Also write the PNGs, the heatmap and the reliability plot (needs matplotlib: pip install "
        "\"spacy_crossner[report]\"); default: where matplotlib is installed."
    ),
) -> None:
    """Compare runs: report.md (scores and notes per run, F1 per type x run), a heatmap PNG of
    F1 per run and type, and report.json (P/R/F1 per type). Metrics of crossner pipelines also
    get the calibration of their entity probabilities: ECE and reliability tables per domain,
    and a reliability plot."""
    try:
        result = report(metrics=metrics, output_dir=output_dir, title=title, plot=plot)
    except (ReportError, OSError) as err:
        fail(str(err))
    if result["plot_skipped"]:
        typer.secho(f"No heatmap: {result['plot_skipped']}", fg=typer.colors.YELLOW)
    for run in result["runs"]:
        p, r, f = run.overall
        typer.echo(f"{run.name:<30} P {format_percent(p):>6}  R {format_percent(r):>6}  F1 {format_percent(f):>6}")
    written = [result["markdown"], result["json"], result["plot"], result["reliability_plot"]]
    typer.secho("Wrote " + ", ".join(str(p) for p in written if p), fg=typer.colors.GREEN)
