"""The typer app of ``python -m spacy_crossner``.

Each command lives in the module of its feature and registers itself on ``app`` when that
module is imported below; the commands are thin wrappers around keyword-only functions.
"""
import typer

app = typer.Typer(
    name="spacy_crossner",
    help="Cross-domain NER for spaCy: convert data, pre-train, evaluate and report.",
    no_args_is_help=True,
    add_completion=False,
)


def fail(message: str, code: int = 1) -> None:
    """End a command with one clear message on stderr and a non-zero exit, no traceback."""
    typer.secho(f"Error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


# Command modules register themselves on `app` when imported.
from . import commands  # noqa: E402,F401
