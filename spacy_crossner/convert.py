"""Convert token/tag column files to spaCy DocBins, and build raw-text corpora.

``convert`` writes one ``.spacy`` file per input file, every Doc tagged with its domain
(``doc._.domain``, kept by ``DocBin(store_user_data=True)``) and with entities read the conlleval
way (see :mod:`spacy_crossner.formats`). ``write_raw_text`` writes sentences without entities,
for language-model objectives and domain-adaptive pre-training (DAPT).

Which files of a directory are read (not recursively): regular, non-hidden files whose suffix
is one of :data:`DATA_SUFFIXES` (``.txt .tsv .conll .bio .iob .iob1 .iob2 .bioes .iobes .bilou
.bmes .ner .train .dev .test .eval``), except README*/LICENSE*/NOTICE* files. A file named on the
command line is always read, whatever its name.

Output names: ``train.txt`` → ``train.spacy``; a file whose suffix is a split name keeps it
(``broad_twitter_BIOES.eval`` → ``broad_twitter_BIOES.eval.spacy``). Two inputs that would write
the same output are an error.
"""
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Union

import srsly
from spacy.tokens import Doc, DocBin, Span
from spacy.vocab import Vocab

from .domains import set_domain
from .formats import (
    REPAIR_KINDS,
    ColumnFile,
    FormatError,
    Sentence,
    normalize_scheme,
    normalize_sep,
    read_column_file,
    read_utf8,
    split_tag,
    tags_to_spans,
)

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
    """The summaries of all files of one ``convert`` call, in input order."""

    files: List[FileSummary] = field(default_factory=list)

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
    sentences (int), tokens (int): written.
    empty_lines (int): empty lines of plain-text inputs, skipped.
    duplicates (int): sentences dropped by ``dedup`` (0 without it).
    per_input (dict): input path → sentences read from it.
    """

    output_path: Path
    sentences: int = 0
    tokens: int = 0
    empty_lines: int = 0
    duplicates: int = 0
    per_input: dict = field(default_factory=dict)


def list_data_files(directory: Union[str, Path]) -> List[Path]:
    """The data files of a directory, sorted by name (rule in the module docstring)."""
    directory = Path(directory)
    found = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.startswith(".") or not path.is_file():
            continue
        if name.lower().startswith(_SKIPPED_PREFIXES):
            continue
        if path.suffix.lower() in DATA_SUFFIXES:
            found.append(path)
    return found


def _resolve_inputs(input_path: Path) -> List[Path]:
    if not input_path.exists():
        raise ConversionError(f"Input not found: {input_path}")
    if input_path.is_dir():
        files = list_data_files(input_path)
        if not files:
            raise ConversionError(
                f"No data files in {input_path} (looked for non-hidden files named "
                f"*{' *'.join(sorted(DATA_SUFFIXES))}; subdirectories are not searched)"
            )
        return files
    return [input_path]


def output_name(input_path: Path) -> str:
    """The name of the DocBin written for an input file: its stem (keeping a split suffix)."""
    if input_path.suffix.lower() in SPLIT_SUFFIXES:
        return input_path.name + ".spacy"
    return input_path.stem + ".spacy"


def sentence_to_doc(
    vocab: Vocab, sentence: Sentence, scheme: str = "IOB2", domain: Optional[str] = None
) -> Doc:
    """A Doc of one sentence with its entities (every other token O) and domain.
    Use :func:`formats.tags_to_spans` for the repairs."""
    doc = _make_doc(vocab, [sentence], scheme)[0]
    set_domain(doc, domain)
    return doc


def _make_doc(
    vocab: Vocab, sentences: Sequence[Sentence], scheme: str, mark_sents: bool = False
):
    words: List[str] = []
    sent_starts: List[bool] = []
    spans = []
    repairs: Counter = Counter()
    for sent in sentences:
        offset = len(words)
        sent_spans, sent_repairs = tags_to_spans(sent.tags, scheme)
        repairs.update(sent_repairs)
        spans.extend((s + offset, e + offset, label) for s, e, label in sent_spans)
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
) -> Iterator[Doc]:
    """The Docs of a column file read with :func:`formats.read_column_file`.

    column_file (ColumnFile): the sentences and the scheme.
    vocab (Vocab): the vocab of the Docs.
    domain (Optional[str]): the ``doc._.domain`` of every Doc.
    by_document (bool): one Doc per document instead of one per sentence.
    summary (Optional[FileSummary]): if given, docs, entities per label and repairs are added
        to it as Docs are made.
    YIELDS (Doc): Docs with words, single spaces, every token's entity annotation (O outside
        entities) and, for documents, sentence starts.
    """
    for group in _group_sentences(column_file, by_document):
        doc, spans, repairs = _make_doc(vocab, group, column_file.scheme, by_document)
        set_domain(doc, domain)
        if summary is not None:
            summary.docs += 1
            summary.entities.update(label for _, _, label in spans)
            summary.repairs.update(repairs)
        yield doc


def _write_column_file(
    column_file: ColumnFile,
    output_path: Path,
    *,
    domain: str,
    by_document: bool,
    vocab: Vocab,
    progress=None,
) -> FileSummary:
    summary = FileSummary(
        column_file.path, output_path, domain, column_file.scheme, column_file.sep,
        sentences=len(column_file.sentences), tokens=column_file.n_tokens,
        documents=column_file.n_documents,
    )
    doc_bin = DocBin(store_user_data=True)
    packed: dict = {}
    docs = column_file_to_docs(
        column_file, vocab, domain=domain, by_document=by_document, summary=summary
    )
    for doc in docs:
        _add_doc(doc_bin, doc, packed)
        if progress is not None:
            progress.update(len(doc))
    output_path.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output_path)
    return summary


def convert_file(
    input_path: Union[str, Path],
    output_path: Union[str, Path],
    *,
    domain: str,
    scheme: str = "auto",
    sep: str = "auto",
    by_document: bool = False,
    vocab: Optional[Vocab] = None,
) -> FileSummary:
    """Convert one column file to one DocBin (arguments as in :func:`convert`).

    output_path (Union[str, Path]): the ``.spacy`` file to write.
    RETURNS (FileSummary): the counts. Raises FormatError on unreadable input.
    """
    column_file = read_column_file(input_path, sep=sep, scheme=scheme)
    return _write_column_file(
        column_file, Path(output_path), domain=domain, by_document=by_document,
        vocab=vocab if vocab is not None else Vocab(),
    )


def convert(
    input_path: Union[str, Path],
    output_dir: Union[str, Path],
    *,
    domain: Optional[str] = None,
    scheme: str = "auto",
    sep: str = "auto",
    by_document: bool = False,
    show_progress: bool = False,
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
    RETURNS (ConvertSummary): per-file counts. Raises ConversionError or FormatError (both
        ValueError) on user errors; every input is read and checked before anything is written.
    """
    input_path, output_dir = Path(input_path), Path(output_dir)
    try:
        scheme = normalize_scheme(scheme)
        sep = normalize_sep(sep)
    except ValueError as err:
        raise ConversionError(str(err)) from None
    inputs = _resolve_inputs(input_path)
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
    progress = None
    total = sum(cf.n_tokens for _, cf in column_files)
    if show_progress and total >= PROGRESS_MIN_TOKENS:
        from tqdm import tqdm

        progress = tqdm(total=total, desc="Converting", unit=" tokens", leave=False,
                        mininterval=0.5)
    vocab = Vocab()
    summary = ConvertSummary()
    try:
        for out, column_file in column_files:
            summary.files.append(
                _write_column_file(
                    column_file, out, domain=domain, by_document=by_document, vocab=vocab,
                    progress=progress,
                )
            )
    finally:
        if progress is not None:
            progress.close()
    return summary


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
    return "\n".join(parts)


def _looks_like_columns(path: Path) -> bool:
    """True when every non-empty line has 2+ fields and ends in a tag (or is -DOCSTART-)."""
    text = read_utf8(path)
    seen = False
    for line in text.split("\n"):
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "-DOCSTART-":
            continue
        if len(fields) < 2:
            return False
        try:
            split_tag(fields[-1])
        except ValueError:
            return False
        seen = True
    return seen


def _read_plain_text(path: Path):
    text = read_utf8(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it is not an empty line
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
    for item in inputs:
        files.extend(_resolve_inputs(Path(item)))
    output = Path(output)
    summary = RawTextSummary(output)
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
            read, empty = _read_plain_text(path)
            summary.empty_lines += empty
        summary.per_input[str(path)] = len(read)
        for words in read:
            if dedup:
                key = tuple(words)
                if key in seen:
                    summary.duplicates += 1
                    continue
                seen.add(key)
            sentences.append(words)
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
