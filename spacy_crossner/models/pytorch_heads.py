"""Torch modules shared by the architectures: per-domain output heads and per-domain CRFs.

Both grow in place when a domain or a label is added (pre-train then fine-tune), keeping the
weights of what was there before. Module keys are derived from domain names, which may hold
characters that torch forbids in module names.
"""
from typing import Dict, List, Sequence

import torch
from torch import nn
from torchcrf import CRF

from ..decoding import FORBIDDEN, allowed_moves


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


class DomainCRFs(nn.Module):
    """One constrained CRF per domain."""

    def __init__(self) -> None:
        super().__init__()
        self.crfs = nn.ModuleDict()

    def setup(self, domain_tags: Dict[str, Sequence[str]]) -> None:
        for domain, tags in domain_tags.items():
            key = module_key(domain)
            if key not in self.crfs or self.crfs[key].num_tags > len(tags):
                # New domain, or fewer tags than before (re-initialized): a fresh CRF.
                self.crfs[key] = ConstrainedCRF(tags)
            else:
                self.crfs[key].grow(tags)

    def get(self, domain: str) -> ConstrainedCRF:
        return self.crfs[module_key(domain)]

    def forward(self, *args, **kwargs):  # pragma: no cover - used through `get`
        raise NotImplementedError("Use DomainCRFs.get(domain) to reach a domain's CRF.")
