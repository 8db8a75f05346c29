"""Torch modules of ``spacy_crossner.MoEE.v2`` and v1 (Liu, Winata & Fung 2020, specs/moee.md).

- :func:`coarse_tag_maps`: each IOB2 tag's Task-1 tag (entity vs non-entity) and gate label
  (entity type, expert 0 = non-entity).
- :class:`EntityExperts`: E experts and the gate as ONE linear map (one GEMM per batch), the
  gate-weighted meta feature, and the fold ``U_a = W_a V`` used at prediction.
- :class:`MoEEEmitter`: encoder (BiLSTM or none), Task 1 with its own CRF (or softmax), MoEE,
  and per-domain Task-2 linear maps whose scores the architecture's output head turns into the
  loss and the tags.

Experts are keyed by entity type *name*, over the union of all domains' labels: a type shared
by two domains (``person`` in conll2003 and ai) shares its expert. The order is the sorted
union, so a freshly built module (loading) and a grown one (labels added) agree; growing copies
the old experts' weights by name.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .pytorch_emitter import Emitter, Losses
from ..decoding import OUTSIDE
from .pytorch_emitters import shared_bilstm
from .pytorch_heads import ConstrainedCRF, DomainHeads, Regrown

EXPERT_GENERATION = "moee_expert_generation"  # key of the component's build_config

# Task-1 tag sets: B/I kept and types merged (the paper's, default), or entity vs O only.
TASK1_TAGS = {"bio": ["O", "B-ENT", "I-ENT"], "binary": ["O", "ENT"]}


def tag_types(tags: Sequence[str]) -> List[str]:
    """The entity types of an IOB2 tag list, in order of first appearance."""
    types: List[str] = []
    for tag in tags:
        if tag != OUTSIDE:
            label = tag.split("-", 1)[1]
            if label not in types:
                types.append(label)
    return types


def coarse_tag_maps(
    tags: Sequence[str], types: Sequence[str], coarse: str = "bio"
) -> Tuple[List[int], List[int]]:
    """Task-1 tag id and gate label of every tag of a domain.

    tags (Sequence[str]): the domain's IOB2 tags (``O``, ``B-X``, ``I-X``).
    types (Sequence[str]): the experts' entity types; expert ``1 + types.index(X)`` is X's.
    coarse (str): "bio" (O / B-ENT / I-ENT) or "binary" (O / ENT).
    RETURNS (Tuple[List[int], List[int]]): per tag, its id in ``TASK1_TAGS[coarse]`` and its
        expert index (0 for O).
    """
    if coarse not in TASK1_TAGS:
        raise ValueError(f"coarse_tags must be one of {sorted(TASK1_TAGS)}, not {coarse!r}")
    task1, gate = [], []
    for tag in tags:
        if tag == OUTSIDE:
            task1.append(0)
            gate.append(0)
            continue
        prefix, label = tag.split("-", 1)
        if label not in types:
            raise ValueError(
                f"Entity type '{label}' has no expert (experts: {list(types)}): the MoEE "
                "experts were set up for other labels."
            )
        task1.append(1 if coarse == "binary" or prefix == "B" else 2)
        gate.append(1 + list(types).index(label))
    return task1, gate


class EntityExperts(Regrown, nn.Module):
    """E = types + 1 linear experts and a softmax gate, computed by one stacked linear map.

    ``proj.weight`` has shape (E * d_e + E, n_in): rows ``a*d_e:(a+1)*d_e`` are expert a's
    W_a, the last E rows the gate's W_g. Expert 0 is the non-entity expert. ``proj`` is
    rebuilt for new types under a new name (:class:`~.pytorch_heads.Regrown`): the optimizer
    sees it as new parameters.
    """

    GROWN = ("proj",)

    def __init__(self, expert_width: int) -> None:
        super().__init__()
        self.expert_width = expert_width
        self.types: List[str] = []

    @property
    def n_experts(self) -> int:
        return len(self.types) + 1

    def setup(self, n_in: int, types: Sequence[str], build_config: Optional[Dict[str, Any]] = None) -> None:
        """Create the experts, or rebuild them for a new type list keeping weights by name.

        n_in (int): width of the hidden states.
        types (Sequence[str]): the entity types, one expert each (sorted here).
        build_config (Optional[Dict[str, Any]]): the component's build config: the experts'
            generation is read from and recorded in its ``moee_expert_generation``.
        """
        if self.grown("proj") is None and build_config:
            self.generations["proj"] = int(build_config.get(EXPERT_GENERATION, 0))
        types = sorted(set(types))
        if self.grown("proj") is not None and self.proj.in_features != n_in:
            raise ValueError(
                f"The MoEE experts expect hidden states of width {self.proj.in_features}, not "
                f"{n_in}: hidden_size/depth of [components.crossner.model] or its tok2vec changed."
            )
        if self.grown("proj") is not None and types == self.types:
            return
        d_e, n_new = self.expert_width, len(types) + 1
        # nn.Linear's init depends on fan_in only, so this is E separate Linear layers' init.
        new = nn.Linear(n_in, n_new * d_e + n_new)
        if self.grown("proj") is not None:
            old, n_old = self.proj, self.n_experts
            new = new.to(old.weight.device)
            old_index = {t: 1 + i for i, t in enumerate(self.types)}
            with torch.no_grad():
                for a_new, name in enumerate([None] + types):
                    a_old = 0 if name is None else old_index.get(name)
                    if a_old is None:
                        continue
                    rows_new = slice(a_new * d_e, (a_new + 1) * d_e)
                    rows_old = slice(a_old * d_e, (a_old + 1) * d_e)
                    new.weight[rows_new] = old.weight[rows_old]
                    new.bias[rows_new] = old.bias[rows_old]
                    new.weight[n_new * d_e + a_new] = old.weight[n_old * d_e + a_old]
                    new.bias[n_new * d_e + a_new] = old.bias[n_old * d_e + a_old]
        self.replace_grown("proj", new)
        self.types = types
        if build_config is not None and self.generations.get("proj"):
            build_config[EXPERT_GENERATION] = self.generations["proj"]

    def expert_outputs(self, hidden: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Every expert's output and the gate logits, from one matrix product.

        hidden: (..., n_in).
        RETURNS: experts (..., E, d_e) and gate logits (..., E).
        """
        n_e, d_e = self.n_experts, self.expert_width
        out = self.proj(hidden)
        # out: (..., E * d_e + E)
        experts = out[..., : n_e * d_e].reshape(*hidden.shape[:-1], n_e, d_e)
        return experts, out[..., n_e * d_e :]

    def forward(self, hidden: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The meta-expert feature M = sum_a alpha_a X_a and the gate logits.

        hidden: (..., n_in).
        RETURNS: M (..., d_e) and gate logits (..., E); alpha = softmax(logits).
        """
        experts, logits = self.expert_outputs(hidden)
        alpha = torch.softmax(logits, dim=-1)
        # (..., 1, E) @ (..., E, d_e) -> (..., d_e)
        mixed = torch.matmul(alpha.unsqueeze(-2), experts).squeeze(-2)
        return mixed, logits

    def folded_scores(self, hidden: torch.Tensor, head: nn.Linear) -> torch.Tensor:
        """``head(M)`` without forming the experts: nothing after H is nonlinear but alpha, so
        head(M) = sum_a alpha_a (H W_a^T V^T + V b_a) + c with U_a = V W_a precomputed.

        hidden: (..., n_in); head: Linear(d_e -> K).
        RETURNS: (..., K), equal to ``head(self(hidden)[0])`` up to float rounding.
        """
        n_e, d_e = self.n_experts, self.expert_width
        n_k = head.out_features
        w = self.proj.weight[: n_e * d_e].reshape(n_e, d_e, -1)
        b = self.proj.bias[: n_e * d_e].reshape(n_e, d_e)
        # U: (E, K, n_in), ub: (E, K)
        u = torch.matmul(head.weight.unsqueeze(0), w)
        ub = b @ head.weight.t()
        fused_w = torch.cat([u.reshape(n_e * n_k, -1), self.proj.weight[n_e * d_e :]], dim=0)
        fused_b = torch.cat([ub.reshape(-1), self.proj.bias[n_e * d_e :]], dim=0)
        out = nn.functional.linear(hidden, fused_w, fused_b)
        per_expert = out[..., : n_e * n_k].reshape(*hidden.shape[:-1], n_e, n_k)
        alpha = torch.softmax(out[..., n_e * n_k :], dim=-1)
        return torch.matmul(alpha.unsqueeze(-2), per_expert).squeeze(-2) + head.bias


class MoEEEmitter(Emitter):
    """Encoder, Task 1 (entity vs non-entity, own CRF), MoEE, and Task-2 heads per domain.

    The returned scores are Task 2's emissions (the architecture's output head turns them into
    the NER loss and the tags); the Task-1 loss (a CRF's with ``task1_crf``, else per-token
    cross-entropy) and the gate loss are returned as weighted auxiliary losses during training.
    """

    def __init__(
        self,
        hidden_size: int,
        depth: int,
        expert_width: int,
        *,
        use_mtl: bool,
        use_moee: bool,
        task1_crf: bool,
        dropout: float,
        task1_weight: float,
        gate_weight: float,
        coarse_tags: str,
        concat_hidden: bool,
        fold_at_prediction: bool = True,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.depth = depth
        self.dropout_rate = dropout
        self.use_mtl = use_mtl
        self.use_moee = use_moee
        self.use_task1_crf = task1_crf
        self.task1_weight = task1_weight
        self.gate_weight = gate_weight
        self.coarse_tags = coarse_tags
        self.concat_hidden = concat_hidden
        self.fold_at_prediction = fold_at_prediction
        self.dropout = nn.Dropout(dropout)
        self.lstm: Optional[nn.LSTM] = None
        self.task1: Optional[nn.Linear] = None
        self.task1_crf: Optional[ConstrainedCRF] = None
        self.experts = EntityExperts(expert_width) if use_moee else None
        self.heads = DomainHeads()
        # per domain: (Task-1 id, expert index) of each of its tag ids; rebuilt by setup
        self._maps: Dict[str, Tuple[torch.Tensor, torch.Tensor]] = {}

    def setup(
        self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Dict[str, Any]
    ) -> None:
        if self.depth > 0:
            self.lstm = shared_bilstm(
                self.lstm, n_in, self.hidden_size, self.depth, self.dropout_rate, "MoEE"
            )
            d_h = 2 * self.hidden_size
        else:
            d_h = n_in
        task1_tags = TASK1_TAGS[self.coarse_tags]
        if self.use_mtl and self.task1 is None:
            self.task1 = nn.Linear(d_h, len(task1_tags))
            if self.use_task1_crf:
                self.task1_crf = ConstrainedCRF(task1_tags)
        types = sorted({t for tags in domain_tags.values() for t in tag_types(tags)})
        if self.experts is not None:
            self.experts.setup(d_h, types, build_config)
            d_task2 = self.experts.expert_width + (d_h if self.concat_hidden else 0)
        else:
            d_task2 = d_h
        self.heads.setup(d_task2, domain_tags, build_config)
        self._maps = {}
        for domain, tags in domain_tags.items():
            task1, gate = coarse_tag_maps(tags, types, self.coarse_tags)
            self._maps[domain] = (
                torch.tensor(task1, dtype=torch.long),
                torch.tensor(gate, dtype=torch.long),
            )

    @property
    def types(self) -> List[str]:
        """The experts' entity types (expert 0 is the non-entity expert)."""
        return list(self.experts.types) if self.experts is not None else []

    def encode(self, X: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Hidden states H (B, T, d_h) of padded features X (B, T, nI); lengths (B,) on CPU.

        With a BiLSTM, the input dropout is the features' own (dropout applies between its
        layers); without one (depth 0, e.g. on transformer vectors) H is the dropped-out input.
        """
        if self.lstm is None:
            return self.dropout(X)
        packed = pack_padded_sequence(X, lengths, batch_first=True, enforce_sorted=False)
        self.lstm.flatten_parameters()  # cuDNN's weight buffer after thinc's update (no-op on CPU)
        hidden, _ = self.lstm(packed)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True, total_length=X.shape[1])
        return hidden

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Losses]:
        # X: (B, T, nI); lengths: (B,) on CPU, all > 0; gold: (B, T) tag ids or -1, or None
        hidden = self.encode(X, lengths)
        # hidden: (B, T, d_h)
        logits = None
        if self.experts is None:
            scores = self.heads(hidden, domains)
        elif self.fold_at_prediction and not self.training and not self.concat_hidden:
            scores = self._folded_task2(hidden, domains)
        else:
            mixed, logits = self.experts(hidden)
            # mixed: (B, T, d_e); logits: (B, T, E)
            if self.concat_hidden:
                mixed = torch.cat([mixed, hidden], dim=-1)
            scores = self.heads(mixed, domains)
        losses: Losses = {}
        if gold is None:
            return scores, losses
        labelled = (gold >= 0).any(dim=1)
        if not bool(labelled.any()):
            return scores, losses
        n_docs = labelled.sum().to(hidden.dtype)
        positions = torch.arange(X.shape[1], device=hidden.device)
        mask = (positions[None, :] < lengths.to(hidden.device)[:, None]) & labelled[:, None]
        y1, g = self._coarse_gold(gold, domains)
        if self.task1 is not None:
            losses["task1"] = self.task1_weight * self._task1_loss(
                hidden[labelled], y1[labelled], mask[labelled], n_docs
            )
        if logits is not None:
            log_alpha = torch.log_softmax(logits, dim=-1)
            nll = -log_alpha.gather(-1, g.unsqueeze(-1)).squeeze(-1)
            losses["gate"] = self.gate_weight * nll.masked_fill(~mask, 0.0).sum() / n_docs
        return scores, losses

    def _coarse_gold(self, gold: torch.Tensor, domains: List[str]):
        """(B, T) Task-1 ids and expert indices of gold tag ids (-1 read as O)."""
        safe = gold.clamp(min=0)
        y1 = torch.zeros_like(safe)
        g = torch.zeros_like(safe)
        for domain in sorted(set(domains)):
            rows = torch.tensor([i for i, d in enumerate(domains) if d == domain], device=gold.device)
            task1_map, gate_map = (m.to(gold.device) for m in self._maps[domain])
            y1[rows] = task1_map[safe[rows]]
            g[rows] = gate_map[safe[rows]]
        return y1, g

    def _task1_loss(self, hidden, y1, mask, n_docs) -> torch.Tensor:
        emissions = self.task1(hidden)
        # emissions: (B', T, K1)
        if self.task1_crf is not None:
            return -self.task1_crf(emissions, y1, mask=mask, reduction="sum") / n_docs
        nll = nn.functional.cross_entropy(emissions.transpose(1, 2), y1, reduction="none")
        return nll.masked_fill(~mask, 0.0).sum() / n_docs

    def task1_scores(self, X: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Task-1 emissions (B, T, K1): a diagnostic, not used for the entities."""
        if self.task1 is None:
            raise ValueError("Task 1 is off (use_mtl = false)")
        return self.task1(self.encode(X, lengths))

    def gate_probs(self, X: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The gate's alpha (B, T, E) over the experts (0 = non-entity, then ``types``)."""
        if self.experts is None:
            raise ValueError("The mixture of entity experts is off (use_moee = false)")
        _, logits = self.experts.expert_outputs(self.encode(X, lengths))
        return torch.softmax(logits, dim=-1)

    def _folded_task2(self, hidden: torch.Tensor, domains: List[str]) -> torch.Tensor:
        k_max = max(self.heads.n_tags(d) for d in domains)
        out = hidden.new_zeros((hidden.shape[0], hidden.shape[1], k_max))
        for domain in sorted(set(domains)):
            rows = [i for i, d in enumerate(domains) if d == domain]
            idx = torch.tensor(rows, device=hidden.device)
            head = self.heads.head(domain)
            scores = self.experts.folded_scores(hidden.index_select(0, idx), head)
            out = out.index_put((idx,), nn.functional.pad(scores, (0, k_max - scores.shape[-1])))
        return out
