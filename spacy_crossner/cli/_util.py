"""The typer app of ``python -m spacy_crossner`` and its error helper.

Command modules (``spacy_crossner/cli/*.py``) import ``app`` from here and register on it;
``spacy_crossner/cli/__init__.py`` imports them, so imports only point down.
"""
import typer

app = typer.Typer(
    name="spacy_crossner",
    help="Cross-domain NER for spaCy: convert data, pre-train, evaluate and report.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help: typer's rich panels print a value type after every flag ("--help <bool>").
    rich_markup_mode=None,
)


def fail(message: str, code: int = 1) -> None:
    """End a command with one clear message on stderr and a non-zero exit, no traceback."""
    typer.secho(f"Error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)
