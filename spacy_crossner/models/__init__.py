"""Registered architectures of spacy_crossner (importing a module registers its functions)."""
from . import embed, bilstm_crf, transformer_tagger  # noqa: F401
from . import int8_transformer  # noqa: F401
from . import moee  # noqa: F401
from . import label_aware  # noqa: F401
from . import multi_cell  # noqa: F401
from . import pgn  # noqa: F401
from . import pooling  # noqa: F401
from .base import TaggerOutput, setup_torch_layers  # noqa: F401
