"""What the DAPT corpus modules share: their user error and their word tokenizer.

A module of its own so that ``corpus`` (the levels) and ``rank`` (the ranking) both import it
and neither imports the other at module level.
"""
import re
from typing import List

_WORD = re.compile(r"\w+(?:[-'\u2019]\w+)*|[^\w\s]")


class DaptInputError(ValueError):
    """A user error in the input of DAPT or select-corpus: the CLI prints it without traceback."""


def tokenize_words(text: str) -> List[str]:
    """Word tokens used for entity matching and token counts (no model tokenizer needed)."""
    return _WORD.findall(text)
