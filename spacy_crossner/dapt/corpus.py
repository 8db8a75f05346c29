"""Raw-text corpora for DAPT: safe reading and the CrossNER corpus levels.

CrossNER pre-trains on four corpus levels built from a domain's raw text (spec ``dapt.md`` 1):

- **domain**: every sentence of the raw corpus (here: after sentence-level de-duplication);
- **entity**: the domain sentences that hold at least ``min_entities`` (default 2) entity mentions;
- **task**: the domain sentences that hold at least one mention of a domain-specialised type;
- **integrated**: the entity-level file followed by the task-level file twice (task upsampled x2).

The paper does not say how entities were matched, so the selection rule is ours:

1. The corpus is read one line at a time (a line is a paragraph or a sentence); each line is split
   into sentences after ``.``, ``!`` or ``?`` (plus closing quotes or brackets) followed by
   whitespace and an upper-case letter, digit or opening quote (``split_sentences=False`` takes
   each line as one sentence).
2. Sentences are de-duplicated exactly, after collapsing runs of whitespace; the first occurrence
   is kept, in corpus order.
3. A sentence is split into word tokens (runs of letters/digits, inner ``-`` or ``'`` allowed,
   and single punctuation marks). An entity list entry is tokenised the same way; mentions are the
   leftmost-longest non-overlapping matches on token boundaries (case-sensitive unless
   ``ignore_case``).
4. entity-level keeps a sentence with ``>= min_entities`` mentions (repeats count); task-level
   keeps a sentence with at least one mention whose types meet ``task_types`` (every type counts
   when ``task_types`` is None).

Entity list: one entry per line, ``surface`` or ``surface<TAB>type[,type...]``; an entry without
a type gets the file's stem as type (``person.txt`` -> ``person``). Several files may be given.
"""
import hashlib
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from ..gazetteer import Gazetteer

LEVELS = ("domain", "entity", "task", "integrated")
# A line longer than this is almost surely not a sentence or paragraph (a file without newlines,
# a minified dump): reading it whole would stall the tokenizer and use a lot of memory.
DEFAULT_MAX_LINE_CHARS = 100_000

_SENT_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_WORD = re.compile(r"\w+(?:[-'\u2019]\w+)*|[^\w\s]")
_SPACE = re.compile(r"\s+")


class DaptInputError(ValueError):
    """A user error in the input of DAPT or select-corpus: the CLI prints it without traceback."""


def iter_lines(path: Union[str, Path], *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file, without their line ending.

    path (Union[str, Path]): the file.
    max_line_chars (int): the longest line accepted, in characters.
    Raises DaptInputError when the file is missing, is not UTF-8, or has a line that is too long.
    """
    path = Path(path)
    if not path.exists():
        raise DaptInputError(f"File not found: {path}")
    if not path.is_file():
        raise DaptInputError(f"Not a file: {path}")
    number = 0
    with path.open("r", encoding="utf8", newline=None) as file_:
        while True:
            number += 1
            try:
                # readline(limit) never reads more than one line's worth past the limit.
                line = file_.readline(max_line_chars + 1)
            except UnicodeDecodeError as err:
                # The text layer decodes whole chunks, so `number` may be an earlier line.
                line_no, column, byte = _first_bad_utf8(path)
                raise DaptInputError(
                    f"{path}, line {line_no}: not UTF-8 text ({err.reason}: byte 0x{byte:02x} at "
                    f"byte {column} of the line). Convert it, e.g. with iconv -f latin1 -t utf8."
                ) from None
            if not line:
                return
            text = line.rstrip("\r\n")
            if len(text) > max_line_chars:
                raise DaptInputError(
                    f"{path}: line {number} is longer than {max_line_chars:,} characters. Give one "
                    "sentence or paragraph per line (or raise the line-length limit)."
                )
            yield text


def _first_bad_utf8(path: Path) -> Tuple[int, int, int]:
    """(line, 0-based byte offset in that line, the byte) of the first byte of a file that is not
    UTF-8; lines end in \\n, \\r\\n or \\r, as ``iter_lines`` reads them."""
    number = 0
    with path.open("rb") as file_:
        for raw in file_:
            parts = raw.replace(b"\r\n", b"\n").split(b"\r")
            if len(parts) > 1 and not parts[-1].strip(b"\n"):
                parts.pop()
            for part in parts:
                number += 1
                try:
                    part.decode("utf8")
                except UnicodeDecodeError as err:
                    return number, err.start, part[err.start]
    return number, 0, 0


def split_sentences(text: str) -> List[str]:
    """Split a paragraph into sentences with the rule of this module's docstring."""
    return [s.strip() for s in _SENT_END.split(text) if s.strip()]


def tokenize_words(text: str) -> List[str]:
    """Word tokens used for entity matching and token counts (no model tokenizer needed)."""
    return _WORD.findall(text)


def read_entity_lists(
    paths: Sequence[Union[str, Path]],
    *,
    ignore_case: bool = False,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> Gazetteer:
    """Read entity lists: ``surface`` or ``surface<TAB>type[,type...]`` per line.

    paths (Sequence[Union[str, Path]]): the files; an untyped entry takes its file's stem.
    ignore_case (bool): match case-insensitively.
    RETURNS (Gazetteer): entries tokenized as the corpus is (:func:`tokenize_words`).
    Raises DaptInputError for unreadable files or when no entry is found.
    """
    gazetteer = Gazetteer(ignore_case=ignore_case, tokenize=tokenize_words)
    for path in paths:
        stem = Path(path).stem
        for line in iter_lines(path, max_line_chars=max_line_chars):
            surface, _, types = line.partition("\t")
            if not surface.strip():
                continue
            names = [t.strip() for t in types.split(",") if t.strip()] or [stem]
            gazetteer.add(surface.strip(), names)
    if not gazetteer.entries:
        raise DaptInputError(f"No entity found in {', '.join(map(str, paths))}")
    return gazetteer


@dataclass
class LevelCounts:
    """Sentences and word tokens written to one corpus level."""

    sentences: int = 0
    tokens: int = 0


@dataclass
class SelectionSummary:
    """What ``select_corpus`` read and wrote."""

    lines_read: int
    sentences_read: int
    duplicates_removed: int
    levels: Dict[str, LevelCounts]
    files: Dict[str, str]

    def to_dict(self) -> dict:
        return asdict(self)


def select_corpus(
    *,
    corpus: Union[str, Path],
    entities: Sequence[Union[str, Path]],
    output_dir: Union[str, Path],
    task_types: Optional[Sequence[str]] = None,
    min_entities: int = 2,
    split: bool = True,
    ignore_case: bool = False,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> SelectionSummary:
    """Build the domain-, entity-, task-level and integrated corpora from a raw corpus.

    corpus (Union[str, Path]): UTF-8 raw text, one paragraph or sentence per line.
    entities (Sequence[Union[str, Path]]): entity list files (see the module docstring).
    output_dir (Union[str, Path]): where ``domain.txt``, ``entity.txt``, ``task.txt`` and
        ``integrated.txt`` are written, one sentence per line.
    task_types (Optional[Sequence[str]]): the domain-specialised entity types of the task level;
        None counts every type.
    min_entities (int): mentions a sentence needs to enter the entity level.
    split (bool): split lines into sentences (else a line is a sentence).
    ignore_case (bool): match entities case-insensitively.
    max_line_chars (int): the longest corpus line accepted.
    RETURNS (SelectionSummary): counts per level and the paths written.
    Raises DaptInputError for bad input (empty corpus, unknown task types, bad files...).
    """
    if min_entities < 1:
        raise DaptInputError(f"min_entities must be at least 1, got {min_entities}")
    gazetteer = read_entity_lists(entities, ignore_case=ignore_case, max_line_chars=max_line_chars)
    wanted = None
    if task_types is not None:
        wanted = {t.strip() for t in task_types if t.strip()}
        unknown = sorted(wanted - gazetteer.types)
        if not wanted or unknown:
            raise DaptInputError(
                f"Task types {unknown or sorted(wanted)} do not occur in the entity list; "
                f"its types are {sorted(gazetteer.types)}"
            )
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise DaptInputError(f"The output directory {output_dir} is a file; give a directory path")
    output_dir.mkdir(parents=True, exist_ok=True)
    files = {level: output_dir / f"{level}.txt" for level in LEVELS}
    for level_file in files.values():
        if level_file.exists() and level_file.resolve() == Path(corpus).resolve():
            raise DaptInputError(
                f"{level_file} is the corpus itself: it would be overwritten while read; give "
                "another output directory"
            )
    counts = {level: LevelCounts() for level in LEVELS}
    seen: Set[bytes] = set()
    lines_read = sentences_read = duplicates = 0
    writers = {level: files[level].open("w", encoding="utf8") for level in ("domain", "entity", "task")}
    try:
        for line in iter_lines(corpus, max_line_chars=max_line_chars):
            lines_read += 1
            text = _SPACE.sub(" ", line).strip()
            if not text:
                continue
            for sentence in split_sentences(text) if split else [text]:
                sentences_read += 1
                # An 8-byte digest per sentence keeps memory small on corpora of millions of lines.
                digest = hashlib.blake2b(sentence.encode("utf8"), digest_size=8).digest()
                if digest in seen:
                    duplicates += 1
                    continue
                seen.add(digest)
                tokens = tokenize_words(sentence)
                mentions = gazetteer.match(tokens)
                chosen = ["domain"]
                if len(mentions) >= min_entities:
                    chosen.append("entity")
                if any(wanted is None or (set(types) & wanted) for _, _, types in mentions):
                    chosen.append("task")
                for level in chosen:
                    writers[level].write(sentence + "\n")
                    counts[level].sentences += 1
                    counts[level].tokens += len(tokens)
    finally:
        for writer in writers.values():
            writer.close()
    if sentences_read == 0:
        raise DaptInputError(f"The corpus {corpus} is empty (no non-blank line)")
    with files["integrated"].open("wb") as out:
        for part in ("entity", "task", "task"):
            with files[part].open("rb") as in_:
                shutil.copyfileobj(in_, out)
    counts["integrated"] = LevelCounts(
        sentences=counts["entity"].sentences + 2 * counts["task"].sentences,
        tokens=counts["entity"].tokens + 2 * counts["task"].tokens,
    )
    return SelectionSummary(
        lines_read=lines_read,
        sentences_read=sentences_read,
        duplicates_removed=duplicates,
        levels=counts,
        files={level: str(path) for level, path in files.items()},
    )


def format_selection(summary: SelectionSummary) -> str:
    """A table of the counts, for people."""
    rows = [
        f"Read {summary.lines_read:,} lines, {summary.sentences_read:,} sentences; "
        f"{summary.duplicates_removed:,} duplicate sentences removed.",
        f"{'level':<11} {'sentences':>12} {'tokens':>14}  file",
    ]
    for level in LEVELS:
        c = summary.levels[level]
        rows.append(f"{level:<11} {c.sentences:>12,} {c.tokens:>14,}  {summary.files[level]}")
    return "\n".join(rows)
