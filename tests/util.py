"""Helpers shared by the tests: tiny two-domain data and training loops."""
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import List, Sequence, Tuple

import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training import Example
from thinc.api import Adam

from spacy_crossner import set_domain

Sentence = Tuple[str, List[str], List[Tuple[int, int, str]]]

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str, siblings: bool = False) -> ModuleType:
    """A script of the repository that is not part of the package (``benchmarks/speed.py``),
    imported from its path (``path`` is relative to the repository root) as a fresh module each
    call, not entered in ``sys.modules``. ``siblings=True`` lets it import the scripts beside it
    (its folder is on ``sys.path`` while it loads, and only then)."""
    file = ROOT / path
    if not file.is_file():
        raise FileNotFoundError(f"load_script: no script at {file}")
    spec = importlib.util.spec_from_file_location(f"{file.stem}_under_test", file)
    module = importlib.util.module_from_spec(spec)
    if siblings:
        sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        if siblings:
            sys.path.remove(str(file.parent))
    return module

# Word + char-CNN features small enough to overfit a handful of sentences in seconds.
TINY_FEATURES = {
    "@architectures": "spacy_crossner.WordCharEmbed.v1",
    "word_width": 32,
    "word_rows": 1000,
    "char_width": 8,
    "char_filters": 16,
    "dropout": 0.0,
}

NEWS: List[Sentence] = [
    ("news", "John Smith lives in London .".split(), [(0, 2, "person"), (4, 5, "location")]),
    ("news", "Acme Corp hired Mary Jones .".split(), [(0, 2, "organisation"), (3, 5, "person")]),
    ("news", "Paris is in France .".split(), [(0, 1, "location"), (3, 4, "location")]),
]
AI: List[Sentence] = [
    ("ai", "LSTM networks were proposed by Hochreiter .".split(), [(0, 1, "algorithm"), (5, 6, "researcher")]),
    ("ai", "We report accuracy on ImageNet .".split(), [(2, 3, "metrics"), (4, 5, "misc")]),
    ("ai", "Google released TensorFlow .".split(), [(0, 1, "organisation"), (2, 3, "product")]),
]


def make_doc(nlp: Language, words: Sequence[str], ents=(), domain=None) -> Doc:
    doc = Doc(nlp.vocab, words=list(words), spaces=[True] * (len(words) - 1) + [False])
    doc.ents = [Span(doc, s, e, label=l) for s, e, l in ents]
    if domain is not None:
        set_domain(doc, domain)
    return doc


def make_examples(nlp: Language, sentences: Sequence[Sentence]) -> List[Example]:
    examples = []
    for domain, words, ents in sentences:
        reference = make_doc(nlp, words, ents, domain)
        predicted = Doc(nlp.vocab, words=list(words))
        set_domain(predicted, domain)
        examples.append(Example(predicted, reference))
    return examples


def train(
    nlp: Language, examples: List[Example], n_iter: int, seed: int = 0, drop: float = 0.0, lr: float = 0.01
):
    random.seed(seed)
    nlp.initialize(lambda: examples)
    # A handful of sentences learn in seconds with a larger step than spaCy's default.
    optimizer = Adam(lr)
    return train_more(nlp, examples, n_iter, optimizer, drop=drop)


def train_more(nlp, examples, n_iter, optimizer, drop=0.0):
    losses = {}
    for _ in range(n_iter):
        random.shuffle(examples)
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses, drop=drop)
    return losses


def predicted_ents(nlp: Language, sentences: Sequence[Sentence]):
    """Entities predicted for each sentence, with the doc's domain set."""
    out = []
    for domain, words, _ in sentences:
        doc = Doc(nlp.vocab, words=list(words))
        set_domain(doc, domain)
        out.append([(e.start, e.end, e.label_) for e in nlp(doc).ents])
    return out


def gold_ents(sentences: Sequence[Sentence]):
    return [sorted(ents) for _, _, ents in sentences]


def blank_with(config: dict, name: str = "crossner") -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", name=name, config=config)
    return nlp


def write_corpus(root) -> dict:
    """NEWS and AI as .spacy files under root: {"source_train", "source_dev", "target_train",
    "target_dev"} -> path (train = dev: the tests train a few steps)."""
    from pathlib import Path

    from spacy.tokens import DocBin

    nlp = spacy.blank("en")
    paths = {}
    for name, sentences in (("source", NEWS), ("target", AI)):
        db = DocBin(store_user_data=True)
        for domain, words, ents in sentences:
            db.add(make_doc(nlp, words, ents, domain))
        path = Path(root) / f"{name}.spacy"
        db.to_disk(path)
        paths[f"{name}_train"] = paths[f"{name}_dev"] = str(path)
    return paths


# spacy train overrides that make configs/bilstm_*.cfg tiny and quick to learn (a teacher in a
# few dozen steps): the self-training tests' teachers and students
TINY_BILSTM_TRAINING = {
    "components.crossner.model.hidden_size": 16,
    "components.crossner.model.dropout": 0.0,
    "components.crossner.model.tok2vec.word_width": 16,
    "components.crossner.model.tok2vec.word_rows": 100,
    "components.crossner.model.tok2vec.char_width": 4,
    "components.crossner.model.tok2vec.char_filters": 4,
    "components.crossner.model.tok2vec.dropout": 0.0,
    "training.optimizer.learn_rate": 0.02,
    "training.batcher.size": 8,
    "vars.target_upsample": 1,
}

TINY_TOK2VEC_WIDTH = 32


def make_tok2vec_pipeline(path, width: int = TINY_TOK2VEC_WIDTH):
    """A blank English pipeline with a small initialized spaCy tok2vec (MultiHashEmbed +
    MaxoutWindowEncoder, like en_core_web_sm's but tiny), saved to path: the stand-in for a
    pretrained pipeline that configs/*_sm.cfg source through vars.tok2vec_pipeline."""
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec", config={"model": {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {"@architectures": "spacy.MultiHashEmbed.v2", "width": width,
                  "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"], "rows": [500, 100, 100, 50],
                  "include_static_vectors": False},
        "encode": {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": width, "depth": 1,
                   "window_size": 1, "maxout_pieces": 2},
    }})
    nlp.initialize()
    nlp.to_disk(path)
    return path


# The bundled MiniLM as a shared transformer, as `spacy init config -p ner --gpu` sets it up.
MINILM_TRANSFORMER = {
    "model": {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": {"@misc": "spacy_crossner.transformer_name.v1", "name": None},
        "tokenizer_config": {"use_fast": True},
        "get_spans": {"@span_getters": "spacy-transformers.strided_spans.v1", "window": 128, "stride": 96},
    }
}
MINILM_LISTENER = {
    "@architectures": "spacy-transformers.TransformerListener.v1",
    "grad_factor": 1.0,
    "pooling": {"@layers": "spacy_crossner.reduce_first.v1"},
    "upstream": "*",
}


def minilm_pipeline(model: dict, target_domain: str = "ai") -> Language:
    """A blank English pipeline: the bundled MiniLM transformer, then a crossner whose model is
    ``model`` (an architecture's settings, without tok2vec) listening to it."""
    nlp = spacy.blank("en")
    nlp.add_pipe("transformer", config=MINILM_TRANSFORMER)
    nlp.add_pipe("crossner", config={"target_domain": target_domain,
                                     "model": {**model, "tok2vec": MINILM_LISTENER}})
    return nlp


def ruler_pipeline_and_data(folder, patterns: list, sentences: Sequence[Tuple[List[str], list]],
                            domain: str):
    """An entity-ruler pipeline saved in ``folder/model`` and gold docs of ``domain`` in
    ``folder/test.spacy`` (sentences: (words, [(start, end, label)])); returns the two paths."""
    from spacy.tokens import DocBin

    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(patterns)
    nlp.to_disk(folder / "model")
    db = DocBin(store_user_data=True)
    for words, ents in sentences:
        doc = Doc(nlp.vocab, words=words)
        doc.ents = [Span(doc, s, e, label=label) for s, e, label in ents]
        set_domain(doc, domain)
        db.add(doc)
    db.to_disk(folder / "test.spacy")
    return folder / "model", folder / "test.spacy"
