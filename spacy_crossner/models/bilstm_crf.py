"""``spacy_crossner.BiLSTMCRF.v2`` (and v1): the multi-task baseline.

A BiLSTM shared by all domains over any token features, a linear map per domain, and an output
head (a CRF per domain, or a softmax per token) chosen in the config.
"""
from typing import List

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from .base import TaggerInput, TaggerOutput, build_crossner_model
from .head import head_for
from .pytorch_emitters import BiLSTMEmitter


@registry.architectures("spacy_crossner.BiLSTMCRF.v2")
def build_bilstm_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    head: Model,
    hidden_size: int = 256,
    depth: int = 1,
    dropout: float = 0.5,
) -> Model[TaggerInput, TaggerOutput]:
    """Shared BiLSTM over token features, a linear map per domain, then the head.

    tok2vec (Model[List[Doc], List[Floats2d]]): token features, e.g.
        ``spacy_crossner.WordCharEmbed.v1``, a spaCy tok2vec or a transformer listener.
    head (Model): the output head, e.g. ``spacy_crossner.CRFHead.v1`` (the paper's) or
        ``spacy_crossner.SoftmaxHead.v1``.
    hidden_size (int): LSTM width per direction.
    depth (int): stacked BiLSTM layers.
    dropout (float): dropout on the BiLSTM output (the input dropout is the tok2vec's own).
    """
    if hidden_size < 1 or depth < 1:
        raise ValueError(
            "spacy_crossner.BiLSTMCRF: hidden_size and depth must be positive "
            f"(got hidden_size={hidden_size}, depth={depth})"
        )
    return build_crossner_model("bilstm_crf", tok2vec, BiLSTMEmitter(hidden_size, depth, dropout), head=head)


@registry.architectures("spacy_crossner.BiLSTMCRF.v1")
def build_bilstm_crf(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_size: int = 256,
    depth: int = 1,
    dropout: float = 0.5,
    use_crf: bool = True,
) -> Model[TaggerInput, TaggerOutput]:
    """``spacy_crossner.BiLSTMCRF.v2`` with its head given by a flag (kept for the configs
    that use it; the same computation).

    use_crf (bool): a CRF per domain (True, ``CRFHead.v1``) or a softmax per token (False,
        ``SoftmaxHead.v1``). The other settings are v2's.
    """
    return build_bilstm_tagger(tok2vec, head_for(use_crf), hidden_size, depth, dropout)
