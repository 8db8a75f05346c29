"""An int8 copy of a trained transformer pipeline, for CPU inference (issue 50).

``quantize(model=..., output=...)`` switches every spacy-transformers ``TransformerModel`` of the
pipeline's config to ``spacy_crossner.Int8TransformerModel.v1``, loads the pipeline that way (the
encoders' linear layers become int8 as the weights load) and saves it. The copy loads with
``spacy.load`` and packages with ``spacy package`` like any pipeline; the original is not
touched. Loading the fp32 pipeline with the architecture name overridden gives the same model
without a copy::

    spacy.load(path, config={"components.transformer.model.@architectures":
                             "spacy_crossner.Int8TransformerModel.v1"})
"""
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Union

INT8_ARCH = "spacy_crossner.Int8TransformerModel.v1"
TRANSFORMER_ARCHS = (
    "spacy-transformers.TransformerModel.v1",
    "spacy-transformers.TransformerModel.v2",
    "spacy-transformers.TransformerModel.v3",
)


class QuantizeError(ValueError):
    """A pipeline that cannot be quantized, with what to do about it."""


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def transformer_components(config: Dict[str, Any]) -> Dict[str, str]:
    """The components of a pipeline config whose model is a spacy-transformers TransformerModel
    or already ``spacy_crossner.Int8TransformerModel.v1``.

    config (Dict[str, Any]): a pipeline config (``spacy.util.load_config``).
    RETURNS (Dict[str, str]): {component name: its model's registered architecture}.
    """
    found = {}
    for name, block in config.get("components", {}).items():
        model = block.get("model") if isinstance(block, dict) else None
        arch = model.get("@architectures") if isinstance(model, dict) else None
        if arch in TRANSFORMER_ARCHS or arch == INT8_ARCH:
            found[name] = arch
    return found


def quantize(
    *, model: Union[str, Path], output: Union[str, Path], per_channel: bool = True
) -> Dict[str, Any]:
    """Write an int8 copy of the transformer pipeline ``model`` to ``output``.

    model (Union[str, Path]): a trained pipeline directory (e.g. training/model-best) with at
        least one spacy-transformers ``transformer`` component.
    output (Union[str, Path]): a new directory for the copy; it must not exist.
    per_channel (bool): one int8 scale per output channel of each weight (True, more accurate)
        or one per matrix (False).
    RETURNS (Dict[str, Any]): what was done: the quantized components with their number of
        int8 linear layers, and the sizes of both pipelines on disk (MB).
    """
    import spacy
    from spacy.util import load_config
    from thinc.api import get_torch_default_device

    from .models.pytorch_int8 import count_int8_linears

    model, output = Path(model), Path(output)
    if not (model / "config.cfg").is_file():
        what = "does not exist" if not model.exists() else "has no config.cfg"
        raise QuantizeError(
            f"{model} is not a spaCy pipeline directory: it {what}. Give a trained pipeline, "
            "such as training/model-best."
        )
    if output.exists():
        raise QuantizeError(f"{output} already exists: give a new directory (nothing is overwritten).")
    if get_torch_default_device().type != "cpu":
        raise QuantizeError("int8 quantization runs on CPU only; run quantize without a GPU selected.")
    config = load_config(model / "config.cfg", interpolate=False)
    found = transformer_components(config)
    todo = [name for name, arch in found.items() if arch != INT8_ARCH]
    if not todo:
        if found:
            raise QuantizeError(
                f"{model} is already quantized: its component(s) {', '.join(found)} use {INT8_ARCH}."
            )
        raise QuantizeError(
            f"{model} has no transformer to quantize: none of its components "
            f"({', '.join(config.get('components', {})) or 'none'}) has a model "
            f"@architectures = {' / '.join(TRANSFORMER_ARCHS)} in {model / 'config.cfg'}."
        )
    for name in todo:
        config["components"][name]["model"]["@architectures"] = INT8_ARCH
        config["components"][name]["model"]["per_channel"] = per_channel
    with tempfile.TemporaryDirectory(prefix="crossner_quantize_") as tmp:
        # the pipeline with the new config and links to the original files: loading it builds
        # the int8 encoders, and nothing of the original is copied or changed
        staged = Path(tmp) / "pipeline"
        shutil.copytree(model.resolve(), staged, copy_function=os.symlink)
        (staged / "config.cfg").unlink()
        config.to_disk(staged / "config.cfg")
        try:
            nlp = spacy.load(staged)
        except Exception as err:  # noqa: BLE001 - any load failure is the user's pipeline
            raise QuantizeError(f"{model} could not be loaded as a spaCy pipeline: {err}") from err
    layers = {}
    for name in todo:
        layers[name] = count_int8_linears(nlp.get_pipe(name).model.transformer)
        if not layers[name]:
            raise QuantizeError(f"component {name!r} of {model} has no linear layers to quantize.")
    output.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    return {
        "model": str(model),
        "output": str(output),
        "components": layers,
        "per_channel": per_channel,
        "model_mb": _size_mb(model),
        "output_mb": _size_mb(output),
    }


__all__: List[str] = ["INT8_ARCH", "QuantizeError", "quantize", "transformer_components"]
