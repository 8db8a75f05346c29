"""``spacy_crossner.LabelAwareTagger.v1``: the label-aware autoregressive tagger of LANER
(Hu et al., Findings of NAACL 2022) on transformer token vectors.

Each token's tag is predicted from its vector, a label-background vector (attention over the
token vectors queried by the encoded previous labels) and a label-context vector (attention
over the previous labels encoded by a BiLSTM). Training uses teacher forcing on the gold tags,
vectorised over all prefixes; prediction decodes greedily or with a beam, under BIO
constraints, in the autoregressive head (:mod:`.head`). The torch module is
:class:`~spacy_crossner.models.pytorch_label_aware.LabelAwareEmitter`; see
``../shared/specs/label_aware.md``.
"""
from typing import List

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from .head import build_autoregressive_head
from .base import (
    TaggerInput,
    TaggerOutput,
    build_crossner_model,
    crossner_forward,
    crossner_init,
    get_emitter,
)
from .pytorch_label_aware import INVENTORY_KEY, LabelAwareEmitter


@registry.architectures("spacy_crossner.LabelAwareTagger.v1")
def build_label_aware_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    label_width: int = 100,
    hidden_width: int = 100,
    use_lb: bool = True,
    use_lc: bool = True,
    freeze_o_zero: bool = True,
    beam_width: int = 1,
    dropout: float = 0.0,
    start: str = "bos",
) -> Model[TaggerInput, TaggerOutput]:
    """Label-aware autoregressive tagger (LANER) over token vectors.

    tok2vec (Model[List[Doc], List[Floats2d]]): token vectors, usually
        ``spacy-transformers.TransformerListener.v1`` with ``reduce_first.v1`` pooling.
    label_width (int): width of the label embeddings (the paper's d2 = 100).
    hidden_width (int): width per direction of the BiLSTM label encoder (100).
    use_lb (bool): label-background attention (False = the paper's "w/o LB").
    use_lc (bool): label-context attention (False = "w/o LC").
    freeze_o_zero (bool): the ``O`` label embedding is a constant zero, as in the authors' code.
    beam_width (int): beam width of the decoder at prediction; 1 = greedy (the paper).
    dropout (float): dropout on the token vectors (the paper: none).
    start (str): how the first token's prefix starts; only ``"bos"`` (a start symbol) is
        implemented, the code's separate first-position branch is not.
    """
    if start != "bos":
        raise ValueError(
            f"[components.crossner.model] start = {start!r} is not supported by "
            "spacy_crossner.LabelAwareTagger.v1: use \"bos\"."
        )
    emitter = LabelAwareEmitter(
        label_width=label_width,
        hidden_width=hidden_width,
        use_lb=use_lb,
        use_lc=use_lc,
        freeze_o_zero=freeze_o_zero,
        beam_width=beam_width,
        dropout=dropout,
    )
    return build_crossner_model(
        "label_aware_tagger",
        tok2vec,
        emitter,
        head=build_autoregressive_head(),
        forward=label_aware_forward,
        init=label_aware_init,
    )


def label_aware_init(model: Model, X=None, Y=None) -> None:
    crossner_init(model, X=X, Y=Y)
    # The label inventory sizes the tables: the component saves build_config with the model.
    model.attrs["build_config"][INVENTORY_KEY] = list(get_emitter(model).tag_names)


def label_aware_forward(model: Model, inputs: TaggerInput, is_train: bool):
    """Training: teacher forcing through the emitter (the shared forward). Prediction: the
    token features, which the head's autoregressive decoder reads."""
    if is_train:
        return crossner_forward(model, inputs, is_train)
    docs, domains = inputs.docs, inputs.domains
    features = model.get_ref("features").predict(docs)
    lengths = [len(doc) for doc in docs]
    n_tags = max(len(model.attrs["domain_tags"][d]) for d in domains)
    width = max((f.shape[1] for f in features if len(f)), default=0)
    # Empty docs may come with features of another width (e.g. a transformer listener's).
    features = [f if len(f) else model.ops.alloc2f(0, width) for f in features]
    padded = model.ops.pad(features) if features else model.ops.alloc3f(0, 0, 0)
    scores = model.ops.alloc3f(len(docs), padded.shape[1], n_tags)

    def backprop(d_scores):
        raise ValueError("label_aware_tagger: no backprop at prediction (is_train=False)")

    output = TaggerOutput(scores=scores, lengths=lengths, domains=list(domains), features=padded)
    return output, backprop
