"""Convert token/tag column files to spaCy DocBins, and build raw-text corpora.

``convert`` writes one ``.spacy`` file per input file, every Doc tagged with its domain
(``doc._.domain``, kept by ``DocBin(store_user_data=True)``) and with entities read the conlleval
way (see :mod:`spacy_crossner.formats`). ``write_raw_text`` writes sentences without entities,
for language-model objectives and domain-adaptive pre-training (DAPT).

Which files of a directory are read (not recursively): regular, non-hidden files whose suffix
is one of :data:`DATA_SUFFIXES` (``.txt .tsv .conll .bio .iob .iob1 .iob2 .bioes .iobes .bilou
.bmes .ner .train .dev .test .eval``), except README*/LICENSE*/NOTICE* files. A file named on the
command line is always read, whatever its name. Every file of a directory that is not read is
listed in the summary (``ConvertSummary.skipped``) with the reason.

Output names: a file whose suffix is a data suffix other than a split name loses it
(``train.txt`` → ``train.spacy``); any other name is kept whole (``broad_twitter_BIOES.eval`` →
``broad_twitter_BIOES.eval.spacy``, ``tech.test.reannotated`` → ``tech.test.reannotated.spacy``).
Two inputs that would write the same output are an error.

An input without a single token line (empty or blank) is converted to an empty ``.spacy`` file
with a warning (``ConvertSummary.warnings``), or is an error with ``strict``.
"""
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import srsly
from spacy.tokens import Doc, DocBin, Span
from spacy.vocab import Vocab

from .domains import set_domain
from .formats import (
    REPAIR_KINDS,
    ColumnFile,
    FormatError,
    Sentence,
    is_docstart,
    normalize_scheme,
    normalize_sep,
    read_column_file,
    read_utf8,
    split_lines,
    split_tag,
    strip_controls,
    tags_to_spans,
)
from .labels import load_label_map, map_label

DATA_SUFFIXES = frozenset(
    ".txt .tsv .conll .bio .iob .iob1 .iob2 .bioes .iobes .bilou .bmes .ner "
    ".train .dev .test .eval".split()
)
SPLIT_SUFFIXES = frozenset(".train .dev .test .eval".split())
_SKIPPED_PREFIXES = ("readme", "license", "licence", "notice")
RAW_FORMATS = ("txt", "spacy")
PROGRESS_MIN_TOKENS = 50_000
RAW_INPUT_FORMATS = ("auto", "columns", "text")


class ConversionError(ValueError):
    """A user error: a missing input, a bad option, outputs that would collide."""


@dataclass
class FileSummary:
    """What ``convert`` read from one input file and wrote.

    input_path (Path), output_path (Path): the files.
    domain (str): the domain every Doc was tagged with.
    scheme (str), sep (str): the tag scheme and column separator used (given or detected).
    sentences (int), tokens (int), documents (int): counts in the input (documents: between
        -DOCSTART- lines or 2+ empty lines).
    docs (int): Docs written (sentences, or documents with ``by_document``).
    entities (Counter): entities per label.
    repairs (Counter): malformed sequences read the conlleval way, per kind (formats.REPAIR_KINDS).
    """

    input_path: Path
    output_path: Path
    domain: str
    scheme: str
    sep: str
    sentences: int = 0
    tokens: int = 0
    documents: int = 0
    docs: int = 0
    entities: Counter = field(default_factory=Counter)
    repairs: Counter = field(default_factory=Counter)

    @property
    def n_entities(self) -> int:
        return sum(self.entities.values())

    @property
    def n_repairs(self) -> int:
        return sum(self.repairs.values())


@dataclass
class ConvertSummary:
    """The summaries of all files of one ``convert`` call, in input order.

    files (List[FileSummary]): per converted file.
    skipped (List[Tuple[Path, str]]): files of an input directory not read, with the reason.
    warnings (List[str]): problems that did not stop the conversion (empty inputs, label-map
        entries that matched no label).
    label_map (Optional[Dict[str, str]]): the label map applied.
    """

    files: List[FileSummary] = field(default_factory=list)
    skipped: List[Tuple[Path, str]] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    label_map: Optional[Dict[str, str]] = None

    def __getitem__(self, name: str) -> FileSummary:
        """The summary of the input file with this name (e.g. "train.txt") or stem ("train")."""
        for item in self.files:
            if name in (item.input_path.name, item.input_path.stem):
                return item
        raise KeyError(name)


@dataclass
class RawTextSummary:
    """What ``write_raw_text`` read and wrote.

    output_path (Path): the written file.
    sentences (int), tokens (int): written; tokens as a reader of the output sees them (in a
        txt output a token holding spaces is written as, and counted as, its parts).
    split_tokens (int): tokens holding whitespace, written as several tokens (txt output).
    warnings (List[str]): inputs without a sentence.
    skipped (List[Tuple[Path, str]]): files of input directories not read, with the reason.
    empty_lines (int): empty lines of plain-text inputs, skipped.
    duplicates (int): sentences dropped by ``dedup`` (0 without it).
    per_input (dict): input path → sentences read from it.
    """

    output_path: Path
    sentences: int = 0
    tokens: int = 0
    empty_lines: int = 0
    duplicates: int = 0
    split_tokens: int = 0
    per_input: dict = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    skipped: List[Tuple[Path, str]] = field(default_factory=list)


def scan_directory(directory: Union[str, Path]) -> Tuple[List[Path], List[Tuple[Path, str]]]:
    """The data files of a directory and the entries not read, sorted by name.

    RETURNS (Tuple[List[Path], List[Tuple[Path, str]]]): the data files (rule in the module
        docstring), and every other entry with the reason it is skipped.
    """
    directory = Path(directory)
    found: List[Path] = []
    skipped: List[Tuple[Path, str]] = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.startswith("."):
            skipped.append((path, "hidden"))
        elif not path.is_file():
            skipped.append((path, "a directory (not searched)" if path.is_dir() else "not a file"))
        elif name.lower().startswith(_SKIPPED_PREFIXES):
            skipped.append((path, "documentation (README/LICENSE/NOTICE)"))
        elif path.suffix.lower() in DATA_SUFFIXES:
            found.append(path)
        else:
            skipped.append((
                path, f"unrecognised suffix '{path.suffix}'" if path.suffix else "no suffix"
            ))
    return found, skipped


def list_data_files(directory: Union[str, Path]) -> List[Path]:
    """The data files of a directory, sorted by name (rule in the module docstring)."""
    return scan_directory(directory)[0]


def _resolve_inputs(input_path: Path) -> Tuple[List[Path], List[Tuple[Path, str]]]:
    if not input_path.exists():
        raise ConversionError(f"Input not found: {input_path}")
    if input_path.is_dir():
        files, skipped = scan_directory(input_path)
        if not files:
            listed = "; ".join(f"{p.name} ({why})" for p, why in skipped) or "it is empty"
            raise ConversionError(
                f"No data files in {input_path} (looked for non-hidden files named "
                f"*{' *'.join(sorted(DATA_SUFFIXES))}; subdirectories are not searched; "
                f"skipped: {listed}). Name a file directly to convert it whatever its name"
            )
        return files, skipped
    if input_path.suffix == ".spacy":
        raise ConversionError(
            f"{input_path} is a .spacy DocBin, already converted: use it with spacy train or "
            "evaluate as it is (convert reads token/tag column files)"
        )
    return [input_path], []


def output_name(input_path: Path) -> str:
    """The name of the DocBin written for an input file (rule in the module docstring)."""
    suffix = input_path.suffix.lower()
    if suffix in DATA_SUFFIXES and suffix not in SPLIT_SUFFIXES:
        return input_path.stem + ".spacy"
    return input_path.name + ".spacy"


def _make_doc(
    vocab: Vocab, sentences: Sequence[Sentence], scheme: str, mark_sents: bool = False,
    label_map: Optional[Dict[str, str]] = None,
):
    words: List[str] = []
    sent_starts: List[bool] = []
    spans = []
    repairs: Counter = Counter()
    for sent in sentences:
        offset = len(words)
        sent_spans, sent_repairs = tags_to_spans(sent.tags, scheme)
        repairs.update(sent_repairs)
        spans.extend(
            (s + offset, e + offset, map_label(label, label_map)) for s, e, label in sent_spans
        )
        words.extend(sent.words)
        sent_starts.extend([True] + [False] * (len(sent.words) - 1))
    spaces = [True] * len(words)
    spaces[-1] = False
    if mark_sents:
        doc = Doc(vocab, words=words, spaces=spaces, sent_starts=sent_starts)
    else:
        doc = Doc(vocab, words=words, spaces=spaces)
    doc.set_ents([Span(doc, s, e, label=label) for s, e, label in spans], default="outside")
    return doc, spans, repairs


def _add_doc(doc_bin: DocBin, doc: Doc, packed: dict) -> None:
    """``doc_bin.add(doc)``, packing equal user data once.

    DocBin.add packs each doc's user data with srsly, whose packer looks up entry points on
    every call (about 1 ms per doc); here every doc carries the same few user-data entries.
    """
    key = repr(list(doc.user_data.items()))
    if key not in packed:
        packed[key] = srsly.msgpack_dumps(doc.user_data)
    store = doc_bin.store_user_data
    doc_bin.store_user_data = False
    try:
        doc_bin.add(doc)
    finally:
        doc_bin.store_user_data = store
    if store:
        doc_bin.user_data.append(packed[key])


def _group_sentences(column_file: ColumnFile, by_document: bool) -> List[List[Sentence]]:
    if not by_document:
        return [[s] for s in column_file.sentences]
    groups: List[List[Sentence]] = []
    current = None
    for sent in column_file.sentences:
        if current is None or sent.doc_index != current:
            groups.append([])
            current = sent.doc_index
        groups[-1].append(sent)
    return groups


def column_file_to_docs(
    column_file: ColumnFile,
    vocab: Vocab,
    *,
    domain: Optional[str],
    by_document: bool = False,
    summary: Optional[FileSummary] = None,
    label_map: Optional[Dict[str, str]] = None,
) -> Iterator[Doc]:
    """The Docs of a column file read with :func:`formats.read_column_file`.

    column_file (ColumnFile): the sentences and the scheme.
    vocab (Vocab): the vocab of the Docs.
    domain (Optional[str]): the ``doc._.domain`` of every Doc.
    by_document (bool): one Doc per document instead of one per sentence.
    summary (Optional[FileSummary]): if given, docs, entities per label and repairs are added
        to it as Docs are made.
    label_map (Optional[Dict[str, str]]): entity labels renamed (others kept), see
        :mod:`spacy_crossner.labels`.
    YIELDS (Doc): Docs with words, single spaces, every token's entity annotation (O outside
        entities) and, for documents, sentence starts.
    """
    for group in _group_sentences(column_file, by_document):
        _check_entity_edges(column_file, group)
        doc, spans, repairs = _make_doc(
            vocab, group, column_file.scheme, by_document, label_map
        )
        set_domain(doc, domain)
        if summary is not None:
            summary.docs += 1
            summary.entities.update(label for _, _, label in spans)
            summary.repairs.update(repairs)
        yield doc


def _check_entity_edges(column_file: ColumnFile, sentences: Sequence[Sentence]) -> None:
    """An entity may not begin or end on a token that is only whitespace (a no-break space read
    as a token of a tab-separated file): no model can predict an entity edge there, so the gold
    entity would be counted as missed by every model."""
    for sent in sentences:
        spans, _ = tags_to_spans(sent.tags, column_file.scheme)
        for start, end, label in spans:
            for i in (start, end - 1):
                if not strip_controls(sent.words[i]):
                    raise FormatError(
                        column_file.path, sent.lines[i],
                        f"the entity {label!r} {'begins' if i == start else 'ends'} on the token "
                        f"{sent.words[i]!r}, which is only whitespace; no model can predict an "
                        "entity edge there: tag it O or move the entity's edge to a word",
                    )


def _write_column_file(
    column_file: ColumnFile,
    output_path: Path,
    *,
    domain: str,
    by_document: bool,
    vocab: Vocab,
    progress=None,
    label_map: Optional[Dict[str, str]] = None,
) -> FileSummary:
    summary = FileSummary(
        column_file.path, output_path, domain, column_file.scheme, column_file.sep,
        sentences=len(column_file.sentences), tokens=column_file.n_tokens,
        documents=column_file.n_documents,
    )
    doc_bin = DocBin(store_user_data=True)
    packed: dict = {}
    docs = column_file_to_docs(
        column_file, vocab, domain=domain, by_document=by_document, summary=summary,
        label_map=label_map,
    )
    for doc in docs:
        _add_doc(doc_bin, doc, packed)
        if progress is not None:
            progress.update(len(doc))
    output_path.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output_path)
    return summary


def convert(
    input_path: Union[str, Path],
    output_dir: Union[str, Path],
    *,
    domain: Optional[str] = None,
    scheme: str = "auto",
    sep: str = "auto",
    by_document: bool = False,
    show_progress: bool = False,
    label_map: Optional[Union[str, Path, Dict[str, str]]] = None,
    strict: bool = False,
) -> ConvertSummary:
    """Convert a column file, or every data file of a directory, to ``.spacy`` DocBins.

    input_path (Union[str, Path]): a file (read whatever its name) or a directory (its data
        files, see the module docstring).
    output_dir (Union[str, Path]): where the DocBins go (created if missing), one per input file.
    domain (Optional[str]): the ``doc._.domain`` of every Doc; default: the directory's name for
        a directory, the parent directory's name for a file.
    scheme (str): "auto" or IOB1, IOB2, BIOES, BILOU, BMES (case-insensitive); "auto" detects
        it per file (formats.detect_scheme).
    sep (str): "auto" (per file: tab if any line has a tab), "tab" or "space".
    by_document (bool): one Doc per document (sentences between -DOCSTART- lines or runs of 2+
        empty lines, with sentence starts set) instead of one Doc per sentence.
    show_progress (bool): show a progress bar (on stderr) over the tokens, for inputs of
        PROGRESS_MIN_TOKENS tokens or more.
    label_map (Optional[Union[str, Path, Dict[str, str]]]): rename entity labels: a JSON
        file, inline JSON or a dict ({"PER": "person"}); labels not in it are kept. Entries that
        match no label of the inputs are reported in ``warnings``.
    strict (bool): an input without a single token line is an error (default: a warning, and
        an empty ``.spacy`` file is written).
    RETURNS (ConvertSummary): per-file counts, skipped files, warnings. Raises ConversionError or FormatError (both
        ValueError) on user errors; every input is read and checked before anything is written.
    """
    input_path, output_dir = Path(input_path), Path(output_dir)
    try:
        scheme = normalize_scheme(scheme)
        sep = normalize_sep(sep)
    except ValueError as err:
        raise ConversionError(str(err)) from None
    label_map = load_label_map(label_map)
    inputs, skipped = _resolve_inputs(input_path)
    if domain is None:
        source = input_path if input_path.is_dir() else input_path.parent
        domain = source.resolve().name
    if not domain or not domain.strip():
        raise ConversionError("The domain name is empty; give one with --domain")
    targets = {}
    for path in inputs:
        out = output_dir / output_name(path)
        if out in targets:
            raise ConversionError(
                f"{targets[out].name} and {path.name} would both be written to {out}; "
                "convert them separately"
            )
        targets[out] = path
    if output_dir.exists() and not output_dir.is_dir():
        raise ConversionError(f"The output directory {output_dir} is a file")
    column_files = [
        (out, read_column_file(path, sep=sep, scheme=scheme)) for out, path in targets.items()
    ]
    warnings: List[str] = []
    for _, column_file in column_files:
        if not column_file.sentences:
            problem = (
                f"{column_file.path} has no token lines (the file is empty or blank)"
            )
            if strict:
                raise ConversionError(f"{problem}; --strict makes this an error")
            warnings.append(f"{problem}: its .spacy file holds no docs")
    progress = None
    total = sum(cf.n_tokens for _, cf in column_files)
    if show_progress and total >= PROGRESS_MIN_TOKENS:
        from tqdm import tqdm

        progress = tqdm(total=total, desc="Converting", unit=" tokens", leave=False,
                        mininterval=0.5)
    vocab = Vocab()
    summary = ConvertSummary(skipped=skipped, warnings=warnings, label_map=label_map)
    try:
        for out, column_file in column_files:
            summary.files.append(
                _write_column_file(
                    column_file, out, domain=domain, by_document=by_document, vocab=vocab,
                    progress=progress, label_map=label_map,
                )
            )
    finally:
        if progress is not None:
            progress.close()
    if label_map:
        seen = {
            sent_label for _, cf in column_files for sent in cf.sentences
            for sent_label in (split_tag(t)[1] for t in sent.tags) if sent_label
        }
        unused = sorted(set(label_map) - seen)
        if unused:
            # Scoped to the whole call: an entry that matches a label of any file converted
            # here is used; a map shared with data sets converted in other calls may leave
            # entries unused on purpose, which the message says.
            n = len(column_files)
            summary.warnings.append(
                f"--label-map entries matched no label of the {n} file{'s' if n != 1 else ''} "
                f"converted in this call: {', '.join(unused)} (labels found: "
                f"{', '.join(sorted(seen)) or 'none'}); check their spelling, or ignore this "
                "if the map is shared with other data sets"
            )
    summary.warnings.extend(identical_files_warnings([cf for _, cf in column_files]))
    return summary


def identical_files_warnings(column_files: List[ColumnFile]) -> List[str]:
    """A warning for each group of files with the same sentences (tokens and tags), e.g. a
    data set that ships its test set as its dev set: early stopping on such a dev set selects
    the model on the test set."""
    groups: Dict[Tuple, List[ColumnFile]] = {}
    for cf in column_files:
        if cf.sentences:
            content = tuple((tuple(s.words), tuple(s.tags)) for s in cf.sentences)
            groups.setdefault(content, []).append(cf)
    warnings = []
    for same in groups.values():
        if len(same) > 1:
            names = " and ".join(str(cf.path) for cf in same)
            warnings.append(
                f"{names} hold the same {len(same[0].sentences):,} sentences: used as dev and "
                "test sets, early stopping on dev selects the model on the test set, and its "
                "test score is not held out; split a dev set off the training data instead"
            )
    return warnings


def summary_table(summary: ConvertSummary) -> str:
    """The summary as plain-text tables: counts per file, entities per label, repairs."""
    from wasabi import table

    rows = []
    for f in summary.files:
        rows.append((
            f.input_path.name, f.output_path.name, f.domain, f.scheme, f.sep,
            f"{f.sentences:,}", f"{f.tokens:,}", f"{f.docs:,}", f"{f.n_entities:,}",
            f"{f.n_repairs:,}",
        ))
    header = ("input", "output", "domain", "scheme", "sep", "sentences", "tokens", "docs",
              "entities", "repairs")
    parts = [table(rows, header=header, divider=True,
                   aligns=("l", "l", "l", "l", "l", "r", "r", "r", "r", "r"))]
    labels = sorted({label for f in summary.files for label in f.entities})
    if labels:
        names = [f.input_path.name for f in summary.files]
        label_rows = [
            (label, *(f"{f.entities[label]:,}" for f in summary.files)) for label in labels
        ]
        parts.append(table(label_rows, header=("entities", *names), divider=True,
                           aligns=("l", *("r" for _ in names))))
    kinds = [k for k in REPAIR_KINDS if any(f.repairs[k] for f in summary.files)]
    if kinds:
        names = [f.input_path.name for f in summary.files]
        repair_rows = [
            (k, *(f"{f.repairs[k]:,}" for f in summary.files), REPAIR_KINDS[k]) for k in kinds
        ]
        parts.append(table(repair_rows, header=("repairs (conlleval)", *names, "meaning"),
                           divider=True))
    if summary.label_map:
        parts.append(table(sorted(summary.label_map.items()), header=("label in data", "written as"),
                           divider=True))
    if summary.skipped:
        parts.append(table([(p.name, why) for p, why in summary.skipped],
                           header=("skipped (not converted)", "why"), divider=True))
    return "\n".join(parts)


def _looks_like_columns(path: Path) -> bool:
    """True when every non-empty line has 2+ fields and ends in a tag (or is -DOCSTART-)."""
    return looks_like_columns(read_utf8(path))


def looks_like_columns(text: str) -> bool:
    """True when every non-empty line of ``text`` has 2+ fields and its last field is a tag (O or
    PREFIX-LABEL), or is -DOCSTART-: a token/tag column file rather than plain text."""
    seen = False
    for line in split_lines(text):
        fields = line.split()
        if not fields:
            continue
        if is_docstart(fields[0]):
            continue
        if len(fields) < 2:
            return False
        try:
            split_tag(strip_controls(fields[-1]))
        except ValueError:
            return False
        seen = True
    return seen


def _check_raw_output(output: Path, fmt: str, files: Sequence[Path]) -> None:
    """The output is a file path that is none of the inputs, named for what is written (the
    readers tell raw text from a DocBin by the suffix)."""
    if output.is_dir():
        raise ConversionError(f"Output {output} is a folder: give the path of the file to write")
    if output.exists() and any(output.resolve() == Path(f).resolve() for f in files):
        raise ConversionError(
            f"Output {output} is also an input: writing it would replace that input before it "
            "is read; give another output path"
        )
    if fmt == "spacy" and output.suffix != ".spacy":
        raise ConversionError(
            f"Output {output}: --format spacy writes a DocBin; name it .spacy (a {output.suffix or 'suffix-less'} "
            "file is read as raw text by the readers)"
        )


def _column_line(line: str) -> bool:
    """True for a line that reads as one token and its tag: a tab before an O or PREFIX-LABEL
    tag, or two fields the second of which is a PREFIX-LABEL tag ("Alice B-person")."""
    fields = line.split()
    if len(fields) < 2:
        return False
    try:
        prefix, _ = split_tag(strip_controls(fields[-1]))
    except ValueError:
        return False
    return "\t" in line.strip() or (len(fields) == 2 and prefix != "O")


def _check_not_mixed(path: Path) -> None:
    """A file read as plain text must not hold token/tag lines: their tags would be written as
    words of the raw text."""
    lines = split_lines(read_utf8(path))
    columns = [n for n, line in enumerate(lines, 1) if _column_line(line)]
    # one space-separated "word B-xx" line may be text ("see B-52"); a tab or a second one is not
    if not columns or (len(columns) == 1 and "\t" not in lines[columns[0] - 1].strip()):
        return
    column = columns[0]
    plain = next(
        (n for n, line in enumerate(lines, 1)
         if line.split() and not is_docstart(line.split()[0]) and not _column_line(line)),
        None,
    )
    raise ConversionError(
        f"{path}, line {column} is a token/tag line ({lines[column - 1][:60]!r}) but line {plain} "
        f"is not ({lines[plain - 1][:60]!r}), so the file is neither a column file nor plain text; "
        "fix the file, or pass --input-format columns (tags dropped) or --input-format text "
        "(every field kept as a word)"
    )


def _read_plain_text(path: Path):
    lines = split_lines(read_utf8(path))
    sentences = [line.split() for line in lines]
    empty = sum(1 for words in sentences if not words)
    return [words for words in sentences if words], empty


def write_raw_text(
    inputs: Sequence[Union[str, Path]],
    output: Union[str, Path],
    *,
    domain: str,
    fmt: str = "txt",
    input_format: str = "auto",
    sep: str = "auto",
    dedup: bool = False,
    strict: bool = False,
) -> RawTextSummary:
    """Write the sentences of labelled and/or plain-text files as a raw-text corpus.

    inputs (Sequence[Union[str, Path]]): column files (tags are ignored) and/or plain-text files
        with one whitespace-tokenised sentence per line; a directory stands for its data files.
    output (Union[str, Path]): the file to write (parent directories are created).
    domain (str): the ``doc._.domain`` of the Docs (fmt "spacy"); recorded in the summary.
    fmt (str): "txt" (one sentence per line, tokens joined by one space) or "spacy" (a DocBin of
        Docs without entity annotation).
    input_format (str): "columns", "text", or "auto": a file is a column file when every
        non-empty line has 2+ fields and its last field is O or PREFIX-LABEL.
    sep (str): column separator of column files ("auto", "tab", "space").
    dedup (bool): drop exact repeats of a sentence (counted in the summary). Off by default.
    strict (bool): an input without a sentence is an error (default: a warning in the summary).
    Lines may end in \\n, \\r\\n or \\r. In txt output a token holding whitespace (``New York``
    from a tab-separated file) is written as its parts, which is how the file reads back, and
    counted so; the spacy output keeps it as one token.
    RETURNS (RawTextSummary): counts. Raises ConversionError / FormatError on user errors.
    """
    fmt = fmt.lower()
    if fmt not in RAW_FORMATS:
        raise ConversionError(f"Unknown output format '{fmt}': use txt or spacy")
    if input_format not in RAW_INPUT_FORMATS:
        raise ConversionError(f"Unknown input format '{input_format}': use auto, columns or text")
    if not domain or not domain.strip():
        raise ConversionError("The domain name is empty; give one with --domain")
    try:
        sep = normalize_sep(sep)
    except ValueError as err:
        raise ConversionError(str(err)) from None
    if not inputs:
        raise ConversionError("No input files given")
    files: List[Path] = []
    skipped: List[Tuple[Path, str]] = []
    for item in inputs:
        found, not_read = _resolve_inputs(Path(item))
        files.extend(found)
        skipped.extend(not_read)
    output = Path(output)
    _check_raw_output(output, fmt, files)
    summary = RawTextSummary(output, skipped=skipped)
    seen = set()
    sentences: List[List[str]] = []
    for path in files:
        is_columns = input_format == "columns" or (
            input_format == "auto" and _looks_like_columns(path)
        )
        if is_columns:
            column_file = read_column_file(path, sep=sep)
            read = [s.words for s in column_file.sentences]
        else:
            if input_format == "auto":
                _check_not_mixed(path)
            read, empty = _read_plain_text(path)
            summary.empty_lines += empty
        summary.per_input[str(path)] = len(read)
        if not read:
            problem = f"{path} holds no sentence (the file is empty or blank)"
            if strict:
                raise ConversionError(f"{problem}; --strict makes this an error")
            summary.warnings.append(problem)
        for words in read:
            if dedup:
                key = tuple(words)
                if key in seen:
                    summary.duplicates += 1
                    continue
                seen.add(key)
            sentences.append(words)
    if fmt == "txt":
        split = []
        for words in sentences:
            parts = [part for word in words for part in word.split()]
            summary.split_tokens += sum(1 for word in words if len(word.split()) != 1)
            split.append(parts)
        sentences = split
    summary.sentences = len(sentences)
    summary.tokens = sum(len(w) for w in sentences)
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "txt":
        with output.open("w", encoding="utf-8", newline="\n") as file_:
            for words in sentences:
                file_.write(" ".join(words) + "\n")
    else:
        vocab = Vocab()
        doc_bin = DocBin(store_user_data=True)
        packed: dict = {}
        for words in sentences:
            doc = Doc(vocab, words=words, spaces=[True] * (len(words) - 1) + [False])
            set_domain(doc, domain)
            _add_doc(doc_bin, doc, packed)
        doc_bin.to_disk(output)
    return summary
