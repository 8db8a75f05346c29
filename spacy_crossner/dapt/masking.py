"""Masked-LM data collators: BERT token-level masking and CrossNER span-level masking.

Both schemes work on word pieces, one block (row) at a time, and share the same three steps
(spec ``dapt.md`` section 2):

1. select each maskable position with probability ``p`` (special tokens and padding never);
2. labels: the original id at selected positions, -100 elsewhere;
3. each selected position becomes [MASK] with probability 0.8, else a uniformly random id in
   ``[0, vocab_size)`` with probability 0.5, else stays unchanged (net 80/10/10).

Span-level masking inserts one left-to-right pass between steps 1 and 2 (``move_lone_masks``)
that moves a lone selected position right, next to the following selected position, so that
masks come in spans of two or more pieces. The number of selected positions does not change.

Randomness comes from torch's global RNG unless a ``torch.Generator`` is given: the Hugging Face
Trainer seeds the global RNG (``--seed``) and restores its state when a run is resumed.
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

MASKING_SCHEMES = ("span", "token")
IGNORE_INDEX = -100
# Step 3 of mask_tokens: of the selected pieces, MASK_SHARE become [MASK]; of the rest,
# RANDOM_SHARE_OF_REST a random id, the others stay as they are (BERT's 80/10/10).
MASK_SHARE = 0.8
RANDOM_SHARE_OF_REST = 0.5


def move_lone_masks(
    selected: Sequence[bool], protected: Optional[Sequence[bool]] = None
) -> List[bool]:
    """The span-level pass of CrossNER's ``DataCollatorForSpanLanguageModeling`` on one row.

    Walk the selected positions left to right with a ``pending`` lone position:
    - no pending: if ``j - 1`` is selected (j continues a run) skip j, else j becomes pending;
    - pending is ``j - 1``: the two already touch, pending is cleared;
    - otherwise: unselect pending, select ``j - 1`` and clear pending.
    The count is unchanged; a mask only moves right; runs of two or more are never broken; at most
    one lone mask survives (the last selected position). Example: {1,4,5,7,11,13} becomes
    {3,4,5,10,11,13}.

    selected (Sequence[bool]): the positions chosen in step 1, for one row.
    protected (Optional[Sequence[bool]]): positions a mask must never move to (special tokens,
        padding). The spec's pass never reaches them while specials sit only at block ends, as in
        our blocks; for other inputs a move onto a protected position is not made (the pending
        position stays lone).
    RETURNS (List[bool]): the new selection, same length.
    """
    out = [bool(s) for s in selected]
    # The pass reads "is j-1 selected now", so it must see its own earlier moves: sequential.
    pending = None
    # Moves only touch positions left of j, so the initial list of selected j is the right walk.
    for j in [i for i, s in enumerate(out) if s]:
        if pending is None:
            if j > 0 and out[j - 1]:
                continue
            pending = j
        elif pending == j - 1:
            pending = None
        else:
            if protected is None or not protected[j - 1]:
                out[pending] = False
                out[j - 1] = True
            pending = None
    return out


def mask_tokens(
    input_ids: torch.Tensor,
    *,
    special_tokens_mask: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    probability: float = 0.2,
    scheme: str = "span",
    generator: Optional[torch.Generator] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mask a batch of word-piece ids for masked-LM training.

    input_ids (torch.Tensor): int64 ids, shape (batch, length). Not modified.
    special_tokens_mask (torch.Tensor): bool or 0/1, shape (batch, length); 1 for [CLS], [SEP],
        padding and any other position that may never be masked.
    mask_token_id (int): the id of [MASK].
    vocab_size (int): random replacements are drawn uniformly from ``[0, vocab_size)``
        (``len(tokenizer)``; special ids possible, as in BERT).
    probability (float): the selection probability p of step 1 (CrossNER hard-codes 0.2).
    scheme (str): "span" (CrossNER span-level) or "token" (BERT token-level).
    generator (Optional[torch.Generator]): source of randomness; torch's global RNG when None.
    RETURNS (Tuple[torch.Tensor, torch.Tensor]): the masked ids and the labels (original id at
        masked positions, -100 elsewhere), both shape (batch, length).
    """
    if scheme not in MASKING_SCHEMES:
        raise ValueError(f"Unknown masking scheme '{scheme}': use one of {MASKING_SCHEMES}")
    if not 0.0 < probability < 1.0:
        raise ValueError(f"The masking probability must be in (0, 1), got {probability}")
    inputs = input_ids.clone()
    protected = special_tokens_mask.bool()
    # Step 1 (batch, length): Bernoulli(p) selection, never on specials or padding.
    probs = torch.full(inputs.shape, probability)
    selected = torch.bernoulli(probs, generator=generator).bool() & ~protected
    if scheme == "span":
        rows = [
            move_lone_masks(row, prot)
            for row, prot in zip(selected.tolist(), protected.tolist())
        ]
        selected = torch.tensor(rows, dtype=torch.bool).reshape(inputs.shape)
    # Step 2: labels only where selected.
    labels = input_ids.clone()
    labels[~selected] = IGNORE_INDEX
    # Step 3: 80% [MASK], then half of the rest (10%) random ids, the last 10% unchanged.
    to_mask = torch.bernoulli(torch.full(inputs.shape, MASK_SHARE), generator=generator).bool()
    to_mask &= selected
    inputs[to_mask] = mask_token_id
    to_random = torch.bernoulli(torch.full(inputs.shape, RANDOM_SHARE_OF_REST), generator=generator).bool()
    to_random &= selected & ~to_mask
    random_ids = torch.randint(vocab_size, inputs.shape, dtype=inputs.dtype, generator=generator)
    inputs[to_random] = random_ids[to_random]
    return inputs, labels


def _pad(rows: List[List[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=torch.long)


@dataclass
class MaskedLMCollator:
    """Batches blocks of word-piece ids and masks them, token- or span-level.

    Usable as ``data_collator`` of a Hugging Face ``Trainer``. Each feature is a dict with
    ``input_ids`` (a block that already holds [CLS] ... [SEP]); rows of unequal length are padded
    on the right with the tokenizer's pad id and an ``attention_mask`` is added.

    tokenizer: a Hugging Face tokenizer with mask and pad tokens.
    probability (float): the selection probability p.
    scheme (str): "span" or "token".
    generator (Optional[torch.Generator]): randomness; torch's global RNG (seeded by the
        Trainer) when None.
    """

    tokenizer: Any
    probability: float = 0.2
    scheme: str = "span"
    generator: Optional[torch.Generator] = None

    def __post_init__(self) -> None:
        if self.tokenizer.mask_token_id is None:
            raise ValueError("The tokenizer has no mask token: masked-LM training needs one")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no padding token")
        if self.scheme not in MASKING_SCHEMES:
            raise ValueError(f"Unknown masking scheme '{self.scheme}': use one of {MASKING_SCHEMES}")
        self._special_ids = torch.tensor(sorted(set(self.tokenizer.all_special_ids)))

    def __call__(self, features: List[Dict[str, Union[List[int], torch.Tensor]]]) -> Dict[str, torch.Tensor]:
        rows = [list(map(int, f["input_ids"])) for f in features]
        input_ids = _pad(rows, self.tokenizer.pad_token_id)
        attention_mask = _pad([[1] * len(r) for r in rows], 0)
        special = torch.isin(input_ids, self._special_ids) | (attention_mask == 0)
        inputs, labels = mask_tokens(
            input_ids,
            special_tokens_mask=special,
            mask_token_id=self.tokenizer.mask_token_id,
            vocab_size=len(self.tokenizer),
            probability=self.probability,
            scheme=self.scheme,
            generator=self.generator,
        )
        return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels}


@dataclass
class PaddingCollator:
    """Batches features that are masked already (``input_ids`` and ``labels``), padding them.

    Used for the held-out slice, masked once so that the loss before and after DAPT is measured
    on identical inputs.
    """

    pad_token_id: int

    def __call__(self, features: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
        rows = [list(map(int, f["input_ids"])) for f in features]
        return {
            "input_ids": _pad(rows, self.pad_token_id),
            "attention_mask": _pad([[1] * len(r) for r in rows], 0),
            "labels": _pad([list(map(int, f["labels"])) for f in features], IGNORE_INDEX),
        }
