"""Torch modules shared by the architectures: per-domain linear maps, and the output heads
that turn a batch's padded emissions into the NER loss and into decoded tags.

When a domain or a label is added (pre-train then fine-tune), a linear map or CRF whose
domain gained tags is replaced by a larger one under a new name (:func:`generation_name`)
that keeps the weights of what was there before. Module keys are derived from domain
names, which may hold characters that torch forbids in module names.

Shapes: B docs, T longest doc, K tags of the widest domain in the batch (columns past a
domain's own tags are padding).
"""
import functools
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn

from ..decoding import FORBIDDEN, allowed_moves, tag_kinds

NEG_INF = float("-inf")
# keys of the component's build_config: per domain, how often its head / its CRF was resized
HEAD_GENERATIONS = "head_generations"
CRF_GENERATIONS = "crf_generations"


def module_key(domain: str) -> str:
    """A torch-safe module name for a domain name (``.`` is not allowed in module names)."""
    return "".join(c if (c.isalnum() or c == "_") else f"-{ord(c)}-" for c in domain)


def generation_name(base: str, generation: int) -> str:
    """The name of a module that may be rebuilt larger: ``base`` as first built, ``base-gN``
    after its N-th resize.

    A resized output is new parameters under a new name: thinc's optimizer keys its state by
    parameter name, so it sees them as new (fresh moments), as it sees the new output layer of
    spaCy textcat's ``resize_output``; nothing edits the optimizer. The generations are kept
    in the component's ``build_config`` so a loaded model is rebuilt under the saved names.
    (``-`` never appears in :func:`module_key`'s keys unescaped, so names cannot collide.)
    """
    return base if generation == 0 else f"{base}-g{generation}"


class Regrown:
    """Mixin of a torch module some of whose submodules or parameters (``GROWN``) are rebuilt
    larger under new names (:func:`generation_name`, one generation per name in
    ``generations``): they stay reachable under their first names (``self.proj``); absent
    ones raise AttributeError (:meth:`grown` gives None instead)."""

    GROWN: Tuple[str, ...] = ()

    @property
    def generations(self) -> Dict[str, int]:
        """Per name of ``GROWN``, how often it was rebuilt (absent: never)."""
        return self.__dict__.setdefault("_generations", {})

    def __getattr__(self, name: str):
        if name in type(self).GROWN:
            name = generation_name(name, self.__dict__.get("_generations", {}).get(name, 0))
        return super().__getattr__(name)

    def grown(self, name: str):
        """The submodule or parameter ``name`` of the current generation, None before setup."""
        return getattr(self, name, None)

    def replace_grown(self, name: str, value) -> None:
        """Register ``value`` (a module or parameter) as ``name``: under its first name if
        there is none yet, else as the next generation in place of the current one."""
        generations = self.generations
        if self.grown(name) is not None:
            delattr(self, generation_name(name, generations.get(name, 0)))
            generations[name] = generations.get(name, 0) + 1
        self._register_grown(name, value)

    def restore_generations(self, saved: Optional[Dict[str, int]]) -> None:
        """Move what is registered to the generations a saved model had (``saved``, name ->
        generation, from the build config), so its weights load under their saved names."""
        generations = self.generations
        for name in type(self).GROWN:
            target = int((saved or {}).get(name, 0))
            value = self.grown(name)
            if value is None or target <= generations.get(name, 0):
                continue
            delattr(self, generation_name(name, generations.get(name, 0)))
            generations[name] = target
            self._register_grown(name, value)

    def _register_grown(self, name: str, value) -> None:
        key = generation_name(name, self.__dict__.get("_generations", {}).get(name, 0))
        if isinstance(value, nn.Parameter):
            self.register_parameter(key, value)
        else:
            self.add_module(key, value)


def merge_generations(own: Dict[str, int], saved: Optional[Dict[str, int]]) -> Dict[str, int]:
    """A module's generations (``own``, updated in place) after those recorded in a build
    config (``saved``, e.g. of a loaded pipeline): the later of the two per key."""
    for key, generation in (saved or {}).items():
        own[key] = max(own.get(key, 0), int(generation))
    return own


class DomainHeads(nn.Module):
    """One linear map per domain from hidden states onto that domain's tags."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict()
        self.generations: Dict[str, int] = {}  # per domain: how often its head was resized

    def setup(
        self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Optional[Dict[str, Any]] = None
    ) -> None:
        """Create missing heads, and replace a head whose domain's tags changed in number by a
        new one (under a new name: :func:`generation_name`) that keeps the rows it had.

        n_in (int): width of the hidden states.
        domain_tags (Dict[str, Sequence[str]]): the tags of each domain (new tags appended).
        build_config (Optional[Dict[str, Any]]): the component's build config: the heads'
            generations are read from and recorded in its ``head_generations``.
        """
        generations = merge_generations(self.generations, (build_config or {}).get(HEAD_GENERATIONS))
        for domain, tags in domain_tags.items():
            key = generation_name(module_key(domain), generations.get(domain, 0))
            if key not in self.heads:
                self.heads[key] = nn.Linear(n_in, len(tags))
                continue
            old = self.heads[key]
            if old.in_features != n_in:
                raise ValueError(
                    f"The head of domain '{domain}' expects inputs of width {old.in_features}, "
                    f"not {n_in}: the input features changed width since training."
                )
            if old.out_features == len(tags):
                continue
            new = nn.Linear(n_in, len(tags)).to(old.weight.device)
            if old.out_features < len(tags):  # grown: the old tags keep their rows
                with torch.no_grad():
                    new.weight[: old.out_features] = old.weight
                    new.bias[: old.out_features] = old.bias
            # (fewer tags than before: initialize called again with other labels, start over)
            del self.heads[key]
            generations[domain] = generations.get(domain, 0) + 1
            self.heads[generation_name(module_key(domain), generations[domain])] = new
        if build_config is not None and generations:
            build_config[HEAD_GENERATIONS] = dict(generations)

    def head(self, domain: str) -> nn.Linear:
        """The linear map of a domain."""
        return self.heads[generation_name(module_key(domain), self.generations.get(domain, 0))]

    def n_tags(self, domain: str) -> int:
        return self.head(domain).out_features

    def copy_rows(self, source: str, target: str, shared: Sequence[Tuple[int, int]]) -> None:
        """Give ``target``'s head the rows (weights, bias) of ``source``'s for shared tags.

        shared (Sequence[Tuple[int, int]]): (source tag id, target tag id) pairs.
        """
        src, dst = self.head(source), self.head(target)
        if src.in_features != dst.in_features:
            raise ValueError(f"The heads of '{source}' and '{target}' differ in input width")
        with torch.no_grad():
            for i, j in shared:
                dst.weight[j] = src.weight[i]
                dst.bias[j] = src.bias[i]

    def forward(self, hidden: torch.Tensor, domains: List[str]) -> torch.Tensor:
        """Scores of each doc's own domain's tags.

        hidden: (B, T, n_in) hidden states.
        domains: B domain names.
        RETURNS: (B, T, K_max) scores; columns past a domain's K are zero and unused.
        """
        k_max = max(self.n_tags(d) for d in domains)
        out = hidden.new_zeros((hidden.shape[0], hidden.shape[1], k_max))
        for domain in sorted(set(domains)):
            idx = torch.tensor(
                [i for i, d in enumerate(domains) if d == domain], device=hidden.device
            )
            scores = self.head(domain)(hidden.index_select(0, idx))
            out = out.index_put((idx,), nn.functional.pad(scores, (0, k_max - scores.shape[-1])))
        return out


class ConstrainedCRF(nn.Module):
    """A linear-chain CRF over one domain's tags whose forbidden BIO moves stay at a fixed,
    prohibitive score (``FORBIDDEN``).

    The mask is applied before every use, so neither the likelihood nor decoding can give
    mass to an invalid sequence (e.g. ``O -> I-X``); learnt scores of allowed moves are kept.
    Its parameters are pytorch-crf's (``start_transitions``, ``end_transitions``,
    ``transitions`` [previous, next], same names and initialisation, so saved pipelines
    load); the computation is the :class:`Lattice`'s, the one CRF implementation of the
    package: the likelihood here, Viterbi and the marginals at decoding (:class:`CRFHead`).
    """

    def __init__(self, tags: Sequence[str]) -> None:
        super().__init__()
        n = len(tags)
        if n < 1:
            raise ValueError("A CRF needs at least one tag")
        self.num_tags = n
        self.start_transitions = nn.Parameter(torch.empty(n))
        self.end_transitions = nn.Parameter(torch.empty(n))
        self.transitions = nn.Parameter(torch.empty(n, n))
        # pytorch-crf's initialisation, drawn in its order
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        nn.init.uniform_(self.transitions, -0.1, 0.1)
        self.set_tags(tags)

    def set_tags(self, tags: Sequence[str]) -> None:
        start, trans, end = allowed_moves(tags)
        self.register_buffer("allowed_start", torch.from_numpy(start), persistent=False)
        self.register_buffer("allowed_transitions", torch.from_numpy(trans), persistent=False)
        self.register_buffer("allowed_end", torch.from_numpy(end), persistent=False)
        is_begin, is_inside = tag_kinds(tags)
        self.register_buffer("is_begin", torch.from_numpy(is_begin), persistent=False)
        self.register_buffer("is_inside", torch.from_numpy(is_inside), persistent=False)
        self.to(self.transitions.device)

    def grown(self, tags: Sequence[str]) -> "ConstrainedCRF":
        """A new CRF over a longer tag list whose prefix is the current one, with the scores
        of the current tags' moves (the new moves start fresh)."""
        n, device = self.num_tags, self.transitions.device
        # the new moves' scores: pytorch-crf's initialisation, drawn in this order
        trans = torch.zeros((len(tags), len(tags)), device=device).uniform_(-0.1, 0.1)
        start = torch.zeros((len(tags),), device=device).uniform_(-0.1, 0.1)
        end = torch.zeros((len(tags),), device=device).uniform_(-0.1, 0.1)
        with torch.random.fork_rng(devices=[]):  # the constructor's own draws are overwritten
            new = ConstrainedCRF(tags).to(device)
        with torch.no_grad():
            trans[:n, :n] = self.transitions
            start[:n] = self.start_transitions
            end[:n] = self.end_transitions
            new.transitions.copy_(trans)
            new.start_transitions.copy_(start)
            new.end_transitions.copy_(end)
        return new

    def apply_constraints(self) -> None:
        with torch.no_grad():
            self.start_transitions.masked_fill_(~self.allowed_start, FORBIDDEN)
            self.transitions.masked_fill_(~self.allowed_transitions, FORBIDDEN)
            self.end_transitions.masked_fill_(~self.allowed_end, FORBIDDEN)

    def forward(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: Optional[torch.Tensor] = None,
        reduction: str = "sum",
    ) -> torch.Tensor:
        """Log-likelihood of the tags (pytorch-crf's ``forward``, batch first).

        A tag of -1 inside a sequence is missing (partial annotation): the likelihood of a row
        with missing tags is that of every path agreeing with its observed tags,
        log Z(consistent paths) - log Z(all paths) (:meth:`Lattice.observed_log_partition`),
        so a missing token may take any tag the BIO moves allow; a row with every tag missing
        has likelihood 0. Rows without missing tags are scored as before (the gold path's
        score), so fully annotated data trains exactly as it did.

        emissions (B, T, K); tags (B, T) long, -1 = missing; mask (B, T) bool, each row a
        prefix of at least one token (default: all). reduction: "sum" (a scalar) or "none" (B,).
        """
        if reduction not in ("sum", "none"):
            raise ValueError(f"reduction must be 'sum' or 'none', not {reduction!r}")
        lattice = self.lattice(emissions, mask)
        numerator = lattice.path_scores(tags)
        live = torch.ones_like(tags, dtype=torch.bool) if mask is None else mask.to(tags.device)
        partial = ((tags < 0) & live).any(dim=1)
        if bool(partial.any()):  # one host sync; fully annotated batches skip the second pass
            numerator = torch.where(partial, lattice.observed_log_partition(tags), numerator)
        llh = numerator - lattice.log_partition()
        return llh.sum() if reduction == "sum" else llh

    def log_partition(self, emissions: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B,) log Z of each sequence (emissions (B, T, K), mask (B, T) as in ``forward``)."""
        return self.lattice(emissions, mask).log_partition()

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: Optional[torch.Tensor] = None) -> List[List[int]]:
        """The best tag sequence of each row (Viterbi; forbidden moves never taken)."""
        lattice = self.lattice(emissions, mask, decoding=True)
        tags = lattice.viterbi().tolist()
        return [row[:n] for row, n in zip(tags, lattice.lengths.tolist())]

    def lattice(self, emissions: torch.Tensor, mask: Optional[torch.Tensor] = None, decoding: bool = False) -> "Lattice":
        """The :class:`Lattice` of a batch under this CRF: its moves at their constrained
        scores (``FORBIDDEN``; -inf when ``decoding``), one group, no whitespace rule."""
        self.apply_constraints()
        B, T, K = emissions.shape
        device, dtype = emissions.device, emissions.dtype
        if mask is None:
            lengths = torch.full((B,), T, dtype=torch.long, device=device)
        else:
            lengths = mask.long().sum(dim=1).to(device)
        start, trans, end = (p.to(dtype) for p in (self.start_transitions, self.transitions, self.end_transitions))
        whitespace = is_inside = None
        if decoding:
            start = start.masked_fill(~self.allowed_start, NEG_INF)
            trans = trans.masked_fill(~self.allowed_transitions, NEG_INF)
            end = end.masked_fill(~self.allowed_end, NEG_INF)
            whitespace = torch.zeros((B, T), dtype=torch.bool, device=device)
            is_inside = self.is_inside[None].expand(B, K)
        return Lattice(
            emissions, lengths, start[None].expand(B, K), trans[None], end[None].expand(B, K),
            whitespace=whitespace, is_inside=is_inside, group=torch.zeros(B, dtype=torch.long, device=device),
        )


STACKED_GROUPS = 4  # up to this many transition tables in a batch: one stacked GEMM per step
# From this many tags on, Viterbi's forward pass splits a step by the BIO structure; below, the
# dense step's fewer calls cost less (benchmarks/decode_ab.py, CPU).
BIO_VITERBI_MIN_TAGS = 25


class _Packed(NamedTuple):
    """A lattice's docs sorted longest first and packed time-major, as in torch's
    ``PackedSequence``: the rows of step t are ``offsets[t] : offsets[t] + steps[t]``, one
    per doc longer than t, in the sorted order, so a step works on a prefix of the docs (the
    rows of the step before it start at ``offsets[t - 1]``) and no work is spent on padding.

    Each row holds two positions of its doc: t (the forward direction) and length - 1 - t
    (the backward recursion runs over each doc reversed, so that it shrinks like the forward
    one)."""

    unsort: torch.Tensor  # (B,) sorted position of each original doc
    order: torch.Tensor  # (B,) original index of each sorted doc
    steps: List[int]  # n_t for t < T (host ints)
    offsets: List[int]  # T + 1 host ints
    rows: torch.Tensor  # (T, B) row of step t of sorted doc d (-1 past its length)
    doc: torch.Tensor  # (N,) sorted position of each row's doc
    time: torch.Tensor  # (N,) the row's step
    E: torch.Tensor  # (N, 2, K) emissions at t and at length - 1 - t
    lengths: torch.Tensor  # (B,) sorted
    group: torch.Tensor  # (B,)
    start: torch.Tensor  # (B, K)
    end: torch.Tensor  # (B, K)
    ws: torch.Tensor  # (B, T)
    inside: torch.Tensor  # (B, K)


class _Scaled(NamedTuple):
    """The forward and backward recursions in scaled probability space, packed as
    :class:`_Packed`, for row r of step t of sorted doc d (u = t for the backward one):

    alpha[t, d] = log X[r, 0] + log_c[t, d, 0] + E[r, 0]
    beta[length_d - 1 - u, d] = log X[r, 1] + log_c[u, d, 1]   (u >= 1; ``end`` at u = 0)
    """

    X: torch.Tensor  # (N, 2, K)
    log_c: torch.Tensor  # (T, B, 2), padded
    log_z: torch.Tensor  # (B,) sorted


class Lattice:
    """The constrained tag lattice of a padded batch: per-doc scores of every move.

    emissions (B, T, K): emission scores, -inf where a tag is not allowed (padding tags,
        whitespace constraints). start, end (B, K): move scores, -inf where forbidden.
        trans (G, K, K) [previous, next]: transition scores of G groups of docs (the domains
        of the batch), -inf where forbidden. whitespace (B, T) bool: whitespace tokens; a move
        into position t is also forbidden when token t-1 is whitespace inside an entity that
        would end there. lengths (B,) long, at least 1. is_inside (B, K): which tags continue
        an entity. group (B,) long: each doc's group (its row of ``trans``). bio (bool): every
        group's tags are :func:`~..decoding.bio_tags` (O, then B-X, I-X per label; padding
        tags last), the BIO moves forbidden in ``trans``: Viterbi may use that structure.

    The recursions run with no gradient (decoding only) over the packed docs
    (:class:`_Packed`), a few operations per step whatever the number of docs and groups:
    those calls, not the arithmetic, are most of the time at these sizes on CPU. Docs of a
    group share its transition table, so a step of the forward-backward is one GEMM (a
    stacked one over the groups, then a row selection, for a batch of a few domains). The
    whitespace moves are masked only at the steps where some doc of the batch has a
    whitespace token before them (found with one host copy of a flag vector per batch), so a
    batch without whitespace tokens pays nothing for them.
    """

    def __init__(
        self, emissions, lengths, start, trans, end, whitespace, is_inside, group, bio: bool = False
    ) -> None:
        if trans.dim() != 3 or group.shape != lengths.shape:
            raise ValueError(
                f"trans must be (G, K, K) and group (B,): got {tuple(trans.shape)} and {tuple(group.shape)}"
            )
        self.is_inside = is_inside
        self.emissions = emissions
        self.lengths = lengths
        self.start = start
        self.group_trans = trans
        self.group = group
        self.end = end
        self.whitespace = whitespace
        self.bio = bio
        T = emissions.shape[1]
        self.ws_steps = set()
        if whitespace is not None:
            flags = whitespace[:, : max(T - 1, 0)].any(dim=0)  # (T-1,): token t-1 is whitespace
            self.ws_steps = set((flags.nonzero()[:, 0] + 1).tolist())
        self._packed: Optional[_Packed] = None
        self._scaled: Optional[_Scaled] = None

    @property
    def trans(self) -> torch.Tensor:
        """(B, K, K) each doc's transition scores."""
        return self.group_trans.index_select(0, self.group)

    @property
    def closed(self) -> torch.Tensor:
        """(B, T, K, K) moves into t forbidden by the whitespace rule (for tests)."""
        return whitespace_closed(self.whitespace, self.is_inside)

    def closed_at(self, t: int) -> Optional[torch.Tensor]:
        """(B, K, K) moves into t forbidden by the whitespace rule, None when there are none."""
        if t not in self.ws_steps:
            return None
        return self.whitespace[:, t - 1, None, None] & self._ends(self.is_inside)

    def move(self, t: int) -> torch.Tensor:
        """(B, K, K) scores of moving into position t."""
        closed = self.closed_at(t)
        return self.trans if closed is None else self.trans.masked_fill(closed, NEG_INF)

    @staticmethod
    def _ends(inside: torch.Tensor) -> torch.Tensor:
        """(n, K, K) moves that end an entity (from an inside tag to one that is not)."""
        return inside[:, :, None] & ~inside[:, None, :]

    def _pack(self) -> _Packed:
        if self._packed is not None:
            return self._packed
        B, T, K = self.emissions.shape
        device = self.emissions.device
        order = torch.argsort(self.lengths, descending=True, stable=True)
        unsort = torch.empty_like(order)
        unsort[order] = torch.arange(B, device=device)
        lengths = self.lengths.index_select(0, order)
        # row-major over (step, sorted doc), the running docs are the packed rows
        live = torch.arange(T, device=device)[:, None] < lengths[None, :]  # (T, B)
        time, doc = live.nonzero(as_tuple=True)
        rows = torch.where(live, live.view(-1).cumsum(0).view(T, B) - 1, -1)
        steps = live.sum(dim=1).tolist()  # one host copy
        offsets = [0]
        for n in steps:
            offsets.append(offsets[-1] + n)
        # emissions of each row at t and at length - 1 - t, one gather
        at = torch.stack([time, lengths.index_select(0, doc) - 1 - time], dim=1)  # (N, 2)
        flat = (order.index_select(0, doc) * T)[:, None] + at
        E = self.emissions.reshape(B * T, K).index_select(0, flat.view(-1)).view(-1, 2, K)
        pick = lambda x: x.index_select(0, order)  # noqa: E731
        self._packed = _Packed(
            unsort=unsort, order=order, steps=steps, offsets=offsets, rows=rows, doc=doc,
            time=time, E=E, lengths=lengths, group=pick(self.group), start=pick(self.start),
            end=pick(self.end), ws=pick(self.whitespace), inside=pick(self.is_inside),
        )
        return self._packed

    @torch.no_grad()
    def viterbi(self) -> torch.Tensor:
        """(B, T) best tag ids (positions past a doc's length are 0), over the packed docs.

        The forward pass keeps only each step's best scores (a max without indices: several
        times faster than one with them on CPU); the backtrack recomputes, for the one tag
        chosen at t, the scores of its predecessors (the same sums) and takes their argmax:
        the first best predecessor, as a max with indices gives.
        """
        p = self._pack()
        B, T, K = self.emissions.shape
        device = p.E.device
        G = self.group_trans.shape[0]
        # row g*K + j: group g's moves into j; each sorted doc's group's first row
        into = self.group_trans.transpose(1, 2).reshape(G * K, K)
        base = None if G == 1 else p.group * K
        if self.bio and G == 1 and K % 2 == 1 and K >= BIO_VITERBI_MIN_TAGS:
            scores = self._bio_scores(p)
        else:
            trans = None if G == 1 else self.group_trans.index_select(0, p.group)  # (B, K, K) sorted docs
            E = p.E[:, 0]
            scores = torch.empty_like(E)  # (N, K) best score of a path ending in each tag
            torch.add(p.start, E[:B], out=scores[:B])  # step 0: row d is sorted doc d
            columns = scores[:, :, None]
            moved = E.new_empty((B, K, K))
            # (the loops index the packed rows with plain slices: a step is a few calls)
            for t in range(1, T):
                n, o, before = p.steps[t], p.offsets[t], p.offsets[t - 1]
                if n == 0:
                    break
                step = moved[:n]
                torch.add(columns[before : before + n], self.group_trans[0] if trans is None else trans[:n], out=step)
                if t in self.ws_steps:
                    step.masked_fill_(p.ws[:n, t - 1, None, None] & self._ends(p.inside[:n]), NEG_INF)
                out = scores[o : o + n]
                torch.amax(step, dim=1, out=out)
                out.add_(E[o : o + n])
        sorted_docs = torch.arange(B, device=device)
        last = p.rows[(p.lengths - 1).clamp(min=0), sorted_docs]
        path = torch.zeros_like(p.time)  # (N,) the best path's tag of each row
        path[last] = (scores.index_select(0, last) + p.end).argmax(dim=1)
        for t in range(T - 1, 0, -1):
            n, o, before = p.steps[t], p.offsets[t], p.offsets[t - 1]
            if n == 0:
                continue
            chosen = path[o : o + n]
            came = scores[before : before + n] + into.index_select(0, chosen if base is None else base[:n] + chosen)
            if t in self.ws_steps:
                inside = p.inside[:n]
                ending = ~inside.gather(1, chosen[:, None])
                came.masked_fill_(p.ws[:n, t - 1, None] & inside & ending, NEG_INF)
            torch.argmax(came, dim=1, out=path[before : before + n])
        tags = torch.zeros((B, T), dtype=torch.long, device=device)
        tags[p.order[p.doc], p.time] = path
        return tags

    def _bio_scores(self, p: _Packed) -> torch.Tensor:
        """Viterbi's forward pass for BIO tags (``bio``) and one transition table: (N, K) best
        scores, as the dense pass gives them.

        Tags reordered [O, B-1 .. B-m, I-1 .. I-m]: any tag may precede O and the B- tags (one
        max over every predecessor for those m + 1 columns), only B-X and I-X may precede I-X
        (a max of two for each); the moves left out are the forbidden ones (-inf), so the best
        scores are the same sums. About half the dense step's work, in a few more calls.
        """
        B, T, K = self.emissions.shape
        m = (K - 1) // 2
        device = p.E.device
        perm = torch.tensor([0] + list(range(1, K, 2)) + list(range(2, K, 2)), device=device)
        E = p.E[:, 0].index_select(1, perm)  # (N, K)
        trans = self.group_trans[0].index_select(0, perm).index_select(1, perm)  # (K, K), one group
        opening = trans[:, : m + 1].t().contiguous()  # (m + 1, K) [next, previous]
        b_to_i = trans[1 : m + 1, m + 1 :].diagonal().contiguous()  # (m,)
        i_to_i = trans[m + 1 :, m + 1 :].diagonal().contiguous()
        inside = p.inside.index_select(1, perm)
        scores = torch.empty_like(E)
        torch.add(p.start.index_select(1, perm), E[:B], out=scores[:B])  # step 0: row d is sorted doc d
        moved = E.new_empty((B, m + 1, K))
        pair = E.new_empty((B, m))
        for t in range(1, T):
            n, o, before = p.steps[t], p.offsets[t], p.offsets[t - 1]
            if n == 0:
                break
            prev, out = scores[before : before + n], scores[o : o + n]
            step = moved[:n]
            torch.add(prev[:, None, :], opening, out=step)
            if t in self.ws_steps:  # moves out of an entity on whitespace (never into I-)
                step.masked_fill_((p.ws[:n, t - 1, None] & inside[:n])[:, None, :], NEG_INF)
            torch.amax(step, dim=2, out=out[:, : m + 1])
            torch.add(prev[:, 1 : m + 1], b_to_i, out=pair[:n])
            torch.maximum(pair[:n], prev[:, m + 1 :] + i_to_i, out=out[:, m + 1 :])
            out.add_(E[o : o + n])
        return scores.index_select(1, torch.argsort(perm))  # the tags' own order

    @staticmethod
    def _products(P: torch.Tensor, group: torch.Tensor):
        """``product(x, n, out)``: out (n, W) = x (n, W) @ P[group[i]] for the first n docs.

        P (G, W, W): one table per group; group (B,): each doc's group.
        """
        G, W, _ = P.shape
        if G == 1:
            table = P[0]
            return lambda x, n, out: torch.mm(x, table, out=out)
        if G <= STACKED_GROUPS:
            stacked = P.transpose(0, 1).reshape(W, G * W)  # x @ stacked: (n, G, W)
            rows = torch.arange(group.shape[0], device=group.device) * G + group

            def product(x, n, out):
                torch.index_select(torch.mm(x, stacked).view(n * G, W), 0, rows[:n], out=out)

            return product
        per_doc = P.index_select(0, group)
        return lambda x, n, out: torch.bmm(x[:, None, :], per_doc[:n], out=out[:, None, :])

    @torch.no_grad()
    def scaled_forward_backward(self) -> _Scaled:
        """The forward and backward recursions in probability space, with a scale per row and
        direction (the scaled forward algorithm); computed once per lattice.

        The backward recursion runs over each doc reversed, beside the forward one: a step is
        one (n, 2K) x (2K, 2K) product of both directions' states with the block-diagonal
        [[P, 0], [0, P^T]] (P = exp(trans)), for the docs still running, then one in-place
        rescaling; the logs of the scales are summed once at the end. Exact up to rounding;
        entries more than ~700 nats below their step's best underflow to zero (they carry no
        probability mass).
        """
        if self._scaled is not None:
            return self._scaled
        p = self._pack()
        B, T, K = self.emissions.shape
        N = p.E.shape[0]
        device = p.E.device
        tiny = torch.finfo(p.E.dtype).tiny
        G = self.group_trans.shape[0]
        t_max = self.group_trans.amax(dim=(1, 2))  # (G,) finite: O -> O is always allowed
        P = torch.exp(self.group_trans - t_max[:, None, None])  # (G, K, K)
        both = P.new_zeros((G, 2 * K, 2 * K))
        both[:, :K, :K] = P
        both[:, K:, K:] = P.transpose(1, 2)
        e_max = p.E.amax(dim=2)  # (N, 2) finite: O is always allowed
        Q = (p.E - e_max[:, :, None]).exp_().view(N, 2 * K)
        special = set()
        if self.ws_steps:
            ws_back = p.ws[p.doc, p.lengths[p.doc] - 1 - p.time]  # (N,) the backward position's token
            special = self.ws_steps | set(p.time[ws_back & (p.time > 0)].unique().tolist())

        def masked(t: int, n: int, x: torch.Tensor, out: torch.Tensor) -> None:
            moves = P.index_select(0, p.group[:n])  # (n, K, K)
            ends = self._ends(p.inside[:n])
            forward = moves.masked_fill(p.ws[:n, t - 1, None, None] & ends, 0.0)
            o = p.offsets[t]
            backward = moves.masked_fill(ws_back[o : o + n, None, None] & ends, 0.0).transpose(1, 2)
            out[:, :K] = torch.bmm(x[:, None, :K], forward)[:, 0]
            out[:, K:] = torch.bmm(x[:, None, K:], backward)[:, 0]

        product = self._products(both, p.group)
        X = torch.empty((N, 2 * K), dtype=p.E.dtype, device=device)
        halves = X.view(N, 2, K)
        scales = X.new_ones((N, 2, 1))
        c0 = p.start.amax(dim=1)  # finite: O may start
        end_max = p.end.amax(dim=1)  # finite: O may end
        torch.exp(p.start - c0[:, None], out=halves[:B, 0])  # step 0: row d is sorted doc d
        torch.exp(p.end - end_max[:, None], out=halves[:B, 1])
        for t in range(1, T):
            n, o, before = p.steps[t], p.offsets[t], p.offsets[t - 1]
            if n == 0:
                break
            x = X[before : before + n] * Q[before : before + n]
            if t in special:
                masked(t, n, x, X[o : o + n])
            else:
                product(x, n, X[o : o + n])
            out, scale = halves[o : o + n], scales[o : o + n]
            torch.amax(out, dim=2, keepdim=True, out=scale)
            out.div_(scale.clamp_min_(tiny))
        # log of the scale of row (t, d): the sum over steps up to t of log(scale) + max trans
        # + max emission of the step before (a cumulative sum over the padded (T, B) grid)
        log_s = X.new_zeros((T, B, 2))
        log_s[p.time, p.doc] = torch.log(scales[:, :, 0]).add_(t_max.index_select(0, p.group)[p.doc, None])
        before = X.new_zeros((T, B, 2))
        before[p.time, p.doc] = e_max
        log_s[1:] += before[:-1]
        log_s[0, :, 0] = c0
        log_s[0, :, 1] = end_max
        log_c = log_s.cumsum(0)  # (T, B, 2); past a doc's length: unused
        sorted_docs = torch.arange(B, device=device)
        last_t = (p.lengths - 1).clamp(min=0)
        last = p.rows[last_t, sorted_docs]
        final = torch.log(halves[last, 0]) + log_c[last_t, sorted_docs, :1] + p.E[last, 0]  # alpha at the end
        log_z = torch.logsumexp(final + p.end, dim=-1)
        self._scaled = _Scaled(halves, log_c, log_z)
        return self._scaled

    @torch.no_grad()
    def forward_backward(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-space forward and backward scores, (B, T, K) each, and log Z (B,).

        alpha[b, t, k]: all paths over 0..t ending in k (emission at t included; -inf past
        the doc's end); beta[b, t, k]: all continuations after t from k, end score included
        (``end`` itself from the doc's last token on). From :meth:`scaled_forward_backward`;
        decoding reads only the entries it needs (:meth:`span_log_probs`).
        :meth:`forward_backward_log` is the log-space reference.
        """
        p = self._pack()
        fb = self.scaled_forward_backward()
        B, T, K = self.emissions.shape
        docs = p.order[p.doc]
        alpha = self.emissions.new_full((B, T, K), NEG_INF)
        alpha[docs, p.time] = torch.log(fb.X[:, 0]) + fb.log_c[p.time, p.doc, :1] + p.E[:, 0]
        beta = self.end[:, None, :].expand(B, T, K).clone()
        later = p.time > 0  # step u = 0 is the last token: beta is `end` there
        beta[docs[later], (p.lengths[p.doc] - 1 - p.time)[later]] = (
            torch.log(fb.X[later, 1]) + fb.log_c[p.time[later], p.doc[later], 1:]
        )
        return alpha, beta, fb.log_z.index_select(0, p.unsort)

    def select(self, docs: torch.Tensor) -> "Lattice":
        """The lattice of some of the docs (docs: (B',) long indices), cut to their longest."""
        lengths = self.lengths.index_select(0, docs)
        T = int(lengths.max())
        pick = lambda x: x.index_select(0, docs)  # noqa: E731
        return Lattice(
            pick(self.emissions)[:, :T], lengths, pick(self.start), self.group_trans, pick(self.end),
            pick(self.whitespace)[:, :T], pick(self.is_inside), pick(self.group), self.bio,
        )

    def tempered(self, inverse_temperature: torch.Tensor) -> "Lattice":
        """The lattice of the tempered distribution p_T(y) ∝ exp(score(y) / T): every emission
        and every move (start, transition, end) of doc b times ``inverse_temperature[b]`` = 1/T
        (a positive (B,) tensor). Scaling all the scores of a path keeps its rank, so the
        tempered lattice has the same Viterbi path; only its marginals change (T > 1 flattens
        them). Forbidden moves stay -inf. Docs of a group with different temperatures get
        transition tables of their own."""
        inv = inverse_temperature.to(device=self.emissions.device, dtype=self.emissions.dtype)
        pairs = torch.stack([self.group.to(inv.dtype), inv], dim=1)
        groups, group = torch.unique(pairs, dim=0, return_inverse=True)
        trans = self.group_trans.index_select(0, groups[:, 0].long()) * groups[:, 1, None, None]
        return Lattice(
            self.emissions * inv[:, None, None], self.lengths, self.start * inv[:, None], trans,
            self.end * inv[:, None], self.whitespace, self.is_inside, group, self.bio,
        )

    @torch.no_grad()
    def span_log_probs(
        self, rows: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor,
        begin_ids: torch.Tensor, inside_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Log marginal probabilities that tokens ``starts[j]:ends[j]`` of doc ``rows[j]`` are
        one entity (``B-X I-X ...`` followed by anything but ``I-X``), for N spans at once.

        rows, starts, ends, begin_ids (the id of B-X), inside_ids (of I-X): (N,) long, on the
        lattice's device. RETURNS: (N,) log probabilities. The per-span reference is
        :func:`crf_span_log_prob` of tests/reference_decoders.py. The forward-backward runs over the docs that have a
        span only (:meth:`select`): a doc without entities needs no marginals.
        """
        if rows.shape[0] == 0:
            return self.emissions.new_zeros((0,))
        docs, rows = torch.unique(rows, sorted=True, return_inverse=True)
        if docs.shape[0] < self.lengths.shape[0]:
            return self.select(docs)._span_log_probs(rows, starts, ends, begin_ids, inside_ids)
        return self._span_log_probs(rows, starts, ends, begin_ids, inside_ids)

    @torch.no_grad()
    def _span_log_probs(self, rows, starts, ends, begin_ids, inside_ids) -> torch.Tensor:
        p = self._pack()
        fb = self.scaled_forward_backward()
        B, T, K = self.emissions.shape
        N = rows.shape[0]
        E, X = p.E.view(-1, K), fb.X.view(-1, K)  # row 2r: forward / emissions at t, 2r+1: backward
        trans = self.group_trans
        d = p.unsort.index_select(0, rows)  # sorted positions
        g = self.group.index_select(0, rows)
        length = p.lengths.index_select(0, d)
        at = torch.minimum(ends, length - 1)  # the token after the span (when it closes)
        u = length - 1 - at  # the backward recursion's step at `at`
        first, after, back = p.rows.view(-1).index_select(0, torch.cat([starts, at, u]) * B + d.repeat(3)).view(3, N)
        # alpha at the first token (B-X), then B -> I and I -> I inside the span, the
        # whitespace rule never closing a move into I
        width = int((ends - starts).max())  # one host copy
        steps = starts[:, None] + 1 + torch.arange(width - 1, device=rows.device)[None, :]
        within = steps < ends[:, None]
        inner_rows = p.rows[torch.minimum(steps, (ends - 1)[:, None]), d[:, None]]  # (N, width - 1)
        inner = E[2 * inner_rows, inside_ids[:, None]].masked_fill_(~within, 0.0).sum(dim=1)
        pairs = torch.cat([(g * K + begin_ids) * K + inside_ids, (g * K + inside_ids) * K + inside_ids])
        moves = trans.view(-1).index_select(0, pairs).view(2, N)  # B-X -> I-X, I-X -> I-X
        n_ii = (ends - starts - 2).clamp(min=0)
        long_span = ends - starts >= 2
        score = torch.log(X[2 * first, begin_ids]) + fb.log_c[starts, d, 0] + E[2 * first, begin_ids]
        score += torch.where(long_span, moves[0] + inner + n_ii * torch.where(n_ii > 0, moves[1], 0.0), 0.0)
        prev = torch.where(long_span, inside_ids, begin_ids)
        # after the span: anything but I-X (logsumexp over the next tag), or the end
        beta = torch.where((u > 0)[:, None], torch.log(X.index_select(0, 2 * back + 1)) + fb.log_c[u, d, 1:], p.end[d])
        nxt = trans.view(-1, K).index_select(0, g * K + prev) + E.index_select(0, 2 * after) + beta  # (N, K)
        inside = p.inside.index_select(0, d)
        shut = p.ws[d, (at - 1).clamp(min=0)] & inside.gather(1, prev[:, None])[:, 0]
        nxt.masked_fill_(shut[:, None] & ~inside, NEG_INF).scatter_(1, inside_ids[:, None], NEG_INF)
        score += torch.where(ends < length, torch.logsumexp(nxt, dim=1), p.end[d, prev])
        return score - fb.log_z.index_select(0, d)

    def log_partition(self) -> torch.Tensor:
        """(B,) log Z, differentiable: the forward algorithm in log space (the likelihood's
        normaliser; pytorch-crf's, step for step). Forbidden moves may be finite scores here
        (the CRF's ``FORBIDDEN``) or -inf."""
        E = self.emissions
        B, T, K = E.shape
        live = torch.arange(T, device=E.device)[None, :] < self.lengths.to(E.device)[:, None]
        trans = self.trans
        score = self.start + E[:, 0]
        for t in range(1, T):
            moves = self.move(t) if t in self.ws_steps else trans
            step = torch.logsumexp(score[:, :, None] + moves + E[:, t, None, :], dim=1)
            score = torch.where(live[:, t, None], step, score)
        return torch.logsumexp(score + self.end, dim=1)

    def observed_log_partition(self, tags: torch.Tensor) -> torch.Tensor:
        """(B,) log of the summed scores of the paths that agree with ``tags`` wherever it is
        >= 0 (tags (B, T) long; -1 = missing: any tag the moves allow there), differentiable:
        :meth:`log_partition` with every tag but the observed one shut at observed positions.

        Shut tags get a finite score far below any path's (a quarter of the dtype's lowest:
        at most two are ever summed, see below), not -inf: a step whose every entry is -inf
        gives logsumexp a NaN gradient. A forward entry holds at most one shut emission (its
        best predecessor is the observed tag, whose emission is open), so a sum in a step
        holds at most two and stays finite; their mass, exp(-1e37), is exactly 0. With no
        tag missing this is the gold path's score (:meth:`path_scores`) up to rounding."""
        E = self.emissions
        K = E.shape[2]
        observed = (tags >= 0)[:, :, None]
        agree = torch.nn.functional.one_hot(tags.clamp(min=0), K).bool()
        shut = observed & ~agree  # (B, T, K)
        off = torch.finfo(E.dtype).min / 4
        consistent = Lattice(
            E.masked_fill(shut, off), self.lengths, self.start, self.group_trans, self.end,
            self.whitespace, self.is_inside, self.group, self.bio,
        )
        return consistent.log_partition()

    def path_scores(self, tags: torch.Tensor) -> torch.Tensor:
        """(B,) score of each doc's tag sequence (tags (B, T) long; entries past a doc's
        length are ignored, any valid id), differentiable, all steps at once. The moves must
        be finite on the paths scored (the CRF's ``FORBIDDEN``, not -inf)."""
        E = self.emissions
        B, T, K = E.shape
        lengths = self.lengths.to(E.device)
        tags = tags.clamp(min=0)
        weights = (torch.arange(T, device=E.device)[None, :] < lengths[:, None]).to(E.dtype)
        emitted = E.gather(2, tags[:, :, None])[:, :, 0]  # (B, T)
        score = self.start.gather(1, tags[:, :1])[:, 0] + emitted[:, 0]
        if T > 1:
            moves = self.group_trans[self.group[:, None], tags[:, :-1], tags[:, 1:]]  # (B, T - 1)
            score = score + ((moves + emitted[:, 1:]) * weights[:, 1:]).sum(1)
        last = tags.gather(1, (lengths - 1)[:, None])  # (B, 1)
        return score + self.end.gather(1, last)[:, 0]

    def forward_backward_log(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The log-space reference of :meth:`forward_backward` (a log-sum-exp per step)."""
        E, lengths = self.emissions, self.lengths
        B, T, K = E.shape
        alpha = E.new_full((B, T, K), NEG_INF)
        alpha[:, 0] = self.start + E[:, 0]
        for t in range(1, T):
            alpha[:, t] = torch.logsumexp(alpha[:, t - 1, :, None] + self.move(t), dim=1) + E[:, t]
        beta = self.end[:, None, :].expand(B, T, K).clone()
        for t in range(T - 2, -1, -1):
            ahead = torch.logsumexp(self.move(t + 1) + (E[:, t + 1] + beta[:, t + 1])[:, None, :], dim=2)
            beta[:, t] = torch.where((t + 1 < lengths)[:, None], ahead, self.end)
        last = alpha.gather(1, (lengths - 1).clamp(min=0)[:, None, None].expand(B, 1, K))[:, 0]
        return alpha, beta, torch.logsumexp(last + self.end, dim=-1)


@functools.lru_cache(maxsize=64)
def _is_bio(tags: Tuple[str, ...]) -> bool:
    """Whether a tag list is laid out as :func:`~..decoding.bio_tags` lays it out."""
    return (
        len(tags) % 2 == 1 and tags[0] == "O"
        and all(b.startswith("B-") and i == f"I-{b[2:]}" for b, i in zip(tags[1::2], tags[2::2]))
    )


@functools.lru_cache(maxsize=64)
def _tag_moves(tags: Tuple[str, ...]) -> Tuple[torch.Tensor, ...]:
    """allowed start, transitions and end, is_begin and is_inside of a tag list, as bool
    tensors on the CPU (cached: a domain's tags rarely change, and the loops are per tag pair)."""
    start, trans, end = allowed_moves(tags)
    begin, inside = tag_kinds(tags)
    return tuple(torch.from_numpy(x) for x in (start, trans, end, begin, inside))


def whitespace_closed(whitespace: torch.Tensor, is_inside: torch.Tensor) -> torch.Tensor:
    """(B, T, K, K) moves into t forbidden because token t-1 is whitespace inside an entity
    that would end there. whitespace: (B, T) bool; is_inside: (B, K) bool."""
    B, T = whitespace.shape
    K = is_inside.shape[1]
    closed = torch.zeros((B, T, K, K), dtype=torch.bool, device=whitespace.device)
    ends = is_inside[:, :, None] & ~is_inside[:, None, :]  # (B, K, K)
    closed[:, 1:] = whitespace[:, :-1, None, None] & ends[:, None]
    return closed


def allowed_tags(
    whitespace: torch.Tensor, lengths: torch.Tensor, is_begin: torch.Tensor, is_inside: torch.Tensor,
    valid: torch.Tensor,
) -> torch.Tensor:
    """(B, T, K) tags each position may take: real tags of the doc's domain, no entity
    starting on whitespace, no whitespace last token inside an entity."""
    B, T = whitespace.shape
    positions = torch.arange(T, device=whitespace.device)
    last = positions[None, :] == (lengths - 1)[:, None]  # (B, T)
    ok = valid[:, None, :] & ~(whitespace[:, :, None] & is_begin[:, None, :])
    return ok & ~((whitespace & last)[:, :, None] & is_inside[:, None, :])


class DomainHead(nn.Module):
    """Base of the output heads: per-domain tag kinds and allowed moves, padded per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.domain_tags: Dict[str, List[str]] = {}

    def setup(self, domain_tags: Dict[str, Sequence[str]], build_config: Optional[Dict[str, Any]] = None) -> None:
        self.domain_tags = {d: list(t) for d, t in domain_tags.items()}

    def n_tags(self, domains: List[str]) -> torch.Tensor:
        return torch.tensor([len(self.domain_tags[d]) for d in domains], dtype=torch.long)

    def domain_moves(
        self, domains: List[str], K: int, device
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """The moves of each domain of the batch, padded to K, and each doc's domain.

        RETURNS: index (B,) long, each doc's row among the batch's domains (sorted by name);
            and G rows per domain: "begin", "inside" (is_begin, is_inside), "valid", allowed
            "start", "end" (G, K) and allowed "trans" (G, K, K), all bool.
        """
        present = sorted(set(domains))
        where = {d: i for i, d in enumerate(present)}
        G = len(present)
        out = {
            name: torch.zeros(shape, dtype=torch.bool)
            for name, shape in (
                ("begin", (G, K)), ("inside", (G, K)), ("valid", (G, K)),
                ("start", (G, K)), ("end", (G, K)), ("trans", (G, K, K)),
            )
        }
        for g, domain in enumerate(present):
            start, trans, end, begin, inside = _tag_moves(tuple(self.domain_tags[domain]))
            n = len(start)
            out["begin"][g, :n] = begin
            out["inside"][g, :n] = inside
            out["valid"][g, :n] = True
            out["start"][g, :n] = start
            out["end"][g, :n] = end
            out["trans"][g, :n, :n] = trans
        index = torch.tensor([where[d] for d in domains], dtype=torch.long, device=device)
        return index, {k: v.to(device) for k, v in out.items()}

    def allowed_emissions(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str], whitespace: torch.Tensor,
        index: torch.Tensor, ok_moves: Dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """(B, T, K) emissions, -inf where :func:`allowed_tags` forbids a tag (index, ok_moves:
        from :meth:`domain_moves`). Without whitespace tokens only padding tags are forbidden,
        and a batch whose domains all have K tags has none: no (B, T, K) mask is built."""
        K = emissions.shape[2]
        valid = ok_moves["valid"].index_select(0, index)
        if bool(whitespace.any()):
            begin, inside = (ok_moves[k].index_select(0, index) for k in ("begin", "inside"))
            return emissions.masked_fill(~allowed_tags(whitespace, lengths, begin, inside, valid), NEG_INF)
        if all(len(self.domain_tags[d]) == K for d in set(domains)):
            return emissions
        return emissions.masked_fill(~valid[:, None, :], NEG_INF)

    def is_bio(self, domains: List[str]) -> bool:
        """Whether every domain of the batch has its tags laid out as ``bio_tags`` does."""
        return all(_is_bio(tuple(self.domain_tags[d])) for d in set(domains))

    def moves(self, domains: List[str], K: int, device) -> Tuple[torch.Tensor, ...]:
        """Per doc, padded to K: is_begin, is_inside, valid (B, K); allowed start, end (B, K)
        and transitions (B, K, K). Built once per domain of the batch, then gathered per doc."""
        index, out = self.domain_moves(domains, K, device)
        return tuple(
            out[k].index_select(0, index) for k in ("begin", "inside", "valid", "start", "end", "trans")
        )

    def forward(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str],
        gold: Optional[torch.Tensor] = None, whitespace: Optional[torch.Tensor] = None,
    ):
        """With gold tags, the loss (:meth:`loss`); without, the decoding (:meth:`decode`;
        ``whitespace`` (B, T) bool, no whitespace tokens when None).

        emissions (B, T, K); lengths (B,); gold (B, T) tag ids, a row of -1 for a doc without
        annotation (no loss).
        """
        if gold is not None:
            return self.loss(emissions, lengths, domains, gold)
        if whitespace is None:
            whitespace = torch.zeros(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        return self.decode(emissions, lengths, domains, whitespace)

    def loss(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str], gold: torch.Tensor
    ) -> torch.Tensor:
        """The NER loss of a batch (a scalar tensor)."""
        raise NotImplementedError

    def lattice(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str],
        whitespace: torch.Tensor,
    ) -> Lattice:
        raise NotImplementedError

    def decode(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str],
        whitespace: torch.Tensor,
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """Best constrained tags (B, T), and what the entity probabilities are computed from
        (CRF: ``"lattice"``, see :meth:`Lattice.span_log_probs`; softmax: ``"logp"``)."""
        raise NotImplementedError


class CRFHead(DomainHead):
    """One constrained CRF per domain: negative log-likelihood loss, Viterbi decoding and
    span marginals (forward-backward), all batched over the docs of a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.crfs = nn.ModuleDict()
        self.generations: Dict[str, int] = {}  # per domain: how often its CRF was resized

    def setup(self, domain_tags: Dict[str, Sequence[str]], build_config: Optional[Dict[str, Any]] = None) -> None:
        """Create missing CRFs, and replace the CRF of a domain whose tags changed in number by
        a new one (under a new name: :func:`generation_name`) keeping the scores it had.

        build_config (Optional[Dict[str, Any]]): the component's build config: the CRFs'
            generations are read from and recorded in its ``crf_generations``.
        """
        super().setup(domain_tags)
        generations = merge_generations(self.generations, (build_config or {}).get(CRF_GENERATIONS))
        for domain, tags in domain_tags.items():
            key = generation_name(module_key(domain), generations.get(domain, 0))
            if key not in self.crfs:
                self.crfs[key] = ConstrainedCRF(tags)
                continue
            old = self.crfs[key]
            if old.num_tags == len(tags):
                old.set_tags(tags)
                continue
            # more tags: the old ones keep their scores; fewer (re-initialized): start over
            new = old.grown(tags) if old.num_tags < len(tags) else ConstrainedCRF(tags).to(old.transitions.device)
            del self.crfs[key]
            generations[domain] = generations.get(domain, 0) + 1
            self.crfs[generation_name(module_key(domain), generations[domain])] = new
        if build_config is not None and generations:
            build_config[CRF_GENERATIONS] = dict(generations)

    def get(self, domain: str) -> ConstrainedCRF:
        return self.crfs[generation_name(module_key(domain), self.generations.get(domain, 0))]

    def copy_rows(self, source: str, target: str, shared: Sequence[Tuple[int, int]]) -> None:
        """Give ``target``'s CRF the start, end and transition scores of ``source``'s among the
        shared tags ((source id, target id) pairs)."""
        src, dst = self.get(source), self.get(target)
        with torch.no_grad():
            for i, j in shared:
                dst.start_transitions[j] = src.start_transitions[i]
                dst.end_transitions[j] = src.end_transitions[i]
                for k, l in shared:
                    dst.transitions[j, l] = src.transitions[i, k]

    def loss(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str], gold: torch.Tensor
    ) -> torch.Tensor:
        """Summed negative log-likelihood of the gold tags, divided by the labelled docs.

        emissions (B, T, K); lengths (B,); gold (B, T) tag ids, a row of -1 for a doc without
        annotation (no loss); -1 at some tokens of a doc: their tags are missing, and the
        likelihood is that of every BIO-valid path through the observed tags
        (:meth:`ConstrainedCRF.forward`).
        """
        labelled = (gold >= 0).any(dim=1).tolist()  # one host copy, not one sync per doc
        n_docs = max(sum(labelled), 1)
        positions = torch.arange(emissions.shape[1], device=emissions.device)
        mask = positions[None, :] < lengths.to(emissions.device)[:, None]
        loss = emissions.new_zeros(())
        for domain in sorted(set(domains)):
            rows = [b for b, d in enumerate(domains) if d == domain and labelled[b]]
            if not rows:
                continue
            idx = torch.tensor(rows, device=emissions.device)
            crf = self.get(domain)
            # gold -1 inside a doc is a missing tag: the CRF marginalises over it
            loss = loss - crf(emissions[idx, :, : crf.num_tags], gold[idx], mask=mask[idx], reduction="sum")
        return loss / n_docs

    def lattice(self, emissions, lengths, domains, whitespace) -> Lattice:
        B, T, K = emissions.shape
        device = emissions.device
        index, ok_moves = self.domain_moves(domains, K, device)
        G = ok_moves["trans"].shape[0]
        start = emissions.new_full((G, K), NEG_INF)
        end = emissions.new_full((G, K), NEG_INF)
        trans = emissions.new_full((G, K, K), NEG_INF)
        for g, domain in enumerate(sorted(set(domains))):
            crf = self.get(domain)
            n = crf.num_tags
            start[g, :n] = crf.start_transitions.to(start.dtype)
            end[g, :n] = crf.end_transitions.to(end.dtype)
            trans[g, :n, :n] = crf.transitions.to(trans.dtype)
        per_doc = lambda x: x.index_select(0, index)  # noqa: E731
        inside = per_doc(ok_moves["inside"])
        lengths = lengths.to(device)
        return Lattice(
            self.allowed_emissions(emissions, lengths, domains, whitespace, index, ok_moves),
            lengths,
            per_doc(start.masked_fill(~ok_moves["start"], NEG_INF)),
            trans.masked_fill(~ok_moves["trans"], NEG_INF),
            per_doc(end.masked_fill(~ok_moves["end"], NEG_INF)),
            whitespace,
            inside,
            group=index,
            bio=self.is_bio(domains),
        )

    def decode(self, emissions, lengths, domains, whitespace):
        # Double precision: marginals of confident entities are sums of near-1 terms.
        # The forward-backward runs when span probabilities are asked for (a batch without
        # entities needs none).
        lattice = self.lattice(emissions.double(), lengths, domains, whitespace)
        return lattice.viterbi(), {"lattice": lattice}


class SoftmaxHead(DomainHead):
    """A softmax per token: cross-entropy loss; decoding is the best BIO-valid sequence under
    the log-probabilities (no learnt transitions); an entity's probability is the product of
    its tokens' probabilities."""

    def loss(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str], gold: torch.Tensor
    ) -> torch.Tensor:
        """Summed token cross-entropy of the gold tags, divided by the labelled docs; a token
        whose gold is -1 (missing, or a doc without annotation) gives no loss."""
        B, T, K = emissions.shape
        labelled = (gold >= 0).any(dim=1)
        n_docs = max(int(labelled.sum()), 1)
        _, _, valid, _, _, _ = self.moves(domains, K, emissions.device)
        logp = torch.log_softmax(emissions.masked_fill(~valid[:, None, :], NEG_INF), dim=-1)
        positions = torch.arange(T, device=emissions.device)
        mask = (positions[None, :] < lengths.to(emissions.device)[:, None]) & (gold >= 0)
        nll = -logp.gather(2, gold.clamp(min=0)[:, :, None])[:, :, 0]
        return nll.masked_fill(~mask, 0.0).sum() / n_docs

    def decode(self, emissions, lengths, domains, whitespace):
        B, T, K = emissions.shape
        device = emissions.device
        index, ok_moves = self.domain_moves(domains, K, device)
        per_doc = lambda x: x.index_select(0, index)  # noqa: E731
        inside, valid = per_doc(ok_moves["inside"]), per_doc(ok_moves["valid"])
        logp = torch.log_softmax(emissions.masked_fill(~valid[:, None, :], NEG_INF), dim=-1)
        lengths = lengths.to(device)
        zeros = emissions.new_zeros((B, K))
        lattice = Lattice(
            self.allowed_emissions(logp, lengths, domains, whitespace, index, ok_moves),
            lengths,
            zeros.masked_fill(~per_doc(ok_moves["start"]), NEG_INF),
            emissions.new_zeros(ok_moves["trans"].shape).masked_fill(~ok_moves["trans"], NEG_INF),
            zeros.masked_fill(~per_doc(ok_moves["end"]), NEG_INF),
            whitespace,
            inside,
            group=index,
            bio=self.is_bio(domains),
        )
        return lattice.viterbi(), {"logp": logp}
