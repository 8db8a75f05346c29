"""One gazetteer for every entity-list lookup: the multi-cell LSTM's dictionary labels for raw
text (:class:`~spacy_crossner.lm.EntityDictionary`) and DAPT's entity-level corpus selection
(:func:`~spacy_crossner.dapt.corpus.select_corpus`).

Entries are token sequences; matching is leftmost-longest and non-overlapping on token
boundaries.
"""
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple


class Gazetteer:
    """Surface forms -> entity types, matched leftmost-longest on token boundaries.

    ignore_case (bool): match case-insensitively (``str.casefold``).
    tokenize (Optional[Callable[[str], List[str]]]): how :meth:`add` splits a surface form
        into tokens (default: on whitespace); match the tokenization of the text searched.
    """

    def __init__(self, ignore_case: bool = False, tokenize: Optional[Callable[[str], List[str]]] = None) -> None:
        self.ignore_case = ignore_case
        self.tokenize = tokenize or str.split
        # Types of an entry in the order they were added (the first is its main type).
        self.entries: Dict[Tuple[str, ...], List[str]] = {}
        # Longest entry per first token: bounds the lengths tried at each position.
        self._longest: Dict[str, int] = {}

    def _key(self, tokens: Iterable[str]) -> Tuple[str, ...]:
        return tuple(t.casefold() for t in tokens) if self.ignore_case else tuple(tokens)

    def add(self, surface: str, types: Iterable[str]) -> None:
        """Add one entry: its surface text and its types."""
        key = self._key(self.tokenize(surface))
        if not key:
            return
        known = self.entries.setdefault(key, [])
        known.extend(t for t in types if t not in known)
        self._longest[key[0]] = max(self._longest.get(key[0], 0), len(key))

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def types(self) -> Set[str]:
        """Every entity type of the gazetteer."""
        return {t for types in self.entries.values() for t in types}

    def match(self, tokens: Sequence[str]) -> List[Tuple[int, int, List[str]]]:
        """Mentions in a token sequence: ``(start, end, types)``, leftmost-longest,
        non-overlapping."""
        key = self._key(tokens)
        found = []
        i = 0
        while i < len(key):
            longest = min(self._longest.get(key[i], 0), len(key) - i)
            for n in range(longest, 0, -1):
                types = self.entries.get(key[i : i + n])
                if types is not None:
                    found.append((i, i + n, types))
                    i += n
                    break
            else:
                i += 1
        return found
