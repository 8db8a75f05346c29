"""Torch side of ``spacy_crossner.LabelAwareTagger.v1`` (LANER, Hu et al. 2022; spec §2-3).

Notation (shape comments): B docs, n = longest doc in words, d1 = token vector width,
d2 = label embedding width, h = label LSTM width per direction, Kg = tags of all domains
(the label inventory, keyed by tag NAME), K = tags of the widest domain in the batch.

The chain runs over spaCy tokens. The label prefix of token i is ``(X, y_0 .. y_{i-1})``
(start symbol X, spec §2.3 ``start = "bos"``), so position i reads the ``i + 1`` slots
``0..i`` of ``A = [X, y_0, ..., y_{n-2}]``. E^{(i)} is a BiLSTM over those slots run from a
zero state *for every i*; it is computed exactly without re-running the BiLSTM per position:

* the forward direction does not depend on where the prefix ends: one LSTM call over A;
* the backward direction does: one packed LSTM call over all reversed prefixes
  ``(A_i, A_{i-1}, ..., A_0)`` of all docs (Σ n_b rows, n sequential steps).

:meth:`LabelAwareEmitter.reference_logits` is the per-position loop of the authors' code (a
fresh BiLSTM call per prefix); it exists for the tests that check the two agree.

Label embeddings and output rows are one parameter per tag *name*, so a pipeline pre-trained
on a source domain keeps them for the tags the target shares, new tags start fresh, and
growing the inventory never changes the shape of an existing parameter (the optimizer's
moments stay valid). Tag ``O`` (index 0 of every domain) has a constant zero embedding when
``freeze_o_zero`` (the code's ``padding_idx``).
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy
import torch
from torch import nn

from .pytorch_emitter import Emitter, Losses

from ..decoding import OUTSIDE, allowed_moves, tag_kinds
from .pytorch_heads import allowed_tags as _allowed_tags
from .pytorch_heads import whitespace_closed as _whitespace_closed

INVENTORY_KEY = "label_aware_tags"
NEG_INF = float("-inf")


def run_lstm(lstm: nn.LSTM, inputs: torch.Tensor, lengths: torch.Tensor, n_buckets: int = 4) -> torch.Tensor:
    """A unidirectional LSTM over right-padded sequences, from a zero state.

    inputs: (N, T, d_in); lengths: (N,) CPU, all >= 1.
    RETURNS: (N, T, h) outputs, zero past each length.
    Output t only reads inputs 0..t, so right padding needs no packing (packing makes torch's
    CPU backward fill a zero tensor of the whole packed batch at every step). Rows are run in
    a few length buckets, each cut to its longest row, so padding costs little compute.
    """
    N, T, _ = inputs.shape
    lengths = lengths.cpu()
    lstm.flatten_parameters()  # cuDNN's weight buffer after thinc's update (no-op on CPU)
    bounds = torch.quantile(
        lengths.double(), torch.linspace(0, 1, n_buckets + 1, dtype=torch.float64)[1:]
    ).ceil().long().unique().tolist()
    out = inputs.new_zeros((N, T, lstm.hidden_size))
    low = 0
    for high in bounds:
        rows = ((lengths > low) & (lengths <= high)).nonzero()[:, 0].to(inputs.device)
        if len(rows):
            result, _ = lstm(inputs[rows, :high])  # (n_rows, high, h)
            out = out.index_put((rows,), nn.functional.pad(result, (0, 0, 0, T - high)))
        low = high
    return out


def beam_search(
    step: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor],
    lengths: torch.Tensor,
    allowed_start: torch.Tensor,
    allowed_transitions: torch.Tensor,
    beam_width: int = 1,
    allowed_tags: Optional[torch.Tensor] = None,
    closed: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Beam search (width 1 = greedy) in torch, on the device of the model's scores.

    The same search as :func:`spacy_crossner.decoding.autoregressive_beam_search` (its numpy
    reference, against which it is tested), with every argument and the whole state as
    tensors, so nothing crosses to the host during decoding: the caller copies the result once.
    step: ``step(t, parents, prev_tags) -> logp``, (N, W) long tensors, (N, W, K) float.
    lengths: (N,) long (CPU or device). allowed_start (N, K), allowed_transitions (N, K, K),
    allowed_tags (N, T, K), closed (N, T, K, K): bool on the model's device (see the reference).
    RETURNS: tags (N, T) and rows (N, T) long: the best sequence and, per position, the beam
    slot whose ``step`` scores produced its tag (0 past a doc's length).
    """
    if beam_width < 1:
        raise ValueError(f"beam_width must be at least 1, got {beam_width}")
    device = allowed_start.device
    N, K = allowed_start.shape
    W = beam_width
    steps = int(lengths.max()) if len(lengths) else 0
    lengths = lengths.to(device)
    scores = torch.full((N, W), NEG_INF, dtype=torch.float64, device=device)
    scores[:, 0] = 0.0  # one live beam at the start: the others would be its copies
    keep = torch.arange(W, device=device)[None, :].expand(N, W)
    parents = torch.zeros((N, W), dtype=torch.long, device=device)
    tags = torch.full((N, W), -1, dtype=torch.long, device=device)
    doc = torch.arange(N, device=device)[:, None]
    hist_tags, hist_parents = [], []
    for t in range(steps):
        logp = step(t, parents, tags).double()
        if t == 0:
            allowed = allowed_start[:, None, :].expand(N, W, K)
        else:
            prev = tags.clamp(min=0)
            allowed = allowed_transitions[doc, prev]  # (N, W, K)
            if closed is not None:
                allowed = allowed & ~closed[doc, t, prev]
        if allowed_tags is not None:
            allowed = allowed & allowed_tags[:, t, None, :]
        cand = torch.where(allowed, scores[:, :, None] + logp, NEG_INF).reshape(N, W * K)
        if W == 1:
            best = cand.argmax(dim=1, keepdim=True)  # the first of equal scores, as the reference
            top = cand.gather(1, best)
        else:
            top, best = torch.sort(cand, dim=1, descending=True, stable=True)
            top, best = top[:, :W], best[:, :W]
        active = (t < lengths)[:, None]
        scores = torch.where(active, top, scores)
        parents = torch.where(active, best // K, keep)
        tags = torch.where(active, best % K, tags)
        hist_tags.append(tags)
        hist_parents.append(parents)
    out_tags = torch.zeros((N, steps), dtype=torch.long, device=device)
    out_rows = torch.zeros((N, steps), dtype=torch.long, device=device)
    slot = scores.argmax(dim=1, keepdim=True)  # (N, 1)
    for t in range(steps - 1, -1, -1):
        active = t < lengths
        parent = hist_parents[t].gather(1, slot)[:, 0]
        out_tags[:, t] = torch.where(active, hist_tags[t].gather(1, slot)[:, 0], 0)
        out_rows[:, t] = torch.where(active, parent, 0)
        slot = torch.where(active[:, None], parent[:, None], slot)
    return out_tags, out_rows


class LabelAwareEmitter(Emitter):
    """Label embeddings, a BiLSTM label encoder, label-background (LB) and label-context (LC)
    attention and a softmax output layer, with teacher forcing in training and greedy or beam
    decoding at prediction.

    label_width (int): d2, width of the label embeddings.
    hidden_width (int): h, LSTM width per direction (the paper: d2 = h = 100).
    use_lb (bool): label-background attention over the token vectors (off: "w/o LB").
    use_lc (bool): label-context attention over the encoded labels (off: "w/o LC").
    freeze_o_zero (bool): the ``O`` embedding is a constant zero (the code's padding_idx).
    beam_width (int): beam width at prediction; 1 = greedy.
    dropout (float): dropout on the token vectors (the paper uses none).
    """

    def __init__(
        self,
        label_width: int = 100,
        hidden_width: int = 100,
        use_lb: bool = True,
        use_lc: bool = True,
        freeze_o_zero: bool = True,
        beam_width: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        for name, value in (("label_width", label_width), ("hidden_width", hidden_width),
                            ("beam_width", beam_width)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"[components.crossner.model] {name} must be a positive integer, got {value!r}"
                )
        self.label_width = label_width
        self.hidden_width = hidden_width
        self.use_lb = use_lb
        self.use_lc = use_lc
        self.freeze_o_zero = freeze_o_zero
        self.beam_width = beam_width
        self.dropout = nn.Dropout(dropout)
        self.n_in: Optional[int] = None
        self.tag_names: List[str] = []
        self.tag_embed = nn.ParameterDict()
        self.tag_out = nn.ParameterDict()
        self.domain_globals: Dict[str, List[int]] = {}
        self.domain_moves: Dict[str, Tuple[numpy.ndarray, numpy.ndarray]] = {}
        self.domain_tags: Dict[str, List[str]] = {}

    # -- sizes and the label inventory ---------------------------------------------------------

    @property
    def n_u(self) -> int:
        """Width of u_i = [h_i; h^b_i; e^c_i], the input of the output layer."""
        return self.n_in + (self.n_in if self.use_lb else 0) + (2 * self.hidden_width if self.use_lc else 0)

    def setup(self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Dict[str, Any]):
        """Create the modules (first call) and add the tags not yet in the inventory.

        n_in (int): d1, width of the token vectors.
        domain_tags (Dict[str, Sequence[str]]): the IOB2 tags of each domain (``O`` first).
        build_config (Dict[str, Any]): the component's build config; its ``label_aware_tags``
            (the inventory, in order) is read and updated in place.
        """
        if self.n_in is None:
            self._build(n_in)
        elif n_in != self.n_in:
            raise ValueError(
                f"The label-aware tagger expects token vectors of width {self.n_in}, got {n_in}: "
                "[components.crossner.model.tok2vec] changed width since training."
            )
        names = list(self.tag_names) or list(build_config.get(INVENTORY_KEY) or [OUTSIDE])
        for name in build_config.get(INVENTORY_KEY) or []:
            if name not in names:
                names.append(name)
        for tags in domain_tags.values():
            if tags[0] != OUTSIDE:
                raise ValueError(f"Tag lists must start with '{OUTSIDE}', got {tags[0]!r}")
            for tag in tags:
                if tag not in names:
                    names.append(tag)
        for i in range(len(self.tag_names), len(names)):
            self._add_tag(i)
        self.tag_names = names
        build_config[INVENTORY_KEY] = list(names)
        index = {name: i for i, name in enumerate(names)}
        for domain, tags in domain_tags.items():
            self.domain_tags[domain] = list(tags)
            self.domain_globals[domain] = [index[t] for t in tags]
            start, trans, _ = allowed_moves(tags)
            self.domain_moves[domain] = (start, trans)

    def _build(self, n_in: int) -> None:
        d2, h = self.label_width, self.hidden_width
        self.n_in = n_in
        # The BiLSTM label encoder as its two directions (same parameters as one
        # bidirectional nn.LSTM): the backward one runs over reversed prefixes alone.
        self.lstm_fwd = nn.LSTM(d2, h, batch_first=True)
        self.lstm_bwd = nn.LSTM(d2, h, batch_first=True)
        self.x_embed = nn.Parameter(torch.randn(d2))
        if self.use_lb:
            self.w2 = nn.Linear(2 * h, n_in)  # Eq 4: q_i -> query over token vectors
        if self.use_lc:
            # Eq 7: [h_i; h^b_i] (or h_i alone without LB) -> query over encoded labels
            self.w3 = nn.Linear(2 * n_in if self.use_lb else n_in, 2 * h)

    def _add_tag(self, i: int) -> None:
        device = self.x_embed.device
        if i > 0 or not self.freeze_o_zero:
            self.tag_embed[f"t{i}"] = nn.Parameter(torch.randn(self.label_width, device=device))
        bound = 1.0 / self.n_u ** 0.5  # nn.Linear's initialisation, one row at a time
        row = torch.empty(self.n_u + 1, device=device).uniform_(-bound, bound)
        self.tag_out[f"t{i}"] = nn.Parameter(row)

    @property
    def x_id(self) -> int:
        """Row of the start / missing-gold symbol X in :meth:`embedding_table`."""
        return len(self.tag_names)

    def embedding_table(self) -> torch.Tensor:
        """(Kg + 1, d2): the embedding of every tag of the inventory, then X."""
        rows = []
        for i in range(len(self.tag_names)):
            if i == 0 and self.freeze_o_zero:
                rows.append(torch.zeros_like(self.x_embed))
            else:
                rows.append(self.tag_embed[f"t{i}"])
        rows.append(self.x_embed)
        return torch.stack(rows)

    def output_layer(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Wo (Kg, n_u) and bo (Kg,) over the whole inventory."""
        table = torch.stack([self.tag_out[f"t{i}"] for i in range(len(self.tag_names))])
        return table[:, :-1], table[:, -1]

    def domain_index(self, domains: List[str], device) -> Tuple[torch.Tensor, torch.Tensor]:
        """Inventory ids of each doc's domain tags, (B, K) long, and which are real, (B, K)."""
        k_max = max(len(self.domain_globals[d]) for d in domains)
        idx = torch.zeros((len(domains), k_max), dtype=torch.long)
        valid = torch.zeros((len(domains), k_max), dtype=torch.bool)
        for b, d in enumerate(domains):
            ids = self.domain_globals[d]
            idx[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            valid[b, : len(ids)] = True
        return idx.to(device), valid.to(device)

    # -- training: teacher forcing, vectorised over all prefixes -----------------------------

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Losses]:
        """Logits of each doc's domain tags, teacher-forced on ``gold``.

        X: (B, n, d1) token vectors; lengths: (B,) on CPU, all >= 1; gold: (B, n) tag ids in
        each doc's domain, -1 where unknown (fed as X). Without gold (no annotation), the
        chain is fed its own greedy decoding.
        RETURNS: (B, n, K) logits (columns past a domain's tags are unused), no aux losses.
        """
        H = self.dropout(X)
        idx, _ = self.domain_index(domains, X.device)
        if gold is None:
            with torch.no_grad():
                decoded, _ = self.decode(H, lengths, domains, beam_width=1)
            gold = torch.full(X.shape[:2], -1, dtype=torch.long, device=X.device)
            for b, ids in enumerate(decoded):
                gold[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        inputs = self.shifted_inputs(gold, idx)
        logits = self.chain_logits(H, lengths, inputs)
        return self.domain_logits(logits, idx), {}

    def shifted_inputs(self, gold: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """A = [X, y_0 .. y_{n-2}] as inventory ids (B, n); unknown gold (-1) becomes X."""
        known = gold >= 0
        globals_ = torch.gather(idx, 1, gold.clamp(min=0))
        globals_ = torch.where(known, globals_, torch.full_like(globals_, self.x_id))
        start = torch.full_like(globals_[:, :1], self.x_id)
        return torch.cat([start, globals_[:, :-1]], dim=1)

    def domain_logits(self, logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """(B, n, Kg) inventory logits -> (B, n, K) logits of each doc's domain tags."""
        return torch.gather(logits, 2, idx[:, None, :].expand(-1, logits.shape[1], -1))

    def chain_logits(self, H: torch.Tensor, lengths: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """o_i of every position, all prefixes at once.

        H: (B, n, d1); lengths: (B,) CPU; inputs: (B, n) inventory ids of A (X = x_id).
        RETURNS: (B, n, Kg) logits over the inventory.
        """
        B, n, _ = H.shape
        device = H.device
        S = self.embedding_table()[inputs]  # (B, n, d2)
        mask = torch.arange(n)[None, :] < lengths[:, None]  # (B, n) CPU
        b_idx, i_idx = mask.nonzero(as_tuple=True)  # N = Σ n_b rows (b, i)
        b_idx, i_idx = b_idx.to(device), i_idx.to(device)
        mask = mask.to(device)
        # Forward half of E^{(i)}_j: prefix-invariant, F[b, j] for every slot j.
        F = run_lstm(self.lstm_fwd, S, lengths)  # (B, n, h)
        if self.use_lc:
            # Backward half over reversed prefixes: R[row, t] = slot j = i - t of prefix i.
            t = torch.arange(n, device=device)
            src = i_idx[:, None] - t[None, :]  # (N, n)
            rev_valid = src >= 0
            R_in = S[b_idx[:, None], src.clamp(min=0)]  # (N, n, d2)
            R = run_lstm(self.lstm_bwd, R_in, (i_idx + 1).cpu())  # (N, n, h)
            q_back = R[:, 0]
        else:
            # q's backward half has read only y_{i-1}: one step from zero state.
            q_back = run_lstm(self.lstm_bwd, S[b_idx, i_idx][:, None], torch.ones(len(b_idx), dtype=torch.long))[:, 0]
        q = torch.cat([F[b_idx, i_idx], q_back], dim=-1)  # (N, 2h)
        parts = [H]
        if self.use_lb:
            Q = H.new_zeros((B, n, q.shape[-1]))
            Q = Q.index_put((b_idx, i_idx), q)
            G = self.w2(Q)  # (B, n, d1), Eq 4
            att = torch.bmm(G, H.transpose(1, 2))  # (B, n_i, n_k), Eq 5 (no scaling)
            att = att.masked_fill(~mask[:, None, :], NEG_INF)
            Hb = torch.bmm(torch.softmax(att, dim=-1), H)  # (B, n, d1), Eq 6
            parts.append(Hb)
        if self.use_lc:
            r = self.w3(torch.cat(parts, dim=-1))[b_idx, i_idx]  # (N, 2h), Eq 7
            h = self.hidden_width
            F_rev = F[b_idx[:, None], src.clamp(min=0)]  # (N, n, h): F at slot i - t
            E = torch.cat([F_rev, R], dim=-1)  # (N, n, 2h): E^{(i)} in reversed order
            # Many tiny products: broadcasting beats bmm's per-matrix overhead on CPU.
            scores = (E * r[:, None, :]).sum(-1)  # (N, n)
            beta = torch.softmax(scores.masked_fill(~rev_valid, NEG_INF), dim=-1)  # Eq 8
            ec = (beta[:, :, None] * E).sum(1)  # (N, 2h)
            Ec = H.new_zeros((B, n, 2 * h)).index_put((b_idx, i_idx), ec)
            parts.append(Ec)
        Wo, bo = self.output_layer()
        return torch.cat(parts, dim=-1) @ Wo.t() + bo  # (B, n, Kg), Eq 9-10

    # -- the per-position reference (tests only) ---------------------------------------------

    def reference_logits(self, H: torch.Tensor, lengths: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """:meth:`chain_logits` computed as the authors' code does: one doc and one position at
        a time, a fresh BiLSTM call over each prefix (O(n^2) LSTM steps, n calls per doc)."""
        B, n, _ = H.shape
        table = self.embedding_table()
        Wo, bo = self.output_layer()
        out = H.new_zeros((B, n, Wo.shape[0]))
        for b in range(B):
            L = int(lengths[b])
            Hd = H[b, :L]  # (L, d1)
            for i in range(L):
                S = table[inputs[b, : i + 1]][None]  # (1, i + 1, d2)
                fwd, _ = self.lstm_fwd(S)
                bwd, _ = self.lstm_bwd(S.flip(1))
                E = torch.cat([fwd, bwd.flip(1)], dim=-1)[0]  # (i + 1, 2h) = BiLSTM(S)
                q = E[i]
                u = [Hd[i]]
                if self.use_lb:
                    alpha = torch.softmax(Hd @ self.w2(q), dim=0)
                    u.append(alpha @ Hd)
                if self.use_lc:
                    r = self.w3(torch.cat(u))
                    beta = torch.softmax(E @ r, dim=0)
                    u.append(beta @ E)
                out = out.index_put((torch.tensor([b]), torch.tensor([i])), (Wo @ torch.cat(u) + bo)[None])
        return out

    # -- prediction: greedy or beam decoding with carried state ------------------------------

    def decode(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        beam_width: Optional[int] = None,
        whitespace: Optional[torch.Tensor] = None,
    ) -> Tuple[List[List[int]], List[torch.Tensor]]:
        """Autoregressive decoding, BIO-valid by construction.

        X: (B, n, d1) token vectors; lengths: (B,) CPU, all >= 1; domains: B domain names;
        beam_width: defaults to ``self.beam_width`` (1 = greedy); whitespace: (B, n) bool,
        whitespace tokens (no entity starts or ends on one; None = no such tokens).
        RETURNS: per doc, the tag ids in its domain and the (n_b, K_b) logits of the chosen
        path (what teacher forcing on the decoded tags gives).
        """
        W = beam_width or self.beam_width
        B, n, d1 = X.shape
        device = X.device
        d2, h = self.label_width, self.hidden_width
        H = X
        idx, valid = self.domain_index(domains, device)  # (B, K)
        K = idx.shape[1]
        rows_idx = idx.repeat_interleave(W, dim=0)  # (B*W, K)
        rows_valid = valid.repeat_interleave(W, dim=0)
        key_mask = (torch.arange(n)[None, :] < lengths[:, None]).to(device)  # (B, n)
        table = self.embedding_table()
        Wo, bo = self.output_layer()
        # the steps below call the LSTMs directly: cuDNN's weight buffer after thinc's update
        # (on the GPU, torch otherwise warns and compacts the weights at every call; no-op on CPU)
        self.lstm_fwd.flatten_parameters()
        self.lstm_bwd.flatten_parameters()
        # BIO and whitespace constraints as masks on the device, built once per domain
        present = sorted(set(domains))
        moves = torch.zeros((len(present), K + K * K + 2 * K), dtype=torch.bool)
        for i, d in enumerate(present):
            start, trans = self.domain_moves[d]
            k = len(start)
            begin, inside = tag_kinds(self.domain_tags[d])
            padded = numpy.zeros((K + K * K + 2 * K,), dtype=bool)
            padded[:k] = start
            padded[K : K + K * K].reshape(K, K)[:k, :k] = trans
            padded[K + K * K : K + K * K + k] = begin
            padded[K + K * K + K : K + K * K + K + k] = inside
            moves[i] = torch.from_numpy(padded)
        which = torch.tensor([present.index(d) for d in domains], dtype=torch.long)
        moves = moves.index_select(0, which).to(device)
        allowed_start = moves[:, :K]
        allowed_trans = moves[:, K : K + K * K].view(B, K, K)
        is_begin, is_inside = moves[:, K + K * K : K + K * K + K], moves[:, K + K * K + K :]
        allowed_tags = closed = None
        if whitespace is not None and bool(whitespace.any()):
            ws = whitespace.to(device)
            allowed_tags = _allowed_tags(ws, lengths.to(device), is_begin, is_inside, valid)
            closed = _whitespace_closed(ws, is_inside)
        state = {
            "h": H.new_zeros((1, B * W, h)),
            "c": H.new_zeros((1, B * W, h)),
            "S": H.new_zeros((B * W, n, d2)),  # input embeddings of the slots so far
            "F": H.new_zeros((B * W, n, h)),  # forward LSTM outputs of the slots so far
        }
        history: List[torch.Tensor] = []
        base = torch.arange(B, device=device)[:, None] * W
        row_lengths = lengths.repeat_interleave(W)  # on the host, as lengths
        # each step's unfinished rows, found on the host and sent to the device in one copy
        per_step = [(row_lengths > t).nonzero()[:, 0] for t in range(n)]
        active = torch.split(torch.cat(per_step).to(device), [len(rows) for rows in per_step])

        def active_rows(t: int) -> torch.Tensor:
            return active[t]

        def step(t: int, parents: torch.Tensor, prev_tags: torch.Tensor) -> torch.Tensor:
            rows = (base + parents).reshape(-1)
            for key in ("S", "F"):
                state[key] = state[key][rows]
            h0, c0 = state["h"][:, rows], state["c"][:, rows]
            if t == 0:
                ids = torch.full((B * W,), self.x_id, dtype=torch.long, device=device)
            else:
                local = prev_tags.reshape(-1)
                ids = torch.gather(rows_idx, 1, local[:, None])[:, 0]
            s = table[ids]  # (B*W, d2)
            state["S"][:, t] = s
            f, (state["h"], state["c"]) = self.lstm_fwd(s[:, None], (h0, c0))
            state["F"][:, t] = f[:, 0]
            # Only docs not yet finished need the rest (their rows: act); others get zeros.
            act = active_rows(t)
            s_act = s[act]
            if self.use_lc:
                back, _ = self.lstm_bwd(state["S"][act, : t + 1].flip(1))  # (Na, t+1, h)
            else:
                back, _ = self.lstm_bwd(s_act[:, None])
            q = torch.cat([f[act, 0], back[:, 0]], dim=-1)  # (Na, 2h)
            u = [H[:, t].repeat_interleave(W, dim=0)[act]]  # h_t: (Na, d1)
            if self.use_lb:
                g = H.new_zeros((B * W, d1)).index_put((act,), self.w2(q)).view(B, W, d1)
                att = torch.bmm(g, H.transpose(1, 2)).masked_fill(~key_mask[:, None, :], NEG_INF)
                u.append(torch.bmm(torch.softmax(att, dim=-1), H).view(B * W, d1)[act])
            if self.use_lc:
                r = self.w3(torch.cat(u, dim=-1))  # (Na, 2h)
                E = torch.cat([state["F"][act, : t + 1].flip(1), back], dim=-1)  # reversed slots
                beta = torch.softmax((E * r[:, None, :]).sum(-1), dim=-1)
                u.append((beta[:, :, None] * E).sum(1))
            logits = H.new_zeros((B * W, K)).index_put(
                (act,), torch.gather(torch.cat(u, dim=-1) @ Wo.t() + bo, 1, rows_idx[act])
            )
            history.append(logits.view(B, W, K))
            logp = torch.log_softmax(logits.masked_fill(~rows_valid, NEG_INF), dim=-1)
            return logp.view(B, W, K)

        tags, rows = beam_search(
            step, lengths, allowed_start, allowed_trans, beam_width=W,
            allowed_tags=allowed_tags, closed=closed,
        )
        steps = tags.shape[1]
        logits = torch.stack(history, 1)  # (B, n, W, K)
        path = logits.gather(2, rows[:, :, None, None].expand(B, steps, 1, K))[:, :, 0]
        # the one copy to the host, after the search
        tags, path = tags.cpu(), path.cpu()
        out_tags, scores = [], []
        for b, d in enumerate(domains):
            n_b, k = int(lengths[b]), len(self.domain_globals[d])
            out_tags.append(tags[b, :n_b].tolist())
            scores.append(path[b, :n_b, :k])
        return out_tags, scores
