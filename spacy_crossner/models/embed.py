"""``spacy_crossner.WordCharEmbed.v1``: context-free word + character-CNN token features.

The input layer of the cross-domain NER papers: a word embedding (hashed on a lexical attribute,
optionally with static vectors such as GloVe from ``nlp.vocab.vectors``) concatenated with a
character CNN max-pooled over each token. No feature depends on a neighbouring token, which the
language-model objectives of later architectures rely on (a contextual input would let the
model see the word it must predict).
"""
from typing import List, Optional

import numpy
from spacy.ml.featureextractor import FeatureExtractor
from spacy.ml.staticvectors import StaticVectors
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import (
    Dropout,
    HashEmbed,
    Linear,
    Model,
    Ragged,
    chain,
    concatenate,
    expand_window,
    reduce_max,
    with_array,
)
from thinc.types import Floats2d


@registry.architectures("spacy_crossner.WordCharEmbed.v1")
def build_word_char_embed(
    word_width: int = 100,
    word_rows: int = 20000,
    attr: str = "NORM",
    char_width: int = 30,
    char_filters: int = 50,
    char_window: int = 1,
    char_rows: int = 2000,
    max_chars: int = 25,
    include_static_vectors: bool = False,
    static_vectors_width: Optional[int] = None,
    dropout: float = 0.5,
) -> Model[List[Doc], List[Floats2d]]:
    """Context-free token features: word embedding (+ static vectors) and a character CNN.

    word_width (int): width of the hashed word embedding.
    word_rows (int): rows of the word hash table.
    attr (str): the token attribute embedded as the word (e.g. "NORM", "LOWER", "ORTH").
    char_width (int): width of a character embedding.
    char_filters (int): number of CNN filters = width of the character feature.
    char_window (int): characters on each side in a filter (1 = width-3 filters).
    char_rows (int): rows of the character hash table.
    max_chars (int): characters of a token looked at (longer tokens are cut).
    include_static_vectors (bool): also use ``nlp.vocab.vectors`` (e.g. GloVe).
    static_vectors_width (Optional[int]): projection width of the static vectors (default:
        word_width).
    dropout (float): dropout on the concatenated features.
    RETURNS (Model[List[Doc], List[Floats2d]]): width word_width + char_filters
        (+ static_vectors_width).
    """
    if char_window < 0 or max_chars < 1:
        raise ValueError(
            "spacy_crossner.WordCharEmbed.v1: char_window must be >= 0 and max_chars >= 1 "
            f"(got char_window={char_window}, max_chars={max_chars})"
        )
    word = chain(
        FeatureExtractor([attr]),
        with_array(HashEmbed(nO=word_width, nV=word_rows, column=0, seed=7)),
    )
    parts = [word, build_char_cnn(char_width, char_filters, char_window, char_rows, max_chars)]
    width = word_width + char_filters
    if include_static_vectors:
        vectors_width = static_vectors_width or word_width
        parts.append(StaticVectors(nO=vectors_width, key_attr="ORTH"))
        width += vectors_width
    model = chain(concatenate(*parts), with_array(Dropout(dropout)))
    model.set_dim("nO", width)
    model.name = "word_char_embed"
    return model


def build_char_cnn(
    char_width: int, n_filters: int, window: int, rows: int, max_chars: int
) -> Model[List[Doc], List[Floats2d]]:
    """A character CNN: embed characters, convolve (window), max-pool per token."""
    cnn = chain(
        with_array(HashEmbed(nO=char_width, nV=rows, seed=11)),
        expand_window(window_size=window),
        with_array(Linear(nO=n_filters, nI=char_width * (2 * window + 1))),
        reduce_max(),
    )
    return Model(
        "char_cnn",
        _char_cnn_forward,
        init=_char_cnn_init,
        layers=[cnn],
        attrs={"max_chars": max_chars},
        dims={"nO": n_filters},
    )


def _char_cnn_init(model: Model, X=None, Y=None) -> None:
    # Every size is given, so the inner layers need no sample.
    model.layers[0].initialize()


def _char_cnn_forward(model: Model, docs: List[Doc], is_train: bool):
    cnn = model.layers[0]
    max_chars = model.attrs["max_chars"]
    doc_lengths = [len(doc) for doc in docs]
    words = [token.text[:max_chars] for doc in docs for token in doc]
    if not words:
        empty = [model.ops.alloc2f(0, model.get_dim("nO")) for _ in docs]
        return empty, lambda dY: []
    codes = numpy.fromiter((ord(c) for w in words for c in w), dtype="uint64")
    char_lengths = numpy.array([len(w) for w in words], dtype="int32")
    chars = Ragged(model.ops.asarray(codes, dtype="uint64"), model.ops.asarray1i(char_lengths))
    pooled, backprop_cnn = cnn(chars, is_train)
    # pooled: (n_tokens, n_filters), split back into docs
    splits = numpy.cumsum(doc_lengths)[:-1].tolist()
    per_doc = model.ops.xp.split(pooled, splits)

    def backprop(d_per_doc: List[Floats2d]) -> List[Doc]:
        backprop_cnn(model.ops.xp.concatenate(d_per_doc, axis=0))
        return []

    return list(per_doc), backprop
