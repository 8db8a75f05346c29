"""Imports every module that defines a command of ``python -m spacy_crossner``."""
from . import convert  # noqa: F401
from .dapt import cli as dapt_cli  # noqa: F401
from . import evaluate  # noqa: F401
from . import report  # noqa: F401
