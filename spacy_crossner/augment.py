"""``spacy_crossner.mention_replace.v1``: entity mention replacement as a spaCy augmenter.

Each entity of a training example is, with probability ``probability``, swapped for another
mention of the same label and the same domain (``doc._.domain``), drawn from labelled files of
that domain (``mentions``: its training set) and/or from dictionaries. Tokens outside the swapped
mentions, their whitespace, their entity tags (O, or missing) and the doc's domain stay as they
were; the new mention's tokens get ``B-``/``I-`` tags of the label, so the tags stay valid BIO.
An example whose domain has no pool, a raw-text example (no entity annotation) and an entity
whose label has no other surface pass through unchanged.

```ini
[corpora.train.augmenter]
@augmenters = "spacy_crossner.mention_replace.v1"
probability = 0.3
seed = 0

[corpora.train.augmenter.mentions]
ai = "corpus/ai/train.spacy"

[corpora.train.augmenter.dictionaries.conll2003]
person = "../shared/data/dictionaries/conll2003/person.txt"
organisation = "../shared/data/dictionaries/conll2003/organization.txt"
```

With ``from_corpus = true`` the pool also holds the entities of the labelled training corpus
itself, each domain's own (read by ``spacy_crossner.MultiDomainCorpus``): a config that need not
name the domain or repeat its path, e.g. to swap the target's mentions among themselves in a
fine-tune.

``mentions`` maps a domain to labelled text (a ``.spacy`` file, a token/tag column file, or a
folder of them). ``dictionaries`` maps a domain to an entity list (a file or a folder of files;
entries ``surface`` or ``surface<TAB>type``, an untyped entry taking the file's stem as label,
as the multi-cell LSTM's dictionaries) or to a table ``label = file`` when the file names do not
spell the labels. The random choices come from one generator seeded by ``seed``: the same
examples in the same order are augmented the same way, and each pass draws anew.
"""
import random
import warnings
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry

from .domains import example_domain, get_domain, set_domain

MentionPool = Dict[Tuple[str, str], List[Tuple[str, ...]]]


@registry.augmenters("spacy_crossner.mention_replace.v1")
def create_mention_replace_augmenter(
    probability: float = 0.3,
    mentions: Optional[Dict[str, str]] = None,
    dictionaries: Optional[Dict[str, Union[str, Dict[str, str]]]] = None,
    seed: int = 0,
    from_corpus: bool = False,
) -> "MentionReplacer":
    """Swap entity mentions for others of the same label and domain (module docstring).

    probability (float): the chance that each entity of an example is swapped, in [0, 1].
    mentions (Optional[Dict[str, str]]): domain -> labelled text whose entities are the pool.
    dictionaries (Optional[Dict[str, Union[str, Dict[str, str]]]]): domain -> entity list file or
        folder, or domain -> {label: file}.
    seed (int): seed of the random choices.
    from_corpus (bool): also draw from the training corpus's own entities, per domain (the
        reader must be spacy_crossner.MultiDomainCorpus, which hands them over).
    RETURNS (MentionReplacer): the augmenter, ``(nlp, example) -> Iterator[Example]``.
    """
    where = "[corpora.train.augmenter] spacy_crossner.mention_replace.v1"
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 <= probability <= 1:
        raise ValueError(f"{where}: probability must be a number in [0, 1], got {probability!r}")
    if not isinstance(from_corpus, bool):
        raise ValueError(f"{where}: from_corpus must be true or false, got {from_corpus!r}")
    pool = read_mention_pool(mentions or {}, dictionaries or {}, where=where)
    if not pool and not from_corpus:
        raise ValueError(f"{where}: no mention to draw from; give `mentions` or `dictionaries`, "
                         "or set from_corpus = true")
    settings = {domain: [f"mentions.{domain}"] for domain in mentions or {}}
    for domain in dictionaries or {}:
        settings.setdefault(domain, []).append(f"dictionaries.{domain}")
    return MentionReplacer(pool, probability=float(probability), seed=seed, settings=settings,
                           from_corpus=from_corpus)


def read_mention_pool(
    mentions: Dict[str, str],
    dictionaries: Dict[str, Union[str, Dict[str, str]]],
    *,
    where: str = "mention_replace",
) -> MentionPool:
    """The surfaces (token tuples) of every (domain, label), without repeats, in file order.

    mentions (Dict[str, str]): domain -> labelled text (.spacy, column file, folder).
    dictionaries (Dict[str, Union[str, Dict[str, str]]]): domain -> entity list file/folder, or
        domain -> {label: file}.
    Raises ValueError naming the setting and the file that cannot be read.
    """
    from .dapt.corpus import DaptInputError, read_entity_lists
    from .dapt.rank import read_reference

    found: Dict[Tuple[str, str], Dict[Tuple[str, ...], None]] = {}

    def add(domain: str, label: str, surface: Sequence[str]) -> None:
        if surface:
            found.setdefault((domain, label), {})[tuple(surface)] = None

    for domain, path in mentions.items():
        try:
            ref = read_reference([path])
        except DaptInputError as err:
            raise ValueError(f"{where}: mentions.{domain} = {path}: {err}") from None
        if not ref.entities:
            # Plain text reads without error but would add nothing to the pool.
            raise ValueError(
                f"{where}: mentions.{domain} = {path}: no entity annotation in it; give labelled "
                "text (.spacy or a token/tag column file), or move entity lists to `dictionaries`"
            )
        for surface, label in ref.entities:
            add(domain, label, surface.split())
    for domain, value in dictionaries.items():
        tables = value.items() if isinstance(value, dict) else [(None, value)]
        for label, path in tables:
            setting = f"dictionaries.{domain}" + (f".{label}" if label else "")
            path = Path(path)
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")) \
                if path.is_dir() else [path]
            if not files:
                raise ValueError(f"{where}: {setting} = {path}: the folder holds no entity list file")
            try:
                gazetteer = read_entity_lists(files)
            except DaptInputError as err:
                raise ValueError(f"{where}: {setting} = {path}: {err}") from None
            for tokens, types in gazetteer.entries.items():
                add(domain, label or types[0], tokens)
    return {key: list(surfaces) for key, surfaces in found.items()}


class MentionReplacer:
    """The augmenter: a plain object (it pickles), called as ``augmenter(nlp, example)``.

    pool (MentionPool): surfaces per (domain, label).
    probability (float): chance of swapping each entity.
    seed (int): seed of its random generator.
    """

    def __init__(
        self, pool: MentionPool, *, probability: float, seed: int = 0,
        settings: Optional[Dict[str, List[str]]] = None, from_corpus: bool = False,
    ) -> None:
        self.pool = pool
        self.from_corpus = from_corpus
        # from_corpus: whether the training corpus's entities were added (add_corpus)
        self._corpus_added = False
        self.probability = probability
        self.seed = seed
        self.rng = random.Random(seed)
        # domain -> the settings its pool came from, to name them in warnings
        self.settings = settings or {}
        self._checked = False

    def add_corpus(self, docs: Iterable[Doc]) -> None:
        """With ``from_corpus``: add the entities of the labelled training docs to the pool, each
        under its doc's domain, after the configured mentions (no repeats). Called, once, by
        ``MultiDomainCorpus`` when it has read its corpora; a no-op without ``from_corpus``.

        docs (Iterable[Doc]): the labelled training docs (raw-text docs add nothing).
        """
        if not self.from_corpus or self._corpus_added:
            return
        self._corpus_added = True
        found = {key: dict.fromkeys(surfaces) for key, surfaces in self.pool.items()}
        for doc in docs:
            domain = get_domain(doc)
            if domain is None or not doc.has_annotation("ENT_IOB"):
                continue
            for ent in doc.ents:
                found.setdefault((domain, ent.label_), {})[tuple(t.text for t in ent)] = None
        self.pool = {key: list(surfaces) for key, surfaces in found.items()}

    def check_corpus(self, labels: Dict[str, Set[str]]) -> None:
        """Warn, once, about pool entries no training example can use: a domain key that is not a
        domain of the labelled training corpus, and a label spelled unlike every label of its
        domain (e.g. ``organization`` beside ``organisation``). Called by ``MultiDomainCorpus``
        once its corpora are read.

        labels (Dict[str, Set[str]]): the entity labels of each domain of the training corpus.
        """
        if self._checked:
            return
        self._checked = True
        where = "[corpora.train.augmenter] spacy_crossner.mention_replace.v1"
        domains = ", ".join(repr(d) for d in sorted(labels)) or "none"
        unused: Dict[str, List[str]] = {}
        for domain, label in self.pool:
            if domain in labels and label not in labels[domain]:
                unused.setdefault(domain, []).append(label)
        for domain in sorted({domain for domain, _label in self.pool}):
            setting = " / ".join(self.settings.get(domain, [domain]))
            if domain not in labels:
                warnings.warn(
                    f"{where}: {setting}: {domain!r} is not a domain of the labelled training "
                    f"corpus (its domains: {domains}), so these mentions are never used; use the "
                    "domain name the docs carry (doc._.domain, convert's --domain)",
                    UserWarning,
                )
            elif domain in unused:
                known = ", ".join(sorted(labels[domain])) or "none"
                missing = ", ".join(repr(label) for label in sorted(unused[domain]))
                warnings.warn(
                    f"{where}: {setting}: the label(s) {missing} are no label of domain {domain!r} "
                    f"in the training corpus (its labels: {known}), so their mentions are never "
                    "used; spell them as the corpus does (a dictionary table `label = file` renames)",
                    UserWarning,
                )

    def __call__(self, nlp: Language, example: Example) -> Iterator[Example]:
        if self.from_corpus and not self._corpus_added:
            raise ValueError(
                "[corpora.train.augmenter] spacy_crossner.mention_replace.v1: from_corpus = true "
                "draws from the training corpus, which only the reader spacy_crossner.MultiDomainCorpus "
                "(v1 or v2) hands over; use that reader for [corpora.train], or give `mentions` / "
                "`dictionaries` and set from_corpus = false"
            )
        reference = example.reference
        domain = example_domain(example)
        if not self.probability or not reference.has_annotation("ENT_IOB") or not reference.ents:
            yield example
            return
        words: List[str] = []
        spaces: List[bool] = []
        iob: List[Optional[str]] = []
        changed = False
        i = 0
        ents = {ent.start: ent for ent in reference.ents}
        while i < len(reference):
            ent = ents.get(i)
            if ent is None:
                token = reference[i]
                words.append(token.text)
                spaces.append(bool(token.whitespace_))
                iob.append(None if token.ent_iob == 0 else "O")
                i += 1
                continue
            surface = self._draw(domain, ent.label_, tuple(t.text for t in ent))
            if surface is None:
                surface = tuple(t.text for t in ent)
            else:
                changed = True
            words.extend(surface)
            spaces.extend([True] * (len(surface) - 1) + [bool(ent[-1].whitespace_)])
            iob.extend([f"B-{ent.label_}"] + [f"I-{ent.label_}"] * (len(surface) - 1))
            i = ent.end
        if not changed:
            yield example
            return
        new_reference = Doc(reference.vocab, words=words, spaces=spaces, ents=iob)
        predicted = Doc(example.predicted.vocab, words=words, spaces=spaces)
        _copy_doc_extensions(reference, new_reference)
        _copy_doc_extensions(example.predicted, predicted)
        if get_domain(new_reference) is None and domain is not None:
            set_domain(new_reference, domain)
        yield Example(predicted, new_reference)

    def _draw(self, domain: Optional[str], label: str, current: Tuple[str, ...]) -> Optional[Tuple[str, ...]]:
        # One draw per entity whatever happens next, so the sequence of choices only depends on
        # the examples and the seed.
        if self.rng.random() >= self.probability:
            return None
        choices = self.pool.get((domain, label)) if domain is not None else None
        if not choices:
            return None
        surface = choices[self.rng.randrange(len(choices))]
        if surface == current:
            if len(choices) == 1:
                return None
            # any other surface, uniformly
            index = self.rng.randrange(len(choices) - 1)
            surface = choices[index if choices[index] != current else len(choices) - 1]
        return surface


def _copy_doc_extensions(source: Doc, target: Doc) -> None:
    """Doc-level extension values (``doc._.domain`` and others); token/span ones do not align."""
    for key, value in source.user_data.items():
        if isinstance(key, tuple) and len(key) == 4 and key[0] == "._." and key[2] is None:
            target.user_data[key] = value
