"""Torch modules of the parameter generation network (Jia, Liang & Zhang, ACL 2019).

A meta tensor ``W`` (V x U x P) and embeddings of domains (U) and tasks (V) generate the weights
of a one-layer BiLSTM for every (domain, task) pair::

    theta[d, t] = kron(I_task[t], I_domain[d]) @ W.reshape(V * U, P)

``theta`` is split into torch's eight LSTM tensors (per direction ``W_ih | W_hh | b_ih | b_hh``,
gate blocks i, f, g, o) and run by torch's fused LSTM kernel. The weights of all pairs a step
needs come from one GEMM; at prediction they are cached until the generating parameters change.
See ../shared/specs/pgn.md.
"""
import functools
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .pytorch_emitter import Emitter, Losses
from .pytorch_heads import DomainHeads, module_key
from .pytorch_lm import SampledSoftmaxLM

NER = "ner"
LM = "lm"
TASKS = (NER, LM)
Pair = Tuple[str, str]


def lstm_param_size(n_in: int, hidden: int) -> int:
    """P: the number of weights of a one-layer BiLSTM (two redundant biases, as in torch)."""
    return 2 * (4 * hidden * n_in + 4 * hidden * hidden + 8 * hidden)


def split_lstm_params(theta: torch.Tensor, n_in: int, hidden: int) -> List[torch.Tensor]:
    """Views of a flat (P,) weight vector in the order of ``nn.LSTM._flat_weights``.

    RETURNS: [W_ih (4H, d), W_hh (4H, H), b_ih (4H,), b_hh (4H,)] forward, then backward.
    """
    shapes = [(4 * hidden, n_in), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)] * 2
    views = []
    offset = 0
    for shape in shapes:
        size = math.prod(shape)
        views.append(theta[offset : offset + size].view(*shape))
        offset += size
    if offset != theta.shape[0]:
        raise ValueError(f"A BiLSTM of input {n_in} and width {hidden} has {offset} weights, got {theta.shape[0]}")
    return views


@functools.lru_cache(maxsize=None)
def fused_lstm_layout(n_in: int, hidden: int, device: str, dtype: torch.dtype) -> Optional[Tuple[Tuple[int, ...], int]]:
    """Where the device's fused LSTM kernel (cuDNN) reads a one-layer BiLSTM's eight tensors.

    Read from an ``nn.LSTM`` of the same shape that torch flattened on ``device``: the element
    offset of each tensor of :func:`split_lstm_params` in the one buffer they share, and the
    buffer's size. None where torch keeps them apart (CPU, cuDNN off): any layout will do there.
    """
    if not device.startswith("cuda"):
        return None
    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    with torch.random.fork_rng(devices=[index]):  # its random init leaves the seeded streams alone
        lstm = nn.LSTM(n_in, hidden, bidirectional=True, device=dev, dtype=dtype)
    lstm.flatten_parameters()
    weights = list(lstm._flat_weights)
    storage = weights[0].untyped_storage()
    if len(weights) != 8 or any(w.untyped_storage().data_ptr() != storage.data_ptr() for w in weights):
        return None
    return tuple(w.storage_offset() for w in weights), storage.nbytes() // weights[0].element_size()


def place_lstm_params(theta: torch.Tensor, n_in: int, hidden: int, layout=None) -> List[torch.Tensor]:
    """:func:`split_lstm_params` of a copy of ``theta`` in a storage of its own.

    The copy is laid out as ``layout`` (offsets, size) says, or as :func:`fused_lstm_layout`
    reads it for ``theta``'s device, so that cuDNN uses the weights in place instead of copying
    them at every call. Differentiable: gradients reach ``theta``.
    """
    if layout is None and theta.is_cuda:
        layout = fused_lstm_layout(n_in, hidden, str(theta.device), theta.dtype)
    if layout is None:
        return split_lstm_params(theta.clone(), n_in, hidden)
    views = split_lstm_params(theta, n_in, hidden)
    offsets, size = layout
    pieces: List[torch.Tensor] = []
    end = 0
    for offset, view in sorted(zip(offsets, views), key=lambda pair: pair[0]):
        if offset < end:
            raise ValueError(f"LSTM weight layout {layout} overlaps at offset {offset}")
        if offset > end:
            pieces.append(theta.new_zeros(offset - end))
        pieces.append(view.reshape(-1))
        end = offset + view.numel()
    if size < end:
        raise ValueError(f"LSTM weight layout {layout} needs {end} elements, has {size}")
    if size > end:
        pieces.append(theta.new_zeros(size - end))
    flat = torch.cat(pieces)
    return [flat[offset : offset + view.numel()].view(view.shape) for offset, view in zip(offsets, views)]


def run_bilstm(X: torch.Tensor, lengths: torch.Tensor, weights: List[torch.Tensor], training: bool) -> torch.Tensor:
    """A one-layer BiLSTM with the given weights over padded input, padding ignored.

    X: (B, T, d); lengths: (B,) on CPU, all > 0; weights: the eight tensors of
    :func:`split_lstm_params`. RETURNS: (B, T, 2H), zeros at padding.
    """
    hidden = weights[1].shape[1]
    packed = pack_padded_sequence(X, lengths, batch_first=True, enforce_sorted=False)
    h0 = X.new_zeros((2, int(packed.batch_sizes[0]), hidden))
    # the packed form of torch's fused kernel (the one nn.LSTM calls)
    out, _, _ = torch._VF.lstm(
        packed.data, packed.batch_sizes, (h0, h0), weights, True, 1, 0.0, training, True
    )
    out = PackedSequence(out, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
    hidden_states, _ = pad_packed_sequence(out, batch_first=True, total_length=X.shape[1])
    return hidden_states


class ParameterGenerator(nn.Module):
    """The meta tensor W and the domain and task embeddings that generate BiLSTM weights.

    n_in (int): input width d. hidden (int): LSTM width per direction H.
    domain_width (int): U. task_width (int): V.
    meta_scale (float): W is stored divided by this and multiplied back when generating: the
        same function and the same initial weights, but one optimizer step of size lr on W's
        entries moves the generated weights meta_scale times as far (with Adam; with plain
        SGD, meta_scale squared). 1.0 is the authors' parametrisation.
    """

    def __init__(
        self, n_in: int, hidden: int, domain_width: int = 8, task_width: int = 8, meta_scale: float = 1.0
    ) -> None:
        super().__init__()
        if not meta_scale > 0:
            raise ValueError(f"meta_scale must be positive, got {meta_scale}")
        self.n_in = n_in
        self.hidden = hidden
        self.domain_width = domain_width
        self.task_width = task_width
        self.meta_scale = float(meta_scale)
        self.n_params = lstm_param_size(n_in, hidden)
        bound = 1.0 / math.sqrt(hidden)
        # the authors' layout (V, U, P) and init U(+-1/sqrt(H)) of the generated weights
        self.W = nn.Parameter(
            torch.empty(task_width, domain_width, self.n_params).uniform_(-bound, bound) / self.meta_scale
        )
        self.domain_embeddings = nn.ParameterDict()
        self.task_embeddings = nn.ParameterDict(
            {task: nn.Parameter(self._init_row(task_width)) for task in TASKS}
        )

    @staticmethod
    def _init_row(width: int) -> torch.Tensor:
        bound = math.sqrt(3.0 / width)  # E||row||^2 = 1
        return torch.empty(width).uniform_(-bound, bound)

    def add_domain(self, domain: str) -> None:
        key = module_key(domain)
        if key not in self.domain_embeddings:
            row = self._init_row(self.domain_width).to(self.W.device)
            self.domain_embeddings[key] = nn.Parameter(row)

    def has_domain(self, domain: str) -> bool:
        return module_key(domain) in self.domain_embeddings

    def pair_codes(self, pairs: Sequence[Pair]) -> torch.Tensor:
        """kron(task row, domain row) per pair: (k, V * U)."""
        D = torch.stack([self.domain_embeddings[module_key(d)] for d, _ in pairs])  # (k, U)
        T = torch.stack([self.task_embeddings[t] for _, t in pairs])  # (k, V)
        return (T[:, :, None] * D[:, None, :]).reshape(len(pairs), -1)

    def forward(self, pairs: Sequence[Pair]) -> torch.Tensor:
        """The flat BiLSTM weights of each pair, W read once: (k, P)."""
        theta = self.pair_codes(pairs) @ self.W.reshape(-1, self.n_params)
        return theta if self.meta_scale == 1.0 else theta * self.meta_scale

    def version_key(self) -> Tuple:
        """Changes whenever a generating parameter may have changed.

        torch optimizers bump ``_version`` (in-place updates), ``load_state_dict`` too (copy_),
        a ``.data`` assignment changes the storage, and thinc's shim zeroes each gradient in
        place after it applied an update (bumping the gradient's version).
        """
        key = []
        for p in self.parameters():
            grad = p.grad
            key.append((p.data_ptr(), p._version, -1 if grad is None else (grad.data_ptr(), grad._version)))
        return tuple(key)


def _clear_cache_after_load(module: "PGNEmitter", incompatible_keys) -> None:
    # a module-level function, not a lambda: the module stays picklable (nlp.pipe n_process>1)
    module.clear_cache()


class PGNEmitter(Emitter):
    """Generated BiLSTMs for NER and language modelling, a linear head per labelled domain.

    hidden_size (int): LSTM width per direction.
    domain_width (int): width U of a domain embedding.
    task_width (int): width V of a task embedding.
    dropout (float): dropout on the BiLSTM output (before the NER head and the LM).
    n_samples (int): negatives of the sampled softmax.
    logq_correction (bool): subtract ln E(k) from sampled logits (the authors' code).
    lm_sampled (bool): sampled softmax in training (False: full softmax).
    lm_on_labelled (bool): labelled sentences also feed their domain's LM pair.
    ner_weights / lm_weights (Dict[str, float]): loss weights of the source and target pairs,
        keys ``"source"`` and ``"target"``.
    meta_scale (float): see :class:`ParameterGenerator`.
    """

    def __init__(
        self,
        hidden_size: int,
        domain_width: int,
        task_width: int,
        dropout: float,
        n_samples: int,
        logq_correction: bool,
        lm_sampled: bool,
        lm_on_labelled: bool,
        ner_weights: Dict[str, float],
        lm_weights: Dict[str, float],
        meta_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.meta_scale = meta_scale
        self.domain_width = domain_width
        self.task_width = task_width
        self.dropout = nn.Dropout(dropout)
        self.n_samples = n_samples
        self.logq_correction = logq_correction
        self.lm_sampled = lm_sampled
        self.lm_on_labelled = lm_on_labelled
        self.ner_weights = dict(ner_weights)
        self.lm_weights = dict(lm_weights)
        self.generator: Optional[ParameterGenerator] = None
        self.lm: Optional[SampledSoftmaxLM] = None
        self.heads = DomainHeads()
        self.n_generated = 0  # pairs generated so far (tests check "once per step")
        self._cache: Dict[Pair, List[torch.Tensor]] = {}
        self._cache_key: Optional[Tuple] = None
        # loading weights (from_bytes/from_disk, thinc's use_params) invalidates the cache
        self.register_load_state_dict_post_hook(_clear_cache_after_load)

    # -- sizes --------------------------------------------------------------------------------

    def setup(self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Dict[str, Any]) -> None:
        if self.generator is None:
            self.generator = ParameterGenerator(
                n_in, self.hidden_size, self.domain_width, self.task_width, meta_scale=self.meta_scale
            )
        elif self.generator.n_in != n_in:
            raise ValueError(
                f"The PGN generates BiLSTMs over features of width {self.generator.n_in}, got "
                f"{n_in}: the tok2vec of [components.crossner.model] changed width."
            )
        for domain in list(build_config.get("pgn_domains", [])) + list(domain_tags):
            self.generator.add_domain(domain)
        vocab = build_config.get("lm_vocab")
        if vocab and self.lm is None:
            self.lm = SampledSoftmaxLM(len(vocab), self.hidden_size, self.n_samples, self.logq_correction)
        self.heads.setup(2 * self.hidden_size, domain_tags, build_config)
        self.clear_cache()

    # -- generated weights --------------------------------------------------------------------

    def clear_cache(self) -> None:
        self._cache = {}
        self._cache_key = None

    def generate(self, pairs: Sequence[Pair]) -> Dict[Pair, List[torch.Tensor]]:
        """The eight LSTM tensors of each pair.

        With gradients enabled (training) they are generated fresh, all pairs in one GEMM.
        Without (prediction), they come from a cache that lives as long as the generating
        parameters are unchanged; the cache is never part of the state dict.
        """
        gen = self.generator
        for domain, _ in pairs:
            if not gen.has_domain(domain):
                raise ValueError(
                    f"The PGN has no embedding for domain '{domain}' (known: "
                    f"{sorted(gen.domain_embeddings)}): domains must be seen at initialize, "
                    "as labelled data, raw text or a domain_aliases entry."
                )
        if torch.is_grad_enabled():
            self.clear_cache()
            return self._generate(pairs)
        key = gen.version_key()
        if key != self._cache_key:
            self._cache = {}
            self._cache_key = key
        missing = [p for p in dict.fromkeys(pairs) if p not in self._cache]
        if missing:
            self._cache.update(self._generate(missing))
        return {p: self._cache[p] for p in pairs}

    def _generate(self, pairs: Sequence[Pair]) -> Dict[Pair, List[torch.Tensor]]:
        pairs = list(dict.fromkeys(pairs))
        self.n_generated += len(pairs)
        thetas = self.generator(pairs)  # (k, P)
        gen = self.generator
        # each pair's weights in a storage of their own, where cuDNN reads them without a copy
        return {p: place_lstm_params(thetas[i], gen.n_in, gen.hidden) for i, p in enumerate(pairs)}

    # -- forward ------------------------------------------------------------------------------

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
        own_domains: Optional[List[str]] = None,
        word_ids: Optional[torch.Tensor] = None,
        target_domain: Optional[str] = None,
    ) -> Tuple[torch.Tensor, Losses]:
        """Scores of each doc's labelled domain's tags, and the weighted LM loss.

        X: (B, T, nI) context-free features; lengths: (B,) CPU; domains: labelled domain per
        doc (after domain_aliases); gold: (B, T) tag ids in training (all -1 for raw text);
        own_domains: each doc's own domain (selects the generated weights); word_ids: (B, T)
        LM ids (-1 padding) in training; target_domain: the own target domain (loss weights).
        RETURNS: ((B, T, K_max) scores, {"lm": loss} when an LM pass ran).
        """
        own = list(own_domains) if own_domains is not None else list(domains)
        B = X.shape[0]
        is_raw = [False] * B if gold is None else (gold < 0).all(dim=1).tolist()
        ner_rows = [i for i in range(B) if not is_raw[i]]
        lm_rows: List[int] = []
        if gold is not None and self.lm is not None and word_ids is not None:
            lm_rows = [i for i in range(B) if is_raw[i] or self.lm_on_labelled]
            lm_rows = [i for i in lm_rows if self._lm_weight(own[i], target_domain) != 0.0]
        pairs = [(own[i], NER) for i in ner_rows] + [(own[i], LM) for i in lm_rows]
        weights = self.generate(pairs) if pairs else {}

        ner_domains = sorted({own[i] for i in ner_rows})
        if len(ner_domains) == 1 and len(ner_rows) == B:
            # one domain, no raw text (e.g. prediction): the plain BiLSTM-CRF computation
            hidden = run_bilstm(X, lengths, weights[(ner_domains[0], NER)], self.training)
        else:
            hidden = X.new_zeros((B, X.shape[1], 2 * self.hidden_size))
            for domain in ner_domains:
                idx = [i for i in ner_rows if own[i] == domain]
                idx_t = torch.tensor(idx, device=X.device)
                states = run_bilstm(X.index_select(0, idx_t), lengths[idx], weights[(domain, NER)], self.training)
                hidden = hidden.index_put((idx_t,), states)
        scores = self.heads(self.dropout(hidden), domains)
        if gold is not None:
            scale = [self._ner_weight(own[i], target_domain) for i in range(B)]
            if any(w != 1.0 for w in scale):
                # the forward value stays the scores, their gradient is scaled per doc
                w = scores.new_tensor(scale)[:, None, None]
                scores = scores * w + (scores * (1 - w)).detach()

        losses: Losses = {}
        if lm_rows:
            losses["lm"] = self._lm_loss(X, lengths, own, lm_rows, word_ids, weights, target_domain)
        return scores, losses

    def _ner_weight(self, domain: str, target: Optional[str]) -> float:
        return self.ner_weights["target" if domain == target else "source"]

    def _lm_weight(self, domain: str, target: Optional[str]) -> float:
        return self.lm_weights["target" if domain == target else "source"]

    def _lm_loss(self, X, lengths, own, rows, word_ids, weights, target) -> torch.Tensor:
        H = self.hidden_size
        total = X.new_zeros(())
        for domain in sorted({own[i] for i in rows}):
            idx = [i for i in rows if own[i] == domain]
            idx_t = torch.tensor(idx, device=X.device)
            lens = lengths[idx]
            states = run_bilstm(X.index_select(0, idx_t), lens, weights[(domain, LM)], self.training)
            states = self.dropout(states)  # (b, T, 2H)
            ids = word_ids.index_select(0, idx_t)
            nxt, prv = SampledSoftmaxLM.neighbour_targets(ids, lens)
            fwd = self.lm.loss(states[:, :, :H].reshape(-1, H), nxt.reshape(-1), sampled=self.lm_sampled)
            bwd = self.lm.loss(states[:, :, H:].reshape(-1, H), prv.reshape(-1), sampled=self.lm_sampled)
            # paper Eqs. 7-8: summed over tokens, averaged over the pair's sentences
            total = total + self._lm_weight(domain, target) * (fwd + bwd) / (2 * len(idx))
        return total
