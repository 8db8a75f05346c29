"""The typer app of ``python -m spacy_crossner`` and its error helper.

Command modules (``spacy_crossner/cli/*.py``) import ``app`` from here and register on it;
``spacy_crossner/cli/__init__.py`` imports them, so imports only point down.
"""
import typer

app = typer.Typer(
    name="spacy_crossner",
    help="Cross-domain NER for spaCy: convert data, train the best pipeline in one command, "
    "pre-train, evaluate and report.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help: typer's rich panels print a value type after every flag ("--help <bool>").
    rich_markup_mode=None,
)


def fail(message: str, code: int = 1) -> None:
    """End a command with one clear message on stderr and a non-zero exit, no traceback."""
    typer.secho(f"Error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def first_paragraph(doc: str) -> str:
    """The first paragraph of a docstring, on one line."""
    import inspect

    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def full_short_help(typer_app: typer.Typer) -> None:
    """Give every command without a ``short_help`` its docstring's whole first paragraph, so that
    ``--help``'s command list wraps the description instead of cutting it at ~45 characters
    with "..." (click's default)."""
    for info in typer_app.registered_commands:
        if info.short_help is None and info.callback is not None:
            info.short_help = first_paragraph(info.help or info.callback.__doc__) or None
