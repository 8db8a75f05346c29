"""``spacy_crossner.BiLSTMCRF.v1``: the multi-task baseline.

A BiLSTM shared by all domains over any token features, a linear map and a CRF per domain.
"""
from typing import List

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from .base import TaggerInput, TaggerOutput, build_crossner_model
from .pytorch_emitters import BiLSTMEmitter


@registry.architectures("spacy_crossner.BiLSTMCRF.v1")
def build_bilstm_crf(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_size: int = 256,
    depth: int = 1,
    dropout: float = 0.5,
    use_crf: bool = True,
) -> Model[TaggerInput, TaggerOutput]:
    """Shared BiLSTM over token features, one head and CRF per domain.

    tok2vec (Model[List[Doc], List[Floats2d]]): token features, e.g.
        ``spacy_crossner.WordCharEmbed.v1``, a spaCy tok2vec or a transformer listener.
    hidden_size (int): LSTM width per direction.
    depth (int): stacked BiLSTM layers.
    dropout (float): dropout on the BiLSTM output (the input dropout is the tok2vec's own).
    use_crf (bool): a CRF per domain (True) or a softmax per token (False).
    """
    if hidden_size < 1 or depth < 1:
        raise ValueError(
            "spacy_crossner.BiLSTMCRF.v1: hidden_size and depth must be positive "
            f"(got hidden_size={hidden_size}, depth={depth})"
        )
    return build_crossner_model(
        "bilstm_crf", tok2vec, BiLSTMEmitter(hidden_size, depth, dropout), use_crf=use_crf
    )
