"""Prediction batches of docs of similar length (issue 50: padding waste in ``nlp.pipe``).

A batch is padded to its longest doc: in a batch of sentences of 5 to 100 tokens most of the
padded positions are padding. :func:`length_batches` splits a batch into sub-batches of docs of
similar length, each at most ``max_items`` padded tokens, the way spacy-transformers'
``Transformer.pipe`` does for the transformer (``util.batch_by_length``, its
``max_batch_items``); the crossner component predicts each sub-batch and yields the docs in the
order they came (``CrossNER.pipe``).
"""
from typing import List, Optional, Sequence


def length_batches(lengths: Sequence[int], max_items: Optional[int]) -> List[List[int]]:
    """Split a batch into sub-batches of similar length.

    lengths (Sequence[int]): the length of each item of the batch (e.g. tokens per doc).
    max_items (Optional[int]): the most padded positions of a sub-batch (its number of items
        times its longest item's length); a longer item than that is a sub-batch of its own.
        None or 0: no split, the whole batch in its order.
    RETURNS (List[List[int]]): indices into ``lengths``; every index once; the items of each
        sub-batch in ascending length (ties in their order in the batch), the sub-batches from
        the shortest items to the longest.
    """
    if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int)
                                  or max_items < 0):
        raise ValueError(f"max_items must be a whole number >= 0 (0 or None: no split), got {max_items!r}")
    if not max_items:
        return [list(range(len(lengths)))] if len(lengths) else []
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])  # stable: ties keep their order
    batches: List[List[int]] = []
    batch: List[int] = []
    for i in order:
        # lengths ascend, so item i is the longest of its sub-batch so far
        if batch and (len(batch) + 1) * max(lengths[i], 1) > max_items:
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches
