"""The output head of every crossner architecture: it owns the NER loss and decoding.

The head is a layer of the architecture (ref ``"head"``) wrapping a torch module
(:class:`~.pytorch_heads.CRFHead` or :class:`~.pytorch_heads.SoftmaxHead`) with
``PyTorchWrapper_v2``; the padded scores of :class:`~.base.TaggerOutput` cross into torch as
they are (no re-padding). The component only calls :func:`get_loss` and :func:`decode`.

Decoders (``head.attrs["decoder"]``):

- ``"crf"``: a constrained CRF per domain; negative log-likelihood; batched Viterbi; an
  entity's probability is the marginal probability of its tag sequence (forward-backward).
- ``"softmax"``: cross-entropy per token; the best BIO-valid sequence under the
  log-probabilities; an entity's probability is the product of its tokens' probabilities.
- ``"autoregressive"``: the softmax loss on teacher-forced scores; decoding is the emitter's
  own greedy or beam search over the features (the label-aware tagger); an entity's
  probability is the product of the chosen steps' probabilities.

Entities never start or end on a whitespace token, and ``I-X`` only follows ``B-X``/``I-X``:
both are constraints of the decoders, not filters afterwards.
"""
import functools
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy
import torch
from thinc.api import ArgsKwargs, Model, PyTorchWrapper_v2, torch2xp, xp2torch
from thinc.types import Floats3d
from thinc.util import get_torch_default_device

from ..decoding import iob2_spans, iob2_spans_batch
from .pytorch_heads import CRFHead, SoftmaxHead

DECODERS = ("crf", "softmax", "autoregressive")
Gold = List[Optional[List[int]]]


class Decoded(NamedTuple):
    """One doc's decoding: IOB2 tags, entity spans ``(start, end, label)`` and, per span, its
    probability under the model."""

    tags: List[str]
    spans: List[Tuple[int, int, str]]
    probs: List[float]


def build_head(decoder: str) -> Model:
    """The head layer for a decoder ("crf", "softmax" or "autoregressive")."""
    if decoder not in DECODERS:
        raise ValueError(f"Unknown decoder {decoder!r}: use one of {DECODERS}")
    module = CRFHead() if decoder == "crf" else SoftmaxHead()
    layer = PyTorchWrapper_v2(module, convert_inputs=_head_inputs, convert_outputs=_head_outputs)
    layer.attrs["setup_torch"] = _setup_head
    layer.attrs["decoder"] = decoder
    return layer


def _setup_head(layer: Model, domain_tags: Dict[str, List[str]], build_config: Dict[str, Any]) -> None:
    module = layer.shims[0]._model
    module.setup(domain_tags, build_config)
    module.to(get_torch_default_device())


def _head_inputs(model: Model, inputs, is_train: bool):
    scores, lengths, domains, gold = inputs
    device = model.shims[0].device
    emissions = xp2torch(scores, requires_grad=is_train, device=device)
    lengths_t = torch.tensor(lengths, dtype=torch.long)
    gold_t = gold_tensor(gold, tuple(emissions.shape[:2]), device)

    def backprop(d_inputs: ArgsKwargs) -> Floats3d:
        return torch2xp(d_inputs.args[0])

    return ArgsKwargs(args=(emissions, lengths_t, domains, gold_t), kwargs={}), backprop


def _head_outputs(model: Model, inputs_outputs, is_train: bool):
    _, loss_t = inputs_outputs

    def backprop(d_loss) -> ArgsKwargs:
        return ArgsKwargs(args=([loss_t],), kwargs={"grad_tensors": [torch.ones_like(loss_t)]})

    return float(loss_t.detach().cpu()), backprop


def gold_tensor(gold: Optional[List[Optional[List[int]]]], shape, device) -> Optional[torch.Tensor]:
    """(B, T) long tensor of gold tag ids, -1 where unknown (raw-text rows all -1)."""
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
    from .pytorch_heads import DomainHeads

    index = {tag: i for i, tag in enumerate(domain_tags[source])}
    shared = [(index[tag], j) for j, tag in enumerate(domain_tags[target]) if tag in index]
    for node in model.walk():
        for shim in node.shims:
            for module in shim._model.modules():
                if isinstance(module, (DomainHeads, CRFHead)):
                    module.copy_rows(source, target, shared)
    return len(shared)


def get_crf(model: Model, domain: str):
    """The constrained CRF of a domain (architectures with ``use_crf = true``)."""
    head = get_head(model)
    if head.attrs["decoder"] != "crf":
        raise ValueError(f"The model's head has no CRF (decoder: {head.attrs['decoder']})")
    return head.shims[0]._model.get(domain)


def get_loss(model: Model, output, gold: Gold) -> Tuple[float, Floats3d]:
    """The NER loss of a batch and its gradient with respect to ``output.scores``.

    model (Model): a crossner architecture.
    output (TaggerOutput): its output for the batch (training mode).
    gold (List[Optional[List[int]]]): per doc, gold tag ids in its domain's tags, or None for
        raw text (no NER loss).
    RETURNS (Tuple[float, Floats3d]): the loss (summed over tokens, averaged over the
        labelled docs) and d_scores, shaped like ``output.scores``. The head's own parameters
        (CRF transitions) get their gradients here too.
    """
    ops = model.ops
    if not any(g is not None and len(g) for g in gold) or output.scores.shape[1] == 0:
        return 0.0, ops.alloc3f(*output.scores.shape)
    loss, backprop = get_head(model)((output.scores, output.lengths, output.domains, gold), True)
    return loss, backprop(None)


def decode(model: Model, output, whitespace: Sequence[Sequence[bool]]) -> List[Decoded]:
    """Tags, entities and entity probabilities of a batch (prediction mode).

    model (Model): a crossner architecture.
    output (TaggerOutput): its output for the batch.
    whitespace (Sequence[Sequence[bool]]): per doc, which tokens are whitespace.
    RETURNS (List[Decoded]): one per doc.
    """
    head = get_head(model)
    module = head.shims[0]._model
    decoder = head.attrs["decoder"]
    device = head.shims[0].device
    keep = [i for i, n in enumerate(output.lengths) if n]
    out: List[Optional[Decoded]] = [None] * len(output.lengths)
    if not keep:
        return _filled(out)
    domains = [output.domains[i] for i in keep]
    lengths = [output.lengths[i] for i in keep]
    T = max(lengths)
    ws = numpy.zeros((len(keep), T), dtype=bool)
    if any(map(any, whitespace)):
        for row, i in enumerate(keep):
            ws[row, : lengths[row]] = numpy.asarray(whitespace[i], dtype=bool)
    ws_t = torch.from_numpy(ws).to(device)
    lengths_t = torch.tensor(lengths, dtype=torch.long)
    idx = model.ops.asarray1i(keep)
    with torch.no_grad():
        if decoder == "autoregressive":
            emitter = model.get_ref("emitter").shims[0]._model
            X = xp2torch(output.features[idx][:, :T], device=device)
            was_training = emitter.training
            emitter.eval()
            try:
                tag_ids, path_logits = emitter.decode(X, lengths_t, domains, whitespace=ws_t)
            finally:
                emitter.train(was_training)
            logp = [torch.log_softmax(p, dim=-1).cpu().numpy() for p in path_logits]
            for row, i in enumerate(keep):
                out[i] = _with_token_probs(module.domain_tags[domains[row]], tag_ids[row], logp[row])
            return _filled(out)
        scores = output.scores if len(keep) == len(output.lengths) else output.scores[idx]
        emissions = xp2torch(scores[:, :T], device=device)
        tags_t, extra = module.decode(emissions, lengths_t, domains, ws_t)
        tags = tags_t.cpu().numpy()
        if decoder == "softmax":
            logp = extra["logp"].cpu().numpy()
            for row, i in enumerate(keep):
                ids = tags[row, : lengths[row]].tolist()
                out[i] = _with_token_probs(module.domain_tags[domains[row]], ids, logp[row])
            return _filled(out)
        # one host copy of the tags; spans found on the host, their probabilities computed on
        # the device from the lattice, one host copy of them
        present = sorted(set(domains))
        which = {d: i for i, d in enumerate(present)}
        table = iob2_spans_batch(tags, lengths, [module.domain_tags[d] for d in domains])
        probs = numpy.zeros((0,))
        if len(table.rows):
            kinds = [_label_tag_ids(tuple(module.domain_tags[d])) for d in present]
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
            log_probs = extra["lattice"].span_log_probs(*torch.from_numpy(columns).to(device))
            probs = numpy.minimum(1.0, numpy.exp(log_probs.cpu().numpy()))
        spans = table.per_doc(len(keep))
        probs = probs.tolist()
        names = numpy.empty(tags.shape, dtype=object)  # every doc's tag names, one host list
        for d in present:
            rows = numpy.array([row for row, x in enumerate(domains) if x == d])
            names[rows] = numpy.array(module.domain_tags[d], dtype=object)[tags[rows]]
        names = names.tolist()
        start = 0
        for row, i in enumerate(keep):
            n = len(spans[row])
            out[i] = Decoded(names[row][: lengths[row]], spans[row], probs[start : start + n])
            start += n
    return _filled(out)


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


