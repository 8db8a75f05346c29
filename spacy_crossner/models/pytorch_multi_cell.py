"""Torch modules of the multi-cell compositional LSTM (Jia & Zhang, ACL 2020).

See ``../shared/specs/multi_cell_lstm.md``. One entity-typed (ET) cell per entity type over the
union of all domains' types ('O' included as its own cell), a compositional (C) cell that merges
the active ET cells' memories with additive attention, both directions run concurrently. Each
domain uses only its own subset of ET cells and its own attention set: the sentences of a
domain run through the encoder on those cells (``index_select`` on stacked parameters, so the
cells of absent domains get exactly zero gradient), as the authors' single-domain batches do;
a batch mixing domains runs once per domain, so that no cell is computed for a sentence whose
domain does not own it.

Vectorised as the spec's section 11 asks: all the domain's cells' (and the C cell's) input
projections in one batched matrix product per batch (both directions at once), one recurrent
batched product per time step for all cells and both directions; the Python loop runs over time
steps only. The entity-type heads read the ET memories where the loop left them, packed (no
padded copy of the (B, T, l, 2d) memories is made in training).

Shapes: B sentences, T time steps, D input width, d hidden width per direction, L cells in the
inventory, l cells of the domain, a = 2d attention width, 2 = directions.
"""
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from .pytorch_emitter import Emitter, Losses
from .pytorch_heads import DomainHeads, Regrown, module_key
from .pytorch_lm import SampledSoftmaxLM


TYPES_KEY = "multi_cell_types"
TARGET_KEY = "multi_cell_target"
CELLS_GENERATION = "multi_cell_generations"  # per grown tensor, how often it was rebuilt larger
LM_VOCAB_KEY = "lm_vocab"
O_TYPE = "O"
ATTENTION_SHARING = ("per_domain_code", "shared")
ATT_LOSS_ON = ("probs_code", "scores_paper")


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


class _Recurrence(torch.autograd.Function):
    """The multi-cell recurrence over packed rows, both directions at once, with its
    backward pass through time written out: the autograd graph holds one node for the whole
    loop instead of some thirty per step, every step writes into preallocated packed buffers,
    and the parameters' gradients are each one large product over all steps after the loop
    instead of one small product per step.

    x: (2, N, G) input projections of the packed rows (step t's rows are offsets[t] :
    offsets[t] + steps[t], the first steps[t] of step t - 1's), G = 2dl + 3d, per cell
    [i, c~] then the C cell's [i^, o^, c-]; w_rec: (2, d, G); P, Q: (2, d, a); v: (2, a).
    RETURNS: h (2, N, d), the ET memories c_k (2, N, l, d), alpha and the scores I (2, N, l).
    The equations are MultiCellEncoder's (the spec's section 2).
    """

    @staticmethod
    def forward(ctx, x, w_rec, P, Q, v, steps, l):
        ctx.set_materialize_grads(False)
        N = x.shape[1]
        d, a = w_rec.shape[1], P.shape[2]
        new = lambda *shape: x.new_empty((2, N, *shape))  # noqa: E731
        H, C, M, CK, IK, CT, U = new(d), new(d), new(d), new(l, d), new(l, d), new(l, d), new(l, a)
        GC, ALPHA, S = new(3, d), new(l), new(l)  # GC: i^, o^, c- after their nonlinearities
        zero = x.new_zeros((2, steps[0], d))
        h = c = zero
        o = before = 0
        for t, n in enumerate(steps):
            rows = slice(o, o + n)
            if t:
                h, c = H[:, before : before + n], C[:, before : before + n]
            g = torch.baddbmm(x[:, rows], h, w_rec)  # (2, n, G)
            et = g[..., : l * 2 * d].view(2, n, l, 2, d)
            i_k, ct_k, c_k = IK[:, rows], CT[:, rows], CK[:, rows]
            torch.sigmoid(et[..., 0, :], out=i_k)
            torch.tanh(et[..., 1, :], out=ct_k)
            torch.lerp(c[:, :, None, :], ct_k, i_k, out=c_k)  # i_k c~_k + (1 - i_k) c^_{t-1}
            gc = g[..., l * 2 * d :].view(2, n, 3, d)
            gates = GC[:, rows]
            torch.sigmoid(gc[:, :, :2], out=gates[:, :, :2])
            torch.tanh(gc[:, :, 2], out=gates[:, :, 2])
            ci, co, cb = gates.unbind(2)
            u = U[:, rows]
            torch.add(torch.bmm(cb, P)[:, :, None, :], torch.bmm(c_k.view(2, n * l, d), Q).view(2, n, l, a), out=u)
            u.tanh_()
            score = S[:, rows]
            score.copy_(torch.bmm(u.view(2, n * l, a), v[:, :, None]).view(2, n, l))
            alpha = ALPHA[:, rows]
            torch.softmax(score, dim=-1, out=alpha)
            m = M[:, rows]
            torch.sum(alpha[..., None] * c_k, dim=2, out=m)
            torch.lerp(c, m, ci, out=C[:, rows])  # c^_t = i^ m + (1 - i^) c^_{t-1}
            torch.mul(co, torch.tanh(C[:, rows]), out=H[:, rows])
            before, o = o, o + n
        ctx.steps, ctx.l = steps, l
        ctx.save_for_backward(w_rec, P, Q, v, H, C, M, CK, IK, CT, U, GC, ALPHA)
        return H, CK, ALPHA, S

    @staticmethod
    def backward(ctx, dH, dCK, dALPHA, dS):
        w_rec, P, Q, v, H, C, M, CK, IK, CT, U, GC, ALPHA = ctx.saved_tensors
        steps, l = ctx.steps, ctx.l
        N = H.shape[1]
        d = w_rec.shape[1]
        offsets = [0]
        for n in steps:
            offsets.append(offsets[-1] + n)
        w_rec_t, P_t, Q_t = w_rec.transpose(1, 2), P.transpose(1, 2), Q.transpose(1, 2)
        v4 = v[:, None, None, :]  # (2, 1, 1, a)
        dG = H.new_empty((2, N, w_rec.shape[2]))
        DPRE, DS = torch.empty_like(U), torch.empty_like(ALPHA)
        zero = H.new_zeros((2, steps[0], d))
        dh_next = dc_next = None  # gradients from step t + 1 into h_t, c^_t (its first rows)
        for t in range(len(steps) - 1, -1, -1):
            n, o = steps[t], offsets[t]
            rows = slice(o, o + n)
            c_prev = C[:, offsets[t - 1] : offsets[t - 1] + n] if t else zero
            ci, co, cb = GC[:, rows].unbind(2)
            i_k, ct_k, c_k, alpha, u = IK[:, rows], CT[:, rows], CK[:, rows], ALPHA[:, rows], U[:, rows]
            dh = dH[:, rows] if dH is not None else zero[:, :n]
            if dh_next is not None:
                dh = dh.clone()
                dh[:, : dh_next.shape[1]] += dh_next
            tc = torch.tanh(C[:, rows])
            dc = dh * co * (1 - tc * tc)
            if dc_next is not None:
                dc[:, : dc_next.shape[1]] += dc_next
            dg = dG[:, rows]
            torch.mul(dh * tc, co * (1 - co), out=dg[..., l * 2 * d + d : l * 2 * d + 2 * d])  # o^
            dm = dc * ci
            torch.mul(dc * (M[:, rows] - c_prev), ci * (1 - ci), out=dg[..., l * 2 * d : l * 2 * d + d])  # i^
            dc_prev = dc * (1 - ci)
            # m = sum_k alpha_k c_k; alpha = softmax(I); I = v^T u; u = tanh(P c- + Q c_k)
            dalpha = (c_k * dm[:, :, None, :]).sum(-1)  # (2, n, l)
            if dALPHA is not None:
                dalpha += dALPHA[:, rows]
            ds = DS[:, rows]
            torch.mul(alpha, dalpha - (alpha * dalpha).sum(-1, keepdim=True), out=ds)
            if dS is not None:
                ds += dS[:, rows]
            dpre = DPRE[:, rows]
            dpre_u = ds[..., None] * v4
            torch.addcmul(dpre_u, dpre_u, u * u, value=-1, out=dpre)  # ds v (1 - u^2): (2, n, l, a)
            dpc = dpre.sum(2)  # (2, n, a)
            dck = torch.baddbmm(
                (alpha[..., None] * dm[:, :, None, :]).view(2, n * l, d), dpre.view(2, n * l, -1), Q_t
            ).view(2, n, l, d)
            if dCK is not None:
                dck += dCK[:, rows]
            torch.mul(torch.bmm(dpc, P_t), 1 - cb * cb, out=dg[..., l * 2 * d + 2 * d :])  # c-
            # c_k = c^_{t-1} + i_k (c~_k - c^_{t-1})
            cells = dg[..., : l * 2 * d].view(2, n, l, 2, d)
            torch.mul(dck * (ct_k - c_prev[:, :, None, :]), i_k * (1 - i_k), out=cells[..., 0, :])
            torch.mul(dck * i_k, 1 - ct_k * ct_k, out=cells[..., 1, :])
            dc_prev += (dck * (1 - i_k)).sum(2)
            if t:
                dh_next = torch.bmm(dg, w_rec_t)  # into h_{t-1}'s first n rows
                dc_next = dc_prev
        # the parameters' gradients: one product over all steps each
        d_w_rec = d_P = d_Q = d_v = None
        if ctx.needs_input_grad[1]:
            # row r's h_{t-1}: the same sentence's row at the step before (zero at step 0)
            parent = torch.cat([
                torch.full((steps[0],), N, device=H.device),
                *(torch.arange(offsets[t - 1], offsets[t - 1] + steps[t], device=H.device) for t in range(1, len(steps))),
            ])
            h_prev = torch.cat([H, H.new_zeros((2, 1, d))], 1).index_select(1, parent)
            d_w_rec = torch.bmm(h_prev.transpose(1, 2), dG)
        if ctx.needs_input_grad[3]:
            d_Q = torch.bmm(CK.view(2, N * l, d).transpose(1, 2), DPRE.view(2, N * l, -1))
        if ctx.needs_input_grad[2]:
            d_P = torch.bmm(GC[:, :, 2].transpose(1, 2), DPRE.sum(2))
        if ctx.needs_input_grad[4]:
            d_v = torch.bmm(DS.view(2, 1, N * l), U.view(2, N * l, -1))[:, 0]
        return dG, d_w_rec, d_P, d_Q, d_v, None, None


class MultiCellEncoder(Regrown, nn.Module):
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

    # grown for new types (ET cells) or domains (attention sets): new names, new parameters
    GROWN = ("et_in_w", "et_rec_w", "et_in_b", "att_p", "att_q", "att_v")

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
                self.replace_grown("et_in_w", nn.Parameter(torch.cat([self.et_in_w, new_in], 2)))
                self.replace_grown("et_rec_w", nn.Parameter(torch.cat([self.et_rec_w, new_rec], 2)))
                self.replace_grown("et_in_b", nn.Parameter(torch.cat([self.et_in_b, new_b], 1)))
            extra = n_sets - self.n_sets
            if extra > 0:
                fresh = MultiCellEncoder(self.n_in, self.width, 1, extra, False).to(self.att_p.device)
                self.replace_grown("att_p", nn.Parameter(torch.cat([self.att_p, fresh.att_p], 0)))
                self.replace_grown("att_q", nn.Parameter(torch.cat([self.att_q, fresh.att_q], 0)))
                self.replace_grown("att_v", nn.Parameter(torch.cat([self.att_v, fresh.att_v], 0)))

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        cells: torch.Tensor,
        att_set: int,
        q_is_p: torch.Tensor,
        states: bool = False,
        attention: bool = False,
        ent_w: Optional[torch.Tensor] = None,
        dropout: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> Dict[str, torch.Tensor]:
        """Run both directions over sentences of one domain: every sentence owns every cell
        of ``cells`` and uses the attention set ``att_set``.

        X: (B, T, D) padded features; lengths: (B,) real lengths (> 0).
        cells: (l,) inventory ids of the domain's cells.
        att_set (int): the attention set; q_is_p: (n_sets,) bool, sets that use P in place of
            Q (the code's source-domain attention).
        states (bool): also return the ET cell memories (for inspection and tests).
        attention (bool): also return alpha and scores.
        ent_w (Optional[Tensor]): (l, 2d) entity-type head weights: also return "ent", the
            heads' outputs w_k^T dropout(C_{t,k}) without bias, computed per direction on the
            packed memories (no padded copy of them is made).
        dropout (Optional[Callable]): the dropout applied to the memories for "ent".
        RETURNS: h (2, B, T, d) hidden states (direction 1 already back in text order); states
            (2, B, T, l, d) ET cell memories c_k; alpha (2, B, T, l) attention weights; scores
            (2, B, T, l) attention scores I_k; ent (B, T, l); all zero at padding positions.
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
        # packed row r: step time[r], rank[r]-th longest sentence
        n_t = torch.tensor(steps, device=device)
        time = torch.repeat_interleave(torch.arange(len(steps), device=device), n_t)
        rank = torch.arange(time.shape[0], device=device) - (n_t.cumsum(0) - n_t)[time]
        X_tm = X2.index_select(1, order).transpose(1, 2).reshape(2, T * B, D)  # time-major
        # fused weights of the ET cells and the C cell: (2, D, G), G = 2dl + 3d
        w_in = torch.cat([self.et_in_w.index_select(2, cells).reshape(2, D, l * 2 * d), self.c_in_w], 2)
        b_in = torch.cat([self.et_in_b.index_select(1, cells).reshape(2, l * 2 * d), self.c_in_b], 1)
        w_rec = torch.cat([self.et_rec_w.index_select(2, cells).reshape(2, d, l * 2 * d), self.c_rec_w], 2)
        # (1) all input projections: one batched GEMM (2, N real tokens, D) x (2, D, G), split
        # into one tensor per step
        x_proj = torch.baddbmm(b_in[:, None, :], X_tm.index_select(1, time * B + rank), w_in)
        # attention: I_k = v^T tanh(P c- + Q c_k); the code's source sets use P for Q
        P = self.att_p[att_set].transpose(1, 2)  # (2, d, a)
        # (Q of every set stays in the graph, as before: a source batch gives it zero gradient)
        Q = torch.where(q_is_p.to(device)[:, None, None, None], self.att_p, self.att_q)[att_set].transpose(1, 2)
        # (2) one recurrent GEMM per step for all cells and both directions, (3) the attention
        # batched over cells and directions: the fused recurrence
        H, CK, ALPHA, SCORES = _Recurrence.apply(x_proj, w_rec, P, Q, self.att_v[att_set], steps, l)
        # packed row r = (step t, sorted sentence i) -> its padded (sentence, position) cell,
        # direction 1 back in text order
        sentence = order.index_select(0, rank)
        back = lengths.index_select(0, sentence) - 1 - time
        to = torch.cat([sentence * T + time, B * T + sentence * T + back])  # (2N,)

        def unpack(packed: torch.Tensor) -> torch.Tensor:  # (2, N, ...) -> (2, B, T, ...)
            tail = packed.shape[2:]
            value = packed.new_zeros((2 * B * T, *tail)).index_copy(0, to, packed.reshape(-1, *tail))
            return value.view(2, B, T, *tail)

        out = {"h": unpack(H)}
        if states:
            out["states"] = unpack(CK)
        if attention:
            out["alpha"] = unpack(ALPHA)
            out["scores"] = unpack(SCORES)
        if ent_w is not None:
            memories = CK if dropout is None else dropout(CK)  # (2, N, l, d)
            # C_{t,k} = [->c_k ; <-c_k]: each direction's half of w_k, summed per token
            partial = torch.einsum("znkh,zkh->znk", memories, ent_w.view(l, 2, d).transpose(0, 1))
            out["ent"] = unpack(partial).sum(0)
        return out


def _reverse_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) positions that reverse each sentence's real tokens and keep padding in place."""
    pos = torch.arange(T, device=lengths.device)[None, :]
    lengths = lengths[:, None]
    return torch.where(pos < lengths, lengths - 1 - pos, pos)


class MultiCellEmitter(Regrown, Emitter):
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

    GROWN = ("aux_w", "aux_b")  # rebuilt larger for new types (and the encoder's cells)

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
                f"spacy_crossner.MultiCellLSTM: attention_sharing must be one of "
                f"{ATTENTION_SHARING}, got {attention_sharing!r}"
            )
        if att_loss_on not in ATT_LOSS_ON:
            raise ValueError(
                f"spacy_crossner.MultiCellLSTM: att_loss_on must be one of {ATT_LOSS_ON}, "
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
        # the entity-type heads `aux_w` (L, 2d) and `aux_b` (L,), and the encoder's cells and
        # attention sets, are registered under generation_name(name, generation): rebuilt
        # larger for new types or domains, they are new parameters to the optimizer
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
        saved = build_config.get(CELLS_GENERATION) or {}
        if self.encoder is None:
            self.encoder = MultiCellEncoder(n_in, self.width, L, len(keys), self.identical_init)
            self.encoder.restore_generations(saved)
            bound = 1 / math.sqrt(2 * self.width)
            w = torch.empty(L, 2 * self.width).uniform_(-bound, bound)
            b = torch.empty(L).uniform_(-bound, bound)
            if self.identical_init:
                w[:] = w[:1].clone()
                b[:] = b[:1].clone()
            self.replace_grown("aux_w", nn.Parameter(w))
            self.replace_grown("aux_b", nn.Parameter(b))
            self.restore_generations(saved)
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
                    self.replace_grown("aux_w", nn.Parameter(torch.cat([self.aux_w, self.aux_w[:1].expand(extra, -1)])))
                    self.replace_grown("aux_b", nn.Parameter(torch.cat([self.aux_b, self.aux_b[:1].expand(extra)])))
        generations = {k: g for k, g in {**self.encoder.generations, **self.generations}.items() if g}
        if generations:
            build_config[CELLS_GENERATION] = generations
        self.heads.setup(2 * self.width, domain_tags, build_config)
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
        sets = torch.tensor([self.attention_set(d) for d in domains], dtype=torch.long)
        return torch.tensor(gathered, dtype=torch.long), mask, sets, position

    def attention_set(self, domain: str) -> int:
        """The attention set of a domain's sentences."""
        return 0 if self.attention_sharing == "shared" else self.set_keys.index(module_key(domain))

    def _groups(self, domains: List[str], device) -> List[Tuple[str, Optional[torch.Tensor]]]:
        """The batch's domains (sorted) with the rows of their sentences (None: all rows)."""
        present = sorted(set(domains))
        if len(present) == 1:
            return [(present[0], None)]
        return [
            (dom, torch.tensor([b for b, d in enumerate(domains) if d == dom], device=device))
            for dom in present
        ]

    def _encode_domain(self, X, lengths, domain, rows, **kwargs) -> Dict[str, torch.Tensor]:
        """The encoder over the sentences of one domain (``rows`` of the batch, None = all)."""
        if rows is not None:
            X, lengths = X.index_select(0, rows), lengths.index_select(0, rows.to(lengths.device))
        cells = torch.tensor(self.domain_cells[domain], dtype=torch.long, device=X.device)
        s = self.attention_set(domain)
        # Input dropout is the features' own (the tok2vec's dropout setting).
        return self.encoder(X, lengths, cells, s, self._q_is_p(), **kwargs)

    # -- forward ------------------------------------------------------------------------------

    def encode(
        self, X: torch.Tensor, lengths: torch.Tensor, domains: List[str], keep_states: bool = True
    ) -> Dict[str, torch.Tensor]:
        """Encoder outputs for a batch, the cells of all its domains side by side: h (2, B, T,
        d); with keep_states, states (2, B, T, l, d), alpha and scores (2, B, T, l), with
        zero memories and weights and -inf scores on the cells a sentence's domain does not
        own; cells (l,) the batch's cell ids, mask (B, l) the cells each sentence owns, and
        position (L,) of every inventory cell among them (-1 = absent).

        Each domain's sentences run on their own cells with their own attention set (as the
        code's single-domain batches do); no cell is computed for a sentence that does not
        own it."""
        device = X.device
        cells, mask, _, position = self.batch_cells(domains)
        cells, mask, position = cells.to(device), mask.to(device), position.to(device)
        B, T = X.shape[:2]
        l, d = cells.shape[0], self.width
        out = {"h": X.new_zeros((2, B, T, d)), "cells": cells, "mask": mask, "position": position}
        if keep_states:
            out["states"] = X.new_zeros((2, B, T, l, d))
            out["alpha"] = X.new_zeros((2, B, T, l))
            out["scores"] = X.new_full((2, B, T, l), float("-inf"))
        for dom, rows in self._groups(domains, device):
            part = self._encode_domain(X, lengths, dom, rows, states=keep_states, attention=keep_states)
            rows = torch.arange(B, device=device) if rows is None else rows
            cols = position[torch.tensor(self.domain_cells[dom], device=device)]
            for key, value in part.items():
                if key != "h":  # the domain's cells in their columns among the batch's
                    fill = float("-inf") if key == "scores" else 0.0
                    shape = (*value.shape[:3], l, *value.shape[4:])
                    value = value.new_full(shape, fill).index_copy(3, cols, value)
                out[key] = out[key].index_copy(1, rows, value)
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
        matches (-1 = no match). RETURNS: scores (B, T, K_max), weighted losses.

        Each domain's sentences run through the encoder on their own cells with their own
        attention set; the auxiliary losses are computed per domain from the encoder's
        packed memories."""
        device = X.device
        B, T = X.shape[:2]
        d = self.width
        groups = self._groups(domains, device)
        aux = gold is not None
        if aux:
            raw = (gold < 0).all(dim=1)  # (B,) raw-text sentences
            n_lab = max(int((~raw).sum()), 1)
            n_raw = max(int(raw.sum()), 1)
            norm = torch.where(raw, 1.0 / n_raw, 1.0 / n_lab).to(device)  # per-sentence divisor
        h = None
        ent = att = None
        for dom, rows in groups:
            cells = torch.tensor(self.domain_cells[dom], device=device)
            w = self.aux_w.index_select(0, cells) if aux and self.ent_weight else None
            part = self._encode_domain(
                X, lengths, dom, rows, attention=aux and bool(self.att_weight), ent_w=w, dropout=self._dropout,
            )
            if rows is None:
                h = part["h"]
            else:
                h = (X.new_zeros((2, B, T, d)) if h is None else h).index_copy(1, rows, part["h"])
            if not aux:
                continue
            pick = (lambda x: x) if rows is None else (lambda x: x.index_select(0, rows))  # noqa: E731
            dict_rows = None if dict_types is None else pick(dict_types)
            target = self._domain_targets(dom, pick(gold), pick(raw), dict_rows)
            if bool((target >= 0).any()):
                if w is not None:
                    loss = _masked_nll(part["ent"] + self.aux_b.index_select(0, cells), None, target, pick(norm))
                    ent = loss if ent is None else ent + loss
                if self.att_weight:
                    # averaged probabilities used as logits (code), or averaged raw scores (paper)
                    logits = (part["alpha"] if self.att_loss_on == "probs_code" else part["scores"]).mean(0)
                    loss = _masked_nll(logits, None, target, pick(norm))
                    att = loss if att is None else att + loss
        hidden = torch.cat([h[0], h[1]], -1)  # (B, T, 2d)
        scores = self.heads(self._dropout(hidden), domains)
        if self.training and self.domain_weights:
            weights = torch.tensor([float(self.domain_weights.get(d, 1.0)) for d in domains], device=device)
            scores = _ScaleGrad.apply(scores, weights)
        if not aux:
            return scores, {}
        losses: Losses = {}
        if ent is not None:
            losses["mc_ent"] = self.ent_weight * ent
        if att is not None:
            losses["mc_att"] = self.att_weight * att
        if self.lm is not None and lm_ids is not None and bool(raw.any()):
            nxt, prv = SampledSoftmaxLM.neighbour_targets(lm_ids, lengths)
            nxt = nxt.masked_fill(~raw[:, None], -1)
            prv = prv.masked_fill(~raw[:, None], -1)
            lm_fw = self.lm.loss(h[0].reshape(-1, d), nxt.reshape(-1))
            lm_bw = self.lm.loss(h[1].reshape(-1, d), prv.reshape(-1))
            losses["lm"] = self.lm_weight * (lm_fw + lm_bw) / n_raw
        return scores, losses

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        """Dropout at rate ``self.dropout.p`` in training. On CPU the keep mask is drawn as
        uniform < 1 - p (the same Bernoulli(1 - p) per element as torch's dropout, whose
        bernoulli_ sampler is several times slower there); elsewhere torch's fused dropout."""
        p = self.dropout.p
        if not self.training or p == 0:
            return x
        if x.device.type != "cpu" or p >= 1:
            return self.dropout(x)
        return x * ((torch.rand_like(x) < 1 - p) * (1 / (1 - p))).to(x.dtype)

    def _domain_targets(self, domain, gold, raw, dict_types) -> torch.Tensor:
        """(B, T) position of each token's type among the domain's cells, -1 = none: the gold
        tag's type for labelled text, the dictionary's type for raw text (types the domain
        does not own, and dictionary misses, give -1)."""
        device = gold.device
        cells = self.domain_cells[domain]
        position = torch.full((len(self.types) + 1,), -1, dtype=torch.long, device=device)
        position[torch.tensor(cells, device=device)] = torch.arange(len(cells), device=device)
        tag_types = torch.tensor(self.domain_tag_types[domain], dtype=torch.long, device=device)
        types = torch.where(gold >= 0, tag_types[gold.clamp(min=0)], torch.full_like(gold, -1))
        if dict_types is not None:
            dt = dict_types.to(device)[:, : gold.shape[1]]
            types = torch.where(raw[:, None], dt, types)  # unowned types: position -1
        return position[types]  # types -1 -> the last entry, -1


def _masked_nll(
    logits: torch.Tensor, mask: Optional[torch.Tensor], target: torch.Tensor, norm: torch.Tensor
) -> torch.Tensor:
    """Sum over tokens of -log softmax(logits over the sentence's cells)[target], each
    sentence's sum times norm[b]; target -1 = no loss. logits (B, T, l), mask (B, 1, l) or
    None (every cell)."""
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1)
    valid = target >= 0
    picked = logp.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1)
    picked = torch.where(valid, picked, torch.zeros_like(picked))
    return -(picked.sum(1) * norm).sum()
