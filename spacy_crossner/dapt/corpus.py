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

Ranking (``select_corpus(scorer=...)``): instead of the levels, the sentences of a large general
corpus (text or JSONL, streamed) are scored by similarity to the target's labelled text and the
best are written as one raw-text file; see :mod:`spacy_crossner.dapt.rank`. Both modes can drop
every sentence that duplicates a dev/test corpus (``exclude``).
"""
import hashlib
import json
import math
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from ..gazetteer import Gazetteer
from .text import DaptInputError, tokenize_words

LEVELS = ("domain", "entity", "task", "integrated")
# A line longer than this is almost surely not a sentence or paragraph (a file without newlines,
# a minified dump): reading it whole would stall the tokenizer and use a lot of memory.
DEFAULT_MAX_LINE_CHARS = 100_000

_SENT_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_SPACE = re.compile(r"\s+")


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
    # Bytes are read one line at a time and decoded per line, so an error names its own line
    # (a text-mode file decodes a chunk ahead). A line of more than 4 bytes per character
    # allowed is too long whatever it holds, so reading stops there.
    limit = 4 * max_line_chars + 3
    with path.open("rb") as file_:
        while True:
            data = file_.readline(limit)
            if not data:
                return
            if len(data) == limit and not data.endswith(b"\n") and file_.peek(1):
                _too_long(path, number + 1, max_line_chars)
            if number == 0 and data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
            try:
                text = data.decode("utf8")
            except UnicodeDecodeError as err:
                # The text layer decodes whole chunks, so `number` may be an earlier line.
                line_no, column, byte = _first_bad_utf8(path)
                raise DaptInputError(
                    f"{path}, line {line_no}: not UTF-8 text ({err.reason}: byte 0x{byte:02x} at "
                    f"byte {column} of the line). Convert it, e.g. with iconv -f latin1 -t utf8."
                ) from None
            text = text[:-1] if text.endswith("\n") else text
            text = text[:-1] if text.endswith("\r") else text
            # Old Mac line ends (a lone \r) end lines too, as in universal-newline reading.
            for part in text.split("\r"):
                number += 1
                if len(part) > max_line_chars:
                    _too_long(path, number, max_line_chars)
                yield part


def _too_long(path: Path, number: int, max_line_chars: int) -> None:
    raise DaptInputError(
        f"{path}: line {number} is longer than {max_line_chars:,} characters. Give one "
        "sentence or paragraph per line, or raise the limit with --max-line-chars."
    )


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



INPUT_FORMATS = ("auto", "text", "jsonl")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
RANK_LEVELS = ("domain", "entity", "task")
OUTPUT_FORMATS = ("txt", "spacy")


def iter_corpus_texts(
    corpus: Union[str, Path, Iterable[str]],
    *,
    input_format: str = "auto",
    text_field: str = "text",
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> Iterator[Tuple[int, str]]:
    """Stream the texts of a raw corpus: ``(line number, text)``, each line read once.

    corpus (Union[str, Path, Iterable[str]]): a UTF-8 file, or any iterable of lines (e.g. a
        generator: it is consumed once, never rewound).
    input_format (str): "text" (a line is a paragraph or sentence), "jsonl" (a line is a JSON
        object whose ``text_field`` holds the text) or "auto" (jsonl for a file named *.jsonl,
        *.ndjson or *.json, else text).
    text_field (str): the field of a JSONL object that holds the text.
    Raises DaptInputError naming the file and line of a line that is not JSON, not an object, or
    lacks the field (or holds no string in it).
    """
    if input_format not in INPUT_FORMATS:
        raise DaptInputError(f"Unknown input format {input_format!r}: use one of {', '.join(INPUT_FORMATS)}")
    if isinstance(corpus, (str, Path)):
        where = str(corpus)
        lines: Iterable[str] = iter_lines(corpus, max_line_chars=max_line_chars)
        jsonl = input_format == "jsonl" or (input_format == "auto" and Path(corpus).suffix.lower() in JSONL_SUFFIXES)
    else:
        where = "the corpus stream"
        lines = corpus
        jsonl = input_format == "jsonl"
    for number, line in enumerate(lines, 1):
        if not jsonl:
            yield number, line
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DaptInputError(f"{where}: line {number} is not JSON ({err.msg}); give one JSON object a line") from None
        if not isinstance(record, dict):
            raise DaptInputError(f"{where}: line {number} is a JSON {type(record).__name__}, not an object")
        if text_field not in record:
            raise DaptInputError(
                f"{where}: line {number} has no field {text_field!r} (its fields: "
                f"{', '.join(map(repr, record)) or 'none'}); name the text field with --text-field"
            )
        text = record[text_field]
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise DaptInputError(
                f"{where}: line {number}, field {text_field!r} holds a {type(text).__name__}, not text"
            )
        yield number, text


@dataclass
class LevelCounts:
    """Sentences and word tokens written to one corpus level."""

    sentences: int = 0
    tokens: int = 0


@dataclass
class RankingSummary:
    """What the ranking of ``select_corpus`` scored and kept.

    scorer (str): the scorer's name. candidates (int): sentences scored.
    not_in_level (int): sentences outside ``rank_level``; too_short / too_long: outside the
    token bounds. selected (int), tokens (int): what was written. score_min / score_max: over
    every sentence scored; selected_min / selected_max: over the kept ones. file (str): the
    output. seconds (float): wall time of the whole selection. top (List[Tuple[float, str]]): the
    five best sentences.
    """

    scorer: str
    candidates: int = 0
    not_in_level: int = 0
    too_short: int = 0
    too_long: int = 0
    selected: int = 0
    tokens: int = 0
    score_min: float = float("nan")
    score_max: float = float("nan")
    selected_min: float = float("nan")
    selected_max: float = float("nan")
    file: str = ""
    seconds: float = 0.0
    top: List[Tuple[float, str]] = field(default_factory=list)


@dataclass
class SelectionSummary:
    """What ``select_corpus`` read and wrote.

    levels / files: the level corpora (empty when a scorer ranks instead). excluded: sentences
    dropped as duplicates of the ``exclude`` text. ranking: the ranking's counts, or None.
    """

    lines_read: int
    sentences_read: int
    duplicates_removed: int
    levels: Dict[str, LevelCounts]
    files: Dict[str, str]
    excluded: int = 0
    ranking: Optional[RankingSummary] = None

    def to_dict(self) -> dict:
        return asdict(self)


def select_corpus(
    *,
    corpus: Union[str, Path, Iterable[str]],
    output_dir: Union[str, Path],
    entities: Sequence[Union[str, Path]] = (),
    task_types: Optional[Sequence[str]] = None,
    min_entities: int = 2,
    split: bool = True,
    ignore_case: bool = False,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    input_format: str = "auto",
    text_field: str = "text",
    exclude: Sequence[Union[str, Path]] = (),
    exclude_ngram: int = 13,
    target: Sequence[Union[str, Path]] = (),
    scorer: Optional[str] = None,
    top_n: Optional[int] = None,
    top_tokens: Optional[int] = None,
    top_share: Optional[float] = None,
    rank_level: str = "domain",
    entity_weight: float = 0.0,
    min_tokens: int = 5,
    max_tokens: int = 200,
    background: int = 20_000,
    model: Optional[str] = None,
    batch_size: int = 64,
    gpu_id: Optional[int] = None,
    output_format: str = "txt",
    domain: Optional[str] = None,
    lang: str = "en",
    progress: Optional[bool] = False,
) -> SelectionSummary:
    """Build the CrossNER corpus levels from a raw corpus, or rank its sentences by similarity
    to a target's labelled text and keep the best. The corpus is read once, as a stream.

    Without ``scorer`` (the levels): ``domain.txt``, ``entity.txt``, ``task.txt`` and
    ``integrated.txt`` are written to ``output_dir`` (rules in the module docstring); ``entities``
    is required. With ``scorer``: every sentence of ``rank_level`` with ``min_tokens`` to
    ``max_tokens`` word tokens is scored (:mod:`spacy_crossner.dapt.rank`), plus
    ``entity_weight`` x its mentions of the entities, and the best (``top_n`` sentences,
    ``top_tokens`` tokens or ``top_share`` of them) are written best first to
    ``selected.txt`` (one sentence per line, word tokens joined by a space: what ``dapt`` and the
    raw-text sections of the configs read) or ``selected.spacy`` (``output_format="spacy"``: Docs
    without entities, ``doc._.domain = domain``), with ``selected.scores.tsv`` (score, text).

    corpus (Union[str, Path, Iterable[str]]): UTF-8 raw text or JSONL (see
        :func:`iter_corpus_texts`), or an iterable of its lines.
    output_dir (Union[str, Path]): where the files are written.
    entities (Sequence[Union[str, Path]]): entity list files (see the module docstring). When
        ranking they are optional: the target's annotated entities are used when none are given.
    task_types (Optional[Sequence[str]]): the domain-specialised entity types of the task level;
        None counts every type.
    min_entities (int): mentions a sentence needs to enter the entity level.
    split (bool): split lines into sentences (else a line is a sentence).
    ignore_case (bool): match entities case-insensitively.
    max_line_chars (int): the longest corpus line accepted.
    input_format (str): "auto", "text" or "jsonl". text_field (str): the JSONL field of the text.
    exclude (Sequence[Union[str, Path]]): dev/test corpora (column files, .spacy, plain text);
        every corpus sentence duplicating one of theirs is dropped and counted.
    exclude_ngram (int): also drop sentences sharing this many consecutive normalised tokens with
        an excluded sentence (0: exact normalised matches only).
    target (Sequence[Union[str, Path]]): the target's labelled (or plain) text; needed to rank.
    scorer (Optional[str]): "lexical", "minilm", or None (build the levels).
    top_n (Optional[int]), top_tokens (Optional[int]), top_share (Optional[float]): how much to
        keep when ranking (exactly one).
    rank_level (str): "domain" (every sentence), "entity" or "task": only the sentences of that
        level are ranked (TOPT's entity-dense text).
    entity_weight (float): added to a sentence's score per entity mention.
    min_tokens (int), max_tokens (int): word-token bounds of a ranked sentence (0: no bound).
    background (int): corpus sentences the lexical scorer counts document frequencies on.
    model (Optional[str]), batch_size (int), gpu_id (Optional[int]): the minilm scorer's encoder
        (None: the bundled MiniLM), batch, and device (None: a GPU if torch sees one; -1: CPU).
    output_format (str): "txt" or "spacy". domain (Optional[str]): the domain of spacy output.
    lang (str): the spaCy language whose tokenizer splits ranked sentences into the tokens
        written (and counted by min_tokens, max_tokens and top_tokens); hyphenated words stay
        whole, as in CrossNER's files.
    progress (Optional[bool]): a progress bar on stderr (None: when stderr is a terminal).
    RETURNS (SelectionSummary): counts, files written, and the ranking's summary.
    Raises DaptInputError for bad input (empty corpus, unknown task types, bad files...).
    """
    started = time.perf_counter()
    if min_entities < 1:
        raise DaptInputError(f"min_entities must be at least 1, got {min_entities}")
    ranking = scorer is not None
    selector = None
    if ranking:
        from .rank import TopSelector

        selector = TopSelector(top_n=top_n, top_tokens=top_tokens, top_share=top_share)
        if rank_level not in RANK_LEVELS:
            raise DaptInputError(f"Unknown rank level {rank_level!r}: use one of {', '.join(RANK_LEVELS)}")
        if output_format not in OUTPUT_FORMATS:
            raise DaptInputError(f"Unknown output format {output_format!r}: use txt or spacy")
        if min_tokens < 0 or max_tokens < 0:
            raise DaptInputError("min_tokens and max_tokens must be >= 0 (0: no bound)")
        if max_tokens and min_tokens > max_tokens:
            raise DaptInputError(
                f"--min-tokens {min_tokens} is above --max-tokens {max_tokens}: no sentence can "
                "be ranked; lower --min-tokens or raise --max-tokens (0: no limit)"
            )
        if batch_size < 1:
            raise DaptInputError(f"--batch-size must be at least 1, got {batch_size}")
        if not math.isfinite(entity_weight):
            raise DaptInputError(f"--entity-weight must be a finite number, got {entity_weight}")
        if domain is not None and output_format != "spacy":
            raise DaptInputError(
                f"--domain {domain!r} is only written with --format spacy (the txt output holds "
                "no domain): add --format spacy, or leave --domain out"
            )
        if not target:
            raise DaptInputError("Ranking needs the target's text: give it with --target (labelled files or plain text)")
    else:
        # Ranking settings without a scorer would be dropped silently: say so instead.
        unused = [
            option for option, given in (
                ("--target", bool(target)), ("--top-n", top_n is not None),
                ("--top-tokens", top_tokens is not None), ("--top-share", top_share is not None),
                ("--rank-level", rank_level != "domain"), ("--entity-weight", entity_weight != 0),
                ("--min-tokens", min_tokens != 5), ("--max-tokens", max_tokens != 200),
                ("--background", background != 20_000), ("--model", model is not None),
                ("--format", output_format != "txt"), ("--domain", domain is not None),
                ("--lang", lang != "en"),
            ) if given
        ]
        if unused:
            raise DaptInputError(
                f"{', '.join(unused)} only apply when ranking: add --scorer (lexical or minilm) "
                "to rank the corpus, or leave them out to build the corpus levels"
            )
    if not ranking and not entities:
        raise DaptInputError(
            "Give an entity list (--entities) to build the corpus levels, or a scorer (--scorer) "
            "and the target's text (--target) to rank the corpus"
        )
    target_text = None
    if ranking:
        from .rank import read_reference

        target_text = read_reference(target)
        if not target_text.sentences:
            raise DaptInputError(f"The target text ({', '.join(map(str, target))}) holds no sentence")
    gazetteer = None
    if entities:
        gazetteer = read_entity_lists(entities, ignore_case=ignore_case, max_line_chars=max_line_chars)
    elif ranking and target_text.entities:
        gazetteer = Gazetteer(ignore_case=ignore_case, tokenize=tokenize_words)
        for surface, label in target_text.entities:
            gazetteer.add(surface, [label])
    needs_entities = not ranking or rank_level != "domain" or entity_weight != 0
    if needs_entities and gazetteer is None:
        raise DaptInputError(
            f"rank level {rank_level!r} and entity_weight {entity_weight} need entities: the target "
            "text has no entity annotation; give an entity list with --entities"
        )
    wanted = None
    if task_types is not None and gazetteer is not None:
        wanted = {t.strip() for t in task_types if t.strip()}
        unknown = sorted(wanted - gazetteer.types)
        if not wanted or unknown:
            raise DaptInputError(
                f"Task types {unknown or sorted(wanted)} do not occur in the entity list; "
                f"its types are {sorted(gazetteer.types)}"
            )
    exclusion = None
    if exclude:
        from .rank import Exclusion, read_reference

        exclusion = Exclusion(read_reference(exclude).sentences, ngram=exclude_ngram)
    score_fn = spacy_tokenizer = None
    if ranking:
        from .rank import make_scorer

        try:
            spacy_tokenizer = _tokenizer(lang)
        except (ImportError, KeyError) as err:
            raise DaptInputError(f"Unknown spaCy language {lang!r} (--lang): {err}") from None

        score_fn = make_scorer(scorer, background=background, model=model, batch_size=batch_size, gpu_id=gpu_id)
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise DaptInputError(f"The output directory {output_dir} is a file; give a directory path")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DaptInputError(
            f"Cannot create the output directory {output_dir} ({err.strerror}); give a directory "
            "path whose parents are folders"
        ) from None
    files: Dict[str, Path] = {} if ranking else {level: output_dir / f"{level}.txt" for level in LEVELS}
    counts: Dict[str, LevelCounts] = {} if ranking else {level: LevelCounts() for level in LEVELS}
    rank_summary = RankingSummary(scorer=scorer) if ranking else None
    written = files.values() if not ranking else [output_dir / "selected.txt", output_dir / "selected.scores.tsv"]
    for out_file in written if isinstance(corpus, (str, Path)) else ():
        if out_file.exists() and out_file.resolve() == Path(corpus).resolve():
            raise DaptInputError(
                f"{out_file} is the corpus itself: it would be overwritten; give another output "
                "directory"
            )
    seen: Set[bytes] = set()
    lines_read = sentences_read = duplicates = excluded = 0
    writers = {} if ranking else {
        level: files[level].open("w", encoding="utf8") for level in ("domain", "entity", "task")
    }
    # Ranked sentences wait here until their batch is scored; the lexical scorer first fills it
    # with its background sample (bounded: max(background, batch_size) sentences).
    pending: List[Tuple[str, int, int]] = []
    fitted = False

    def flush() -> None:
        texts = [text for text, _, _ in pending]
        for (text, n_tokens, n_mentions), score in zip(pending, score_fn.score(texts)):
            selector.add(score + entity_weight * n_mentions, text, n_tokens)
        rank_summary.candidates += len(pending)
        pending.clear()

    bar = _progress_bar(progress)
    try:
        for _, line in iter_corpus_texts(corpus, input_format=input_format, text_field=text_field,
                                         max_line_chars=max_line_chars):
            lines_read += 1
            bar.update(1)
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
                if exclusion is not None and exclusion.matches(sentence):
                    excluded += 1
                    continue
                tokens = tokenize_words(sentence)
                mentions = gazetteer.match(tokens) if gazetteer is not None else []
                chosen = ["domain"]
                if len(mentions) >= min_entities:
                    chosen.append("entity")
                if any(wanted is None or (set(types) & wanted) for _, _, types in mentions):
                    chosen.append("task")
                if not ranking:
                    for level in chosen:
                        writers[level].write(sentence + "\n")
                        counts[level].sentences += 1
                        counts[level].tokens += len(tokens)
                    continue
                if rank_level not in chosen:
                    rank_summary.not_in_level += 1
                    continue
                words = [t.text for t in spacy_tokenizer(sentence) if not t.is_space]
                if min_tokens and len(words) < min_tokens:
                    rank_summary.too_short += 1
                elif max_tokens and len(words) > max_tokens:
                    rank_summary.too_long += 1
                else:
                    pending.append((" ".join(words), len(words), len(mentions)))
                    if not fitted and len(pending) >= score_fn.background_size:
                        score_fn.fit(target_text.texts, [t for t, _, _ in pending])
                        fitted = True
                    if fitted and len(pending) >= batch_size:
                        flush()
            bar.set_postfix_str(_postfix(sentences_read, duplicates, excluded, rank_summary), refresh=False)
        if ranking:
            if not fitted:
                score_fn.fit(target_text.texts, [t for t, _, _ in pending])
            flush()
    finally:
        bar.close()
        for writer in writers.values():
            writer.close()
    if sentences_read == 0:
        raise DaptInputError(f"The corpus {_name(corpus)} is empty (no non-blank line)")
    if ranking and rank_summary.candidates == 0:
        # Every reason a sentence was left out, --exclude's included (it may have taken them all).
        raise DaptInputError(
            f"No sentence of {_name(corpus)} could be ranked: of {sentences_read:,} sentences, "
            f"{duplicates:,} were repeats, {excluded:,} duplicates of the --exclude text, "
            f"{rank_summary.not_in_level:,} outside the rank level, {rank_summary.too_short:,} "
            f"shorter than --min-tokens, {rank_summary.too_long:,} longer than --max-tokens "
            "(check --exclude, loosen the others)"
        )
    if ranking:
        _write_selection(selector, rank_summary, output_dir, output_format, domain, corpus)
        files = {"selected": Path(rank_summary.file)}
    else:
        with files["integrated"].open("wb") as out:
            for part in ("entity", "task", "task"):
                with files[part].open("rb") as in_:
                    shutil.copyfileobj(in_, out)
        counts["integrated"] = LevelCounts(
            sentences=counts["entity"].sentences + 2 * counts["task"].sentences,
            tokens=counts["entity"].tokens + 2 * counts["task"].tokens,
        )
    if rank_summary is not None:
        rank_summary.seconds = time.perf_counter() - started
    return SelectionSummary(
        lines_read=lines_read,
        sentences_read=sentences_read,
        duplicates_removed=duplicates,
        levels=counts,
        files={name: str(path) for name, path in files.items()},
        excluded=excluded,
        ranking=rank_summary,
    )


def _tokenizer(lang: str):
    """spaCy's tokenizer of ``lang``, keeping hyphenated words whole as CrossNER's files do
    (``state-of-the-art``, ``back-propagation``)."""
    import spacy
    from spacy.lang.char_classes import HYPHENS
    from spacy.util import compile_infix_regex

    nlp = spacy.blank(lang)
    infixes = [pattern for pattern in nlp.Defaults.infixes if HYPHENS not in pattern]
    if infixes:
        nlp.tokenizer.infix_finditer = compile_infix_regex(infixes).finditer
    return nlp.tokenizer


def _name(corpus: Any) -> str:
    return str(corpus) if isinstance(corpus, (str, Path)) else "stream"


def _progress_bar(progress: Optional[bool]):
    from tqdm import tqdm

    if progress is None:
        progress = sys.stderr.isatty()
    return tqdm(desc="Selecting", unit=" lines", disable=not progress, leave=False, mininterval=1.0)


def _postfix(read: int, duplicates: int, excluded: int, ranking: Optional[RankingSummary]) -> str:
    text = f"{read:,} sentences, {duplicates:,} repeats, {excluded:,} excluded"
    if ranking is not None:
        text += f", {ranking.candidates:,} scored"
    return text


def _write_selection(
    selector: Any, summary: RankingSummary, output_dir: Path, output_format: str,
    domain: Optional[str], corpus: Any,
) -> None:
    kept = selector.result()
    if not kept:
        raise DaptInputError(
            f"No sentence of {_name(corpus)} could be ranked: {summary.not_in_level:,} outside the rank "
            f"level, {summary.too_short:,} shorter than min_tokens, {summary.too_long:,} longer than "
            "max_tokens (loosen them)"
        )
    summary.selected = len(kept)
    summary.tokens = sum(n for _, _, n in kept)
    summary.score_min, summary.score_max = selector.min_score, selector.max_score
    summary.selected_max, summary.selected_min = kept[0][0], kept[-1][0]
    summary.top = [(score, text) for score, text, _ in kept[:5]]
    with (output_dir / "selected.scores.tsv").open("w", encoding="utf8", newline="\n") as out:
        for score, text, _ in kept:
            out.write(f"{score:.6f}\t{text}\n")
    if output_format == "txt":
        path = output_dir / "selected.txt"
        with path.open("w", encoding="utf8", newline="\n") as out:
            for _, text, _ in kept:
                out.write(text + "\n")
    else:
        from spacy.tokens import Doc, DocBin
        from spacy.vocab import Vocab

        from ..domains import set_domain

        path = output_dir / "selected.spacy"
        vocab = Vocab()
        doc_bin = DocBin(store_user_data=True)
        for _, text, _ in kept:
            words = text.split(" ")
            doc = Doc(vocab, words=words, spaces=[True] * (len(words) - 1) + [False])
            set_domain(doc, domain)
            doc_bin.add(doc)
        doc_bin.to_disk(path)
    summary.file = str(path)


def format_selection(summary: SelectionSummary) -> str:
    """A table of the counts, for people."""
    rows = [
        f"Read {summary.lines_read:,} lines, {summary.sentences_read:,} sentences; "
        f"{summary.duplicates_removed:,} duplicate sentences removed; "
        f"{summary.excluded:,} dropped as duplicates of the excluded (dev/test) text.",
    ]
    ranked = summary.ranking
    if ranked is not None:
        rows += [
            f"Scored {ranked.candidates:,} sentences with the {ranked.scorer} scorer "
            f"({ranked.not_in_level:,} outside the rank level, {ranked.too_short:,} too short, "
            f"{ranked.too_long:,} too long); scores {ranked.score_min:.4f} .. {ranked.score_max:.4f}.",
            f"Kept {ranked.selected:,} sentences ({ranked.tokens:,} tokens), scores "
            f"{ranked.selected_min:.4f} .. {ranked.selected_max:.4f}, in {ranked.seconds:.1f} s: {ranked.file}",
            "Best:",
        ]
        rows += [f"  {score:.4f}  {text}" for score, text in ranked.top]
        return "\n".join(rows)
    rows.append(f"{'level':<11} {'sentences':>12} {'tokens':>14}  file")
    for level in LEVELS:
        c = summary.levels[level]
        rows.append(f"{level:<11} {c.sentences:>12,} {c.tokens:>14,}  {summary.files[level]}")
    return "\n".join(rows)
