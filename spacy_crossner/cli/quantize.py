"""The ``quantize`` command."""
from pathlib import Path

import typer

from typing import Optional

from ..quantize import DEFAULT_CALIBRATION_SIZE, DEFAULT_SMOOTHING, QuantizeError, quantize
from ._util import app, fail


@app.command("quantize")
def quantize_cli(
    model: Path = typer.Argument(..., help="Trained transformer pipeline directory (e.g. training/model-best)."),
    output: Path = typer.Argument(..., help="New directory for the int8 copy (must not exist)."),
    per_tensor: bool = typer.Option(
        False, "--per-tensor",
        help="One int8 scale per weight matrix instead of one per output channel (the default, "
        "more accurate).",
    ),
    calibration: Optional[Path] = typer.Option(
        None, "--calibration",
        help="Text of the pipeline's domain (its training .spacy file or folder, or a .txt of one "
        "tokenised sentence a line): the linear layers are smoothed on it before they are "
        "quantized (SmoothQuant), which loses less accuracy. Without it: plain int8.",
    ),
    smoothing: float = typer.Option(
        DEFAULT_SMOOTHING, "--smoothing",
        help="Smoothing strength (SmoothQuant's alpha, in (0, 1]), with --calibration.",
    ),
    calibration_size: int = typer.Option(
        DEFAULT_CALIBRATION_SIZE, "--calibration-size",
        help="The most calibration sentences used (the first ones).",
    ),
) -> None:
    """Write an int8 copy of a transformer pipeline for CPU inference.

    The encoder's linear layers of every spacy-transformers transformer component become int8
    (dynamic quantization); the copy loads with spacy.load and packages with spacy package.
    It runs on CPU only and is for inference: train and fine-tune the original."""
    try:
        result = quantize(model=model, output=output, per_channel=not per_tensor,
                          calibration=calibration, smoothing=smoothing,
                          calibration_size=calibration_size)
    except (QuantizeError, OSError) as err:
        fail(str(err))
    for name, n in result["components"].items():
        smoothed = result["smoothed"].get(name)
        extra = f", {smoothed} smoothed on {result['calibration_sentences']} sentences" if smoothed else ""
        typer.echo(f"{name}: {n} linear layers int8{extra}")
    typer.secho(f"Wrote {output} ({result['output_mb']:.0f} MB; {model}: {result['model_mb']:.0f} MB)",
                fg=typer.colors.GREEN)
