"""The shape every crossner architecture shares.

An architecture is ``Model[List[Doc], TaggerOutput]``: input features (a context-free embedding,
a tok2vec or a transformer listener, ref ``"features"``) feed a torch *emitter* (ref
``"emitter"``) that returns, for each doc, scores over the tags of that doc's domain, plus named
auxiliary losses whose gradients it adds itself in the backward pass. An optional layer of
per-domain CRFs (ref ``"crf"``) is never called in the forward pass: the component uses it for
the loss and reads its transitions for decoding.

Torch modules are sized by the labels, which are only known at ``initialize`` (or, for a loaded
pipeline, from the component's cfg), so a layer that owns a torch module carries a
``setup_torch`` attr; :func:`setup_torch_layers` calls them all with the domain tag sets and the
``build_config`` saved at initialization, before weights are loaded or when labels are added.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, PyTorchWrapper_v2, torch2xp, xp2torch
from thinc.types import Floats2d
from thinc.util import get_torch_default_device, is_xp_array

from ..domains import get_domain, resolve_domains
from .pytorch_heads import DomainCRFs

DomainTags = Dict[str, List[str]]


class TrainingBatch(list):
    """The docs of a training batch, with what the component knows of their gold standard.

    A plain list of docs to every layer that only needs docs (tok2vecs, listeners); emitters
    that need gold tags (teacher forcing, auxiliary losses) or must tell raw text apart read
    the extra attributes.

    gold (List[Optional[List[int]]]): per doc, gold tag ids in its domain's tag list, or None
        for raw text.
    """

    def __init__(self, docs: List[Doc], gold: List[Optional[List[int]]]) -> None:
        super().__init__(docs)
        if len(gold) != len(docs):
            raise ValueError(f"TrainingBatch: {len(docs)} docs but {len(gold)} gold sequences")
        self.gold = gold

    @property
    def is_raw(self) -> List[bool]:
        return [g is None for g in self.gold]


@dataclass
class TaggerOutput:
    """What an architecture returns for a batch.

    scores (List[Floats2d]): per doc, (n_tokens, n_tags) scores of its domain's tags.
    domains (List[str]): the domain used for each doc.
    losses (Dict[str, float]): auxiliary losses of this batch (training only), already weighted
        and already part of the backward pass; reported for logging.
    tag_ids (Optional[List[List[int]]]): for architectures that decode themselves (e.g.
        autoregressive beam search at prediction), the chosen tag ids per doc; the component
        then uses them instead of decoding ``scores``.
    """

    scores: List[Floats2d]
    domains: List[str]
    losses: Dict[str, float] = field(default_factory=dict)
    tag_ids: Optional[List[List[int]]] = None


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


def build_crossner_model(
    name: str,
    features: Model[List[Doc], List[Floats2d]],
    emitter: torch.nn.Module,
    *,
    use_crf: bool,
    extra_layers: Sequence[Model] = (),
    extra_inputs: Optional[Callable[..., Dict[str, Any]]] = None,
) -> Model[List[Doc], TaggerOutput]:
    """Compose features, a torch emitter and optional per-domain CRFs into an architecture.

    name (str): the model's name.
    features (Model[List[Doc], List[Floats2d]]): token features.
    emitter (torch.nn.Module): has ``setup(n_in, domain_tags, build_config)`` and
        ``forward(X, lengths, domains, gold=None) -> (scores (B, T, K_max), {name: loss})``;
        ``gold`` is a (B, T) long tensor of gold tag ids during training (-1 where unknown,
        all -1 for raw-text docs) and None at prediction; losses are already weighted.
    use_crf (bool): add a per-domain CRF layer (ref ``"crf"``).
    extra_layers (Sequence[Model]): further layers to serialize with the model.
    extra_inputs (Optional[Callable]): ``f(model, docs, domains, is_train) -> dict`` computed
        from the (non-empty) docs of a batch and passed to the emitter's forward as keyword
        arguments (arrays become tensors on the emitter's device), e.g. word ids for a
        language model or dictionary matches. ``domains`` are the docs' own domains (before
        ``domain_aliases``).
    """
    emitter_layer = wrap_emitter(emitter)
    layers = [features, emitter_layer, *extra_layers]
    refs = {"features": features, "emitter": emitter_layer}
    if use_crf:
        crf_layer = build_crf_layer()
        layers.append(crf_layer)
        refs["crf"] = crf_layer
    return Model(
        name,
        crossner_forward,
        init=crossner_init,
        layers=layers,
        refs=refs,
        attrs={
            "domain_tags": {},
            "target_domain": None,
            "domain_aliases": {},
            "build_config": {},
            "extra_inputs": extra_inputs,
        },
        dims={"nI": None},
    )


def crossner_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    features = model.get_ref("features")
    features.initialize(X=X)
    if X:
        sample = features.predict([doc for doc in X[:4]])
        n_in = int(sample[0].shape[1])
    elif features.has_dim("nO"):
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


def crossner_forward(model: Model, docs: List[Doc], is_train: bool):
    domain_tags = model.attrs["domain_tags"]
    default = model.attrs["target_domain"]
    domains = resolve_domains(docs, domain_tags.keys(), default, model.attrs["domain_aliases"])
    features, bp_features = model.get_ref("features")(docs, is_train)
    gold = getattr(docs, "gold", None)
    keep = [i for i, doc in enumerate(docs) if len(doc)]
    scores = [model.ops.alloc2f(0, len(domain_tags[d])) for d in domains]
    losses: Dict[str, float] = {}
    bp_emitter = None
    if keep:
        emitter = model.get_ref("emitter")
        kept_gold = [gold[i] for i in keep] if gold is not None else None
        extra: Dict[str, Any] = {}
        if model.attrs.get("extra_inputs") is not None:
            kept_docs = [docs[i] for i in keep]
            own = [get_domain(doc) or default for doc in kept_docs]
            extra = model.attrs["extra_inputs"](model, kept_docs, own, is_train)
        (kept_scores, losses), bp_emitter = emitter(
            ([features[i] for i in keep], [domains[i] for i in keep], kept_gold, extra), is_train
        )
        for i, s in zip(keep, kept_scores):
            scores[i] = s

    def backprop(d_scores: List[Floats2d]) -> Any:
        d_features = [model.ops.alloc2f(*f.shape) for f in features]
        if bp_emitter is not None:
            d_kept = bp_emitter([d_scores[i] for i in keep])
            for i, d in zip(keep, d_kept):
                d_features[i] = d
        return bp_features(d_features)

    return TaggerOutput(scores=scores, domains=domains, losses=losses), backprop


def wrap_emitter(module: torch.nn.Module) -> Model:
    """Bridge an emitter module with PyTorchWrapper_v2 (padding in, per-doc arrays out)."""
    layer = PyTorchWrapper_v2(
        module, convert_inputs=_emitter_inputs, convert_outputs=_emitter_outputs
    )
    layer.attrs["setup_torch"] = _setup_emitter
    return layer


def _setup_emitter(layer: Model, domain_tags: DomainTags, build_config: Dict[str, Any]) -> None:
    module = layer.shims[0]._model
    module.setup(build_config["nI"], domain_tags, build_config)
    module.to(get_torch_default_device())
    layer.attrs["n_tags"] = {d: len(t) for d, t in domain_tags.items()}


def _emitter_inputs(model: Model, inputs, is_train: bool):
    X, domains, gold, extra = inputs
    device = model.shims[0].device
    lengths = [x.shape[0] for x in X]
    Xt = xp2torch(model.ops.pad(X), requires_grad=is_train, device=device)
    lengths_t = torch.tensor(lengths, dtype=torch.long)
    gold_t = None
    if gold is not None:
        gold_t = torch.full((len(X), max(lengths)), -1, dtype=torch.long)
        for i, ids in enumerate(gold):
            if ids is not None:
                gold_t[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        gold_t = gold_t.to(device)

    def backprop(d_inputs: ArgsKwargs) -> List[Floats2d]:
        dX = d_inputs.args[0]
        if dX is None:
            return [model.ops.alloc2f(*x.shape) for x in X]
        return model.ops.unpad(torch2xp(dX), lengths)

    kwargs = {"gold": gold_t}
    for name, value in extra.items():
        kwargs[name] = xp2torch(value, device=device) if is_xp_array(value) else value
    return ArgsKwargs(args=(Xt, lengths_t, domains), kwargs=kwargs), backprop


def _emitter_outputs(model: Model, inputs_outputs, is_train: bool):
    (X, domains, _, _), (scores_t, losses_t) = inputs_outputs
    n_tags = model.attrs["n_tags"]
    lengths = [x.shape[0] for x in X]
    scores_xp = torch2xp(scores_t.detach())
    scores = [
        model.ops.asarray2f(scores_xp[i, :n, : n_tags[d]])
        for i, (n, d) in enumerate(zip(lengths, domains))
    ]
    losses = {name: float(value.detach().cpu()) for name, value in losses_t.items()}

    def backprop(d_scores: List[Floats2d]) -> ArgsKwargs:
        d_padded = model.ops.alloc3f(*scores_t.shape)
        for i, (n, d) in enumerate(zip(lengths, domains)):
            d_padded[i, :n, : n_tags[d]] = d_scores[i]
        tensors = [scores_t]
        grads = [xp2torch(d_padded, device=scores_t.device)]
        for value in losses_t.values():
            if value.requires_grad:
                tensors.append(value)
                grads.append(torch.ones_like(value))
        return ArgsKwargs(args=(tensors,), kwargs={"grad_tensors": grads})

    return (scores, losses), backprop


def build_crf_layer() -> Model:
    """A layer holding one constrained CRF per domain (used by the component, not forward)."""
    layer = PyTorchWrapper_v2(DomainCRFs())
    layer.attrs["setup_torch"] = _setup_crfs
    return layer


def _setup_crfs(layer: Model, domain_tags: DomainTags, build_config: Dict[str, Any]) -> None:
    module = layer.shims[0]._model
    module.setup(domain_tags)
    module.to(get_torch_default_device())


def get_crfs(model: Model) -> Optional[DomainCRFs]:
    """The per-domain CRFs of an architecture, or None for a head without CRF."""
    if not model.has_ref("crf"):
        return None
    return model.get_ref("crf").shims[0]._model


def get_emitter(model: Model) -> torch.nn.Module:
    """The torch emitter module of an architecture."""
    return model.get_ref("emitter").shims[0]._model



def forget_resized_optimizer_state(optimizer: Any, model: Model) -> int:
    """Drop the optimizer's running state of torch parameters whose size changed.

    Growing a head or CRF for a new label replaces its parameters by larger ones; thinc's
    optimizer keeps moments keyed by parameter name and would apply the old-sized state.
    RETURNS (int): how many parameters' state was dropped.
    """
    dropped = 0
    for node in model.walk():
        for shim in node.shims:
            module = getattr(shim, "_model", None)
            if module is None:
                continue
            for name, param in module.named_parameters():
                key = (shim.id, name)
                moments = getattr(optimizer, "mom1", {})
                if key in moments and moments[key].size != param.numel():
                    for table in ("mom1", "mom2", "averages", "_nr_update", "_last_seen"):
                        state = getattr(optimizer, table, None)
                        if state is not None and key in state:
                            del state[key]
                    dropped += 1
    return dropped
