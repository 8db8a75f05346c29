"""Language-model output layer with sampled softmax, shared by the raw-text objectives.

Forward LM: the state at t predicts word t+1; backward LM: the state at t predicts word t-1; at
sentence edges the missing neighbour is UNK (id 0), as in the papers' code. Training uses a
sampled softmax over the target and ``n_samples`` distinct negatives drawn from a log-uniform
(Zipfian) law over the frequency-sorted vocabulary; evaluation uses the full softmax.
"""
import math
from typing import Optional, Tuple

import torch
from torch import nn


def log_uniform_sample(n_vocab: int, n_samples: int, generator: Optional[torch.Generator] = None,
                       device=None) -> Tuple[torch.Tensor, int]:
    """Draw ``n_samples`` distinct ids from P(k) = ln((k+2)/(k+1)) / ln(V+1).

    RETURNS: (ids (n_samples,) long, number of draws it took).
    """
    n_samples = min(n_samples, n_vocab)
    seen = []
    seen_set = set()
    tries = 0
    log_v1 = math.log(n_vocab + 1)
    while len(seen) < n_samples:
        batch = max(2 * (n_samples - len(seen)), 8)
        u = torch.rand(batch, generator=generator)
        ks = (torch.exp(u * log_v1).floor().long() - 1).clamp_(0, n_vocab - 1).tolist()
        for k in ks:
            tries += 1
            if k not in seen_set:
                seen_set.add(k)
                seen.append(k)
                if len(seen) == n_samples:
                    break
    return torch.tensor(seen, dtype=torch.long, device=device), tries


def expected_count(ids: torch.Tensor, n_vocab: int, tries: int) -> torch.Tensor:
    """E(k) = 1 - (1 - Q(k))^tries for the log-uniform law Q."""
    k = ids.to(torch.float64)
    q = torch.log((k + 2) / (k + 1)) / math.log(n_vocab + 1)
    return (1 - (1 - q) ** tries).to(torch.float32)


class SampledSoftmaxLM(nn.Module):
    """One output table shared by the forward and backward language models.

    n_vocab (int): vocabulary size (id 0 = UNK).
    width (int): width of the states that predict words.
    n_samples (int): negatives per call of the sampled softmax.
    logq_correction (bool): subtract ln E(k) from sampled logits (TF/AllenNLP sampled softmax,
        PGN's code) or not (the multi-cell LSTM's code).
    """

    def __init__(self, n_vocab: int, width: int, n_samples: int = 50, logq_correction: bool = True):
        super().__init__()
        if n_vocab < 2:
            raise ValueError(f"An LM needs a vocabulary of at least 2 entries, got {n_vocab}")
        self.n_vocab = n_vocab
        self.n_samples = n_samples
        self.logq_correction = logq_correction
        self.weight = nn.Parameter(torch.randn(n_vocab, width) / math.sqrt(width))
        self.bias = nn.Parameter(torch.zeros(n_vocab))

    @staticmethod
    def neighbour_targets(word_ids: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Targets of the forward and backward LMs for (B, T) ids (-1 = padding).

        RETURNS: (next (B, T), previous (B, T)) with UNK (0) at sentence edges and -1 at padding.
        """
        pad = word_ids < 0
        nxt = torch.zeros_like(word_ids)
        prv = torch.zeros_like(word_ids)
        nxt[:, :-1] = word_ids[:, 1:].clamp(min=0)
        prv[:, 1:] = word_ids[:, :-1].clamp(min=0)
        # the last real token of each sentence predicts UNK as its "next" word
        last = (lengths.to(word_ids.device) - 1).clamp(min=0)
        nxt[torch.arange(word_ids.shape[0], device=word_ids.device), last] = 0
        nxt[pad] = -1
        prv[pad] = -1
        return nxt, prv

    def loss(self, states: torch.Tensor, targets: torch.Tensor, sampled: bool = True) -> torch.Tensor:
        """Summed negative log-likelihood of ``targets`` (-1 = ignore) given ``states``.

        states: (N, width); targets: (N,).
        """
        keep = targets >= 0
        states = states[keep]
        targets = targets[keep]
        if targets.numel() == 0:
            return states.sum() * 0.0
        if not sampled or self.n_samples >= self.n_vocab - 1:
            logits = states @ self.weight.t() + self.bias
            return nn.functional.cross_entropy(logits, targets, reduction="sum")
        negatives, tries = log_uniform_sample(self.n_vocab, self.n_samples, device=states.device)
        true_logits = (states * self.weight[targets]).sum(-1) + self.bias[targets]  # (N,)
        neg_logits = states @ self.weight[negatives].t() + self.bias[negatives]  # (N, S)
        if self.logq_correction:
            true_logits = true_logits - torch.log(expected_count(targets, self.n_vocab, tries))
            neg_logits = neg_logits - torch.log(expected_count(negatives, self.n_vocab, tries))
        # a negative that is the target itself is not a negative
        neg_logits = neg_logits.masked_fill(negatives[None, :] == targets[:, None], -1e4)
        logits = torch.cat([true_logits[:, None], neg_logits], dim=1)
        return -torch.log_softmax(logits, dim=1)[:, 0].sum()
