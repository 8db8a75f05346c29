"""The Doc extension that records which domain a document comes from.

The converter and the readers set ``doc._.domain``; DocBins written with ``store_user_data=True``
keep it. The ``crossner`` component predicts a doc with the head of ``doc._.domain`` and falls back
to its ``target_domain`` when the doc has none (e.g. ``nlp("raw text")``).
"""
from typing import Iterable, List, Optional

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


def resolve_domains(
    docs: Iterable[Doc], known: Iterable[str], default: Optional[str]
) -> List[str]:
    """The domain used for each doc: its own ``doc._.domain``, else ``default``.

    docs (Iterable[Doc]): the batch.
    known (Iterable[str]): the domains the component has labels for.
    default (Optional[str]): the component's ``target_domain``.
    RETURNS (List[str]): one domain name per doc.
    Raises UnknownDomainError naming the domain and the known ones.
    """
    known = list(known)
    out = []
    for doc in docs:
        domain = get_domain(doc) or default
        if domain is None:
            raise UnknownDomainError(
                "A doc has no domain (doc._.domain is None) and the crossner component has no "
                "target_domain. Set target_domain in [components.crossner] or doc._.domain. "
                f"Known domains: {known}"
            )
        if domain not in known:
            raise UnknownDomainError(
                f"Unknown domain '{domain}': the crossner component has labels for {known}. "
                "Set doc._.domain to one of them, or train with data from that domain."
            )
        out.append(domain)
    return out
