"""``python -m spacy_crossner``: the command-line interface (spaCy's ``cli/`` layout).

``_util`` holds the typer ``app``; each command module registers its commands on it and calls
plain keyword-only functions of the library modules, which never import the CLI.
"""
from ._util import app, fail, full_short_help

from . import (  # noqa: F401,E402  (register the commands)
    annotate, best, calibrate, convert, dapt, evaluate, init_config, quantize, report, self_train,
    vectors,
)

full_short_help(app)

__all__ = ["app", "fail"]
