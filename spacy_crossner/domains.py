"""The Doc extension that records which domain a document comes from.

The converter and the readers set ``doc._.domain``; DocBins written with ``store_user_data=True``
keep it. The ``crossner`` component predicts a doc with the head of ``doc._.domain`` and falls back
to its ``target_domain`` when the doc has none (e.g. ``nlp("raw text")``).
"""
from typing import Dict, Iterable, List, Optional

from spacy.tokens import Doc

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


def doc_domains(docs: Iterable[Doc], default: Optional[str]) -> List[Optional[str]]:
    """Each doc's own domain, or ``default`` for docs without one."""
    return [get_domain(doc) or default for doc in docs]


def resolve_domains(
    docs: Iterable[Doc],
    known: Iterable[str],
    default: Optional[str],
    aliases: Optional[Dict[str, str]] = None,
) -> List[str]:
    """The labelled domain whose labels tag each doc.

    That is the doc's own ``doc._.domain`` (else ``default``), mapped through ``aliases``: a
    domain without labels of its own (zero-shot / unsupervised adaptation) is tagged with the
    labels, head and CRF of the domain it is an alias of.
    docs (Iterable[Doc]): the batch.
    known (Iterable[str]): the domains the component has labels for.
    default (Optional[str]): the component's ``target_domain``.
    aliases (Optional[Dict[str, str]]): the component's ``domain_aliases``.
    RETURNS (List[str]): one labelled domain name per doc.
    Raises UnknownDomainError naming the domain and the known ones.
    """
    known = list(known)
    aliases = aliases or {}
    out = []
    for domain in doc_domains(docs, default):
        domain = aliases.get(domain, domain)
        if domain is None:
            raise UnknownDomainError(
                "A doc has no domain (doc._.domain is None) and the crossner component has no "
                "target_domain. Set target_domain in [components.crossner] or doc._.domain. "
                f"Known domains: {known}"
            )
        if domain not in known:
            raise UnknownDomainError(
                f"Unknown domain '{domain}': the crossner component has labels for {known}. "
                "Set doc._.domain to one of them, train with labelled data from that domain, "
                "or map it to a labelled domain with domain_aliases in [components.crossner]."
            )
        out.append(domain)
    return out
