"""Language-model and dictionary inputs shared by the architectures with raw-text objectives.

- an LM vocabulary built from training text (frequency-sorted, index 0 = UNK), and word ids;
- entity dictionaries (a folder of ``<type>.txt`` files, one entry per line) matched on tokens,
  multi-word entries as spans, to give raw-text tokens entity-type labels.
"""
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy
from spacy.tokens import Doc

from .gazetteer import Gazetteer

UNK = "<unk>"


def normalize_word(word: str, lowercase: bool = False) -> str:
    """The LM's view of a word: digits become 0 (as in the papers' code), optionally lower-cased."""
    word = "".join("0" if c.isdigit() else c for c in word)
    return word.lower() if lowercase else word


def build_lm_vocab(
    sentences: Iterable[Sequence[str]],
    *,
    max_size: int = 20000,
    min_count: int = 1,
    lowercase: bool = False,
) -> List[str]:
    """A frequency-sorted LM vocabulary; index 0 is UNK.

    sentences (Iterable[Sequence[str]]): tokenized training text.
    max_size (int): at most this many entries, UNK included (0 = no limit).
    min_count (int): words seen fewer times are UNK.
    lowercase (bool): lower-case words before counting.
    RETURNS (List[str]): ``[UNK, most frequent, ...]``; ties broken by first occurrence.
    """
    counts: Counter = Counter()
    for words in sentences:
        counts.update(normalize_word(w, lowercase) for w in words)
    ranked = [w for w, c in counts.most_common() if c >= min_count and w != UNK]
    if max_size:
        ranked = ranked[: max_size - 1]
    return [UNK] + ranked


def lm_word_ids(
    docs: Sequence[Doc], index: Dict[str, int], lowercase: bool = False
) -> numpy.ndarray:
    """Padded (B, T) int64 LM word ids of docs; unknown words get 0 (UNK), padding -1."""
    width = max((len(doc) for doc in docs), default=0)
    ids = numpy.full((len(docs), width), -1, dtype="int64")
    for i, doc in enumerate(docs):
        for j, token in enumerate(doc):
            ids[i, j] = index.get(normalize_word(token.text, lowercase), 0)
    return ids


class EntityDictionary:
    """Entity names by type, matched as token spans (longest match first, no overlaps).

    Built from a folder of ``<type>.txt`` files with one entry per line; an entry with spaces
    is a multi-word entity matched on consecutive tokens. A name listed under several types
    has the first (in sorted file order). The matching is :class:`~spacy_crossner.gazetteer.Gazetteer`'s.
    """

    def __init__(self, entries: Dict[str, List[Tuple[str, ...]]]) -> None:
        self.types = sorted(entries)
        self.gazetteer = Gazetteer()
        for type_ in self.types:
            for name in entries[type_]:
                self.gazetteer.add(" ".join(name), [type_])

    @classmethod
    def from_dir(cls, path, label_map: Optional[Dict[str, str]] = None) -> "EntityDictionary":
        """Read ``<type>.txt`` files of a folder.

        path: the folder.
        label_map (Optional[Dict[str, str]]): file stem -> entity label (e.g.
            ``{"organization": "organisation"}``); stems not in it are used as they are.
        """
        path = Path(path)
        if not path.is_dir():
            raise ValueError(f"Entity dictionary folder not found: {path}")
        files = sorted(p for p in path.glob("*.txt") if not p.name.startswith("."))
        if not files:
            raise ValueError(f"Entity dictionary folder {path} has no <type>.txt files")
        label_map = label_map or {}
        entries: Dict[str, List[Tuple[str, ...]]] = {}
        for file in files:
            label = label_map.get(file.stem, file.stem)
            try:
                lines = file.read_text(encoding="utf8").splitlines()
            except UnicodeDecodeError as err:
                raise ValueError(f"{file}: not UTF-8 ({err})") from err
            names = [tuple(line.split()) for line in lines if line.strip()]
            entries.setdefault(label, []).extend(names)
        return cls(entries)

    def to_dict(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {t: [] for t in self.types}
        for name, types in self.gazetteer.entries.items():
            out[types[0]].append(" ".join(name))
        return out

    def match(self, words: Sequence[str]) -> List[Tuple[int, int, str]]:
        """Non-overlapping ``(start, end, type)`` matches, longest first, left to right."""
        return [(start, end, types[0]) for start, end, types in self.gazetteer.match(words)]

    def token_types(self, words: Sequence[str], type_index: Dict[str, int]) -> List[int]:
        """Per token, the index of its matched type in ``type_index``, or -1 (no match).

        Types missing from ``type_index`` are ignored (-1).
        """
        out = [-1] * len(words)
        for start, end, type_ in self.match(words):
            if type_ in type_index:
                for k in range(start, end):
                    out[k] = type_index[type_]
        return out
