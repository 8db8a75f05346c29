"""spacy_crossner: cross-domain named entity recognition for spaCy."""
from . import domains  # noqa: F401  (registers Doc._.domain)
from . import misc  # noqa: F401
from .domains import get_domain, set_domain

__version__ = "0.1.0"

__all__ = ["get_domain", "set_domain", "__version__"]
