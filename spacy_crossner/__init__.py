"""spacy_crossner: cross-domain named entity recognition for spaCy."""
from . import domains  # noqa: F401  (registers Doc._.domain)
from . import augment, callbacks, listeners, misc, models, optimizers, pipeline, readers, torch_threads  # noqa: F401  (register functions)
from .domains import get_domain, set_domain
from .pipeline import CrossNER

__version__ = "0.1.0"

__all__ = ["CrossNER", "get_domain", "set_domain", "__version__"]
