"""Reading token/tag column files and turning tag sequences into entity spans.

Pure functions: the only I/O is reading one file. Facts about the formats and their pitfalls are
in ``specs/crossner_benchmark.md`` (sections 1, 5 and 6).

Column files
    One token per line, the token in the first column and the tag in the LAST column (so
    4-column CoNLL files work too), columns separated by tabs or by runs of spaces. Empty trailing
    columns (a trailing tab) are ignored, as conlleval ignores trailing whitespace. An empty line
    (or a line of only whitespace) ends a sentence; a missing final empty line does not lose the
    last sentence. Lines end in ``\\n``, ``\\r\\n`` or a lone ``\\r`` (Python's universal newlines;
    old Mac files); ``\\r`` characters right before a ``\\n`` belong to the line ending.
    Whitespace and control characters around a tag are stripped; a label that still holds a
    control character is an error. ``-DOCSTART-`` lines (any case, any column layout) are
    dropped; they and runs of 2+ empty lines (CrossNER's conll2003) mark document boundaries,
    recorded as ``Sentence.doc_index``.

Separators
    ``auto`` takes the separator of the first token line (tab if it holds a tab, else spaces);
    a later line with the other separator is then an error naming that line. ``tab`` splits on
    tabs only (tokens may hold spaces); ``space`` splits on runs of spaces and tabs.

Tag schemes
    ``O`` or ``PREFIX-LABEL``; labels are case-sensitive and kept verbatim.

    ======  ==================  =====================================
    scheme  prefixes            meaning
    ======  ==================  =====================================
    IOB1    I, B                B- only between two same-type entities
    IOB2    B, I                B- starts every entity
    BIOES   B, I, E, S          E end, S single-token entity
    BILOU   B, I, L, U          L last, U unit (single-token) entity
    BMES    B, M, E, S          M = inside
    ======  ==================  =====================================

    Auto-detection (:func:`detect_scheme`) looks at the prefixes of the whole file: any ``M-`` →
    BMES; any ``L-``/``U-`` → BILOU; any ``E-``/``S-`` → BIOES (mixing these families is an
    error); otherwise IOB1 if some ``I-`` opens a chunk (at a sentence start, after ``O`` or after
    another type) and every ``B-`` directly follows a ``B-``/``I-`` of its own
    type; otherwise IOB2.

Chunks
    Entities are read with conlleval's rules (spec section 6), for every scheme alike (``M`` reads
    as ``I``, ``L`` as ``E``, ``U`` as ``S``): a chunk starts at ``B-``/``S-``, or at a
    continuation tag whose previous tag is ``O``, ``E-``, ``S-`` or of another type; it ends before
    ``B``/``S``/``O``, after ``E``/``S``, or on a type change. Malformed sequences are therefore
    repaired the way conlleval reads them, and each repair is counted by kind
    (:data:`REPAIR_KINDS`).
"""
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

SCHEMES = ("IOB1", "IOB2", "BIOES", "BILOU", "BMES")
SCHEME_PREFIXES: Dict[str, frozenset] = {
    "IOB1": frozenset("IB"),
    "IOB2": frozenset("BI"),
    "BIOES": frozenset("BIES"),
    "BILOU": frozenset("BILU"),
    "BMES": frozenset("BMES"),
}
_SCHEME_ALIASES = {"IOB": "IOB2", "BIO": "IOB2", "IOBES": "BIOES", "BILUO": "BILOU"}
SEPARATORS = ("auto", "tab", "space")
DOCSTART = "-DOCSTART-"
ALL_PREFIXES = frozenset("BIESLUM")
# Every prefix read the conlleval way: M is inside, L is end, U is single.
_CANONICAL = {"B": "B", "I": "I", "E": "E", "S": "S", "M": "I", "L": "E", "U": "S"}

REPAIR_KINDS: Dict[str, str] = {
    "inside_without_begin": "I-/M- opening an entity (sentence start, after O or a closed entity)",
    "end_without_begin": "E-/L- opening an entity (no B- before it)",
    "type_change": "continuation tag of another type inside an entity (entity cut in two)",
    "unclosed": "BIOES/BILOU/BMES entity ending without E-/L- (B- or I- followed by O, B-, S-...)",
}
"""Kinds of malformed tag sequences that are read the conlleval way and counted."""

_TAG_RE = re.compile(r"^([A-Za-z])-(.+)$", re.DOTALL)
_SPACE_SPLIT = re.compile(r"[ \t]+")
# Universal newlines, with any \r run before a \n taken as part of that line ending
# ("B-PER\r\r\n" is one line, as editors show it).
_LINE_END = re.compile(r"\r*\n|\r")


class FormatError(ValueError):
    """A line of an input file cannot be read. The message names the file and the line."""

    def __init__(self, path: Union[str, Path], line: Optional[int], problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class EntitySpan(NamedTuple):
    """An entity over tokens ``start`` to ``end`` (exclusive) with label ``label``."""

    start: int
    end: int
    label: str


@dataclass
class Sentence:
    """One sentence of a column file.

    words (List[str]): the tokens.
    tags (List[str]): the tags as written in the file.
    lines (List[int]): the 1-based line number of each token.
    doc_index (int): index of the document (between -DOCSTART- lines or 2+ empty lines).
    """

    words: List[str]
    tags: List[str]
    lines: List[int]
    doc_index: int = 0


@dataclass
class ColumnFile:
    """The sentences of one column file and how it was read.

    path (Path): the file.
    sep (str): "tab" or "space".
    n_columns (int): number of columns of the token lines (0 if the file has none).
    scheme (str): the tag scheme, given or detected.
    sentences (List[Sentence]): the sentences, in file order.
    n_docstart (int): number of -DOCSTART- lines dropped.
    scheme_given (bool): True when the scheme was given, False when it was detected.
    """

    path: Path
    sep: str
    n_columns: int
    scheme: str
    sentences: List[Sentence] = field(default_factory=list)
    n_docstart: int = 0
    scheme_given: bool = False

    @property
    def n_documents(self) -> int:
        return len({s.doc_index for s in self.sentences})

    @property
    def n_tokens(self) -> int:
        return sum(len(s.words) for s in self.sentences)


def normalize_scheme(scheme: str) -> str:
    """The canonical name of a scheme ("auto" or one of :data:`SCHEMES`), case-insensitive.

    scheme (str): e.g. "iob2", "BIOES", "iobes", "auto".
    RETURNS (str): "auto" or an element of SCHEMES. Raises ValueError on an unknown name.
    """
    name = scheme.strip().upper()
    name = _SCHEME_ALIASES.get(name, name)
    if name == "AUTO":
        return "auto"
    if name not in SCHEMES:
        raise ValueError(
            f"Unknown tag scheme '{scheme}': use auto, {', '.join(SCHEMES)}"
        )
    return name


def normalize_sep(sep: str) -> str:
    """The canonical separator name: "auto", "tab" or "space" (also accepts "\\t" and " ")."""
    name = {"\t": "tab", "\\t": "tab", " ": "space"}.get(sep, sep.strip().lower())
    if name not in SEPARATORS:
        raise ValueError(f"Unknown column separator '{sep}': use auto, tab or space")
    return name


def split_tag(tag: str) -> Tuple[str, str]:
    """Split a tag into (prefix, label): "B-PER" → ("B", "PER"), "O" → ("O", "").

    Only the first hyphen separates, so labels may contain hyphens. Raises ValueError when the
    tag is neither "O" nor a one-letter prefix, a hyphen and a non-empty label.
    """
    if tag == "O":
        return "O", ""
    match = _TAG_RE.match(tag)
    if match is None:
        raise ValueError(f"'{tag}' is not a tag: expected O or PREFIX-LABEL such as B-person")
    return match.group(1), match.group(2)


def read_utf8(path: Union[str, Path]) -> str:
    """The text of a UTF-8 file (a leading BOM dropped). Raises FormatError naming the file and
    line of the first byte that is not UTF-8."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        prefix = data[: err.start].decode("utf-8", errors="replace")
        line = len(_LINE_END.findall(prefix)) + 1
        raise FormatError(
            path, line, f"not valid UTF-8 (byte 0x{data[err.start]:02x}); save the file as UTF-8"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def split_lines(text: str) -> List[str]:
    """The lines of a text, ending in ``\\n``, ``\\r\\n`` or a lone ``\\r`` (universal newlines;
    ``\\r`` runs before a ``\\n`` are part of the line ending). A final line ending does not make
    an extra empty line."""
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _is_blank_char(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf")


def strip_controls(text: str) -> str:
    """``text`` without whitespace and control/format characters (``\\v``, ``\\r``, NUL, BOM,
    zero-width space ...) at either end."""
    start, end = 0, len(text)
    while start < end and _is_blank_char(text[start]):
        start += 1
    while end > start and _is_blank_char(text[end - 1]):
        end -= 1
    return text[start:end]


def _control_chars(text: str) -> List[str]:
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf")]


def is_docstart(first_field: str) -> bool:
    """True for a ``-DOCSTART-`` marker, in any case (some corpora write ``-docstart-``)."""
    return first_field.upper() == DOCSTART


def _split_fields(line: str, sep: str) -> List[str]:
    if sep == "tab":
        fields = [f.strip(" ") for f in line.split("\t")]
    elif line[0] in " \t":
        fields = [""] + _SPACE_SPLIT.split(line.strip(" \t"))
    else:
        fields = _SPACE_SPLIT.split(line.rstrip(" \t"))
    # empty trailing columns (a trailing tab, a "\v" after the tag) are ignored, as by conlleval
    while len(fields) > 1 and not strip_controls(fields[-1]):
        fields.pop()
    return fields


def _strip_ascii(line: str) -> str:
    # ASCII whitespace only: a token that is a no-break space keeps the tab after it.
    return line.strip(" \t\n\r\v\f")


def _detect_sep(lines: Sequence[str]) -> Tuple[str, Optional[int]]:
    """The separator of the first token line (not -DOCSTART-) and that line's number."""
    for line_no, line in enumerate(lines, start=1):
        fields = line.split(maxsplit=1)
        if not fields or is_docstart(fields[0]):
            continue
        return ("tab" if "\t" in _strip_ascii(line) else "space"), line_no
    return "space", None


def _found_sep(line: str) -> str:
    body = strip_controls(line)
    if "\t" in body:
        return "a tab"
    if " " in body:
        return "spaces but no tab"
    return "no separator"


def read_column_file(
    path: Union[str, Path], *, sep: str = "auto", scheme: str = "auto"
) -> ColumnFile:
    """Read a token/tag column file.

    path (Union[str, Path]): the file, UTF-8 (a leading BOM is ignored).
    sep (str): "tab", "space" (runs of spaces or tabs) or "auto" (the first token line's: tab
        if it has a tab, else spaces; a later line with the other separator is an error).
    scheme (str): one of SCHEMES or "auto" (see :func:`detect_scheme`).
    RETURNS (ColumnFile): the sentences with their tags as written; every tag is checked against
        the scheme. Raises FormatError (a ValueError) naming the file and line of the first
        unreadable line: wrong number of columns, the other separator (auto), empty token, a
        tag not of the scheme, or a label holding a control character.
    """
    path = Path(path)
    sep = normalize_sep(sep)
    scheme = normalize_scheme(scheme)
    text = read_utf8(path)
    raw_lines = split_lines(text)
    sep_detected = sep == "auto"
    if sep_detected:
        sep, sep_line = _detect_sep(raw_lines)
    sentences: List[Sentence] = []
    n_columns = 0
    n_docstart = 0
    doc_index = 0
    doc_break = False  # a boundary was seen since the last sentence
    empty_run = 0
    words: List[str] = []
    tags: List[str] = []
    lines: List[int] = []

    def flush() -> None:
        nonlocal words, tags, lines
        if words:
            sentences.append(Sentence(words, tags, lines, doc_index))
            words, tags, lines = [], [], []

    for line_no, line in enumerate(raw_lines, start=1):
        if not strip_controls(line):
            flush()
            empty_run += 1
            if empty_run >= 2:
                doc_break = True
            continue
        empty_run = 0
        # whatever the separator: MC writes "-DOCSTART- O" into files read as tab-separated
        if is_docstart(line.split(maxsplit=1)[0]):
            flush()
            n_docstart += 1
            doc_break = True
            continue
        if sep_detected and sep == "space" and "\t" in _strip_ascii(line):
            raise FormatError(
                path, line_no,
                f"this line is tab-separated but the first token line (line {sep_line}) is "
                f"space-separated: {line!r}; use one separator throughout, or give the "
                "separator option (space: runs of spaces and tabs; tab: tabs only)",
            )
        fields = _split_fields(line, sep)
        if n_columns == 0:
            n_columns = len(fields)
            if n_columns < 2:
                raise FormatError(
                    path, line_no,
                    f"found 1 column ({line.strip()!r}) but a token and a tag are needed; "
                    f"the file was read as {sep}-separated (see the separator option)",
                )
        elif len(fields) != n_columns:
            raise FormatError(
                path, line_no,
                f"expected {n_columns} {sep}-separated columns like the first token line, "
                f"found {len(fields)} (the line has {_found_sep(line)}): {line!r}",
            )
        if not fields[0]:
            raise FormatError(path, line_no, f"empty token: {line!r}")
        if not words and doc_break:
            if sentences:
                doc_index += 1
            doc_break = False
        words.append(fields[0])
        tags.append(strip_controls(fields[-1]))
        lines.append(line_no)
    flush()
    result = ColumnFile(path, sep, n_columns, scheme, sentences, n_docstart,
                        scheme_given=scheme != "auto")
    _check_tags(result)
    return result


def _check_tags(column_file: ColumnFile) -> None:
    """Check tag syntax, detect the scheme when "auto", and check the prefixes against it."""
    path = column_file.path
    for sent in column_file.sentences:
        for tag, line_no in zip(sent.tags, sent.lines):
            try:
                prefix, _ = split_tag(tag)
            except ValueError as err:
                raise FormatError(path, line_no, str(err)) from None
            controls = _control_chars(tag)
            if controls:
                raise FormatError(
                    path, line_no,
                    f"the tag {tag!r} holds the control character {controls[0]!r}; remove it "
                    "(control characters around a tag are stripped, inside a label they are "
                    "an error)",
                )
            if prefix != "O" and prefix not in ALL_PREFIXES:
                raise FormatError(
                    path, line_no,
                    f"tag '{tag}' has the prefix '{prefix}', which no scheme uses "
                    f"(prefixes are upper-case: B, I, E, S, L, U, M)",
                )
    if column_file.scheme == "auto":
        try:
            column_file.scheme = detect_scheme(s.tags for s in column_file.sentences)
        except ValueError as err:
            raise FormatError(path, None, str(err)) from None
    allowed = SCHEME_PREFIXES[column_file.scheme]
    for sent in column_file.sentences:
        for tag, line_no in zip(sent.tags, sent.lines):
            if tag != "O" and tag[0] not in allowed:
                raise FormatError(
                    path, line_no,
                    f"tag '{tag}' is not a {column_file.scheme} tag (O or "
                    f"{'/'.join(sorted(allowed))}-LABEL); " + (
                        f"the file does not follow the scheme given ({column_file.scheme}): "
                        "fix the tag, or give the scheme the file uses (or auto)"
                        if column_file.scheme_given else
                        f"the scheme was detected as {column_file.scheme} from the whole file; "
                        "choose the tag scheme explicitly if the detected one is wrong"
                    ),
                )


def detect_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """Guess the tag scheme of a file from all its tag sequences (one per sentence).

    Rule: any M- → BMES; any L-/U- → BILOU; any E-/S- → BIOES (two of these families together
    raise ValueError); else IOB1 when some I- opens a chunk and every B- directly follows a B-/I-
    of its own type; else IOB2 (also for a file with only O tags).
    RETURNS (str): an element of SCHEMES.
    """
    prefixes = set()
    i_opens = False
    b_outside_runs = False
    for tags in tag_sequences:
        prev_prefix, prev_label = "O", ""
        for tag in tags:
            prefix, label = split_tag(tag)
            prefixes.add(prefix)
            same_type_run = prev_prefix in ("B", "I") and prev_label == label
            if prefix == "I" and not same_type_run:
                i_opens = True
            elif prefix == "B" and not same_type_run:
                b_outside_runs = True
            prev_prefix, prev_label = prefix, label
    families = []
    if "M" in prefixes:
        families.append("BMES")
    if prefixes & {"L", "U"}:
        families.append("BILOU")
    if prefixes & {"E", "S"} and "M" not in prefixes:
        families.append("BIOES")
    if len(families) > 1:
        raise ValueError(
            f"cannot detect the tag scheme: the prefixes {', '.join(sorted(prefixes - {'O'}))} "
            f"mix {' and '.join(families)}; choose the scheme explicitly"
        )
    if families:
        return families[0]
    if i_opens and not b_outside_runs:
        return "IOB1"
    return "IOB2"


def conlleval_chunks(tags: Sequence[str]) -> List[EntitySpan]:
    """The entities of a tag sequence, read with conlleval's rules (any scheme, no checks).

    tags (Sequence[str]): tags such as "B-PER", "I-PER", "E-PER", "S-PER", "L-", "U-", "M-", "O".
        Pass one sentence, or several concatenated to score a stream without sentence breaks.
    RETURNS (List[EntitySpan]): (start, end exclusive, label), in order, never overlapping.
    """
    return _read_chunks(tags, "IOB2")[0]


def tags_to_spans(
    tags: Sequence[str], scheme: str = "IOB2"
) -> Tuple[List[EntitySpan], Counter]:
    """The entities of a tag sequence and the repairs conlleval's reading made.

    tags (Sequence[str]): one sentence's tags.
    scheme (str): the scheme the tags claim to follow (decides what counts as a repair: an I-
        opening an entity is normal in IOB1 and a repair elsewhere).
    RETURNS (Tuple[List[EntitySpan], Counter]): the entities, and repairs counted per kind of
        :data:`REPAIR_KINDS`. The entities are the same for every scheme.
    """
    return _read_chunks(tags, normalize_scheme(scheme))


def _read_chunks(tags: Sequence[str], scheme: str) -> Tuple[List[EntitySpan], Counter]:
    spans: List[EntitySpan] = []
    repairs: Counter = Counter()
    closing_scheme = scheme in ("BIOES", "BILOU", "BMES")
    start: Optional[int] = None
    chunk_label = ""
    prev, prev_label = "O", ""
    for i, tag in enumerate(tags):
        raw_prefix, label = split_tag(tag)
        prefix = _CANONICAL.get(raw_prefix, "O")
        # conlleval's endOfChunk
        if start is not None and (
            prev in ("E", "S")
            or prefix in ("B", "S", "O")
            or prev_label != label
        ):
            if closing_scheme and prev in ("B", "I"):
                repairs["unclosed"] += 1
            spans.append(EntitySpan(start, i, chunk_label))
            start = None
        # conlleval's startOfChunk
        if prefix != "O" and start is None:
            if prefix in ("I", "E"):
                if prev in ("B", "I") and prev_label != label:
                    repairs["type_change"] += 1
                elif prefix == "E":
                    repairs["end_without_begin"] += 1
                elif scheme != "IOB1":
                    repairs["inside_without_begin"] += 1
            start, chunk_label = i, label
        prev, prev_label = prefix, label
    if start is not None:
        if closing_scheme and prev in ("B", "I"):
            repairs["unclosed"] += 1
        spans.append(EntitySpan(start, len(tags), chunk_label))
    return spans, repairs


def spans_to_tags(
    spans: Iterable[Tuple[int, int, str]], length: int, scheme: str = "IOB2"
) -> List[str]:
    """Write entities as tags.

    spans (Iterable[Tuple[int, int, str]]): (start, end exclusive, label), not overlapping.
    length (int): number of tokens.
    scheme (str): "IOB2" (default), "BIOES" or "BILOU".
    RETURNS (List[str]): one tag per token, "O" outside entities.
    """
    scheme = normalize_scheme(scheme)
    if scheme not in ("IOB2", "BIOES", "BILOU"):
        raise ValueError(f"spans_to_tags writes IOB2, BIOES or BILOU, not {scheme}")
    last, single = ("E", "S") if scheme == "BIOES" else ("L", "U")
    tags = ["O"] * length
    for start, end, label in spans:
        if not 0 <= start < end <= length:
            raise ValueError(f"entity ({start}, {end}, {label}) is outside 0..{length}")
        if any(t != "O" for t in tags[start:end]):
            raise ValueError(f"entity ({start}, {end}, {label}) overlaps another one")
        for i in range(start, end):
            tags[i] = f"I-{label}"
        tags[start] = f"B-{label}"
        if scheme != "IOB2":
            if end - start == 1:
                tags[start] = f"{single}-{label}"
            else:
                tags[end - 1] = f"{last}-{label}"
    return tags


def spans_to_iob2(spans: Iterable[Tuple[int, int, str]], length: int) -> List[str]:
    """Write entities as IOB2 tags (see :func:`spans_to_tags`)."""
    return spans_to_tags(spans, length, "IOB2")
