"""The Doc extension that records which domain a document comes from, and the one place
where a doc's domain is resolved.

The converter and the readers set ``doc._.domain``; DocBins written with ``store_user_data=True``
keep it. The ``crossner`` component predicts a doc with the head of ``doc._.domain`` and falls back
to its ``target_domain`` when the doc has none (e.g. ``nlp("raw text")``); a domain without labels
of its own is tagged with the labels of the domain it is an alias of (``domain_aliases``).
"""
from typing import Dict, Iterable, List, Optional

from spacy.tokens import Doc
from spacy.training import Example

DOMAIN_ATTR = "domain"


def register_domain_extension() -> None:
    """Register ``Doc._.domain`` (default None) unless it exists already."""
    if not Doc.has_extension(DOMAIN_ATTR):
        Doc.set_extension(DOMAIN_ATTR, default=None)


register_domain_extension()


def get_domain(doc: Doc) -> Optional[str]:
    """The domain of a doc, or None when it has none."""
    return doc._.get(DOMAIN_ATTR)


def set_domain(doc: Doc, domain: Optional[str]) -> None:
    """Tag a doc with a domain name (None removes the tag)."""
    doc._.set(DOMAIN_ATTR, domain)


class UnknownDomainError(ValueError):
    """A doc names a domain the component has no labels for."""


def doc_domain(doc: Doc, default: Optional[str] = None) -> Optional[str]:
    """A doc's own domain: ``doc._.domain``, else ``default`` (the component's target)."""
    return get_domain(doc) or default


def example_domain(eg: Example, default: Optional[str] = None) -> Optional[str]:
    """An Example's domain: its reference doc's, else its predicted doc's, else ``default``."""
    return get_domain(eg.reference) or get_domain(eg.predicted) or default


def labelled_domain(
    domain: Optional[str], known: Iterable[str], aliases: Optional[Dict[str, str]] = None
) -> str:
    """The labelled domain whose labels, head and CRF tag docs of ``domain``.

    domain (Optional[str]): a doc's own domain (:func:`doc_domain`).
    known (Iterable[str]): the domains the component has labels for.
    aliases (Optional[Dict[str, str]]): the component's ``domain_aliases``.
    Raises UnknownDomainError naming the domain and the known ones.
    """
    known = list(known)
    domain = (aliases or {}).get(domain, domain)
    if domain is None:
        raise UnknownDomainError(
            "A doc has no domain (doc._.domain is None) and the crossner component has no "
            "target_domain. Set target_domain in [components.crossner] or doc._.domain. "
            f"Known domains: {known}"
        )
    if domain not in known:
        raise UnknownDomainError(
            f"Unknown domain '{domain}': the crossner component has labels for {known}. "
            "Set doc._.domain to one of them (python -m spacy_crossner evaluate takes "
            "--domain), train with labelled data from that domain, or map it to a labelled "
            "domain with domain_aliases in [components.crossner]."
        )
    return domain


def doc_domains(docs: Iterable[Doc], default: Optional[str]) -> List[Optional[str]]:
    """Each doc's own domain, or ``default`` for docs without one."""
    return [doc_domain(doc, default) for doc in docs]


def resolve_domains(
    docs: Iterable[Doc],
    known: Iterable[str],
    default: Optional[str],
    aliases: Optional[Dict[str, str]] = None,
) -> List[str]:
    """The labelled domain of each doc (:func:`doc_domain`, then :func:`labelled_domain`)."""
    known = list(known)
    return [labelled_domain(d, known, aliases) for d in doc_domains(docs, default)]
