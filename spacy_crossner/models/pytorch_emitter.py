"""The protocol every torch emitter follows (declared once; the emitters subclass it).

An emitter maps padded token features of docs from possibly different domains to scores over
each doc's own domain's tags, plus named auxiliary losses that are already weighted and part of
the backward pass. It is sized by the labels, which are only known at initialization (or, for a
loaded pipeline, from the component's saved ``build_config``).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

Losses = Dict[str, torch.Tensor]
DomainTags = Dict[str, Sequence[str]]


class Emitter(nn.Module):
    """Base class of the emitters of ``spacy_crossner`` architectures."""

    def setup(self, n_in: int, domain_tags: DomainTags, build_config: Dict[str, Any]) -> None:
        """Create or grow the modules for these input width, domains and tags.

        n_in (int): width of the token features.
        domain_tags (Dict[str, Sequence[str]]): the IOB2 tags of each domain (``O`` first; new
            tags are appended, so existing ids keep their meaning).
        build_config (Dict[str, Any]): JSON-able sizes saved with the pipeline; a setup may
            read and record more in it (e.g. an inventory that grows with the labels).
        """
        raise NotImplementedError

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
        **extra: Any,
    ) -> Tuple[torch.Tensor, Losses]:
        """Scores and weighted auxiliary losses of a batch.

        X: (B, T, nI) padded features; lengths: (B,) long on CPU, all >= 1; domains: B
        labelled domain names (after ``domain_aliases``); gold: (B, T) gold tag ids during
        training (-1 where unknown, a row of -1 for raw text), None at prediction; extra: the
        architecture's extra inputs (``build_crossner_model(extra_inputs=...)``).
        RETURNS: (B, T, K) scores, K = most tags of the batch's domains (columns past a
        domain's own tags are unused), and the auxiliary losses.
        """
        raise NotImplementedError
