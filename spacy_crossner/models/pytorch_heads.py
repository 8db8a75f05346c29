"""Torch modules shared by the architectures: per-domain linear maps, and the output heads
that turn a batch's padded emissions into the NER loss and into decoded tags.

Linear maps and CRFs grow in place when a domain or a label is added (pre-train then
fine-tune), keeping the weights of what was there before. Module keys are derived from domain
names, which may hold characters that torch forbids in module names.

Shapes: B docs, T longest doc, K tags of the widest domain in the batch (columns past a
domain's own tags are padding).
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torchcrf import CRF

from ..decoding import FORBIDDEN, allowed_moves, tag_kinds

NEG_INF = float("-inf")


def module_key(domain: str) -> str:
    """A torch-safe module name for a domain name (``.`` is not allowed in module names)."""
    return "".join(c if (c.isalnum() or c == "_") else f"-{ord(c)}-" for c in domain)


class DomainHeads(nn.Module):
    """One linear map per domain from hidden states onto that domain's tags."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict()

    def setup(self, n_in: int, domain_tags: Dict[str, Sequence[str]]) -> None:
        """Create missing heads and grow heads whose domain gained tags.

        n_in (int): width of the hidden states.
        domain_tags (Dict[str, Sequence[str]]): the tags of each domain (new tags appended).
        """
        for domain, tags in domain_tags.items():
            key = module_key(domain)
            if key not in self.heads:
                self.heads[key] = nn.Linear(n_in, len(tags))
                continue
            old = self.heads[key]
            if old.in_features != n_in:
                raise ValueError(
                    f"The head of domain '{domain}' expects inputs of width {old.in_features}, "
                    f"not {n_in}: the input features changed width since training."
                )
            if old.out_features > len(tags):
                # Fewer tags than before (initialize called again with other labels): start over.
                self.heads[key] = nn.Linear(n_in, len(tags)).to(old.weight.device)
            elif old.out_features < len(tags):
                new = nn.Linear(n_in, len(tags)).to(old.weight.device)
                with torch.no_grad():
                    new.weight[: old.out_features] = old.weight
                    new.bias[: old.out_features] = old.bias
                self.heads[key] = new

    def n_tags(self, domain: str) -> int:
        return self.heads[module_key(domain)].out_features

    def copy_rows(self, source: str, target: str, shared: Sequence[Tuple[int, int]]) -> None:
        """Give ``target``'s head the rows (weights, bias) of ``source``'s for shared tags.

        shared (Sequence[Tuple[int, int]]): (source tag id, target tag id) pairs.
        """
        src, dst = self.heads[module_key(source)], self.heads[module_key(target)]
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
            scores = self.heads[module_key(domain)](hidden.index_select(0, idx))
            out = out.index_put((idx,), nn.functional.pad(scores, (0, k_max - scores.shape[-1])))
        return out


class ConstrainedCRF(CRF):
    """pytorch-crf's CRF whose forbidden BIO moves stay at a fixed, prohibitive score.

    The mask is applied before every use, so neither the likelihood nor decoding can give
    mass to an invalid sequence (e.g. ``O -> I-X``); learnt scores of allowed moves are kept.
    """

    def __init__(self, tags: Sequence[str]) -> None:
        super().__init__(len(tags), batch_first=True)
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

    def grow(self, tags: Sequence[str]) -> None:
        """Extend to a longer tag list whose prefix is the current one."""
        old = self.num_tags
        new = len(tags)
        if new > old:
            device = self.transitions.device
            trans = torch.zeros((new, new), device=device).uniform_(-0.1, 0.1)
            start = torch.zeros((new,), device=device).uniform_(-0.1, 0.1)
            end = torch.zeros((new,), device=device).uniform_(-0.1, 0.1)
            with torch.no_grad():
                trans[:old, :old] = self.transitions
                start[:old] = self.start_transitions
                end[:old] = self.end_transitions
            self.transitions = nn.Parameter(trans)
            self.start_transitions = nn.Parameter(start)
            self.end_transitions = nn.Parameter(end)
            self.num_tags = new
        self.set_tags(tags)

    def apply_constraints(self) -> None:
        with torch.no_grad():
            self.start_transitions.masked_fill_(~self.allowed_start, FORBIDDEN)
            self.transitions.masked_fill_(~self.allowed_transitions, FORBIDDEN)
            self.end_transitions.masked_fill_(~self.allowed_end, FORBIDDEN)

    def forward(self, emissions, tags, mask=None, reduction="sum"):
        self.apply_constraints()
        return super().forward(emissions, tags, mask=mask, reduction=reduction)


class Lattice:
    """The constrained tag lattice of a padded batch: per-doc scores of every move.

    emissions (B, T, K): emission scores, -inf where a tag is not allowed (padding tags,
        whitespace constraints). start, end (B, K) and trans (B, K, K) [previous, next]: move
        scores, -inf where forbidden. whitespace (B, T) bool: whitespace tokens; a move into
        position t is also forbidden when token t-1 is whitespace inside an entity that would
        end there. lengths (B,) long, on the emissions' device. is_inside (B, K): which tags
        continue an entity.

    The whitespace moves are masked only at the steps where some doc of the batch has a
    whitespace token before them (found with one host copy of a (T,) flag vector per batch),
    so a batch without whitespace tokens pays nothing for them.
    """

    def __init__(self, emissions, lengths, start, trans, end, whitespace, is_inside) -> None:
        self.is_inside = is_inside
        self.emissions = emissions
        self.lengths = lengths
        self.start = start
        self.trans = trans
        self.end = end
        self.whitespace = whitespace
        self.ends = is_inside[:, :, None] & ~is_inside[:, None, :]  # (B, K, K)
        T = emissions.shape[1]
        flags = whitespace[:, : max(T - 1, 0)].any(dim=0)  # (T-1,): token t-1 is whitespace
        self.ws_steps = set((flags.nonzero()[:, 0] + 1).tolist())

    @property
    def closed(self) -> torch.Tensor:
        """(B, T, K, K) moves into t forbidden by the whitespace rule (for tests)."""
        return whitespace_closed(self.whitespace, self.is_inside)

    def closed_at(self, t: int) -> Optional[torch.Tensor]:
        """(B, K, K) moves into t forbidden by the whitespace rule, None when there are none."""
        if t not in self.ws_steps:
            return None
        return self.whitespace[:, t - 1, None, None] & self.ends

    def move(self, t: int) -> torch.Tensor:
        """(B, K, K) scores of moving into position t."""
        closed = self.closed_at(t)
        return self.trans if closed is None else self.trans.masked_fill(closed, NEG_INF)

    def _by_length(self):
        """The batch sorted longest first, so that step t runs over the n_t docs longer than t
        (a prefix): order and its inverse (B,), n_t per step (host ints, one copy of the
        lengths per batch), and the sorted emissions, lengths, moves and whitespace flags."""
        order = torch.argsort(self.lengths, descending=True, stable=True)
        unsort = torch.empty_like(order)
        unsort[order] = torch.arange(order.shape[0], device=order.device)
        T = self.emissions.shape[1]
        counts = torch.bincount(self.lengths, minlength=T + 1)  # docs of each length
        steps = (counts.flip(0).cumsum(0).flip(0)[1 : T + 1]).tolist()  # n_t, t < T
        pick = lambda x: x.index_select(0, order)  # noqa: E731
        sorted_ = {
            "E": pick(self.emissions), "lengths": pick(self.lengths), "start": pick(self.start),
            "trans": pick(self.trans), "end": pick(self.end), "ws": pick(self.whitespace),
            "ends": pick(self.ends),
        }
        return order, unsort, steps, sorted_

    def viterbi(self) -> torch.Tensor:
        """(B, T) best tag ids (positions past a doc's length are 0), over a shrinking batch."""
        _, unsort, steps, s = self._by_length()
        E, lengths, trans = s["E"], s["lengths"], s["trans"]
        B, T, K = E.shape
        score = s["start"] + E[:, 0]
        # A finished doc's back-pointers are the identity, so one backtrack from the last
        # step serves every length (two small ops per step).
        history = torch.arange(K, device=E.device).expand(B, T, K).clone()
        for t in range(1, T):
            n = steps[t]
            if n == 0:
                break
            move = trans[:n]
            if t in self.ws_steps:
                move = move.masked_fill(s["ws"][:n, t - 1, None, None] & s["ends"][:n], NEG_INF)
            best, arg = (score[:n, :, None] + move).max(dim=1)
            history[:n, t] = arg
            score = torch.cat([best + E[:n, t], score[n:]])
        current = (score + s["end"]).argmax(dim=-1, keepdim=True)  # (B, 1)
        tags = torch.empty((B, T), dtype=torch.long, device=E.device)
        for t in range(T - 1, -1, -1):
            tags[:, t] = current[:, 0]
            current = history[:, t].gather(1, current)
        live = torch.arange(T, device=E.device)[None, :] < lengths[:, None]  # (B, T)
        tags = tags.masked_fill(~live, 0)
        return tags.index_select(0, unsort)

    def forward_backward(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-space forward and backward scores, (B, T, K) each, and log Z (B,).

        alpha[b, t, k]: all paths over 0..t ending in k (emission at t included; -inf past
        the doc's end); beta[b, t, k]: all continuations after t from k, end score included.

        Computed in probability space with a scale per doc and step (the scaled forward
        algorithm) over a shrinking, length-sorted batch: one batched (1, K) x (K, K) product
        per step for the docs still running, instead of a log-sum-exp over the padded
        (B, K, K); exact up to rounding. Entries more than ~700 nats below their step's best
        underflow to -inf (they carry no probability mass). :meth:`forward_backward_log` is
        the log-space reference.
        """
        _, unsort, steps, s = self._by_length()
        E, lengths, trans, end = s["E"], s["lengths"], s["trans"], s["end"]
        B, T, K = E.shape
        t_max = trans.amax(dim=(1, 2))  # (B,) finite: O -> O is always allowed
        P = torch.exp(trans - t_max[:, None, None])  # (B, K, K)
        e_max = E.amax(dim=2)  # (B, T) finite: O is always allowed
        Q = torch.exp(E - e_max[:, :, None])  # (B, T, K)
        tiny = torch.finfo(E.dtype).tiny

        def moves(t: int, n: int) -> torch.Tensor:
            if t not in self.ws_steps:
                return P[:n]
            return P[:n].masked_fill(s["ws"][:n, t - 1, None, None] & s["ends"][:n], 0.0)

        def rescale(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
            scale = x.amax(dim=1)
            scale = torch.where(scale > tiny, scale, torch.ones_like(scale))
            return x / scale[:, None], torch.log(scale)

        alpha = E.new_full((B, T, K), NEG_INF)
        first = s["start"] + E[:, 0]
        log_c = first.amax(dim=1)
        a = torch.exp(first - log_c[:, None])
        alpha[:, 0] = torch.log(a) + log_c[:, None]
        for t in range(1, T):
            n = steps[t]
            if n == 0:
                break
            a, log_s = rescale(torch.bmm(a[:n, None, :], moves(t, n))[:, 0] * Q[:n, t])
            log_c = log_c[:n] + log_s + t_max[:n] + e_max[:n, t]
            alpha[:n, t] = torch.log(a) + log_c[:, None]
        end_max = end.amax(dim=1)
        end_p = torch.exp(end - end_max[:, None])
        beta = end[:, None, :].expand(B, T, K).clone()
        b, log_c = end_p.clone(), end_max.clone()
        for t in range(T - 2, -1, -1):
            n = steps[t + 1]  # docs with a token after t
            if n == 0:
                continue
            nb, log_s = rescale(torch.bmm(moves(t + 1, n), (Q[:n, t + 1] * b[:n])[:, :, None])[:, :, 0])
            b = torch.cat([nb, b[n:]])
            log_c = torch.cat([log_c[:n] + log_s + t_max[:n] + e_max[:n, t + 1], log_c[n:]])
            beta[:n, t] = torch.log(nb) + log_c[:n, None]
        last = alpha.gather(1, (lengths - 1).clamp(min=0)[:, None, None].expand(B, 1, K))[:, 0]
        log_z = torch.logsumexp(last + end, dim=-1)
        return alpha.index_select(0, unsort), beta.index_select(0, unsort), log_z.index_select(0, unsort)

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

    def setup(self, domain_tags: Dict[str, Sequence[str]]) -> None:
        self.domain_tags = {d: list(t) for d, t in domain_tags.items()}

    def n_tags(self, domains: List[str]) -> torch.Tensor:
        return torch.tensor([len(self.domain_tags[d]) for d in domains], dtype=torch.long)

    def moves(self, domains: List[str], K: int, device) -> Tuple[torch.Tensor, ...]:
        """Per doc, padded to K: is_begin, is_inside, valid (B, K); allowed start, end (B, K)
        and transitions (B, K, K). Built once per domain of the batch, then gathered per doc."""
        present = sorted(set(domains))
        where = {d: i for i, d in enumerate(present)}
        out = {
            name: torch.zeros(shape, dtype=torch.bool)
            for name, shape in (
                ("begin", (len(present), K)), ("inside", (len(present), K)),
                ("valid", (len(present), K)), ("start", (len(present), K)),
                ("end", (len(present), K)), ("trans", (len(present), K, K)),
            )
        }
        for b, domain in enumerate(present):
            tags = self.domain_tags[domain]
            n = len(tags)
            start, trans, end = allowed_moves(tags)
            begin, inside = tag_kinds(tags)
            out["begin"][b, :n] = torch.from_numpy(begin)
            out["inside"][b, :n] = torch.from_numpy(inside)
            out["valid"][b, :n] = True
            out["start"][b, :n] = torch.from_numpy(start)
            out["end"][b, :n] = torch.from_numpy(end)
            out["trans"][b, :n, :n] = torch.from_numpy(trans)
        index = torch.tensor([where[d] for d in domains], dtype=torch.long, device=device)
        return tuple(
            out[k].to(device).index_select(0, index)
            for k in ("begin", "inside", "valid", "start", "end", "trans")
        )

    def lattice(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str],
        whitespace: torch.Tensor,
    ) -> Lattice:
        raise NotImplementedError

    def decode(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str],
        whitespace: torch.Tensor,
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """Best constrained tags (B, T) and what :meth:`span_log_probs` needs."""
        raise NotImplementedError


class CRFHead(DomainHead):
    """One constrained CRF per domain: negative log-likelihood loss, Viterbi decoding and
    span marginals (forward-backward), all batched over the docs of a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.crfs = nn.ModuleDict()

    def setup(self, domain_tags: Dict[str, Sequence[str]]) -> None:
        super().setup(domain_tags)
        for domain, tags in domain_tags.items():
            key = module_key(domain)
            if key not in self.crfs or self.crfs[key].num_tags > len(tags):
                # New domain, or fewer tags than before (re-initialized): a fresh CRF.
                self.crfs[key] = ConstrainedCRF(tags)
            else:
                self.crfs[key].grow(tags)

    def get(self, domain: str) -> ConstrainedCRF:
        return self.crfs[module_key(domain)]

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

    def forward(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str], gold: torch.Tensor
    ) -> torch.Tensor:
        """Summed negative log-likelihood of the gold tags, divided by the labelled docs.

        emissions (B, T, K); lengths (B,); gold (B, T) tag ids, a row of -1 for a doc without
        annotation (no loss).
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
            loss = loss - crf(
                emissions[idx, :, : crf.num_tags], gold[idx].clamp(min=0), mask=mask[idx], reduction="sum"
            )
        return loss / n_docs

    def lattice(self, emissions, lengths, domains, whitespace) -> Lattice:
        B, T, K = emissions.shape
        device = emissions.device
        begin, inside, valid, ok_start, ok_end, ok_trans = self.moves(domains, K, device)
        present = sorted(set(domains))
        start = emissions.new_full((len(present), K), NEG_INF)
        end = emissions.new_full((len(present), K), NEG_INF)
        trans = emissions.new_full((len(present), K, K), NEG_INF)
        for i, domain in enumerate(present):
            crf = self.get(domain)
            n = crf.num_tags
            start[i, :n] = crf.start_transitions.to(start.dtype)
            end[i, :n] = crf.end_transitions.to(end.dtype)
            trans[i, :n, :n] = crf.transitions.to(trans.dtype)
        index = torch.tensor([present.index(d) for d in domains], dtype=torch.long, device=device)
        start, end, trans = (x.index_select(0, index) for x in (start, end, trans))
        lengths = lengths.to(device)
        ok = allowed_tags(whitespace, lengths, begin, inside, valid)
        return Lattice(
            emissions.masked_fill(~ok, NEG_INF),
            lengths,
            start.masked_fill(~ok_start, NEG_INF),
            trans.masked_fill(~ok_trans, NEG_INF),
            end.masked_fill(~ok_end, NEG_INF),
            whitespace,
            inside,
        )

    def decode(self, emissions, lengths, domains, whitespace):
        # Double precision: marginals of confident entities are sums of near-1 terms.
        lattice = self.lattice(emissions.double(), lengths, domains, whitespace)
        tags = lattice.viterbi()
        alpha, beta, log_z = lattice.forward_backward()
        return tags, {"lattice": lattice, "alpha": alpha, "beta": beta, "log_z": log_z}


class SoftmaxHead(DomainHead):
    """A softmax per token: cross-entropy loss; decoding is the best BIO-valid sequence under
    the log-probabilities (no learnt transitions); an entity's probability is the product of
    its tokens' probabilities."""

    def forward(
        self, emissions: torch.Tensor, lengths: torch.Tensor, domains: List[str], gold: torch.Tensor
    ) -> torch.Tensor:
        B, T, K = emissions.shape
        labelled = (gold >= 0).any(dim=1)
        n_docs = max(int(labelled.sum()), 1)
        _, _, valid, _, _, _ = self.moves(domains, K, emissions.device)
        logp = torch.log_softmax(emissions.masked_fill(~valid[:, None, :], NEG_INF), dim=-1)
        positions = torch.arange(T, device=emissions.device)
        mask = (positions[None, :] < lengths.to(emissions.device)[:, None]) & labelled[:, None]
        nll = -logp.gather(2, gold.clamp(min=0)[:, :, None])[:, :, 0]
        return nll.masked_fill(~mask, 0.0).sum() / n_docs

    def decode(self, emissions, lengths, domains, whitespace):
        B, T, K = emissions.shape
        device = emissions.device
        begin, inside, valid, ok_start, ok_end, ok_trans = self.moves(domains, K, device)
        logp = torch.log_softmax(emissions.masked_fill(~valid[:, None, :], NEG_INF), dim=-1)
        lengths = lengths.to(device)
        ok = allowed_tags(whitespace, lengths, begin, inside, valid)
        zeros = emissions.new_zeros((B, K))
        lattice = Lattice(
            logp.masked_fill(~ok, NEG_INF),
            lengths,
            zeros.masked_fill(~ok_start, NEG_INF),
            emissions.new_zeros((B, K, K)).masked_fill(~ok_trans, NEG_INF),
            zeros.masked_fill(~ok_end, NEG_INF),
            whitespace,
            inside,
        )
        return lattice.viterbi(), {"logp": logp}
