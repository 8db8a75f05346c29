"""The output heads of the crossner architectures: each owns the NER loss, decoding and the
entities' probabilities, and is chosen in the config like any sub-layer (ref ``"head"``).

A head is a registered layer wrapping a torch module (:class:`~.pytorch_heads.CRFHead` or
:class:`~.pytorch_heads.SoftmaxHead`, :func:`~.torch_layer.wrap_torch`); the padded scores of
:class:`~.base.TaggerOutput` cross into torch through its converters as they are (no
re-padding): with gold tags the module returns the loss (``begin_update``; the gradient flows
back to the scores and the head's own parameters), without them its decoding (``predict``).
Each head carries its decoding as a module-level function (``attrs["decode"]``, so the model
pickles); the component only calls :func:`get_loss` and :func:`decode`.

- ``spacy_crossner.CRFHead.v1``: a constrained CRF per domain; negative log-likelihood;
  batched Viterbi; an entity's probability is the marginal probability of its tag sequence
  (forward-backward).
- ``spacy_crossner.SoftmaxHead.v1``: cross-entropy per token; the best BIO-valid sequence
  under the log-probabilities; an entity's probability is the product of its tokens'.
- ``spacy_crossner.AutoregressiveHead.v1``: the softmax loss on teacher-forced scores;
  decoding is the emitter's own greedy or beam search over the features (the label-aware
  tagger); an entity's probability is the product of the chosen steps' probabilities.

Partial annotation: a gold tag id of -1 inside a labelled doc is a missing tag (the
component's ``missing_as = "missing"``). The CRF head's loss then marginalises over it
(log Z of all paths minus log Z of the BIO-valid paths through the observed tags); the softmax
and autoregressive heads give no loss at that token. The autoregressive (label-aware) emitter
is teacher-forced with its start / unknown symbol X in place of a missing previous tag, the
symbol it already reads at the first token: the next step's score is not conditioned on a
guessed tag.

Entities never start or end on a whitespace token, and ``I-X`` only follows ``B-X``/``I-X``:
both are constraints of the decoders, not filters afterwards.

The probabilities are calibrated by a temperature per labelled domain, a parameter every head
reads from ``model.attrs["temperatures"]`` ({domain: T}; the component's ``cfg["temperatures"]``,
fitted by :mod:`spacy_crossner.calibrate`): the scores they come from are divided by T (a CRF's
emissions and moves alike: :meth:`~.pytorch_heads.Lattice.tempered`); decoding ranks the
untempered scores, so the entities do not depend on T. Without temperatures (T = 1) nothing is
recomputed.
"""
import functools
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy
import torch
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, torch2xp, xp2torch
from thinc.types import Floats3d
from thinc.util import get_torch_default_device

from ..decoding import iob2_spans, iob2_spans_batch
from .pytorch_heads import CRFHead, DomainHeads, SoftmaxHead
from .torch_layer import torch_device, torch_module, wrap_torch

Gold = List[Optional[List[int]]]


class Decoded(NamedTuple):
    """One doc's decoding: IOB2 tags, entity spans ``(start, end, label)`` and, per span, its
    probability under the model."""

    tags: List[str]
    spans: List[Tuple[int, int, str]]
    probs: List[float]


class HeadInput(NamedTuple):
    """What a head layer takes: padded scores (B, T, K), lengths and labelled domains of the
    docs, and either their gold tag ids (the loss) or their whitespace flags (decoding)."""

    scores: Floats3d
    lengths: List[int]
    domains: List[str]
    gold: Optional[Gold] = None
    whitespace: Optional[torch.Tensor] = None


class Batch(NamedTuple):
    """The non-empty docs of a batch being decoded (see :func:`decode`)."""

    keep: List[int]  # their rows in the batch
    domains: List[str]
    lengths: List[int]
    whitespace: torch.Tensor  # (B', T) bool, on the head's device
    out: List[Optional[Decoded]]  # one slot per doc of the batch, filled by the head
    # (B',) float64 1/T of each doc's domain (``model.attrs["temperatures"]``); None: all T = 1
    inverse_temperature: Optional[numpy.ndarray] = None


@registry.architectures("spacy_crossner.CRFHead.v1")
def build_crf_head() -> Model[HeadInput, Any]:
    """A constrained CRF per domain: negative log-likelihood loss, Viterbi decoding, entity
    probabilities from the CRF's marginals."""
    return _head_layer(CRFHead(), decode_crf)


@registry.architectures("spacy_crossner.SoftmaxHead.v1")
def build_softmax_head() -> Model[HeadInput, Any]:
    """A softmax per token: cross-entropy loss, the best BIO-valid sequence under the
    log-probabilities, entity probabilities as products of token probabilities."""
    return _head_layer(SoftmaxHead(), decode_softmax)


@registry.architectures("spacy_crossner.AutoregressiveHead.v1")
def build_autoregressive_head() -> Model[HeadInput, Any]:
    """The softmax loss on the emitter's teacher-forced scores; decoding is the emitter's own
    autoregressive search (an emitter with a ``decode`` method: the label-aware tagger's)."""
    return _head_layer(SoftmaxHead(), decode_autoregressive)


def head_for(use_crf: bool) -> Model[HeadInput, Any]:
    """The head of the v1 architectures' ``use_crf`` setting."""
    return build_crf_head() if use_crf else build_softmax_head()


def _head_layer(module, decode_fn: Callable) -> Model:
    layer = wrap_torch(module, _head_inputs, _head_outputs)
    layer.attrs["setup_torch"] = _setup_head
    layer.attrs["decode"] = decode_fn
    return layer


def _setup_head(layer: Model, domain_tags: Dict[str, List[str]], build_config: Dict[str, Any]) -> None:
    module = torch_module(layer)
    module.setup(domain_tags, build_config)
    module.to(get_torch_default_device())


def _head_inputs(model: Model, inputs: HeadInput, is_train: bool):
    scores, lengths, domains, gold, whitespace = inputs
    device = torch_device(model)
    emissions = xp2torch(scores, requires_grad=is_train and gold is not None, device=device)
    lengths_t = torch.tensor(lengths, dtype=torch.long)
    if gold is None:  # decoding
        kwargs = {"whitespace": whitespace}
    else:
        kwargs = {"gold": gold_tensor(gold, tuple(emissions.shape[:2]), device)}

    def backprop(d_inputs: ArgsKwargs) -> Floats3d:
        return torch2xp(d_inputs.args[0])

    return ArgsKwargs(args=(emissions, lengths_t, domains), kwargs=kwargs), backprop


def _head_outputs(model: Model, inputs_outputs, is_train: bool):
    inputs, output = inputs_outputs
    if inputs.gold is None:  # decoding: the module's (tags, what probabilities come from)
        return output, _no_backprop
    loss_t = output

    def backprop(d_loss) -> ArgsKwargs:
        return ArgsKwargs(args=([loss_t],), kwargs={"grad_tensors": [torch.ones_like(loss_t)]})

    return float(loss_t.detach().cpu()), backprop


def _no_backprop(d_output):
    raise ValueError("A head's decoding has no gradient: decode with predict, not begin_update")


def gold_tensor(gold: Optional[List[Optional[List[int]]]], shape, device) -> Optional[torch.Tensor]:
    """(B, T) long tensor of gold tag ids, -1 where unknown: padding, missing tags of a
    partially annotated doc, and every token of a raw-text row (gold None)."""
    if gold is None:
        return None
    out = torch.full(shape, -1, dtype=torch.long)
    for i, ids in enumerate(gold):
        if ids is not None:
            out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out.to(device)


def get_head(model: Model) -> Model:
    """The head layer of a crossner architecture."""
    return model.get_ref("head")


def copy_domain_rows(model: Model, source: str, target: str, domain_tags: Dict[str, List[str]]) -> int:
    """Initialise ``target``'s output rows (linear heads and CRF) from ``source``'s for the tags
    the two domains share by name (``O`` included), as the CrossNER authors' pre-train then
    fine-tune keeps one output layer over the union of labels.

    RETURNS (int): the number of shared tags.
    """
    index = {tag: i for i, tag in enumerate(domain_tags[source])}
    shared = [(index[tag], j) for j, tag in enumerate(domain_tags[target]) if tag in index]
    for layer in (model.get_ref("emitter"), get_head(model)):
        for module in torch_module(layer).modules():
            if isinstance(module, (DomainHeads, CRFHead)):
                module.copy_rows(source, target, shared)
    return len(shared)


def get_crf(model: Model, domain: str):
    """The constrained CRF of a domain (architectures with a CRF head)."""
    module = torch_module(get_head(model))
    if not isinstance(module, CRFHead):
        raise ValueError(f"The model's head has no CRF (head: {type(module).__name__})")
    return module.get(domain)


def get_loss(model: Model, output, gold: Gold) -> Tuple[float, Floats3d]:
    """The NER loss of a batch and its gradient with respect to ``output.scores``.

    model (Model): a crossner architecture.
    output (TaggerOutput): its output for the batch (training mode).
    gold (List[Optional[List[int]]]): per doc, gold tag ids in its domain's tags (-1: a
        missing tag, marginalised by a CRF head, no loss in a softmax head), or None for raw
        text (no NER loss).
    RETURNS (Tuple[float, Floats3d]): the loss (summed over tokens, averaged over the
        labelled docs) and d_scores, shaped like ``output.scores``. The head's own parameters
        (CRF transitions) get their gradients here too.
    """
    ops = model.ops
    if not any(g is not None and len(g) for g in gold) or output.scores.shape[1] == 0:
        return 0.0, ops.alloc3f(*output.scores.shape)
    loss, backprop = get_head(model)(HeadInput(output.scores, output.lengths, output.domains, gold), True)
    return loss, backprop(None)


def decode(model: Model, output, whitespace: Sequence[Sequence[bool]]) -> List[Decoded]:
    """Tags, entities and entity probabilities of a batch (prediction mode): the head's own
    decoding (``attrs["decode"]``) over the batch's non-empty docs.

    model (Model): a crossner architecture.
    output (TaggerOutput): its output for the batch.
    whitespace (Sequence[Sequence[bool]]): per doc, which tokens are whitespace.
    RETURNS (List[Decoded]): one per doc.
    """
    head = get_head(model)
    keep = [i for i, n in enumerate(output.lengths) if n]
    out: List[Optional[Decoded]] = [None] * len(output.lengths)
    if not keep:
        return _filled(out)
    lengths = [output.lengths[i] for i in keep]
    ws = numpy.zeros((len(keep), max(lengths)), dtype=bool)
    if any(map(any, whitespace)):
        for row, i in enumerate(keep):
            ws[row, : lengths[row]] = numpy.asarray(whitespace[i], dtype=bool)
    ws_t = torch.from_numpy(ws).to(torch_device(head))
    domains = [output.domains[i] for i in keep]
    batch = Batch(keep, domains, lengths, ws_t, out, inverse_temperature(model, domains))
    with torch.no_grad():
        head.attrs["decode"](model, head, output, batch)
    return _filled(out)


def inverse_temperature(model: Model, domains: Sequence[str]) -> Optional[numpy.ndarray]:
    """Per doc, 1/T of its labelled domain's temperature (``model.attrs["temperatures"]``,
    {domain: T}, set by the component from its ``cfg["temperatures"]``; a domain without one
    has T = 1), or None when every T is 1: the probabilities are then computed exactly as
    without calibration. The temperature divides the scores the probabilities come from, never
    the ones decoding ranks (:mod:`spacy_crossner.calibrate`)."""
    temperatures = model.attrs.get("temperatures") or {}
    values = numpy.array([float(temperatures.get(d, 1.0)) for d in domains], dtype="float64")
    if not len(values) or bool((values == 1.0).all()):
        return None
    return 1.0 / values


def _tempered_logp(logp: torch.Tensor, inverse: Optional[numpy.ndarray]) -> torch.Tensor:
    """(B, T, K) log-probabilities at each doc's temperature: log_softmax(logits / T) equals
    log_softmax(log_softmax(logits) / T), so the untempered log-probabilities suffice."""
    if inverse is None:
        return logp
    inv = torch.from_numpy(inverse).to(device=logp.device, dtype=logp.dtype)
    return torch.log_softmax(logp * inv[:, None, None], dim=-1)


def _kept_scores(model: Model, output, batch: Batch) -> Floats3d:
    """The scores of the batch's non-empty docs, cut to the longest of them."""
    T = max(batch.lengths)
    if len(batch.keep) == len(output.lengths):
        return output.scores[:, :T]
    return output.scores[model.ops.asarray1i(batch.keep)][:, :T]


def decode_autoregressive(model: Model, head: Model, output, batch: Batch) -> None:
    """The emitter's own search over the token features (``TaggerOutput.features``)."""
    domain_tags = model.attrs["domain_tags"]
    emitter = torch_module(model.get_ref("emitter"))
    T = max(batch.lengths)
    idx = model.ops.asarray1i(batch.keep)
    X = xp2torch(output.features[idx][:, :T], device=torch_device(head))
    lengths_t = torch.tensor(batch.lengths, dtype=torch.long)
    was_training = emitter.training
    emitter.eval()
    try:
        tag_ids, path_logits = emitter.decode(X, lengths_t, batch.domains, whitespace=batch.whitespace)
    finally:
        emitter.train(was_training)
    inverse = batch.inverse_temperature
    logp = [
        torch.log_softmax(p if inverse is None else p * float(inverse[row]), dim=-1).cpu().numpy()
        for row, p in enumerate(path_logits)
    ]
    for row, i in enumerate(batch.keep):
        batch.out[i] = _with_token_probs(domain_tags[batch.domains[row]], tag_ids[row], logp[row])


def decode_softmax(model: Model, head: Model, output, batch: Batch) -> None:
    """The best BIO-valid sequence under the log-probabilities of the scores."""
    domain_tags = model.attrs["domain_tags"]
    tags_t, extra = head.predict(
        HeadInput(_kept_scores(model, output, batch), batch.lengths, batch.domains, None, batch.whitespace)
    )
    tags = tags_t.cpu().numpy()
    logp = _tempered_logp(extra["logp"], batch.inverse_temperature).cpu().numpy()
    for row, i in enumerate(batch.keep):
        ids = tags[row, : batch.lengths[row]].tolist()
        batch.out[i] = _with_token_probs(domain_tags[batch.domains[row]], ids, logp[row])


def decode_crf(model: Model, head: Model, output, batch: Batch) -> None:
    """Viterbi, then each entity's marginal probability from the CRF's lattice."""
    domain_tags = model.attrs["domain_tags"]
    domains, lengths = batch.domains, batch.lengths
    tags_t, extra = head.predict(
        HeadInput(_kept_scores(model, output, batch), lengths, domains, None, batch.whitespace)
    )
    # one host copy of the tags; spans found on the host, their probabilities computed on
    # the device from the lattice, one host copy of them
    tags = tags_t.cpu().numpy()
    device = tags_t.device
    present = sorted(set(domains))
    which = {d: i for i, d in enumerate(present)}
    table = iob2_spans_batch(tags, lengths, [domain_tags[d] for d in domains])
    probs = numpy.zeros((0,))
    if len(table.rows):
        kinds = [_label_tag_ids(tuple(domain_tags[d])) for d in present]
        K = max(len(begin) for begin, _ in kinds)
        begin_of = numpy.full((len(present), K), -1, dtype="int64")
        inside_of = numpy.full((len(present), K), -1, dtype="int64")
        for i, (begin, inside) in enumerate(kinds):
            begin_of[i, : len(begin)], inside_of[i, : len(inside)] = begin, inside
        domain_of = numpy.array([which[d] for d in domains], dtype="int64")[table.rows]
        first = tags[table.rows, table.starts]
        columns = numpy.stack(
            [table.rows, table.starts, table.ends, begin_of[domain_of, first], inside_of[domain_of, first]]
        )
        lattice = extra["lattice"]
        if batch.inverse_temperature is not None:  # Viterbi's path is kept; marginals at T
            lattice = lattice.tempered(torch.from_numpy(batch.inverse_temperature))
        log_probs = lattice.span_log_probs(*torch.from_numpy(columns).to(device))
        probs = numpy.minimum(1.0, numpy.exp(log_probs.cpu().numpy()))
    spans = table.per_doc(len(batch.keep))
    probs = probs.tolist()
    names = numpy.empty(tags.shape, dtype=object)  # every doc's tag names, one host list
    for d in present:
        rows = numpy.array([row for row, x in enumerate(domains) if x == d])
        names[rows] = numpy.array(domain_tags[d], dtype=object)[tags[rows]]
    names = names.tolist()
    start = 0
    for row, i in enumerate(batch.keep):
        n = len(spans[row])
        batch.out[i] = Decoded(names[row][: lengths[row]], spans[row], probs[start : start + n])
        start += n


def _filled(out: List[Optional[Decoded]]) -> List[Decoded]:
    """The decodings, an empty one for each empty doc (None)."""
    return [Decoded([], [], []) if d is None else d for d in out]


@functools.lru_cache(maxsize=64)
def _label_tag_ids(tags: Tuple[str, ...]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Per tag, the ids of ``B-X`` and ``I-X`` of its label X (-1 for ``O``)."""
    index = {t: k for k, t in enumerate(tags)}
    labels = [t[2:] if t[:2] in ("B-", "I-") else None for t in tags]
    return (
        numpy.array([index.get(f"B-{x}", -1) if x is not None else -1 for x in labels], dtype="int64"),
        numpy.array([index.get(f"I-{x}", -1) if x is not None else -1 for x in labels], dtype="int64"),
    )


def _with_token_probs(names: Sequence[str], ids: Sequence[int], logp: numpy.ndarray) -> Decoded:
    """Spans of the decoded tags, each with the product of its tokens' probabilities."""
    tags = [names[k] for k in ids]
    spans = iob2_spans(tags)
    chosen = logp[numpy.arange(len(ids)), numpy.asarray(ids, dtype="int64")] if len(ids) else numpy.zeros(0)
    probs = [min(1.0, float(numpy.exp(chosen[s:e].sum()))) for s, e, _ in spans]
    return Decoded(tags, spans, probs)


