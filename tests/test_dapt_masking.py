"""Properties of the token- and span-level masking of DAPT (spec dapt.md section 2)."""
import pytest
import torch

from spacy_crossner.dapt.masking import (
    IGNORE_INDEX,
    MaskedLMCollator,
    PaddingCollator,
    mask_tokens,
    move_lone_masks,
)

MASK_ID = 103
VOCAB = 30522


def _selection(n, positions):
    return [i in positions for i in range(n)]


def _positions(selection):
    return {i for i, s in enumerate(selection) if s}


def _lone(positions):
    return {i for i in positions if i - 1 not in positions and i + 1 not in positions}


def test_spec_example():
    moved = move_lone_masks(_selection(16, {1, 4, 5, 7, 11, 13}))
    assert _positions(moved) == {3, 4, 5, 10, 11, 13}


@pytest.mark.parametrize(
    "before,after",
    [
        (set(), set()),
        ({5}, {5}),  # one lone mask stays: it is the final pending
        ({2, 3}, {2, 3}),
        ({1, 3}, {2, 3}),  # the lone mask moves right, next to the next selection
        ({1, 2, 3, 9}, {1, 2, 3, 9}),  # a run is never broken; a final lone mask stays
        ({1, 6, 7, 8}, {5, 6, 7, 8}),  # a lone mask glues to the left edge of a run
    ],
)
def test_move_lone_masks_cases(before, after):
    assert _positions(move_lone_masks(_selection(12, before))) == after


def test_move_lone_masks_properties_random():
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(2, 80, (1,), generator=gen))
        sel = (torch.rand(n, generator=gen) < 0.25).tolist()
        before = _positions(sel)
        after = _positions(move_lone_masks(sel))
        assert len(after) == len(before)
        # At most one lone mask, and only the rightmost selected position can be one.
        lone = _lone(after)
        assert len(lone) <= 1
        if lone:
            assert lone == {max(after)}
        # Runs of two or more are kept whole.
        for i in before:
            if i + 1 in before:
                assert i in after and i + 1 in after


def test_move_lone_masks_respects_protected():
    sel = _selection(10, {1, 6})
    protected = _selection(10, {5})
    assert _positions(move_lone_masks(sel, protected)) == {1, 6}


def _block_batch(rows=64, length=128):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 2000, (rows, length), generator=gen)
    ids[:, 0] = 101
    ids[:, -1] = 102
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    return ids, special


@pytest.mark.parametrize("scheme", ["span", "token"])
def test_rate_labels_and_specials(scheme):
    ids, special = _block_batch()
    inputs, labels = mask_tokens(
        ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB,
        probability=0.2, scheme=scheme, generator=torch.Generator().manual_seed(2),
    )
    masked = labels != IGNORE_INDEX
    rate = masked[:, 1:-1].float().mean().item()
    assert abs(rate - 0.2) < 0.02
    assert not masked[special].any()
    assert torch.equal(inputs[special], ids[special])
    # Labels hold the original id where masked, -100 elsewhere; unmasked inputs are untouched.
    assert torch.equal(labels[masked], ids[masked])
    assert (labels[~masked] == IGNORE_INDEX).all()
    assert torch.equal(inputs[~masked], ids[~masked])


def test_span_masks_are_adjacent_unless_final_lone():
    ids, special = _block_batch()
    _, labels = mask_tokens(
        ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB,
        probability=0.2, scheme="span", generator=torch.Generator().manual_seed(3),
    )
    for row in (labels != IGNORE_INDEX).tolist():
        positions = _positions(row)
        lone = _lone(positions)
        assert len(lone) <= 1 and (not lone or lone == {max(positions)})


def test_span_masking_lengthens_runs():
    ids, special = _block_batch()
    means = {}
    for scheme in ("token", "span"):
        _, labels = mask_tokens(
            ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB,
            probability=0.2, scheme=scheme, generator=torch.Generator().manual_seed(4),
        )
        runs = []
        for row in (labels != IGNORE_INDEX).tolist():
            length = 0
            for s in row + [False]:
                if s:
                    length += 1
                elif length:
                    runs.append(length)
                    length = 0
        means[scheme] = sum(runs) / len(runs)
    # Spec simulation at p=0.2: about 1.25 pieces per run (token) and 2.24 (span).
    assert 1.15 < means["token"] < 1.35
    assert 2.0 < means["span"] < 2.5


@pytest.mark.parametrize("scheme", ["span", "token"])
def test_80_10_10_over_many_draws(scheme):
    ids, special = _block_batch(rows=128, length=256)
    gen = torch.Generator().manual_seed(5)
    counts = {"mask": 0, "random": 0, "kept": 0}
    for _ in range(4):
        inputs, labels = mask_tokens(
            ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB,
            probability=0.2, scheme=scheme, generator=gen,
        )
        masked = labels != IGNORE_INDEX
        counts["mask"] += (inputs[masked] == MASK_ID).sum().item()
        counts["kept"] += (inputs[masked] == ids[masked]).sum().item()
        counts["random"] += ((inputs[masked] != MASK_ID) & (inputs[masked] != ids[masked])).sum().item()
    total = sum(counts.values())
    assert total > 20_000
    assert abs(counts["mask"] / total - 0.8) < 0.01
    # A random id can equal the original (p = 1/30522): negligible here.
    assert abs(counts["random"] / total - 0.1) < 0.01
    assert abs(counts["kept"] / total - 0.1) < 0.01


def test_seeded_masking_is_reproducible():
    ids, special = _block_batch(rows=4)
    a = mask_tokens(ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB,
                    generator=torch.Generator().manual_seed(7))
    b = mask_tokens(ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB,
                    generator=torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_bad_arguments():
    ids, special = _block_batch(rows=1)
    with pytest.raises(ValueError, match="scheme"):
        mask_tokens(ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB, scheme="word")
    with pytest.raises(ValueError, match="probability"):
        mask_tokens(ids, special_tokens_mask=special, mask_token_id=MASK_ID, vocab_size=VOCAB, probability=1.5)


class _TinyTokenizer:
    """The attributes of a Hugging Face tokenizer that the collator uses."""

    mask_token_id = MASK_ID
    pad_token_id = 0
    all_special_ids = [0, 100, 101, 102, 103]

    def __len__(self):
        return VOCAB


def test_collator_pads_and_never_masks_padding_or_specials():
    collator = MaskedLMCollator(_TinyTokenizer(), probability=0.5, scheme="span",
                                generator=torch.Generator().manual_seed(0))
    features = [{"input_ids": [101] + list(range(1000, 1040)) + [102]},
                {"input_ids": [101, 1000, 1001, 1002, 102]}]
    batch = collator(features)
    assert batch["input_ids"].shape == (2, 42)
    assert batch["attention_mask"][1].tolist() == [1] * 5 + [0] * 37
    assert (batch["input_ids"][1, 5:] == 0).all()
    assert (batch["labels"][1, 5:] == IGNORE_INDEX).all()
    assert (batch["labels"][:, 0] == IGNORE_INDEX).all()
    assert batch["labels"][0, 41] == IGNORE_INDEX and batch["labels"][1, 4] == IGNORE_INDEX
    assert (batch["labels"] != IGNORE_INDEX).any()


def test_padding_collator():
    batch = PaddingCollator(0)([{"input_ids": [101, 5, 102], "labels": [-100, 5, -100]},
                                {"input_ids": [101, 102], "labels": [-100, -100]}])
    assert batch["input_ids"].tolist() == [[101, 5, 102], [101, 102, 0]]
    assert batch["labels"].tolist() == [[-100, 5, -100], [-100, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
