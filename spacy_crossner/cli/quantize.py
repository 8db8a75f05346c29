"""The ``quantize`` command."""
from pathlib import Path

import typer

from ..quantize import QuantizeError, quantize
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
) -> None:
    """Write an int8 copy of a transformer pipeline for CPU inference.

    The encoder's linear layers of every spacy-transformers transformer component become int8
    (dynamic quantization); the copy loads with spacy.load and packages with spacy package.
    It runs on CPU only and is for inference: train and fine-tune the original."""
    try:
        result = quantize(model=model, output=output, per_channel=not per_tensor)
    except (QuantizeError, OSError) as err:
        fail(str(err))
    for name, n in result["components"].items():
        typer.echo(f"{name}: {n} linear layers int8")
    typer.secho(f"Wrote {output} ({result['output_mb']:.0f} MB; {model}: {result['model_mb']:.0f} MB)",
                fg=typer.colors.GREEN)
