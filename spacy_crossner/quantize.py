"""An int8 copy of a trained transformer pipeline, for CPU inference (issue 50).

``quantize(model=..., output=...)`` switches every spacy-transformers ``TransformerModel`` of the
pipeline's config to ``spacy_crossner.Int8TransformerModel.v1``, loads the pipeline that way (the
encoders' linear layers become int8 as the weights load) and saves it. The copy loads with
``spacy.load`` and packages with ``spacy package`` like any pipeline; the original is not
touched. Loading the fp32 pipeline with the architecture name overridden gives the same model
without a copy::

    spacy.load(path, config={"components.transformer.model.@architectures":
                             "spacy_crossner.Int8TransformerModel.v1"})

With ``calibration`` text (the pipeline's training set will do), the linear layers are smoothed
before they are quantized (``models/pytorch_int8.py``: SmoothQuant's per-channel migration of
the activation range into the weights), which loses less accuracy; the copy records what was done
under ``int8`` in its meta.json.
"""
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

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


DEFAULT_SMOOTHING = 0.8
DEFAULT_CALIBRATION_SIZE = 500


def _calibration_sentences(calibration: Union[str, Path], size: int) -> List[List[str]]:
    from .self_train import PseudoLabelError, read_sentences

    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise QuantizeError(f"calibration_size must be a whole number >= 1, got {size!r}")
    try:
        sentences = read_sentences(calibration)
    except PseudoLabelError as err:
        raise QuantizeError(f"calibration: {err}") from None
    if not sentences:
        raise QuantizeError(f"calibration: {calibration} holds no sentence")
    return sentences[:size]


def quantize(
    *, model: Union[str, Path], output: Union[str, Path], per_channel: bool = True,
    calibration: Optional[Union[str, Path]] = None, smoothing: float = DEFAULT_SMOOTHING,
    calibration_size: int = DEFAULT_CALIBRATION_SIZE,
) -> Dict[str, Any]:
    """Write an int8 copy of the transformer pipeline ``model`` to ``output``.

    model (Union[str, Path]): a trained pipeline directory (e.g. training/model-best) with at
        least one spacy-transformers ``transformer`` component.
    output (Union[str, Path]): a new directory for the copy; it must not exist.
    per_channel (bool): one int8 scale per output channel of each weight (True, more accurate)
        or one per matrix (False).
    calibration (Optional[Union[str, Path]]): text of the pipeline's domain to smooth the linear
        layers on before quantizing: a ``.spacy`` file or folder, or a ``.txt`` file of one
        tokenised sentence a line. None: no smoothing.
    smoothing (float): the smoothing strength (SmoothQuant's alpha), in (0, 1]; used with
        ``calibration``. 0.8 was chosen on the dev sets of four CrossNER domains
        (benchmarks/results/speed_int8.md).
    calibration_size (int): the most calibration sentences used (the first ones).
    RETURNS (Dict[str, Any]): what was done: the quantized components with their number of
        int8 linear layers (and ``smoothed``: of smoothed ones), and the sizes of both pipelines
        on disk (MB).
    """
    import spacy
    from spacy.util import load_config
    from confection import ConfigValidationError
    from thinc.api import get_torch_default_device

    from .models.pytorch_int8 import (
        count_int8_linears, count_smoothed, record_input_ranges, smooth_and_quantize,
    )

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
    try:
        config = load_config(model / "config.cfg", interpolate=False)
    except (ConfigValidationError, UnicodeDecodeError) as err:
        # confection's parse errors say "file: '<string>'", not which file
        raise QuantizeError(
            f"{model / 'config.cfg'} cannot be read as a spaCy config: {str(err).strip()}"
        ) from None
    if calibration is not None:
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0 < smoothing <= 1:
            raise QuantizeError(f"smoothing must be a number in (0, 1], got {smoothing!r}")
        if not Path(calibration).exists():
            raise QuantizeError(f"calibration: {calibration} does not exist")
        # read before any pipeline is loaded: a bad file fails fast
        sentences = _calibration_sentences(calibration, calibration_size)
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
    smoothed: Dict[str, int] = {}
    n_calibration = 0
    if calibration is not None:
        # the fp32 pipeline runs the calibration text; its encoders, smoothed and quantized, give
        # the int8 pipeline its weights through the same load path as a saved copy
        from spacy.tokens import Doc

        fp32 = spacy.load(model)
        docs = [Doc(fp32.vocab, words=words) for words in sentences]
        n_calibration = len(docs)
        encoders = {name: fp32.get_pipe(name).model.transformer for name in todo}
        with contextlib.ExitStack() as stack:
            ranges = {name: stack.enter_context(record_input_ranges(enc)) for name, enc in encoders.items()}
            for _ in fp32.pipe(docs, batch_size=64):
                pass
        for name, encoder in encoders.items():
            smooth_and_quantize(encoder, ranges[name], alpha=float(smoothing), per_channel=per_channel)
            target = nlp.get_pipe(name).model.transformer
            target.load_state_dict(encoder.state_dict())
            smoothed[name] = count_smoothed(target)
        del fp32, encoders
    nlp.meta["int8"] = {
        "per_channel": per_channel,
        "smoothing": float(smoothing) if calibration is not None else None,
        "calibration": str(calibration) if calibration is not None else None,
        "calibration_sentences": n_calibration,
        "components": layers,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    return {
        "model": str(model),
        "output": str(output),
        "components": layers,
        "smoothed": smoothed,
        "smoothing": float(smoothing) if calibration is not None else None,
        "calibration_sentences": n_calibration,
        "per_channel": per_channel,
        "model_mb": _size_mb(model),
        "output_mb": _size_mb(output),
    }


__all__: List[str] = [
    "DEFAULT_CALIBRATION_SIZE", "DEFAULT_SMOOTHING", "INT8_ARCH", "QuantizeError", "quantize",
    "transformer_components",
]
