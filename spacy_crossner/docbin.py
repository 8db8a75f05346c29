"""Reading DocBins with user data (where ``doc._.domain`` lives) at full speed.

srsly's msgpack (de)serializers collect their registered hooks on every call, scanning
catalogue's whole registry (thousands of entries once spaCy and its plugins are loaded) and
other packages' entry points: several milliseconds per doc of a DocBin with user data, a minute
for CoNLL-2003. Inside :func:`msgpack_hooks_collected_once` the hooks are collected once for the
whole read; behaviour is otherwise the same.
"""
import contextlib
from pathlib import Path
from typing import Iterator, List, Union

import srsly
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab


@contextlib.contextmanager
def msgpack_hooks_collected_once() -> Iterator[None]:
    registries = (srsly.msgpack_encoders, srsly.msgpack_decoders)
    for registry in registries:
        hooks = registry.get_all()
        # An instance attribute shadows the method for the duration of the block.
        registry.get_all = lambda hooks=hooks: dict(hooks)
    try:
        yield
    finally:
        for registry in registries:
            del registry.get_all


def read_docbin(path: Union[str, Path], vocab: Vocab) -> Iterator[Doc]:
    """The docs of one ``.spacy`` file, with their user data (e.g. ``doc._.domain``)."""
    docbin = DocBin().from_disk(path)
    with msgpack_hooks_collected_once():
        docs = list(docbin.get_docs(vocab))
    yield from docs


def spacy_files(path: Union[str, Path]) -> List[Path]:
    """The ``.spacy`` files of a path: the file itself, or those under a folder, sorted."""
    path = Path(path)
    return sorted(path.glob("**/*.spacy")) if path.is_dir() else [path]
