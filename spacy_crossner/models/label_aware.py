"""``spacy_crossner.LabelAwareTagger.v1``: the label-aware autoregressive tagger of LANER
(Hu et al., Findings of NAACL 2022) on transformer token vectors.

Each token's tag is predicted from its vector, a label-background vector (attention over the
token vectors queried by the encoded previous labels) and a label-context vector (attention
over the previous labels encoded by a BiLSTM). Training uses teacher forcing on the gold tags,
vectorised over all prefixes; prediction decodes greedily or with a beam, under BIO
constraints, and hands the component its tags (``TaggerOutput.tag_ids``). The torch module is
:class:`~spacy_crossner.models.pytorch_label_aware.LabelAwareEmitter`; see
``../shared/specs/label_aware.md``.
"""
from typing import List

import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, xp2torch
from thinc.types import Floats2d

from ..domains import resolve_domains
from .base import TaggerOutput, crossner_forward, crossner_init, get_emitter, wrap_emitter
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
) -> Model[List[Doc], TaggerOutput]:
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
    emitter_layer = wrap_emitter(emitter)
    return Model(
        "label_aware_tagger",
        label_aware_forward,
        init=label_aware_init,
        layers=[tok2vec, emitter_layer],
        refs={"features": tok2vec, "emitter": emitter_layer},
        attrs={
            "domain_tags": {},
            "target_domain": None,
            "domain_aliases": {},
            "build_config": {},
            "extra_inputs": None,
        },
        dims={"nI": None},
    )


def label_aware_init(model: Model, X=None, Y=None) -> None:
    crossner_init(model, X=X, Y=Y)
    # The label inventory sizes the tables: the component saves build_config with the model.
    model.attrs["build_config"][INVENTORY_KEY] = list(get_emitter(model).tag_names)


def label_aware_forward(model: Model, docs: List[Doc], is_train: bool):
    if is_train:
        # Teacher forcing through the wrapped emitter (gold ids come with the TrainingBatch).
        return crossner_forward(model, docs, is_train)
    domains = resolve_domains(
        docs,
        model.attrs["domain_tags"].keys(),
        model.attrs["target_domain"],
        model.attrs.get("domain_aliases"),
    )
    features = model.get_ref("features").predict(docs)
    scores = [model.ops.alloc2f(0, len(model.attrs["domain_tags"][d])) for d in domains]
    tag_ids: List[List[int]] = [[] for _ in docs]
    keep = [i for i, doc in enumerate(docs) if len(doc)]
    if keep:
        layer = model.get_ref("emitter")
        emitter = get_emitter(model)
        X = [features[i] for i in keep]
        lengths = torch.tensor([x.shape[0] for x in X], dtype=torch.long)
        Xt = xp2torch(model.ops.pad(X), device=layer.shims[0].device)
        with torch.no_grad():
            was_training = emitter.training
            emitter.eval()
            ids, logits = emitter.decode(Xt, lengths, [domains[i] for i in keep])
            emitter.train(was_training)
        for i, doc_ids, doc_logits in zip(keep, ids, logits):
            tag_ids[i] = doc_ids
            scores[i] = model.ops.asarray2f(doc_logits.cpu().numpy())

    def backprop(d_scores):
        raise ValueError("label_aware_tagger: no backprop at prediction (is_train=False)")

    return TaggerOutput(scores=scores, domains=domains, tag_ids=tag_ids), backprop
