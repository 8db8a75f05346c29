"""The ``evaluate`` command."""
from pathlib import Path
from typing import Optional

import typer

from ..calibrate import format_reliability
from ..evaluate import EvaluationError, evaluate, results_table, summary_table
from ._util import app, fail


@app.command("evaluate")
def evaluate_cli(
    model: Path = typer.Argument(..., help="Trained pipeline directory (e.g. training/model-best)."),
    data: Path = typer.Argument(..., help="A .spacy file (or folder of them) with gold entities."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the metrics as JSON to this file."
    ),
    mode: str = typer.Option(
        "sentence", "--mode", "-m",
        help="sentence: score each sentence on its own (spaCy's scorer); crossner-compat: the "
        "CrossNER authors' scoring, all sentences of the split as one tag stream (conlleval).",
    ),
    labels: Optional[str] = typer.Option(
        None, "--labels", "-l",
        help="Comma-separated entity types to score; others count as O. Default: all.",
    ),
    domain: Optional[str] = typer.Option(
        None, "--domain", "-d",
        help="Domain set on every doc. Default: each doc's own domain, else the component's "
        "target_domain.",
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id, -1 for CPU."),
    label_map: Optional[str] = typer.Option(
        None, "--label-map",
        help='Rename the gold labels of DATA before scoring: a JSON file or inline JSON, e.g. '
        '\'{"PER": "person"}\' for a model trained on person scored on data saying PER.',
    ),
) -> None:
    """Score a pipeline's entities (exact match P/R/F, overall and per type) on a .spacy corpus.

    This is the scorer of spacy_crossner pipelines: docs keep their gold tokens and domain.
    The output JSON has the keys of `spacy evaluate --output` (token_acc, ents_p, ents_r,
    ents_f, ents_per_type, speed) plus counts and what was scored, and the calibration of the
    entity probabilities: ECE and a reliability table (confidence, accuracy, count per bin)
    per domain."""
    label_list = [l.strip() for l in labels.split(",") if l.strip()] if labels else None
    if labels is not None and not label_list:
        fail("--labels is empty: give comma-separated entity types")
    try:
        result = evaluate(model=model, data=data, output=output, mode=mode, labels=label_list,
                          domain=domain, gpu_id=gpu_id, label_map=label_map)
    except (EvaluationError, OSError) as err:
        fail(str(err))
    typer.echo(f"{result['data']} ({result['n_docs']:,} docs, {result['n_words']:,} words), "
               f"domain {result['domain']}, mode {mode}")
    typer.echo(results_table(result))
    typer.echo(summary_table(result))
    calibration = result.get("calibration")
    if calibration is not None:
        temperatures = calibration["temperatures"]
        how = ("temperatures " + ", ".join(f"{d} {t:.3g}" for d, t in sorted(temperatures.items()))
               if temperatures else "uncalibrated")
        typer.echo(f"Entity probabilities ({how}): reliability per domain")
        for name, summary in calibration["per_domain"].items():
            typer.echo(f"{name}:")
            typer.echo(format_reliability(summary))
    if result.get("note"):
        typer.secho(f"Note: {result['note']}", fg=typer.colors.YELLOW)
    if output is not None:
        typer.secho(f"Wrote {output}", fg=typer.colors.GREEN)
