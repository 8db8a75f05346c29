"""Checks of a training setup that would otherwise train something useless without a word.

Each is called with one line from where its data is seen: :func:`check_initialize` (labels and
dev corpus) from the component's ``initialize``, :func:`check_distinct_domains`
from ``MultiDomainCorpus`` once its corpora are read, :func:`missing_path` by the readers.

- a training corpus whose labelled docs hold no entity at all (every tag O) trains a model that
  predicts nothing: an error (one such domain beside others: a warning);
- a dev corpus without gold entities scores every model ents_f = 0, so ``model-best`` is the
  untrained first model and patience stops training early: an error;
- two labelled corpora of ``MultiDomainCorpus`` whose docs carry the same domain (converted with
  the same ``--domain``) would merge their label sets into one domain: an error unless both
  sections set ``domain`` explicitly;
- a corpus path that does not exist names the reader and where its ``path`` is set.
"""
import warnings
from typing import Any, Dict, List, Optional, Sequence


def check_initialize(labels: Dict[str, List[str]], nlp: Any) -> None:
    """What the component's ``initialize`` checks: :func:`check_labels`, then (with ``nlp``)
    :func:`check_dev_corpus`."""
    check_labels(labels)
    if nlp is not None:
        check_dev_corpus(nlp, labels)


def check_labels(labels: Dict[str, List[str]]) -> None:
    """Labels collected per domain by ``initialize``.

    labels (Dict[str, List[str]]): the labels of each labelled domain.
    """
    empty = [domain for domain, domain_labels in labels.items() if not domain_labels]
    if not empty:
        return
    described = ", ".join(repr(d) for d in empty)
    if len(empty) == len(labels):
        raise ValueError(
            f"The crossner component found no entity in the training corpus: every token of "
            f"domain {described} is tagged O, so the model would learn to predict nothing. Check "
            "the files behind [corpora.train] (`python -m spacy_crossner convert` prints the "
            "entities it read per label), or give labels in [initialize.components.crossner.labels]"
        )
    warnings.warn(
        f"crossner: domain {described} has no entity in the training corpus (every token O): "
        "it only teaches its domain to predict nothing. Check its corpus in [corpora.train].",
        UserWarning,
    )


def check_dev_corpus(nlp: Any, labels: Optional[Dict[str, List[str]]] = None) -> None:
    """The dev corpus of ``nlp.config`` (``[training] dev_corpus``) is readable and has gold
    entities; gold types the model has no label for (in the docs' domain) are warned about.

    Only the setup of ``spacy train`` is checked: when the config names no dev corpus or its
    reader cannot be built here (no path set, as in a pipeline initialised outside training),
    spaCy reports that itself when it reads the corpus. An error of this package's reader when
    reading is raised now, naming the section, rather than at the first evaluation.
    """
    from spacy.util import registry

    from .domains import get_domain

    try:
        config = nlp.config.interpolate()
        dot_name = config["training"]["dev_corpus"]
        section: Any = config
        for part in dot_name.split("."):
            section = section[part]
        reader = registry.resolve({"reader": section})["reader"]
    except Exception:  # noqa: BLE001 - not this check's concern; spaCy reports it when reading
        return
    ours = str(section.get("@readers", "")).startswith("spacy_crossner.")
    try:
        examples = list(reader(nlp))
    except ValueError as err:
        if ours:
            raise ValueError(f"[{dot_name}] (the dev corpus): {err}") from None
        return
    except Exception:  # noqa: BLE001
        return
    path = section.get("path") if isinstance(section, dict) else None
    where = f"[{dot_name}] ({section.get('@readers')}" + (f", path = {path})" if path else ")")
    if examples and not any(len(eg.reference.ents) for eg in examples):
        raise ValueError(
            f"{where}: none of its {len(examples)} docs has a gold entity, so every model "
            "scores ents_f = 0, model-best would be the untrained model and patience would stop "
            "training early. Use the target domain's labelled dev set (--paths.dev / [paths])."
        )
    if not labels:
        return
    unknown: Dict[str, set] = {}
    for eg in examples:
        domain = get_domain(eg.reference)
        known = set(labels.get(domain, ())) if domain in labels else None
        for ent in eg.reference.ents:
            if known is not None and ent.label_ not in known:
                unknown.setdefault(domain, set()).add(ent.label_)
    for domain, missing in unknown.items():
        warnings.warn(
            f"{where}: its docs of domain {domain!r} have gold types the model has no label for "
            f"in that domain ({', '.join(sorted(missing))}): they count as misses in every "
            "evaluation. Is it the dev set of the training domain?",
            UserWarning,
        )


def check_distinct_domains(entries: Sequence[Any], docs: Sequence[Sequence[Any]]) -> None:
    """Two labelled corpora of a MultiDomainCorpus may only share a domain when both set it.

    entries (Sequence[CorpusEntry]): the corpora (name, setting, raw, domain).
    docs (Sequence[Sequence[Doc]]): the docs read for each entry, their domain set.
    """
    from .domains import get_domain

    seen: Dict[str, Any] = {}
    for entry, entry_docs in zip(entries, docs):
        if entry.raw:
            continue
        for domain in sorted({get_domain(doc) for doc in entry_docs}, key=str):
            other = seen.setdefault(domain, entry)
            if other is entry or (other.domain is not None and entry.domain is not None):
                continue
            raise ValueError(
                f"MultiDomainCorpus: [corpora.*.domains.{other.name}] and "
                f"[corpora.*.domains.{entry.name}] both hold docs of domain {domain!r} (converted "
                "with the same --domain), so their label sets would merge into one domain. Give "
                f"one of them another domain (`domain = \"...\"` in its section, or convert it "
                f"again with another --domain); if they are one domain, set `domain = "
                f"\"{domain}\"` in both sections."
            )


def missing_path(reader: str, setting: str, path: Any, section_hint: Optional[str]) -> str:
    """The message for a corpus ``path`` that does not exist."""
    hint = f" ({section_hint} in this package's configs)" if section_hint else ""
    return (
        f"{reader}: {setting} = {path} does not exist. It is the `path` of the [corpora.*] "
        f"section that uses {reader}{hint}: give an existing .spacy file or folder "
        "(`python -m spacy_crossner convert` writes them)"
    )
