"""Torch modules of the multi-cell compositional LSTM (Jia & Zhang, ACL 2020).

See ``../shared/specs/multi_cell_lstm.md``. One entity-typed (ET) cell per entity type over the
union of all domains' types ('O' included as its own cell), a compositional (C) cell that merges
the active ET cells' memories with additive attention, both directions run concurrently. Each
domain uses only its own subset of ET cells: a batch gathers the cells of the domains it holds
(``index_select`` on stacked parameters, so the cells of absent domains get exactly zero
gradient) and masks, per sentence, the gathered cells its domain does not own.

Vectorised as the spec's section 11 asks: all gathered cells' (and the C cell's) input
projections in one batched matrix product per batch (both directions at once), one recurrent
batched product per time step for all cells and both directions; the Python loop runs over time
steps only.

Shapes: B sentences, T time steps, D input width, d hidden width per direction, L cells in the
inventory, l cells gathered for the batch, a = 2d attention width, 2 = directions.
"""
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from .pytorch_emitter import Emitter, Losses
from .pytorch_heads import DomainHeads, module_key
from .pytorch_lm import SampledSoftmaxLM


TYPES_KEY = "multi_cell_types"
TARGET_KEY = "multi_cell_target"
LM_VOCAB_KEY = "lm_vocab"
O_TYPE = "O"
ATTENTION_SHARING = ("per_domain_code", "shared")
ATT_LOSS_ON = ("probs_code", "scores_paper")
# Up to this many attention sets in a batch, all are applied in one stacked GEMM; beyond, each
# sentence's own set in per-sentence products.
STACKED_SETS = 2


def tag_type(tag: str) -> str:
    """The entity type of a BIO/BIOES tag: 'O' for O, else the label without its prefix."""
    return O_TYPE if tag == O_TYPE else tag.split("-", 1)[1]


def cell_inventory(
    domain_tags: Dict[str, Sequence[str]], known: Sequence[str] = (), first: Sequence[str] = ()
) -> List[str]:
    """The ET cell inventory: ``known`` cells, then types not yet in it.

    domain_tags (Dict[str, Sequence[str]]): tags per domain.
    known (Sequence[str]): the inventory so far (kept in order: cells are never reordered).
    first (Sequence[str]): domains whose types are listed first (the sources, as in the code:
        ['O'] + source types in order + target-only types).
    RETURNS (List[str]): 'O' first, each type once.
    """
    types = list(known) or [O_TYPE]
    if O_TYPE not in types:
        types.insert(0, O_TYPE)
    order = [d for d in first if d in domain_tags] + [d for d in domain_tags if d not in first]
    for domain in order:
        for tag in domain_tags[domain]:
            t = tag_type(tag)
            if t not in types:
                types.append(t)
    return types


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient of row b is multiplied by weights[b] (domain weights)."""

    @staticmethod
    def forward(ctx, x, weights):
        ctx.save_for_backward(weights)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        (weights,) = ctx.saved_tensors
        return grad * weights.view(-1, *([1] * (grad.dim() - 1))), None


def _uniform(shape: Sequence[int], bound: float) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class MultiCellEncoder(nn.Module):
    """The bidirectional multi-cell LSTM over an inventory of ET cells and attention sets.

    n_in (int): D, the width of the input features.
    width (int): d, the hidden width per direction (the paper: 100).
    n_cells (int): L, ET cells in the inventory.
    n_sets (int): attention parameter sets (one per domain, or one shared).
    identical_init (bool): all ET cells start as copies of one random prototype (the code),
        so attention is uniform before training; else each cell is drawn on its own.

    Parameters follow torch's default Linear init (U(±1/sqrt(fan_in))); input-side projections
    carry the bias, recurrent ones none; v ~ U(±1/sqrt(2d)). The first axis of every parameter
    is the direction (0 = left-to-right, 1 = right-to-left).
    """

    def __init__(self, n_in: int, width: int, n_cells: int, n_sets: int, identical_init: bool = True):
        super().__init__()
        D, d = n_in, width
        self.n_in = n_in
        self.width = width
        self.att_width = 2 * width
        self.identical_init = identical_init
        # ET cells, chunk order [i, c~] per cell
        self.et_in_w = _uniform((2, D, n_cells, 2 * d), 1 / math.sqrt(D))
        self.et_in_b = _uniform((2, n_cells, 2 * d), 1 / math.sqrt(D))
        self.et_rec_w = _uniform((2, d, n_cells, 2 * d), 1 / math.sqrt(d))
        if identical_init:
            with torch.no_grad():
                for p in (self.et_in_w, self.et_rec_w):
                    p.copy_(p[:, :, :1].expand_as(p))
                self.et_in_b.copy_(self.et_in_b[:, :1].expand_as(self.et_in_b))
        # C cell, chunk order [i^, o^, c-]
        self.c_in_w = _uniform((2, D, 3 * d), 1 / math.sqrt(D))
        self.c_in_b = _uniform((2, 3 * d), 1 / math.sqrt(D))
        self.c_rec_w = _uniform((2, d, 3 * d), 1 / math.sqrt(d))
        # additive attention sets: I_k = v^T tanh(P c- + Q c_k)
        a = self.att_width
        self.att_p = _uniform((n_sets, 2, a, d), 1 / math.sqrt(d))
        self.att_q = _uniform((n_sets, 2, a, d), 1 / math.sqrt(d))
        self.att_v = _uniform((n_sets, 2, a), 1 / math.sqrt(a))

    @property
    def n_cells(self) -> int:
        return self.et_in_w.shape[2]

    @property
    def n_sets(self) -> int:
        return self.att_p.shape[0]

    def grow(self, n_cells: int, n_sets: int) -> None:
        """Add ET cells (copies of cell 0 under identical_init, else fresh) and attention sets."""
        with torch.no_grad():
            extra = n_cells - self.n_cells
            if extra > 0:
                if self.identical_init:
                    new_in = self.et_in_w[:, :, :1].expand(-1, -1, extra, -1)
                    new_rec = self.et_rec_w[:, :, :1].expand(-1, -1, extra, -1)
                    new_b = self.et_in_b[:, :1].expand(-1, extra, -1)
                else:
                    fresh = MultiCellEncoder(self.n_in, self.width, extra, 1, False).to(self.et_in_w.device)
                    new_in, new_rec, new_b = fresh.et_in_w, fresh.et_rec_w, fresh.et_in_b
                self.et_in_w = nn.Parameter(torch.cat([self.et_in_w, new_in], 2))
                self.et_rec_w = nn.Parameter(torch.cat([self.et_rec_w, new_rec], 2))
                self.et_in_b = nn.Parameter(torch.cat([self.et_in_b, new_b], 1))
            extra = n_sets - self.n_sets
            if extra > 0:
                fresh = MultiCellEncoder(self.n_in, self.width, 1, extra, False).to(self.att_p.device)
                self.att_p = nn.Parameter(torch.cat([self.att_p, fresh.att_p], 0))
                self.att_q = nn.Parameter(torch.cat([self.att_q, fresh.att_q], 0))
                self.att_v = nn.Parameter(torch.cat([self.att_v, fresh.att_v], 0))

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        cells: torch.Tensor,
        cell_mask: torch.Tensor,
        sets: torch.Tensor,
        q_is_p: torch.Tensor,
        keep_states: bool = True,
    ) -> Dict[str, torch.Tensor]:
        """Run both directions.

        X: (B, T, D) padded features; lengths: (B,) real lengths (> 0).
        cells: (l,) inventory ids of the cells gathered for this batch.
        cell_mask: (B, l) bool, True where the sentence's domain owns the gathered cell.
        sets: (B,) attention set of each sentence; q_is_p: (n_sets,) bool, sets that use P in
            place of Q (the code's source-domain attention).
        keep_states (bool): also return states, alpha and scores (False at prediction: only h).
        RETURNS: h (2, B, T, d) hidden states (direction 1 already back in text order), states
            (2, B, T, l, d) ET cell memories c_k, alpha (2, B, T, l) attention weights (0 on
            masked cells), scores (2, B, T, l) attention scores I_k (-inf on masked cells); all
            zero at padding positions.
        """
        B, T, D = X.shape
        d = self.width
        l = cells.shape[0]
        device = X.device
        lengths = lengths.to(device)
        rev = _reverse_index(lengths, T)  # (B, T), its own inverse
        X2 = torch.stack([X, X.gather(1, rev[:, :, None].expand(-1, -1, D))])  # (2, B, T, D)
        # Sentences sorted longest first run as a shrinking batch: at step t only the n_t
        # sentences longer than t are computed (padding costs nothing, as with packed LSTMs).
        order = torch.argsort(lengths, descending=True, stable=True)
        steps = torch.bincount(lengths.cpu(), minlength=T + 1).flip(0).cumsum(0).flip(0)[1:].tolist()
        steps = [n for n in steps if n > 0]  # n_t for t < max length
        flat = torch.cat([t * B + torch.arange(n, device=device) for t, n in enumerate(steps)])
        X_tm = X2.index_select(1, order).transpose(1, 2).reshape(2, T * B, D)  # time-major
        # fused weights of the gathered ET cells and the C cell: (2, D, G), G = 2dl + 3d
        w_in = torch.cat([self.et_in_w.index_select(2, cells).reshape(2, D, l * 2 * d), self.c_in_w], 2)
        b_in = torch.cat([self.et_in_b.index_select(1, cells).reshape(2, l * 2 * d), self.c_in_b], 1)
        w_rec = torch.cat([self.et_rec_w.index_select(2, cells).reshape(2, d, l * 2 * d), self.c_rec_w], 2)
        # (1) all input projections: one batched GEMM (2, N real tokens, D) x (2, D, G), split
        # into one tensor per step
        x_steps = torch.baddbmm(b_in[:, None, :], X_tm.index_select(1, flat), w_in).split(steps, 1)
        # attention parameters; the code's source sets use P for Q (their Q gets no gradient)
        q_all = torch.where(q_is_p.to(device)[:, None, None, None], self.att_p, self.att_q)
        sets = sets.to(device).index_select(0, order)
        set_ids = torch.unique(sets)
        shared = set_ids.numel() == 1
        if shared:
            s = int(set_ids[0])
            P = self.att_p[s].transpose(1, 2)  # (2, d, a)
            Q = q_all[s].transpose(1, 2)  # (2, d, a)
            v = self.att_v[s][:, None, :, None]  # (2, 1, a, 1)
        elif set_ids.numel() <= STACKED_SETS:
            # two sets in the batch (mixed domains): score every token with both in one large
            # GEMM, then keep its own set's scores (the other gets exactly zero gradient from
            # it); at two sets one large GEMM beats per-sentence products (benchmarks/
            # multi_cell_ab.py)
            stacked = True
            S = set_ids.numel()
            a = self.att_width
            P = self.att_p.index_select(0, set_ids).permute(1, 3, 0, 2).reshape(2, d, S * a)
            Q = q_all.index_select(0, set_ids).permute(1, 3, 0, 2).reshape(2, d, S * a)
            v = self.att_v.index_select(0, set_ids).transpose(0, 1)  # (2, S, a)
            own = (sets[:, None] == set_ids[None, :]).to(X.dtype)  # (B, S) one-hot
        else:
            # more sets: each sentence's own P, Q, v gathered once per batch (sentence-major,
            # so that the first n sentences are one contiguous block), then one batched product
            # per step over (sentence, direction): the work no longer grows with the sets
            stacked = False
            P = self.att_p.index_select(0, sets).transpose(2, 3).contiguous()  # (B, 2, d, a)
            Q = q_all.index_select(0, sets).transpose(2, 3).contiguous()  # (B, 2, d, a)
            v = self.att_v.index_select(0, sets).transpose(0, 1)[..., None]  # (2, B, a, 1)
        cell_mask = cell_mask.to(device).index_select(0, order)
        blocked = None if bool(cell_mask.all()) else ~cell_mask[None, :, :]  # (1, B, l)
        h = X.new_zeros((2, B, d))
        c = X.new_zeros((2, B, d))
        hs, cks, alphas, scores = [], [], [], []
        for t, n in enumerate(steps):
            h, c = h[:, :n], c[:, :n]
            # (2) one recurrent GEMM per step for all cells, both directions: (2, n, G)
            g = torch.baddbmm(x_steps[t], h, w_rec)
            et = g[..., : l * 2 * d].view(2, n, l, 2 * d)
            i_k = torch.sigmoid(et[..., :d])
            c_k = i_k * torch.tanh(et[..., d:]) + (1 - i_k) * c[:, :, None, :]  # (2, n, l, d)
            c_i, c_o, c_bar = g[..., l * 2 * d :].split(d, dim=-1)
            c_i, c_o, c_bar = torch.sigmoid(c_i), torch.sigmoid(c_o), torch.tanh(c_bar)
            # (3) additive attention, batched over cells
            if shared:
                pc = torch.bmm(c_bar, P)  # (2, n, a)
                qc = torch.bmm(c_k.reshape(2, n * l, d), Q).view(2, n, l, -1)
                score = torch.matmul(torch.tanh(pc[:, :, None, :] + qc), v).squeeze(-1)
            elif stacked:
                pc = torch.bmm(c_bar, P).view(2, n, 1, S, a)
                qc = torch.bmm(c_k.reshape(2, n * l, d), Q).view(2, n, l, S, a)
                score_all = (torch.tanh(pc + qc) * v[:, None, None]).sum(-1)  # (2, n, l, S)
                score = (score_all * own[None, :n, None, :]).sum(-1)
            else:
                pc = torch.matmul(c_bar.transpose(0, 1)[:, :, None, :], P[:n]).transpose(0, 1)  # (2, n, 1, a)
                qc = torch.matmul(c_k.transpose(0, 1), Q[:n]).transpose(0, 1)  # (2, n, l, a)
                score = torch.matmul(torch.tanh(pc + qc), v[:, :n]).squeeze(-1)  # (2, n, l)
            if blocked is not None:
                score = score.masked_fill(blocked[:, :n], float("-inf"))  # (2, n, l)
            alpha = torch.softmax(score, dim=-1)
            m = (alpha[..., None] * c_k).sum(2)  # (2, n, d)
            c = c_i * m + (1 - c_i) * c
            h = c_o * torch.tanh(c)
            hs.append(h)
            if keep_states:
                cks.append(c_k)
                alphas.append(alpha)
                scores.append(score)
        unsort = torch.empty_like(order)
        unsort[order] = torch.arange(B, device=device)
        out = {}
        outputs = (("h", hs), ("states", cks), ("alpha", alphas), ("scores", scores))
        for key, parts in outputs if keep_states else outputs[:1]:
            packed = torch.cat(parts, 1)  # (2, N, ...)
            # padding positions hold zeros
            value = packed.new_zeros((2, T * B, *packed.shape[2:])).index_copy(1, flat, packed)
            value = value.view(2, T, B, *packed.shape[2:]).transpose(1, 2).index_select(1, unsort)
            # direction 1 ran over reversed sentences: put it back in text order
            index = rev.view(B, T, *([1] * (value.dim() - 3))).expand(*value.shape[1:])
            out[key] = torch.stack([value[0], value[1].gather(1, index)])
        return out


def _reverse_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) positions that reverse each sentence's real tokens and keep padding in place."""
    pos = torch.arange(T, device=lengths.device)[None, :]
    lengths = lengths[:, None]
    return torch.where(pos < lengths, lengths - 1 - pos, pos)


class MultiCellEmitter(Emitter):
    """Multi-cell LSTM emitter: encoder, entity-type and attention auxiliary losses, optional
    forward/backward language models on raw text, and a linear map per domain.

    width (int): d, hidden width per direction.
    dropout (float): dropout on the hidden states and the cell states (input dropout is the
        token features' own).
    attention_sharing (str): "per_domain_code" (one attention set per domain; the sources use
        P for Q, as in the code) or "shared" (one set, the paper).
    att_loss_on (str): "probs_code" (log-softmax of the averaged attention probabilities, the
        code) or "scores_paper" (softmax of the averaged raw scores, the paper).
    ent_weight, att_weight (float): weights of the entity-type and attention losses.
    lm_weight (float): weight of each language model's loss on raw text (0 = no LMs).
    lm_samples (int): negatives of the sampled softmax.
    lm_logq_correction (bool): log-Q correction of the sampled logits (the code: none).
    identical_init (bool): ET cells and aux heads start identical (the code).
    domain_weights (Dict[str, float]): weight of each domain's NER loss (scales the gradient
        the NER loss sends into the emitter; unlisted domains 1.0).
    """

    def __init__(
        self,
        width: int = 100,
        dropout: float = 0.5,
        attention_sharing: str = "per_domain_code",
        att_loss_on: str = "probs_code",
        ent_weight: float = 1.0,
        att_weight: float = 1.0,
        lm_weight: float = 0.0,
        lm_samples: int = 50,
        lm_logq_correction: bool = False,
        identical_init: bool = True,
        domain_weights: Optional[Dict[str, float]] = None,
    ) -> None:
        super().__init__()
        if attention_sharing not in ATTENTION_SHARING:
            raise ValueError(
                f"spacy_crossner.MultiCellLSTM.v1: attention_sharing must be one of "
                f"{ATTENTION_SHARING}, got {attention_sharing!r}"
            )
        if att_loss_on not in ATT_LOSS_ON:
            raise ValueError(
                f"spacy_crossner.MultiCellLSTM.v1: att_loss_on must be one of {ATT_LOSS_ON}, "
                f"got {att_loss_on!r}"
            )
        self.width = width
        self.attention_sharing = attention_sharing
        self.att_loss_on = att_loss_on
        self.ent_weight = ent_weight
        self.att_weight = att_weight
        self.lm_weight = lm_weight
        self.lm_samples = lm_samples
        self.lm_logq_correction = lm_logq_correction
        self.identical_init = identical_init
        self.domain_weights = dict(domain_weights or {})
        self.dropout = nn.Dropout(dropout)
        self.encoder: Optional[MultiCellEncoder] = None
        self.aux_w: Optional[nn.Parameter] = None  # (L, 2d) entity-type heads w_k
        self.aux_b: Optional[nn.Parameter] = None  # (L,)
        self.heads = DomainHeads()
        self.lm: Optional[SampledSoftmaxLM] = None
        self.types: List[str] = []
        self.set_keys: List[str] = []
        self.target: Optional[str] = None
        self.domain_cells: Dict[str, List[int]] = {}
        self.domain_tag_types: Dict[str, List[int]] = {}
        # Host-side inputs derived from settings (LM word index, entity dictionary), built on
        # first use by the architecture's extra_inputs.
        self.input_cache: Dict[str, Any] = {}

    # -- sizing -------------------------------------------------------------------------------

    def setup(self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Dict[str, Any]):
        """Create or grow the cells, attention sets, aux heads, domain heads and LM."""
        self.target = build_config.get(TARGET_KEY)
        sources = [d for d in domain_tags if d != self.target]
        # The cells built so far keep their places (a loaded model starts from the saved
        # inventory); new types are appended, and the inventory is saved back.
        known = self.types or build_config.get(TYPES_KEY, ())
        self.types = cell_inventory(domain_tags, known, sources)
        build_config[TYPES_KEY] = list(self.types)
        type_index = {t: i for i, t in enumerate(self.types)}
        self.domain_cells = {
            dom: sorted({type_index[tag_type(tag)] for tag in tags} | {0})
            for dom, tags in domain_tags.items()
        }
        self.domain_tag_types = {
            dom: [type_index[tag_type(tag)] for tag in tags] for dom, tags in domain_tags.items()
        }
        if self.attention_sharing == "shared":
            keys = ["shared"]
        else:
            keys = list(self.set_keys) + [module_key(d) for d in domain_tags if module_key(d) not in self.set_keys]
        self.set_keys = keys
        L = len(self.types)
        if self.encoder is None:
            self.encoder = MultiCellEncoder(n_in, self.width, L, len(keys), self.identical_init)
            bound = 1 / math.sqrt(2 * self.width)
            w = torch.empty(L, 2 * self.width).uniform_(-bound, bound)
            b = torch.empty(L).uniform_(-bound, bound)
            if self.identical_init:
                w[:] = w[:1].clone()
                b[:] = b[:1].clone()
            self.aux_w, self.aux_b = nn.Parameter(w), nn.Parameter(b)
        else:
            if self.encoder.n_in != n_in:
                raise ValueError(
                    f"The multi-cell LSTM expects features of width {self.encoder.n_in}, got "
                    f"{n_in}: the tok2vec of [components.crossner.model] changed width."
                )
            extra = L - self.aux_w.shape[0]
            self.encoder.grow(L, len(keys))
            if extra > 0:
                with torch.no_grad():
                    self.aux_w = nn.Parameter(torch.cat([self.aux_w, self.aux_w[:1].expand(extra, -1)]))
                    self.aux_b = nn.Parameter(torch.cat([self.aux_b, self.aux_b[:1].expand(extra)]))
        self.heads.setup(2 * self.width, domain_tags)
        vocab = build_config.get(LM_VOCAB_KEY)
        if self.lm_weight > 0 and vocab and self.lm is None:
            self.lm = SampledSoftmaxLM(len(vocab), self.width, self.lm_samples, self.lm_logq_correction)

    def encoder_parameter_count(self) -> int:
        """Parameters of the cells, attention and aux heads (the spec's formula, without heads)."""
        params = list(self.encoder.parameters()) + [self.aux_w, self.aux_b]
        return sum(p.numel() for p in params)

    def _q_is_p(self) -> torch.Tensor:
        # The code's source domains reuse P in place of Q (only with several domains).
        flags = [
            self.attention_sharing == "per_domain_code"
            and len(self.set_keys) > 1
            and self.target is not None
            and key != module_key(self.target)
            for key in self.set_keys
        ]
        return torch.tensor(flags, dtype=torch.bool)

    def batch_cells(self, domains: List[str]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For a batch: gathered cell ids (l,), cell mask (B, l), attention set per sentence,
        and the position of every inventory cell among the gathered ones ((L,), -1 = absent)."""
        gathered = sorted({k for d in set(domains) for k in self.domain_cells[d]})
        position = torch.full((len(self.types),), -1, dtype=torch.long)
        position[gathered] = torch.arange(len(gathered))
        mask = torch.zeros((len(domains), len(gathered)), dtype=torch.bool)
        for b, dom in enumerate(domains):
            mask[b, position[self.domain_cells[dom]]] = True
        if self.attention_sharing == "shared":
            sets = torch.zeros(len(domains), dtype=torch.long)
        else:
            sets = torch.tensor([self.set_keys.index(module_key(d)) for d in domains], dtype=torch.long)
        return torch.tensor(gathered, dtype=torch.long), mask, sets, position

    # -- forward ------------------------------------------------------------------------------

    def encode(
        self, X: torch.Tensor, lengths: torch.Tensor, domains: List[str], keep_states: bool = True
    ) -> Dict[str, torch.Tensor]:
        """Encoder outputs for a batch (see MultiCellEncoder.forward), plus the batch's cells."""
        device = X.device
        cells, mask, sets, position = self.batch_cells(domains)
        # Input dropout is the features' own (the tok2vec's dropout setting).
        out = self.encoder(
            X, lengths, cells.to(device), mask.to(device), sets.to(device), self._q_is_p(),
            keep_states=keep_states,
        )
        out.update(cells=cells.to(device), mask=mask.to(device), position=position.to(device))
        return out

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
        lm_ids: Optional[torch.Tensor] = None,
        dict_types: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Losses]:
        """X: (B, T, nI); lengths (B,) CPU; gold (B, T) tag ids (-1 unknown / raw text);
        lm_ids (B, T) LM word ids (-1 padding); dict_types (B, T) inventory ids of dictionary
        matches (-1 = no match). RETURNS: scores (B, T, K_max), weighted losses."""
        out = self.encode(X, lengths, domains, keep_states=gold is not None)
        h = out["h"]  # (2, B, T, d)
        B, T = X.shape[:2]
        hidden = torch.cat([h[0], h[1]], -1)  # (B, T, 2d)
        scores = self.heads(self.dropout(hidden), domains)
        if self.training and self.domain_weights:
            weights = torch.tensor([float(self.domain_weights.get(d, 1.0)) for d in domains], device=X.device)
            scores = _ScaleGrad.apply(scores, weights)
        if gold is None:
            return scores, {}
        return scores, self._losses(out, lengths, domains, gold, lm_ids, dict_types)

    def _losses(self, out, lengths, domains, gold, lm_ids, dict_types) -> Losses:
        device = gold.device
        B, T = gold.shape
        raw = (gold < 0).all(dim=1)  # (B,) raw-text sentences
        n_lab = max(int((~raw).sum()), 1)
        n_raw = max(int(raw.sum()), 1)
        norm = torch.where(raw, 1.0 / n_raw, 1.0 / n_lab).to(device)  # per-sentence divisor
        target = self._aux_targets(out, domains, gold, raw, dict_types)  # (B, T)
        mask = out["mask"][:, None, :]  # (B, 1, l)
        losses: Losses = {}
        valid = target >= 0
        if self.ent_weight and bool(valid.any()):
            states = out["states"]  # (2, B, T, l, d)
            C = torch.cat([states[0], states[1]], -1)  # (B, T, l, 2d)
            w = self.aux_w.index_select(0, out["cells"])  # (l, 2d)
            b = self.aux_b.index_select(0, out["cells"])
            logits = torch.einsum("btlh,lh->btl", self.dropout(C), w) + b
            losses["mc_ent"] = self.ent_weight * _masked_nll(logits, mask, target, norm)
        if self.att_weight and bool(valid.any()):
            if self.att_loss_on == "probs_code":
                logits = out["alpha"].mean(0)  # averaged probabilities used as logits
            else:
                logits = out["scores"].mean(0)  # averaged raw scores (-inf on masked cells)
            losses["mc_att"] = self.att_weight * _masked_nll(logits, mask, target, norm)
        if self.lm is not None and lm_ids is not None and bool(raw.any()):
            h = out["h"]
            nxt, prv = SampledSoftmaxLM.neighbour_targets(lm_ids, lengths)
            nxt = nxt.masked_fill(~raw[:, None], -1)
            prv = prv.masked_fill(~raw[:, None], -1)
            d = h.shape[-1]
            lm_fw = self.lm.loss(h[0].reshape(-1, d), nxt.reshape(-1))
            lm_bw = self.lm.loss(h[1].reshape(-1, d), prv.reshape(-1))
            losses["lm"] = self.lm_weight * (lm_fw + lm_bw) / n_raw
        return losses

    def _aux_targets(self, out, domains, gold, raw, dict_types) -> torch.Tensor:
        """(B, T) position of each token's type among the batch's gathered cells, -1 = none:
        the gold tag's type for labelled text, the dictionary's type for raw text (types the
        doc's domain does not own, and dictionary misses, give -1)."""
        device = gold.device
        position = out["position"]
        target = torch.full_like(gold, -1)
        for dom in set(domains):
            rows = torch.tensor([b for b, d in enumerate(domains) if d == dom], device=device)
            tag_types = torch.tensor(self.domain_tag_types[dom], dtype=torch.long, device=device)
            g = gold.index_select(0, rows)
            types = torch.where(g >= 0, tag_types[g.clamp(min=0)], torch.full_like(g, -1))
            if dict_types is not None:
                owned = torch.zeros(len(self.types) + 1, dtype=torch.bool, device=device)
                owned[torch.tensor(self.domain_cells[dom], device=device)] = True
                dt = dict_types.index_select(0, rows).to(device)[:, : g.shape[1]]
                dt = torch.where(owned[dt.clamp(min=-1)] & (dt >= 0), dt, torch.full_like(dt, -1))
                types = torch.where(raw.index_select(0, rows)[:, None], dt, types)
            pos = torch.where(types >= 0, position[types.clamp(min=0)], torch.full_like(types, -1))
            target = target.index_put((rows,), pos)
        return target


def _masked_nll(logits: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    """Sum over tokens of -log softmax(logits over the sentence's cells)[target], each
    sentence's sum times norm[b]; target -1 = no loss. logits (B, T, l), mask (B, 1, l)."""
    logp = torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
    valid = target >= 0
    picked = logp.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1)
    picked = torch.where(valid, picked, torch.zeros_like(picked))
    return -(picked.sum(1) * norm).sum()
