"""``spacy_crossner.TransformerTagger.v1``: a linear or CRF head on transformer token vectors.

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
from .pytorch_emitters import LinearEmitter


@registry.architectures("spacy_crossner.TransformerTagger.v1")
def build_transformer_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    use_crf: bool = False,
    dropout: float = 0.1,
) -> Model[TaggerInput, TaggerOutput]:
    """Dropout and a linear map per domain on token vectors, with an optional CRF per domain.

    tok2vec (Model[List[Doc], List[Floats2d]]): token vectors, usually
        ``spacy-transformers.TransformerListener.v1``.
    use_crf (bool): False = BERT-tagger (softmax per token), True = BERT-CRF.
    dropout (float): dropout on the token vectors.
    """
    return build_crossner_model(
        "transformer_tagger", tok2vec, LinearEmitter(dropout), use_crf=use_crf
    )
