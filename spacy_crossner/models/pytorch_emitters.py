"""Torch emitters of the baseline architectures (the protocol: :mod:`.pytorch_emitter`)."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .pytorch_emitter import Emitter, Losses
from .pytorch_heads import DomainHeads



def shared_bilstm(
    existing: Optional[nn.LSTM], n_in: int, hidden_size: int, depth: int, dropout: float, owner: str
) -> nn.LSTM:
    """The BiLSTM of an emitter: ``existing`` if it fits ``n_in``, else a new one.

    owner (str): the architecture's name, for the error when the input width changed.
    """
    if existing is None:
        return nn.LSTM(
            n_in,
            hidden_size,
            num_layers=depth,
            bidirectional=True,
            batch_first=True,
            dropout=dropout if depth > 1 else 0.0,
        )
    if existing.input_size != n_in:
        raise ValueError(
            f"The {owner} BiLSTM expects features of width {existing.input_size}, got {n_in}: "
            "the tok2vec of [components.crossner.model] changed width."
        )
    return existing


class LinearEmitter(Emitter):
    """Dropout and a linear map per domain (the BERT-tagger head)."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.heads = DomainHeads()

    def setup(self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Dict[str, Any]):
        self.heads.setup(n_in, domain_tags, build_config)

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Losses]:
        # X: (B, T, nI) -> (B, T, K_max)
        return self.heads(self.dropout(X), domains), {}


class BiLSTMEmitter(Emitter):
    """A BiLSTM shared by all domains, then a linear map per domain (the multi-task baseline).

    ``dropout`` applies to the BiLSTM's output (and between stacked layers); the input dropout
    is the token features' own."""

    def __init__(self, hidden_size: int, depth: int, dropout: float) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.depth = depth
        self.dropout_rate = dropout
        self.dropout = nn.Dropout(dropout)
        self.lstm: Optional[nn.LSTM] = None
        self.heads = DomainHeads()

    def setup(self, n_in: int, domain_tags: Dict[str, Sequence[str]], build_config: Dict[str, Any]):
        self.lstm = shared_bilstm(
            self.lstm, n_in, self.hidden_size, self.depth, self.dropout_rate, "BiLSTMCRF"
        )
        self.heads.setup(2 * self.hidden_size, domain_tags, build_config)

    def forward(
        self,
        X: torch.Tensor,
        lengths: torch.Tensor,
        domains: List[str],
        gold: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Losses]:
        # X: (B, T, nI); lengths: (B,) on CPU, all > 0. Input dropout is the features'
        # own (the tok2vec's dropout setting): dropping here too would compound the rates.
        packed = pack_padded_sequence(X, lengths, batch_first=True, enforce_sorted=False)
        # thinc's update assigns each weight a new tensor, which breaks cuDNN's single weight
        # buffer: re-pack it once here instead of a copy and a warning per call (no-op on CPU)
        self.lstm.flatten_parameters()
        hidden, _ = self.lstm(packed)
        # hidden: (B, T, 2 * hidden_size)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True, total_length=X.shape[1])
        return self.heads(self.dropout(hidden), domains), {}
