"""Word-piece pooling for transformer listeners that also takes tokens without a word piece.

A token whose characters the word-piece tokenizer drops entirely (U+2060 WORD JOINER, a zero-width
space, a lone soft hyphen: common in Wikipedia text) is aligned to no word piece. thinc's
``reduce_first.v1`` refuses such a token ("all sequence lengths must be > 0"), so a whole batch
fails on one of them. ``spacy_crossner.reduce_first.v1`` gives the vector of each token's first
word piece, as ``reduce_first.v1`` does, and zeros for a token without one (no gradient flows
from it). Its layer is named ``reduce_first`` as thinc's, and has no weights: a pipeline trained
with thinc's layer loads with this one named in its config instead.
"""
from typing import Callable, Tuple

from thinc.api import Model, Ragged
from thinc.types import Floats2d
from spacy.util import registry


@registry.layers("spacy_crossner.reduce_first.v1")
def reduce_first_or_zeros() -> Model[Ragged, Floats2d]:
    """The first word piece's vector of each token; zeros for a token without word pieces."""
    return Model("reduce_first", _forward)


def _forward(model: Model[Ragged, Floats2d], Xr: Ragged, is_train: bool) -> Tuple[Floats2d, Callable]:
    ops = model.ops
    X = Xr.dataXd
    lengths = ops.asarray1i(Xr.lengths)
    if X.shape[0] and bool((lengths > 0).all()):  # the usual case: thinc's own reduction
        Y, starts_ends = ops.reduce_first(X, lengths)

        def backprop_all(dY: Floats2d) -> Ragged:
            return Ragged(ops.backprop_reduce_first(dY, starts_ends), Xr.lengths)

        return Y, backprop_all
    xp = ops.xp
    starts = xp.cumsum(lengths) - lengths
    rows = xp.nonzero(lengths > 0)[0]
    Y = ops.alloc2f(lengths.shape[0], X.shape[1])
    Y[rows] = X[starts[rows]]

    def backprop(dY: Floats2d) -> Ragged:
        dX = ops.alloc2f(*X.shape)
        dX[starts[rows]] = dY[rows]
        return Ragged(dX, Xr.lengths)

    return Y, backprop
