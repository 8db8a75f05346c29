"""What training uses, in one readable block printed when the ``crossner`` component initializes.

A user sees, before the first step: each domain of the training corpus with its sentences,
entities and labels, the mix of one pass (sentences per domain and their share), the target
domain and where it came from, the architecture and its feature layers with their settings, and
the static vectors (rows, width, case handling, and how many training tokens have a vector).
Everything is read from one pass of the training examples and from the pipeline's config, so it
works with any reader and any architecture.
"""
from collections import Counter
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import resolve_dot_names
from wasabi import Printer

from .domains import example_domain, get_domain
from .readers import MultiDomainCorpus

TITLE = "crossner: what training uses"
# Lowercase vector keys sampled to tell whether a table keys Title-case forms to their rows.
CASE_SAMPLE = 2000


class DomainStats:
    """Counts of one stream: labelled docs of a domain, or its raw text."""

    def __init__(self) -> None:
        self.per_pass = 0
        self.docs: Dict[int, Doc] = {}  # id(doc) -> doc: the distinct sentences
        self.labels: Counter = Counter()

    def add_doc(self, doc: Doc) -> None:
        if id(doc) not in self.docs:
            self.docs[id(doc)] = doc
            self.labels.update(ent.label_ for ent in doc.ents)


def _key(doc: Doc, default: Optional[str]) -> Tuple[str, bool]:
    return (get_domain(doc) or default or "(none)", not doc.has_annotation("ENT_IOB"))


def collect(
    nlp: Language, get_examples: Callable[[], Iterable[Example]], default_domain: Optional[str]
) -> Tuple[Dict[Tuple[str, bool], DomainStats], str]:
    """Counts per (domain, raw) of the corpora and of one pass, and where they come from.

    With a :class:`MultiDomainCorpus` as ``[training] train_corpus``, a fresh copy of it gives
    the whole corpora and its first pass (the pass training starts with: same seed); otherwise
    one pass of ``get_examples`` gives both (sentences = the distinct ones of that pass).
    """
    stats: Dict[Tuple[str, bool], DomainStats] = {}
    corpus = _train_corpus(nlp)
    if corpus is not None:
        for docs in corpus.docs(nlp):
            for doc in docs:
                stats.setdefault(_key(doc, default_domain), DomainStats()).add_doc(doc)
        where = f"[{nlp.config['training']['train_corpus']}]"
        examples: Iterable[Example] = corpus(nlp)
    else:
        where = "the training examples"
        examples = get_examples()
    for eg in examples:
        key = _key(eg.reference, example_domain(eg, default_domain))
        entry = stats.setdefault(key, DomainStats())
        entry.per_pass += 1
        if corpus is None:
            entry.add_doc(eg.reference)
    return stats, where


def _train_corpus(nlp: Language) -> Optional[MultiDomainCorpus]:
    """A fresh copy of the config's ``[training] train_corpus`` when it is a MultiDomainCorpus
    (None for a pipeline built in code or another reader)."""
    name = nlp.config.get("training", {}).get("train_corpus")
    if not name:
        return None
    try:
        corpus = resolve_dot_names(nlp.config.interpolate(), [name])[0]
    except Exception:  # no such section, or its paths unset: nothing to read
        return None
    return corpus if isinstance(corpus, MultiDomainCorpus) else None


def summary_lines(nlp: Language, pipe: Any, get_examples: Callable[[], Iterable[Example]]) -> List[str]:
    """The lines of the block (without its title).

    nlp (Language): the pipeline being initialized (its config names the corpora and the
        architecture).
    pipe (CrossNER): the initialized component (labels, target domain).
    get_examples (Callable[[], Iterable[Example]]): the training examples; one pass is read
        when the training corpus is not a MultiDomainCorpus of the config.
    """
    stats, where = collect(nlp, get_examples, pipe.default_domain())
    component = _interpolated(nlp).get("components", {}).get(pipe.name, {})
    lines = domain_lines(stats, where)
    lines.append(target_line(component, pipe))
    lines.extend(feature_lines(component))
    lines.extend(vector_lines(nlp, stats, component))
    return lines


def _interpolated(nlp: Language) -> Dict[str, Any]:
    """The pipeline's config with variables filled in (``spacy train`` keeps ``${vars.x}``)."""
    try:
        return nlp.config.interpolate()
    except Exception:  # a reference that cannot be filled: show the settings as written
        return nlp.config


def domain_lines(stats: Dict[Tuple[str, bool], DomainStats], where: str) -> List[str]:
    total = sum(s.per_pass for s in stats.values()) or 1
    labelled_total = sum(s.per_pass for (_, raw), s in stats.items() if not raw) or 1
    rows = []
    for (domain, raw), s in sorted(stats.items(), key=lambda item: (item[0][1], item[0][0])):
        name = f"{domain} (raw text)" if raw else domain
        entities = "-" if raw else f"{sum(s.labels.values()):,}"
        copies = s.per_pass / len(s.docs) if s.docs else 0.0
        share = "-" if raw else f"{100 * s.per_pass / labelled_total:.1f}%"
        rows.append((name, f"{len(s.docs):,}", entities, f"{s.per_pass:,}", f"x{copies:.2f}", share))
    header = ("domain", "sentences", "entities", "per pass", "copies", "share")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    fmt = lambda r: "  " + "  ".join(
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
    )
    lines = [f"Training corpus (from {where}): one pass = {total:,} docs; share = of the labelled docs of a pass"]
    lines += [fmt(header)] + [fmt(r) for r in rows]
    for (domain, raw), s in sorted(stats.items()):
        if not raw:
            labels = ", ".join(f"{label} {n:,}" for label, n in sorted(s.labels.items()))
            lines.append(f"  labels of {domain} ({len(s.labels)}): {labels or 'none'}")
    return lines


def target_line(component: Dict[str, Any], pipe: Any) -> str:
    configured = component.get("target_domain")
    target = pipe.default_domain()
    if configured is not None:
        how = f"set in [components.{pipe.name}] target_domain"
    elif pipe.target_domain is not None:
        how = "inferred from the target corpus (set --vars.target_domain to choose another)"
    elif target is not None:
        how = "the only labelled domain"
    else:
        return "Target domain: none (every doc must carry its doc._.domain)"
    return f"Target domain (docs without doc._.domain): {target}, {how}"


def _settings(block: Dict[str, Any]) -> Tuple[str, str]:
    """A config block's registered name and its plain settings, in config order."""
    name = next((str(v) for k, v in block.items() if k.startswith("@")), "?")
    plain = [f"{k}={v}" for k, v in block.items() if not k.startswith("@") and not isinstance(v, dict)]
    return name, ", ".join(plain)


def feature_lines(component: Dict[str, Any]) -> List[str]:
    model = component.get("model")
    if not isinstance(model, dict):
        return ["Model: not described by the config"]
    arch, settings = _settings(model)
    lines = [f"Model: {arch} ({settings})"]
    for key, value in model.items():
        if isinstance(value, dict):
            sub, sub_settings = _settings(value)
            lines.append(f"  {key}: {sub} ({sub_settings})")
    return lines


def uses_static_vectors(component: Dict[str, Any]) -> Optional[bool]:
    """Whether the component's features read ``nlp.vocab.vectors`` (None: cannot tell)."""
    model = component.get("model", {})
    found: List[bool] = []

    def walk(block: Any) -> None:
        if isinstance(block, dict):
            if "include_static_vectors" in block:
                found.append(bool(block["include_static_vectors"]))
            if str(block.get("@architectures", "")).startswith("spacy.StaticVectors"):
                found.append(True)
            for value in block.values():
                walk(value)

    walk(model)
    return any(found) if found else None


def vector_case(vectors: Any) -> str:
    """How a table handles case, from its keys: Title-case forms keyed to lowercase rows
    (``python -m spacy_crossner vectors`` of an uncased table) or exact text only."""
    strings = vectors.strings
    checked = mapped = 0
    for key in vectors.key2row:
        if checked >= CASE_SAMPLE:
            break
        word = strings[key] if key in strings else None
        if not word or not word.isalpha() or word.lower() != word:
            continue
        checked += 1
        title = word[:1].upper() + word[1:]
        mapped += vectors.find(key=title) == vectors.find(key=word) if title in strings else 0
    if checked and mapped >= checked / 2:
        return "uncased table, Title-case and UPPER forms read their lowercase word's row"
    return "keys as in the table: a token reads the row of its exact text"


def vector_lines(
    nlp: Language, stats: Dict[Tuple[str, bool], DomainStats], component: Dict[str, Any]
) -> List[str]:
    vectors = nlp.vocab.vectors
    used = uses_static_vectors(component)
    rows, width = vectors.shape if vectors.shape else (0, 0)
    if not width or not vectors.key2row:
        note = " (but the features ask for them: include_static_vectors = true)" if used else ""
        return [f"Vectors: none{note}"]
    tokens = Counter(t.text for s in stats.values() for doc in s.docs.values() for t in doc)
    have = {text for text in tokens if vectors.find(key=text) >= 0}
    n_tokens = sum(tokens.values()) or 1
    n_have = sum(n for text, n in tokens.items() if text in have)
    use = {True: "read by the features", False: "loaded but not read (include_static_vectors = false)",
           None: "loaded"}[used]
    return [
        f"Vectors: {vectors.name or 'unnamed'}, {rows:,} rows x {width}, {len(vectors.key2row):,} "
        f"keys, {use}",
        f"  case: {vector_case(vectors)}",
        f"  coverage of the training tokens: {100 * n_have / n_tokens:.1f}% of {n_tokens:,} tokens, "
        f"{len(have):,} of {len(tokens):,} distinct words",
    ]


def print_training_summary(
    nlp: Language, pipe: Any, get_examples: Callable[[], Iterable[Example]], printer: Optional[Printer] = None
) -> List[str]:
    """Print the block under a divider (spaCy's training output style) and return its lines.

    printer (Optional[Printer]): prints the divider (default: a wasabi Printer, as spaCy's).
    """
    printer = printer or Printer()
    lines = summary_lines(nlp, pipe, get_examples)
    printer.divider(TITLE)
    for line in lines:
        # Plain print: the table's columns must not be wrapped at the terminal's width.
        print(line, flush=True)
    return lines
