"""Corpus readers that know about domains.

``spacy_crossner.MultiDomainCorpus.v1`` yields training examples from several labelled domains
and optional raw-text domains, each upsampled (or downsampled) by its own factor and shuffled
under a seed. ``spacy_crossner.DomainCorpus.v1`` reads one domain (dev and test sets).
Examples keep the gold tokenization: the predicted doc has the reference's words.
"""
import logging
import random
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Union

from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.util import registry

from .domains import get_domain, set_domain

logger = logging.getLogger("spacy_crossner")

RAW_TEXT_SUFFIXES = (".txt", ".text", ".raw")


@registry.readers("spacy_crossner.MultiDomainCorpus.v1")
def create_multi_domain_corpus(
    paths: Dict[str, str],
    upsample: Optional[Dict[str, float]] = None,
    raw_paths: Optional[Dict[str, str]] = None,
    raw_upsample: Optional[Dict[str, float]] = None,
    seed: int = 0,
    shuffle: bool = True,
    max_length: int = 0,
    limit: int = 0,
) -> Callable[[Language], Iterable[Example]]:
    """Training examples from several domains.

    paths (Dict[str, str]): domain name -> a ``.spacy`` file or a folder of them (labelled).
    upsample (Optional[Dict[str, float]]): domain -> copies of its docs per epoch (default 1).
        2.5 = every doc twice plus a random half; 0.1 = a random tenth. CrossNER's joint
        setting upsamples the target domain (e.g. ``{"ai": 10}``).
    raw_paths (Optional[Dict[str, str]]): domain -> raw text: a ``.spacy`` file/folder, or a
        ``.txt`` file with one whitespace-tokenized sentence per line. These docs have no entity
        annotation and only feed language-model and dictionary objectives.
    raw_upsample (Optional[Dict[str, float]]): like ``upsample``, for raw-text domains.
    seed (int): seed of sampling and shuffling; each pass over the corpus reshuffles, and the
        sequence of passes is the same for the same seed.
    shuffle (bool): shuffle the examples of a pass (False keeps domain order, for debugging).
    max_length (int): skip docs longer than this many tokens (0 = no limit); skipped docs are
        counted in the log.
    limit (int): use at most this many docs per domain (0 = all).
    """
    return MultiDomainCorpus(
        paths,
        upsample=upsample or {},
        raw_paths=raw_paths or {},
        raw_upsample=raw_upsample or {},
        seed=seed,
        shuffle=shuffle,
        max_length=max_length,
        limit=limit,
    )


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
    paths = {domain or "": path}
    return MultiDomainCorpus(
        paths, shuffle=False, max_length=max_length, limit=limit, keep_domain=domain is None
    )


class MultiDomainCorpus:
    """Reads labelled and raw-text domains; calling it yields one pass of examples."""

    def __init__(
        self,
        paths: Dict[str, str],
        *,
        upsample: Optional[Dict[str, float]] = None,
        raw_paths: Optional[Dict[str, str]] = None,
        raw_upsample: Optional[Dict[str, float]] = None,
        seed: int = 0,
        shuffle: bool = True,
        max_length: int = 0,
        limit: int = 0,
        keep_domain: bool = False,
    ) -> None:
        self.paths = {d: _check_path(p, f"paths.{d}") for d, p in paths.items()}
        self.raw_paths = {d: _check_path(p, f"raw_paths.{d}") for d, p in (raw_paths or {}).items()}
        self.upsample = dict(upsample or {})
        self.raw_upsample = dict(raw_upsample or {})
        for name, table, known in (
            ("upsample", self.upsample, self.paths),
            ("raw_upsample", self.raw_upsample, self.raw_paths),
        ):
            for domain, factor in table.items():
                if domain not in known:
                    raise ValueError(
                        f"MultiDomainCorpus: {name} names domain '{domain}', which has no path "
                        f"(domains: {sorted(known)})"
                    )
                if not factor >= 0:
                    raise ValueError(f"MultiDomainCorpus: {name}.{domain} must be >= 0, got {factor}")
        if not self.paths and not self.raw_paths:
            raise ValueError("MultiDomainCorpus: give at least one domain in paths or raw_paths")
        self.seed = seed
        self.shuffle = shuffle
        self.max_length = max_length
        self.limit = limit
        self.keep_domain = keep_domain
        self._passes = 0

    def __call__(self, nlp: Language) -> Iterator[Example]:
        rng = random.Random(f"{self.seed}-{self._passes}")
        self._passes += 1
        pool: List[Example] = []
        for domain, path in self.paths.items():
            docs = self._read(nlp, domain, path, raw=False)
            pool.extend(_sample(docs, self.upsample.get(domain, 1.0), rng))
        for domain, path in self.raw_paths.items():
            docs = self._read(nlp, domain, path, raw=True)
            pool.extend(_sample(docs, self.raw_upsample.get(domain, 1.0), rng))
        if self.shuffle:
            rng.shuffle(pool)
        yield from pool

    def _read(self, nlp: Language, domain: str, path: Path, raw: bool) -> List[Example]:
        if raw and path.is_file() and path.suffix in RAW_TEXT_SUFFIXES:
            docs: Iterable[Doc] = _read_text_lines(nlp, path)
        else:
            docs = _read_docbins(nlp, path)
        examples = []
        skipped = 0
        for doc in docs:
            if self.max_length and len(doc) > self.max_length:
                skipped += 1
                continue
            if not self.keep_domain:
                set_domain(doc, domain)
            if raw and doc.has_annotation("ENT_IOB"):
                # Raw-text domains never carry labels, even when made from labelled files.
                doc = _strip_entities(nlp, doc)
            examples.append(_gold_tokenized_example(nlp, doc))
            if self.limit and len(examples) >= self.limit:
                break
        if skipped:
            logger.info("%s: skipped %d docs longer than max_length=%d", path, skipped, self.max_length)
        return examples


def _check_path(path: Union[str, Path], setting: str) -> Path:
    if path is None or str(path) in ("", "None", "null"):
        raise ValueError(f"MultiDomainCorpus: {setting} is not set")
    path = Path(path)
    if not path.exists():
        raise ValueError(f"MultiDomainCorpus: {setting} = {path} does not exist")
    return path


def _read_docbins(nlp: Language, path: Path) -> Iterator[Doc]:
    files = sorted(path.glob("**/*.spacy")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"No .spacy files in {path}")
    for file in files:
        yield from DocBin().from_disk(file).get_docs(nlp.vocab)


def _read_text_lines(nlp: Language, path: Path) -> Iterator[Doc]:
    with path.open(encoding="utf8") as f:
        for line in f:
            words = line.split()
            if words:
                yield Doc(nlp.vocab, words=words)


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


def _sample(examples: List[Example], factor: float, rng: random.Random) -> List[Example]:
    whole = int(factor)
    out = examples * whole
    rest = factor - whole
    if rest > 0 and examples:
        out.extend(rng.sample(examples, int(round(rest * len(examples)))))
    return out
