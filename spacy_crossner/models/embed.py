"""``spacy_crossner.WordCharEmbed.v1``: context-free word + character-CNN token features.

The input layer of the cross-domain NER papers: a word embedding (hashed on a lexical attribute,
optionally with static vectors such as GloVe from ``nlp.vocab.vectors``) concatenated with a
character CNN max-pooled over each token. No feature depends on a neighbouring token, which the
language-model objectives of later architectures rely on (a contextual input would let the
model see the word it must predict): :func:`require_context_free` is the check those
architectures call when they are built.

Static vectors are looked up by ``StaticVectors``, which in spaCy 3.8 keys them by the table's
own attribute (``Vectors.attr``, ORTH for every table but floret's): an uncased table such as
GloVe 6B reads capitalised words only if the table maps their forms to the lowercase rows, which
``python -m spacy_crossner vectors`` does (see :mod:`spacy_crossner.vectors`).
"""
from typing import Dict, List, Optional

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
    list2ragged,
    ragged2list,
    reduce_max,
    with_array,
)
from thinc.layers.chain import init as chain_init
from thinc.types import Floats2d

NAME = "spacy_crossner.WordCharEmbed.v1"


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
    include_static_vectors (bool): also use ``nlp.vocab.vectors`` (e.g. GloVe, loaded with
        ``[initialize] vectors``; ``python -m spacy_crossner vectors`` makes the directory).
    static_vectors_width (Optional[int]): projection width of the static vectors (default:
        word_width).
    dropout (float): dropout on the concatenated features.
    RETURNS (Model[List[Doc], List[Floats2d]]): width word_width + char_filters
        (+ static_vectors_width).
    """
    if char_window < 0 or max_chars < 1:
        raise ValueError(
            f"{NAME}: char_window must be >= 0 and max_chars >= 1 "
            f"(got char_window={char_window}, max_chars={max_chars})"
        )
    if static_vectors_width is not None and static_vectors_width < 1:
        raise ValueError(
            f"{NAME}: static_vectors_width must be positive or null (= word_width), got "
            f"{static_vectors_width}"
        )
    word = chain(
        FeatureExtractor([attr]),
        with_array(HashEmbed(nO=word_width, nV=word_rows, column=0, seed=7)),
    )
    char = build_char_cnn(char_width, char_filters, char_window, char_rows, max_chars)
    width = word_width + char_filters
    if include_static_vectors:
        # StaticVectors returns a Ragged, the other features lists of arrays: convert them to
        # Ragged before concatenating and back afterwards, as spaCy's MultiHashEmbed does.
        vectors_width = static_vectors_width or word_width
        static = StaticVectors(nO=vectors_width)
        model = chain(
            concatenate(chain(word, list2ragged()), chain(char, list2ragged()), static),
            with_array(Dropout(dropout)),
            ragged2list(),
        )
        model.init = init_with_static_vectors
        model.set_ref("static_vectors", static)
        width += vectors_width
    else:
        # The layout without static vectors is unchanged since v1 was published, so pipelines
        # saved with it keep loading (a different layer tree would not deserialize).
        model = chain(concatenate(word, char), with_array(Dropout(dropout)))
    model.set_ref("word", word)
    model.set_ref("char_cnn", char)
    model.set_dim("nO", width)
    model.name = "word_char_embed"
    # Read by require_context_free: no feature of a token depends on its neighbours.
    model.attrs["context_free"] = True
    return model


def init_with_static_vectors(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    """Initialize the features, first checking that the docs' vocab has static vectors.

    model (Model): the WordCharEmbed model built with include_static_vectors = true.
    X (Optional[List[Doc]]): sample docs; their vocab holds the vectors table.
    """
    if X:
        vectors = X[0].vocab.vectors
        if vectors.shape[0] == 0 or vectors.shape[1] == 0:
            raise ValueError(
                f"{NAME}: include_static_vectors = true, but the pipeline has no word vectors. "
                "Load a table with [initialize] vectors (e.g. `--paths.vectors DIR` for a "
                "directory written by `python -m spacy_crossner vectors`), or set "
                "include_static_vectors = false."
            )
    chain_init(model, X=X, Y=Y)


@registry.architectures("spacy_crossner.WithShape.v1")
def build_with_shape(
    tok2vec: Model[List[Doc], List[Floats2d]],
    width: int = 32,
    rows: int = 1000,
) -> Model[List[Doc], List[Floats2d]]:
    """Token features plus an embedding of each token's shape (``Token.shape_``: "Xxxxx", "XX",
    "dd", "x.x."), concatenated. An uncased transformer (the bundled MiniLM lowercases its input)
    cannot tell "Apple" from "apple" or "US" from "us": the shape gives the tagger back the case
    and the digits, context-free and per token, beside whatever ``tok2vec`` computes.

    tok2vec (Model[List[Doc], List[Floats2d]]): the token features, e.g. a transformer listener.
    width (int): width of the shape embedding.
    rows (int): rows of the shape hash table (spaCy's shapes cut runs of a character class at 4:
        a few hundred distinct shapes cover a corpus).
    RETURNS (Model[List[Doc], List[Floats2d]]): width tok2vec's + ``width``.
    """
    if width < 1 or rows < 1:
        raise ValueError(
            f"spacy_crossner.WithShape.v1: width and rows must be >= 1 (got width={width}, "
            f"rows={rows})"
        )
    shape = chain(
        FeatureExtractor(["SHAPE"]),
        with_array(HashEmbed(nO=width, nV=rows, column=0, seed=11)),
    )
    shape.attrs["context_free"] = True
    # not thinc's concatenate: a transformer listener gives an empty doc a (0, 0) array, which
    # concatenate cannot stack beside the (0, width) of the shape
    model = Model(
        "with_shape",
        _with_shape_forward,
        init=_with_shape_init,
        layers=[tok2vec, shape],
        refs={"tok2vec": tok2vec, "shape": shape},
        dims={"nO": None},
        attrs={"shape_width": width},
    )
    _set_with_shape_width(model)
    return model


def _set_with_shape_width(model: Model) -> None:
    tok2vec = model.get_ref("tok2vec")
    if tok2vec.has_dim("nO") and tok2vec.get_dim("nO"):
        model.set_dim("nO", tok2vec.get_dim("nO") + model.attrs["shape_width"], force=True)


def _with_shape_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    for layer in model.layers:
        layer.initialize(X=X)
    _set_with_shape_width(model)


def _with_shape_forward(model: Model, docs: List[Doc], is_train: bool):
    tok2vec, shape = model.get_ref("tok2vec"), model.get_ref("shape")
    ops = model.ops
    features, bp_features = tok2vec(docs, is_train)
    shapes, bp_shapes = shape(docs, is_train)
    widths = {int(f.shape[1]) for f in features if f.shape[0]}
    if len(widths) > 1:
        raise ValueError(f"spacy_crossner.WithShape.v1: the token features have several widths {sorted(widths)}")
    if widths:
        n_in = widths.pop()
    elif tok2vec.has_dim("nO") and tok2vec.get_dim("nO"):
        n_in = tok2vec.get_dim("nO")
    else:
        n_in = 0
    # an empty doc's features may be (0, 0): stack a (0, n_in) in their place
    output = [
        ops.xp.hstack((f if f.shape[0] else ops.alloc2f(0, n_in), s)) for f, s in zip(features, shapes)
    ]

    def backprop(d_output: List[Floats2d]) -> List[Doc]:
        # the token features' gradient in the shape they were given (an empty doc's as it came)
        bp_features([
            ops.xp.ascontiguousarray(d[:, :n_in]) if f.shape[0] else ops.alloc2f(*f.shape)
            for d, f in zip(d_output, features)
        ])
        bp_shapes([ops.xp.ascontiguousarray(d[:, n_in:]) for d in d_output])
        return docs

    return output, backprop


# Names of layers whose output for a token depends on other tokens of the doc.
CONTEXTUAL_LAYERS = {
    "tok2vec-listener": "is a listener of a tok2vec component (spacy.Tok2VecListener.v1)",
    "transformer-listener": "is a listener of a transformer (spacy-transformers)",
    "transformer": "contains a transformer",
    "expand_window": "mixes neighbouring tokens (expand_window, e.g. spaCy's "
    "MaxoutWindowEncoder)",
    "lstm": "contains an LSTM",
    "pytorch": "contains a PyTorch layer (e.g. spaCy's TorchBiLSTMEncoder)",
}


def contextual_reason(tok2vec: Model) -> Optional[str]:
    """Why a token-features model may be contextual, or None when it is context-free.

    tok2vec (Model): the features model. Sub-models marked ``attrs["context_free"]`` (as
        WordCharEmbed is, whose window runs over characters) are context-free; elsewhere a
        listener, a transformer, a window over tokens or a recurrent/torch layer counts as
        contextual.
    RETURNS (Optional[str]): a phrase naming what was found, or None.
    """
    stack = [tok2vec]
    while stack:
        node = stack.pop()
        if node.attrs.get("context_free"):
            continue
        if node.name in CONTEXTUAL_LAYERS:
            return CONTEXTUAL_LAYERS[node.name]
        stack.extend(node.layers)
    return None


def require_context_free(
    tok2vec: Model, *, architecture: str, lm_weights: Dict[str, float]
) -> None:
    """Refuse contextual token features where a language-model objective is trained.

    A language model predicts each word from the features of the words before (after) it; with
    a contextual input (a tok2vec listener, a transformer, a window encoder) the features of
    those words already encode the word to predict, so the objective teaches nothing.

    tok2vec (Model): the architecture's token features.
    architecture (str): the registered name, for the message.
    lm_weights (Dict[str, float]): the config settings that switch the language models on
        (setting name -> weight); the check runs if any weight is above 0.
    """
    if not any(weight > 0 for weight in lm_weights.values()):
        return
    reason = contextual_reason(tok2vec)
    if reason is None:
        return
    settings = ", ".join(f"{name} = {weight:g}" for name, weight in lm_weights.items())
    names = " and ".join(lm_weights)
    raise ValueError(
        f"{architecture}: {settings} trains language models, which need context-free token "
        f"features, but the model's tok2vec ({tok2vec.name}) {reason}: its vector of a word "
        "depends on the neighbouring words, so the language model would see the word it must "
        f"predict. Use {NAME} as [components.<name>.model.tok2vec] (with "
        f"include_static_vectors = true for pretrained vectors), or set {names} to 0."
    )


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
