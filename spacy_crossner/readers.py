"""Corpus readers that know about domains.

``spacy_crossner.MultiDomainCorpus.v1`` yields training examples from several labelled corpora
and optional raw-text corpora, each upsampled (or downsampled) by its own factor and shuffled
under a seed; ``spacy_crossner.MultiDomainCorpus.v2`` mixes the labelled corpora by their sizes
instead (the square root of each size by default, or a fixed share), so targets of any size get
a sensible part of each pass. ``spacy_crossner.DomainCorpus.v1`` reads one domain (dev and test
sets).
Examples keep the gold tokenization: the predicted doc has the reference's words.

Every corpus is checked when it is read (at ``spacy train``'s initialization), and errors name
the config section and the file: a labelled section without docs or without entity annotation,
an empty raw-text file, a raw-text file that is a token/tag column file (convert it with
``python -m spacy_crossner raw-text``), a text file that is not UTF-8, an unreadable ``.spacy``.
"""
import logging
import random
from itertools import zip_longest
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry

from .convert import looks_like_columns
from .docbin import read_docbin, spacy_files
from .domains import example_domain, get_domain, set_domain
from .formats import FormatError, read_utf8, split_lines
from .training_checks import check_distinct_domains, missing_path

logger = logging.getLogger("spacy_crossner")

RAW_TEXT_SUFFIXES = (".txt", ".text", ".raw")
DOMAIN_CORPUS = "spacy_crossner.DomainCorpus.v1"


@registry.readers("spacy_crossner.MultiDomainCorpus.v1")
def create_multi_domain_corpus(
    domains: Dict[str, Dict[str, Any]],
    seed: int = 0,
    shuffle: bool = True,
    max_length: int = 0,
    limit: int = 0,
    augmenter: Optional[Callable[[Language, Example], Iterable[Example]]] = None,
) -> Callable[[Language], Iterable[Example]]:
    """Training examples from several domains, each a section of the config.

    domains (Dict[str, Dict[str, Any]]): one entry per corpus, e.g.
        ``[corpora.train.domains.source]`` and ``[corpora.train.domains.target]``, each with
        ``path`` (a ``.spacy`` file or folder; for raw text also a ``.txt`` file with one
        whitespace-tokenized sentence per line), and optionally ``domain`` (the domain name given
        to its docs; default: the docs' own ``doc._.domain``, else the entry's name),
        ``upsample`` (copies of its docs per pass, default 1: 2.5 = every doc twice plus a random
        half, 0.1 = a random tenth; CrossNER's joint setting upsamples the target by 10),
        ``limit`` (use only its first N docs; 0 = all) and ``raw`` (true: raw text without
        entity annotation, which only feeds language-model and dictionary objectives).
    seed (int): seed of sampling and shuffling; each pass reshuffles, and the sequence of
        passes is the same for the same seed.
    shuffle (bool): shuffle the examples of a pass (false keeps corpus order).
    max_length (int): skip docs longer than this many tokens (0 = no limit); skips are logged.
    limit (int): use at most this many docs of each corpus (0 = all); a corpus's own ``limit``
        takes precedence.
    augmenter (Optional[Callable]): a spaCy augmenter (``[corpora.train.augmenter]``, e.g.
        ``spacy_crossner.mention_replace.v1``) applied to every example of every pass.
    Files are read once; each pass samples and shuffles the docs anew.
    """
    entries = [CorpusEntry.from_config(name, value) for name, value in domains.items()]
    return MultiDomainCorpus(entries, seed=seed, shuffle=shuffle, max_length=max_length, limit=limit,
                             augmenter=augmenter)


MIXES = ("sqrt", "size", "equal", "upsample")
# The shares of the mixes: a corpus of n docs weighs n ** exponent.
MIX_EXPONENTS = {"sqrt": 0.5, "size": 1.0, "equal": 0.0}


@registry.readers("spacy_crossner.MultiDomainCorpus.v2")
def create_multi_domain_corpus_v2(
    domains: Dict[str, Dict[str, Any]],
    mix: str = "sqrt",
    pass_size: int = 0,
    seed: int = 0,
    shuffle: bool = True,
    max_length: int = 0,
    limit: int = 0,
    augmenter: Optional[Callable[[Language, Example], Iterable[Example]]] = None,
) -> Callable[[Language], Iterable[Example]]:
    """Training examples from several domains, mixed to fit corpora of any size.

    The labelled corpora share each pass by ``mix``, so a target of 100 or of 10,000 sentences
    gets a sensible part of the stream without a hand-set factor; ``share`` in a corpus's
    section fixes its part. Raw-text corpora keep ``upsample`` (they form their own streams).

    domains (Dict[str, Dict[str, Any]]): one entry per corpus, as in v1 (``path``, ``domain``,
        ``limit``, ``raw``), plus ``share`` (the corpus's fraction of the labelled docs of a
        pass, 0 < share <= 1). ``upsample`` belongs to raw-text corpora, and to labelled ones
        only with ``mix = "upsample"``.
    mix (str): how the labelled corpora without a ``share`` split the rest of a pass:
        "sqrt" (default; in proportion to the square root of their sizes: CoNLL-2003's 14,041
        sentences and a 100-sentence target give the target 7.8 % of a pass, about 11 copies,
        close to CrossNER's x10; a 2,321-sentence target gets 29 %, about 2 copies), "size"
        (in proportion to their sizes: each once), "equal" (equal parts) or "upsample" (v1:
        each labelled corpus's own fixed ``upsample`` factor, default 1; e.g. CrossNER's
        joint setting, target ``upsample = 10``).
    pass_size (int): labelled docs per pass (0 = the labelled corpora's sizes added up); not
        used with mix = "upsample".
    seed, shuffle, max_length, limit, augmenter: as in v1.
    """
    if mix not in MIXES:
        raise ValueError(
            f"spacy_crossner.MultiDomainCorpus.v2: [corpora.train] mix must be one of {MIXES}, "
            f"got {mix!r}"
        )
    if not isinstance(pass_size, int) or pass_size < 0:
        raise ValueError(
            f"spacy_crossner.MultiDomainCorpus.v2: pass_size must be an integer >= 0, got {pass_size!r}"
        )
    entries = [
        CorpusEntry.from_config(name, value, keys=CorpusEntry.KEYS_V2)
        for name, value in domains.items()
    ]
    _check_mix_settings(entries, mix)
    return MultiDomainCorpus(
        entries, seed=seed, shuffle=shuffle, max_length=max_length, limit=limit, mix=mix,
        pass_size=pass_size, augmenter=augmenter,
    )


def _check_mix_settings(entries: List["CorpusEntry"], mix: str) -> None:
    """share and upsample are each valid in one mode; errors name the section and the fix."""
    labelled = [e for e in entries if not e.raw]
    for entry in entries:
        if entry.share is not None and entry.raw:
            raise ValueError(
                f"MultiDomainCorpus.v2: {entry.setting} share = {entry.share}: share is for "
                "labelled corpora; a raw-text corpus sets its copies per pass with upsample"
            )
        if entry.share is not None and mix == "upsample":
            raise ValueError(
                f"MultiDomainCorpus.v2: {entry.setting} share = {entry.share} but mix = "
                "\"upsample\" uses each corpus's fixed upsample factor; remove share, or set "
                "mix = \"sqrt\" (or size, equal)"
            )
        if entry.upsample_given and not entry.raw and mix != "upsample":
            raise ValueError(
                f"MultiDomainCorpus.v2: {entry.setting} upsample = {entry.upsample:g} but mix = "
                f"\"{mix}\" sizes the labelled corpora; give its part of a pass with share "
                "instead, or set mix = \"upsample\" for fixed factors (v1's behaviour, e.g. "
                "CrossNER's target upsample = 10)"
            )
    shares = [e.share for e in labelled if e.share is not None]
    total = sum(shares)
    free = [e for e in labelled if e.share is None]
    names = ", ".join(f"{e.name} = {e.share:g}" for e in labelled if e.share is not None)
    if free and total >= 1:
        raise ValueError(
            f"MultiDomainCorpus.v2: the shares ({names}) add up to {total:g}, leaving nothing "
            f"for {', '.join(e.name for e in free)}; make them add up to less than 1"
        )
    if shares and not free and abs(total - 1) > 1e-6:
        raise ValueError(
            f"MultiDomainCorpus.v2: every labelled corpus has a share ({names}) and they add "
            f"up to {total:g}; make them add up to 1, or remove one to give it the rest"
        )


def mix_counts(sizes: List[int], shares: List[Optional[float]], mix: str, pass_size: int = 0) -> List[int]:
    """Docs per pass of each labelled corpus under a mix (not "upsample").

    sizes (List[int]): docs of each corpus.
    shares (List[Optional[float]]): each corpus's fixed share, or None to get part of the rest
        in proportion to ``size ** exponent`` of the mix.
    mix (str): "sqrt", "size" or "equal".
    pass_size (int): docs per pass (0 = the sizes added up).
    RETURNS (List[int]): docs per pass, at least 1 for every non-empty corpus.
    """
    exponent = MIX_EXPONENTS[mix]
    total = pass_size or sum(sizes)
    rest = 1.0 - sum(s for s in shares if s is not None)
    weights = [size ** exponent if share is None else 0.0 for size, share in zip(sizes, shares)]
    weight_sum = sum(weights)
    counts = []
    for size, share, weight in zip(sizes, shares, weights):
        part = share if share is not None else (rest * weight / weight_sum if weight_sum else 0.0)
        counts.append(max(1, int(round(part * total))) if size else 0)
    return counts


class CorpusEntry:
    """One corpus of a MultiDomainCorpus: where it is, its domain, its upsampling, raw or not."""

    KEYS = ("path", "domain", "upsample", "raw", "limit")
    KEYS_V2 = KEYS + ("share",)

    def __init__(
        self,
        name: str,
        path: Union[str, Path],
        *,
        domain: Optional[str] = None,
        upsample: Optional[float] = 1.0,
        raw: bool = False,
        limit: int = 0,
        setting: Optional[str] = None,
        share: Optional[float] = None,
    ) -> None:
        self.name = name
        self.setting = setting or f"[corpora.*.domains.{name}]"
        self.path = _check_path(path, f"{name}.path", self.setting, name)
        self.domain = domain
        # v2 tells an upsample the config gave from the default (None = not given).
        self.upsample_given = upsample is not None
        upsample = 1.0 if upsample is None else upsample
        if isinstance(upsample, bool) or not isinstance(upsample, (int, float)) or not upsample >= 0:
            raise ValueError(f"MultiDomainCorpus: {name}.upsample must be a number >= 0, got {upsample!r}")
        self.upsample = float(upsample)
        self.raw = bool(raw)
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"MultiDomainCorpus: {name}.limit must be an integer >= 0, got {limit!r}")
        self.limit = limit
        if share is not None and (
            isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1
        ):
            raise ValueError(
                f"MultiDomainCorpus: {self.setting} share must be a number with 0 < share <= 1 "
                f"(its fraction of the labelled docs of a pass), got {share!r}"
            )
        self.share = None if share is None else float(share)

    @classmethod
    def from_config(cls, name: str, value: Any, keys: Tuple[str, ...] = KEYS) -> "CorpusEntry":
        setting = f"[corpora.*.domains.{name}]"
        if not isinstance(value, dict):
            raise ValueError(
                f"MultiDomainCorpus: {setting} must be a section with at least `path`, got {value!r}"
            )
        unknown = sorted(set(value) - set(keys))
        if unknown:
            hint = ""
            if "share" in unknown and "share" not in keys:
                hint = " (share needs @readers = \"spacy_crossner.MultiDomainCorpus.v2\")"
            raise ValueError(
                f"MultiDomainCorpus: {setting} has unknown settings {unknown}; allowed: "
                f"{list(keys)}{hint}"
            )
        if "path" not in value:
            raise ValueError(f"MultiDomainCorpus: {setting} needs a `path`")
        v2 = "share" in keys
        if not v2 and value.get("upsample", 1.0) is None:
            raise ValueError(f"MultiDomainCorpus: {name}.upsample must be a number >= 0, got None")
        return cls(name, value["path"], domain=value.get("domain"),
                   upsample=value.get("upsample", None if v2 else 1.0), raw=value.get("raw", False),
                   limit=value.get("limit", 0), share=value.get("share"))


@registry.readers("spacy_crossner.DomainCorpus.v1")
def create_domain_corpus(
    path: str, domain: Optional[str] = None, max_length: int = 0, limit: int = 0
) -> Callable[[Language], Iterable[Example]]:
    """The examples of one ``.spacy`` file or folder, in file order (dev and test sets).

    path (str): a ``.spacy`` file or a folder of them.
    domain (Optional[str]): domain given to every doc (default: keep the docs' own).
    max_length (int): skip docs longer than this (0 = no limit).
    limit (int): at most this many docs (0 = all).
    """
    entry = CorpusEntry("corpus", path, domain=domain, setting=DOMAIN_CORPUS)
    return MultiDomainCorpus([entry], shuffle=False, max_length=max_length, limit=limit)


class MultiDomainCorpus:
    """Reads labelled and raw-text corpora; calling it yields one pass of examples."""

    def __init__(
        self,
        entries: List[CorpusEntry],
        *,
        seed: int = 0,
        shuffle: bool = True,
        max_length: int = 0,
        limit: int = 0,
        augmenter: Optional[Callable[[Language, Example], Iterable[Example]]] = None,
        mix: str = "upsample",
        pass_size: int = 0,
    ) -> None:
        if not entries:
            raise ValueError("MultiDomainCorpus: give at least one corpus in [corpora.*.domains]")
        self.entries = entries
        self.seed = seed
        self.shuffle = shuffle
        self.max_length = max_length
        self.limit = limit
        self.augmenter = augmenter
        self.mix = mix
        self.pass_size = pass_size
        self._passes = 0
        self._cache: Dict[Tuple[int, int], List[Doc]] = {}

    def __call__(self, nlp: Language) -> Iterator[Example]:
        rng = random.Random(f"{self.seed}-{self._passes}")
        self._passes += 1
        pool: List[Doc] = []
        counts = self.per_pass(nlp)
        all_docs = self.docs(nlp)
        for i, entry in enumerate(self.entries):
            docs = all_docs[i]
            if counts[i] is None:
                pool.extend(_sample(docs, entry.upsample, rng))
            else:
                pool.extend(_sample_count(docs, counts[i], rng))
        if self.shuffle:
            rng.shuffle(pool)
        for doc in pool:
            example = _gold_tokenized_example(nlp, doc)
            if self.augmenter is None:
                yield example
            else:
                yield from self.augmenter(nlp, example)

    def docs(self, nlp: Language) -> List[List[Doc]]:
        """The docs of each corpus, read once per vocab."""
        out = []
        fresh = False
        for i, entry in enumerate(self.entries):
            key = (i, id(nlp.vocab))
            if key not in self._cache:
                self._cache[key] = self._read(nlp, entry)
                fresh = True
            out.append(self._cache[key])
        if fresh:
            check_distinct_domains(self.entries, out)
            add_corpus = getattr(self.augmenter, "add_corpus", None)
            if add_corpus is not None:  # mention_replace's from_corpus: the labelled docs' entities
                add_corpus(doc for entry, docs in zip(self.entries, out) if not entry.raw for doc in docs)
            check_corpus = getattr(self.augmenter, "check_corpus", None)
            if check_corpus is not None:  # e.g. mention_replace's domains and labels
                labels: Dict[str, Set[str]] = {}
                for entry, docs in zip(self.entries, out):
                    if not entry.raw:
                        for doc in docs:
                            labels.setdefault(get_domain(doc), set()).update(e.label_ for e in doc.ents)
                check_corpus(labels)
        return out

    def per_pass(self, nlp: Language) -> List[Optional[int]]:
        """Docs per pass of each corpus under the mix; None where ``upsample`` samples (raw
        text, and every corpus with mix = "upsample")."""
        docs = self.docs(nlp)
        if self.mix == "upsample":
            return [None] * len(self.entries)
        labelled = [i for i, e in enumerate(self.entries) if not e.raw]
        counts: List[Optional[int]] = [None] * len(self.entries)
        mixed = mix_counts(
            [len(docs[i]) for i in labelled], [self.entries[i].share for i in labelled],
            self.mix, self.pass_size,
        )
        for i, count in zip(labelled, mixed):
            counts[i] = count
        return counts

    def _read(self, nlp: Language, entry: CorpusEntry) -> List[Doc]:
        path = entry.path
        where = f"{entry.setting} path = {path}"
        if path.is_file() and path.suffix in RAW_TEXT_SUFFIXES:
            if not entry.raw and entry.setting == DOMAIN_CORPUS:
                raise ValueError(
                    f"{DOMAIN_CORPUS}: path = {path} is a text file; convert it first: python -m "
                    f"spacy_crossner convert {path} OUTPUT_DIR --domain DOMAIN"
                )
            if not entry.raw:
                raise ValueError(
                    f"MultiDomainCorpus: {entry.name}.path = {path} is a text file; set "
                    f"raw = true for raw text, or convert labelled data to .spacy first"
                )
            docs: Iterable[Doc] = _read_text_lines(nlp, path, where)
        else:
            docs = _read_docbins(nlp, path, where)
        kept: List[Doc] = []
        skipped = 0
        limit = entry.limit or self.limit
        for doc in docs:
            if self.max_length and len(doc) > self.max_length:
                skipped += 1
                continue
            if entry.domain is not None:
                set_domain(doc, entry.domain)
            elif get_domain(doc) is None:
                set_domain(doc, entry.name)
            if entry.raw and doc.has_annotation("ENT_IOB"):
                # Raw-text corpora never carry labels, even when made from labelled files.
                doc = _strip_entities(nlp, doc)
            kept.append(doc)
            if limit and len(kept) >= limit:
                break
        if skipped:
            logger.info("%s: skipped %d docs longer than max_length=%d", path, skipped, self.max_length)
        _check_read(entry, kept, skipped, where, self.max_length)
        return kept


def _check_read(entry: CorpusEntry, docs: List[Doc], skipped: int, where: str, max_length: int) -> None:
    """A corpus that cannot feed what its section promises is an error naming section and file."""
    if not docs:
        if skipped:
            raise ValueError(
                f"{where}: all {skipped} docs are longer than max_length = {max_length}; raise it "
                "or set it to 0"
            )
        what = "text" if entry.raw else "docs"
        raise ValueError(
            f"{where}: the corpus is empty (no {what}); check the file, or remove the section"
        )
    if not entry.raw and not any(doc.has_annotation("ENT_IOB") for doc in docs):
        raise ValueError(
            f"{where}: none of its {len(docs)} docs has entity annotation, so this labelled "
            "section would train nothing; convert labelled data with `python -m spacy_crossner "
            "convert`, or set raw = true for raw text"
        )


def _check_path(path: Union[str, Path], setting: str, section: str = "", name: str = "") -> Path:
    if path is None or str(path) in ("", "None", "null"):
        raise ValueError(f"MultiDomainCorpus: {setting} is not set")
    path = Path(path)
    if not path.exists():
        if section == DOMAIN_CORPUS:
            raise ValueError(missing_path(DOMAIN_CORPUS, "path", path, "[corpora.dev], e.g. --paths.target_dev"))
        raise ValueError(missing_path("spacy_crossner.MultiDomainCorpus.v1", setting, path,
                                      f"[corpora.train.domains.{name}]"))
    return path


def _read_docbins(nlp: Language, path: Path, where: str = "") -> Iterator[Doc]:
    where = where or str(path)
    files = spacy_files(path)
    if not files:
        raise ValueError(f"{where}: no .spacy files in {path} (subfolders included)")
    for file in files:
        try:
            docs = list(read_docbin(file, nlp.vocab))
        except Exception as err:  # spaCy's E1014 and msgpack/zlib errors do not name the file
            raise ValueError(
                f"{where}: cannot read {file} as a .spacy DocBin ({type(err).__name__}: {err}); "
                "make it with `python -m spacy_crossner convert` or DocBin.to_disk"
            ) from err
        yield from docs


def _read_text_lines(nlp: Language, path: Path, where: str = "") -> Iterator[Doc]:
    where = where or str(path)
    try:
        text = read_utf8(path)
    except FormatError as err:
        raise ValueError(f"{where}: {err}") from None
    if looks_like_columns(text):
        raise ValueError(
            f"{where}: this is a token/tag column file, not raw text (one sentence per line); "
            f"convert it: python -m spacy_crossner raw-text {path} --output RAW.txt --domain NAME"
        )
    for line in split_lines(text):
        words = line.split()
        if words:
            yield Doc(nlp.vocab, words=words, spaces=[True] * (len(words) - 1) + [False])


def _strip_entities(nlp: Language, doc: Doc) -> Doc:
    words = [t.text for t in doc]
    spaces = [bool(t.whitespace_) for t in doc]
    stripped = Doc(nlp.vocab, words=words, spaces=spaces)
    set_domain(stripped, get_domain(doc))
    return stripped


def _gold_tokenized_example(nlp: Language, reference: Doc) -> Example:
    words = [t.text for t in reference]
    spaces = [bool(t.whitespace_) for t in reference]
    predicted = Doc(nlp.vocab, words=words, spaces=spaces)
    set_domain(predicted, get_domain(reference))
    return Example(predicted, reference)


def _sample(docs: List[Doc], factor: float, rng: random.Random) -> List[Doc]:
    whole = int(factor)
    out = docs * whole
    rest = factor - whole
    if rest > 0 and docs:
        out.extend(rng.sample(docs, int(round(rest * len(docs)))))
    return out


def _sample_count(docs: List[Doc], count: int, rng: random.Random) -> List[Doc]:
    """``count`` docs: every doc count // len(docs) times, plus a random sample of the rest."""
    if not docs:
        return []
    whole, rest = divmod(count, len(docs))
    out = docs * whole
    if rest:
        out.extend(rng.sample(docs, rest))
    return out


SCHEDULES = ("alternate", "sum")


@registry.batchers("spacy_crossner.domain_schedule.v1")
def make_domain_schedule_batcher(
    schedule: str = "alternate", size: int = 10
) -> Callable[[Iterable[Example]], Iterator[List[Example]]]:
    """Batches that follow the multi-cell LSTM's update schedules (``[training.batcher]``).

    Examples are split into streams, one per domain (raw-text docs, without entity annotation,
    form their own stream per domain), each kept in the order given (spaCy shuffles each pass).
    schedule (str): "alternate" (the authors' SDA code: single-domain batches of ``size`` docs,
        the streams taking turns) or "sum" (the paper's Algorithm 1 and the UDA code: every
        batch holds ``size`` docs of each stream, so one update sums the domains' losses).
        A stream that runs out drops out until the next pass.
    size (int): docs per stream in a batch (the code: 10).
    """
    if schedule not in SCHEDULES:
        raise ValueError(
            f"spacy_crossner.domain_schedule.v1: schedule must be one of {SCHEDULES}, got {schedule!r}"
        )
    if size < 1:
        raise ValueError(f"spacy_crossner.domain_schedule.v1: size must be >= 1, got {size}")

    def batcher(examples: Iterable[Example]) -> Iterator[List[Example]]:
        streams: Dict[Any, List[Example]] = {}
        for eg in examples:
            raw = not eg.reference.has_annotation("ENT_IOB")
            key = (example_domain(eg), raw)
            streams.setdefault(key, []).append(eg)
        chunks = [[s[i : i + size] for i in range(0, len(s), size)] for s in streams.values()]
        for step in zip_longest(*chunks):
            present = [chunk for chunk in step if chunk]
            if schedule == "alternate":
                yield from present
            else:
                yield [eg for chunk in present for eg in chunk]

    return batcher
