"""``spacy_crossner.TransformerTagger.v2`` (and v1): a softmax or CRF head on transformer token
vectors.

The BERT-tagger (linear) and BERT-CRF baselines of the CrossNER paper. The features are a
spacy-transformers listener (or any tok2vec); words are spaCy tokens, their vectors pooled over
word pieces by the listener.
"""
from typing import List

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from .base import TaggerInput, TaggerOutput, build_crossner_model
from .head import head_for
from .pytorch_emitters import LinearEmitter


@registry.architectures("spacy_crossner.TransformerTagger.v2")
def build_transformer_tagger_v2(
    tok2vec: Model[List[Doc], List[Floats2d]],
    head: Model,
    dropout: float = 0.1,
) -> Model[TaggerInput, TaggerOutput]:
    """Dropout and a linear map per domain on token vectors, then the head.

    tok2vec (Model[List[Doc], List[Floats2d]]): token vectors, usually
        ``spacy-transformers.TransformerListener.v1``.
    head (Model): ``spacy_crossner.SoftmaxHead.v1`` (BERT-tagger) or
        ``spacy_crossner.CRFHead.v1`` (BERT-CRF).
    dropout (float): dropout on the token vectors.
    """
    return build_crossner_model("transformer_tagger", tok2vec, LinearEmitter(dropout), head=head)


@registry.architectures("spacy_crossner.TransformerTagger.v1")
def build_transformer_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    use_crf: bool = False,
    dropout: float = 0.1,
) -> Model[TaggerInput, TaggerOutput]:
    """``spacy_crossner.TransformerTagger.v2`` with its head given by a flag (kept for the
    configs that use it; the same computation).

    tok2vec (Model[List[Doc], List[Floats2d]]): token vectors, usually
        ``spacy-transformers.TransformerListener.v1``.
    use_crf (bool): False = BERT-tagger (softmax per token), True = BERT-CRF.
    dropout (float): dropout on the token vectors.
    """
    return build_transformer_tagger_v2(tok2vec, head_for(use_crf), dropout)
