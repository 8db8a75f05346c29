"""The shape every crossner architecture shares.

An architecture is ``Model[TaggerInput, TaggerOutput]``. The component resolves each doc's
domain once per batch (:mod:`spacy_crossner.domains`) and passes the docs with their domains
(and, in training, their gold tag ids) as a :class:`TaggerInput`. Input features (a
context-free embedding, a tok2vec or a transformer listener, ref ``"features"``) feed a torch
*emitter* (ref ``"emitter"``, :class:`~.pytorch_emitter.Emitter`) that returns padded scores
over each doc's domain's tags plus named auxiliary losses whose gradients it adds itself in the
backward pass. The output *head* (ref ``"head"``, :mod:`.head`) owns the NER loss and decoding.

Torch modules are sized by the labels, which are only known at ``initialize`` (or, for a loaded
pipeline, from the component's cfg), so a layer that owns a torch module carries a
``setup_torch`` attr; :func:`setup_torch_layers` calls them all with the domain tag sets and the
``build_config`` saved at initialization, before weights are loaded or when labels are added.

Every function held in ``attrs`` is a module-level function, so every model pickles.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d
from thinc.util import get_torch_default_device, is_xp_array

from .head import gold_tensor
from .pytorch_emitter import Emitter
from .torch_layer import torch_device, torch_module, wrap_torch

DomainTags = Dict[str, List[str]]


class TaggerInput(NamedTuple):
    """What the component gives an architecture for a batch.

    docs (List[Doc]): the docs.
    domains (List[str]): per doc, the labelled domain whose labels, head and CRF tag it (its
        own domain mapped through ``domain_aliases``).
    own_domains (List[str]): per doc, its own domain (before aliases; e.g. PGN's domain
        embeddings use it).
    gold (Optional[List[Optional[List[int]]]]): in training, per doc, the gold tag ids in its
        labelled domain's tag list, or None for raw text; None at prediction.
    """

    docs: List[Doc]
    domains: List[str]
    own_domains: List[str]
    gold: Optional[List[Optional[List[int]]]] = None


@dataclass
class TaggerOutput:
    """What an architecture returns for a batch.

    scores (Floats3d): (B, T, K) padded scores of each doc's domain's tags (T = longest doc,
        K = most tags among the batch's domains; columns past a domain's tags are unused).
    lengths (List[int]): the docs' lengths.
    domains (List[str]): the labelled domain of each doc.
    losses (Dict[str, float]): auxiliary losses of this batch (training only), already weighted
        and already part of the backward pass; reported for logging.
    features (Optional[Floats3d]): (B, T, nI) padded token features, for heads that decode
        from the features themselves (the label-aware tagger's autoregressive decoder).
    """

    scores: Floats3d
    lengths: List[int]
    domains: List[str]
    losses: Dict[str, float] = field(default_factory=dict)
    features: Optional[Floats3d] = None


def setup_torch_layers(model: Model, domain_tags: DomainTags, build_config: Dict[str, Any]) -> None:
    """Size (or grow) every torch module of ``model`` for these domains and tags.

    model (Model): a crossner architecture.
    domain_tags (Dict[str, List[str]]): IOB2 tags per domain.
    build_config (Dict[str, Any]): JSON-able sizes recorded at initialization (e.g. ``nI``).
        The setups receive the dict stored in ``model.attrs["build_config"]`` and may record
        more in it (e.g. an inventory that grows with the labels).
    """
    model.attrs["domain_tags"] = {d: list(t) for d, t in domain_tags.items()}
    build_config = model.attrs["build_config"] = dict(build_config)
    for node in model.walk():
        setup = node.attrs.get("setup_torch")
        if setup is not None:
            setup(node, domain_tags, build_config)


def resize_output(model: Model, domain_tags: DomainTags, build_config: Dict[str, Any]) -> Model:
    """Grow the model's outputs for new domains or labels (``model.attrs["resize_output"]``,
    the hook spaCy's textcat and parser grow through): :func:`setup_torch_layers`. An output
    that grows is rebuilt under a new name (:func:`~.pytorch_heads.generation_name`), keeping
    the rows it had, so the optimizer sees its parameters as new; its state is never edited.
    RETURNS (Model): the model.
    """
    setup_torch_layers(model, domain_tags, build_config)
    return model


def build_crossner_model(
    name: str,
    features: Model[List[Doc], List[Floats2d]],
    emitter: Emitter,
    *,
    head: Model,
    extra_layers: Sequence[Model] = (),
    extra_inputs: Optional[Callable[..., Dict[str, Any]]] = None,
    forward: Optional[Callable] = None,
    init: Optional[Callable] = None,
) -> Model[TaggerInput, TaggerOutput]:
    """Compose features, a torch emitter and an output head into an architecture.

    name (str): the model's name.
    features (Model[List[Doc], List[Floats2d]]): token features.
    emitter (Emitter): the torch emitter (:class:`~.pytorch_emitter.Emitter`).
    head (Model): the output head (:mod:`.head`: ``spacy_crossner.CRFHead.v1``,
        ``SoftmaxHead.v1`` or ``AutoregressiveHead.v1``), which owns the loss and decoding.
    extra_layers (Sequence[Model]): further layers to serialize with the model.
    extra_inputs (Optional[Callable]): a module-level function ``f(model, docs, own_domains,
        is_train) -> dict`` computed from the (non-empty) docs of a batch and passed to the
        emitter's forward as keyword arguments (arrays become tensors on the emitter's
        device), e.g. word ids for a language model or dictionary matches; its settings live
        in ``model.attrs``.
    forward, init (Optional[Callable]): the architecture's own forward / init (default
        :func:`crossner_forward` / :func:`crossner_init`).
    """
    emitter_layer = wrap_emitter(emitter)
    head_layer = head
    return Model(
        name,
        forward or crossner_forward,
        init=init or crossner_init,
        layers=[features, emitter_layer, *extra_layers, head_layer],
        refs={"features": features, "emitter": emitter_layer, "head": head_layer},
        attrs={
            "domain_tags": {},
            "target_domain": None,
            "domain_aliases": {},
            "build_config": {},
            "extra_inputs": extra_inputs,
            "resize_output": resize_output,
        },
        dims={"nI": None},
    )


def crossner_init(model: Model, X: Optional[TaggerInput] = None, Y=None) -> None:
    features = model.get_ref("features")
    docs = list(X.docs) if X is not None else None
    features.initialize(X=docs or None)
    if docs:
        sample = features.predict(docs[:4])
        n_in = int(sample[0].shape[1])
    elif features.has_dim("nO") and features.get_dim("nO"):
        n_in = features.get_dim("nO")
    else:
        raise ValueError(
            "Cannot infer the width of the crossner model's input features: initialize the "
            "component with examples or set nO on [components.crossner.model.tok2vec]."
        )
    model.set_dim("nI", n_in)
    build_config = dict(model.attrs.get("build_config") or {})
    build_config["nI"] = n_in
    if not model.attrs["domain_tags"]:
        raise ValueError(
            "The crossner model has no labels: initialize the component with examples that "
            "have entity annotation, or list labels in [initialize.components.crossner.labels]."
        )
    setup_torch_layers(model, model.attrs["domain_tags"], build_config)


def crossner_forward(model: Model, inputs: TaggerInput, is_train: bool):
    docs, domains, own_domains, gold = inputs
    domain_tags = model.attrs["domain_tags"]
    ops = model.ops
    features, bp_features = model.get_ref("features")(docs, is_train)
    lengths = [len(doc) for doc in docs]
    keep = [i for i, n in enumerate(lengths) if n]
    n_tags = max((len(domain_tags[d]) for d in domains), default=1)
    losses: Dict[str, float] = {}
    bp_emitter = None
    if not keep:
        scores = ops.alloc3f(len(docs), max(lengths, default=0), n_tags)
    else:
        extra: Dict[str, Any] = {}
        kept_docs = [docs[i] for i in keep]
        if model.attrs.get("extra_inputs") is not None:
            extra = model.attrs["extra_inputs"](
                model, kept_docs, [own_domains[i] for i in keep], is_train
            )
        kept_gold = [gold[i] for i in keep] if gold is not None else None
        (kept_scores, losses), bp_emitter = model.get_ref("emitter")(
            ([features[i] for i in keep], [domains[i] for i in keep], kept_gold, extra), is_train
        )
        if len(keep) == len(docs):
            scores = kept_scores
        else:
            scores = ops.alloc3f(len(docs), kept_scores.shape[1], max(n_tags, kept_scores.shape[2]))
            scores[ops.asarray1i(keep), :, : kept_scores.shape[2]] = kept_scores

    def backprop(d_scores: Floats3d) -> Any:
        if bp_emitter is None:
            return bp_features([ops.alloc2f(*f.shape) for f in features])
        if len(keep) == len(docs):
            d_kept_scores = d_scores
        else:
            width = kept_scores.shape[2]
            d_kept_scores = ops.xp.ascontiguousarray(d_scores[ops.asarray1i(keep), :, :width])
        d_kept = bp_emitter(d_kept_scores)
        d_features = [ops.alloc2f(*f.shape) for f in features]
        for i, d in zip(keep, d_kept):
            d_features[i] = d
        return bp_features(d_features)

    output = TaggerOutput(scores=scores, lengths=lengths, domains=list(domains), losses=losses)
    return output, backprop


def wrap_emitter(module: Emitter) -> Model:
    """Bridge an emitter with PyTorchWrapper_v2's layer (:func:`~.torch_layer.wrap_torch`):
    the features are padded once on the way in and unpadded once on the way back; the scores
    stay padded."""
    layer = wrap_torch(module, _emitter_inputs, _emitter_outputs)
    layer.attrs["setup_torch"] = _setup_emitter
    return layer


def _setup_emitter(layer: Model, domain_tags: DomainTags, build_config: Dict[str, Any]) -> None:
    module = torch_module(layer)
    module.setup(build_config["nI"], domain_tags, build_config)
    module.to(get_torch_default_device())


def _emitter_inputs(model: Model, inputs, is_train: bool):
    X, domains, gold, extra = inputs
    device = torch_device(model)
    lengths = [x.shape[0] for x in X]
    Xt = xp2torch(model.ops.pad(X), requires_grad=is_train, device=device)
    lengths_t = torch.tensor(lengths, dtype=torch.long)

    def backprop(d_inputs: ArgsKwargs) -> List[Floats2d]:
        dX = d_inputs.args[0]
        if dX is None:
            return [model.ops.alloc2f(*x.shape) for x in X]
        return model.ops.unpad(torch2xp(dX), lengths)

    kwargs = {"gold": gold_tensor(gold, tuple(Xt.shape[:2]), device)}
    for name, value in extra.items():
        kwargs[name] = xp2torch(value, device=device) if is_xp_array(value) else value
    return ArgsKwargs(args=(Xt, lengths_t, domains), kwargs=kwargs), backprop


def _emitter_outputs(model: Model, inputs_outputs, is_train: bool):
    _, (scores_t, losses_t) = inputs_outputs
    scores = torch2xp(scores_t.detach())
    losses = {name: float(value.detach().cpu()) for name, value in losses_t.items()}

    def backprop(d_scores: Floats3d) -> ArgsKwargs:
        tensors = [scores_t]
        grads = [xp2torch(d_scores, device=scores_t.device)]
        for value in losses_t.values():
            if value.requires_grad:
                tensors.append(value)
                grads.append(torch.ones_like(value))
        return ArgsKwargs(args=(tensors,), kwargs={"grad_tensors": grads})

    return (scores, losses), backprop


def get_emitter(model: Model) -> Emitter:
    """The torch emitter module of an architecture."""
    return torch_module(model.get_ref("emitter"))
