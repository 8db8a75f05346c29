"""Dynamic int8 quantization of a Hugging Face encoder for CPU inference (issue 50).

``torch.ao.quantization.quantize_dynamic`` swaps every ``nn.Linear`` of a module for an int8
one: weights stored as int8 (per output channel by default), activations quantized on the fly
per batch. It runs on CPU only and carries no weight gradients, so it is an inference path.

The helpers here are load hooks of the encoder built by
``spacy_crossner.Int8TransformerModel.v1``: when a state dict is loaded into it, fp32 weights
are loaded and then quantized, and int8 weights (the state a quantized pipeline saves) are
loaded into an encoder quantized first. Everything is a module-level function or a plain
object, so a pipeline holding them pickles.

Smoothing (SmoothQuant, Xiao et al. 2023): a dynamic int8 layer quantizes its input with one
scale per batch, so a few input channels with large values (BERT-style encoders have them)
leave little resolution for the rest. ``smooth_and_quantize`` divides each input channel ``j``
of a linear layer by ``s_j = a_j ** alpha / w_j ** (1 - alpha)`` (``a_j``: the largest input
value seen on calibration text, ``w_j``: the largest weight of the channel) and multiplies the
weight's column ``j`` by ``s_j``: the same function in fp32, with the range moved from the
activations into the per-channel-quantized weights. The divisors are a buffer
(``smooth_inv``) of the int8 layer, applied by a forward pre-hook, and saved with the weights.

Activation range: torch's int8 dynamic layer quantizes its input to 7 bits (``reduce_range``),
because x86 CPUs without VNNI multiply-add pairs of 8-bit values into 16 bits, which the full
8-bit range can overflow. CPUs with AVX512-VNNI accumulate in 32 bits, so there the input keeps
all 8 bits (``FullRangeDynamicLinear``), which loses less accuracy at the same speed. Whether it
does is decided when the layers are built (``full_range``: None = by the CPU); the weights saved
are the same either way.
"""
import contextlib
import functools
import warnings
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

PACKED_SUFFIX = "_packed_params._packed_params"
SETTING = "spacy_crossner.Int8TransformerModel.v1"
SMOOTH_BUFFER = "smooth_inv"


def is_quantized(module: nn.Module) -> bool:
    """Whether ``module`` holds dynamically quantized linear layers.

    module (nn.Module): any torch module.
    RETURNS (bool): True if at least one int8 dynamic ``Linear`` is inside.
    """
    return any(isinstance(m, DynamicLinear) for m in module.modules())


def count_int8_linears(module: nn.Module) -> int:
    """The number of int8 dynamic ``Linear`` layers inside ``module``."""
    return sum(isinstance(m, DynamicLinear) for m in module.modules())


@functools.lru_cache(maxsize=1)
def cpu_has_avx512_vnni() -> bool:
    """Whether this CPU has AVX512-VNNI (read from /proc/cpuinfo; False where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512_vnni" in line.split()
    except OSError:
        pass
    return False


def full_range_default() -> bool:
    """Whether int8 layers take 8-bit inputs here: on AVX512-VNNI with torch's x86/fbgemm engine."""
    return cpu_has_avx512_vnni() and torch.backends.quantized.engine in ("x86", "fbgemm")


class FullRangeDynamicLinear(DynamicLinear):
    """torch's int8 dynamic ``Linear`` with its input quantized to 8 bits, not 7 (module docstring)."""

    def forward(self, x):
        if self._packed_params.dtype != torch.qint8:
            return super().forward(x)
        return torch.ops.quantized.linear_dynamic(
            x, self._packed_params._packed_params, reduce_range=False).to(x.dtype)

    def _get_name(self) -> str:
        return "FullRangeDynamicQuantizedLinear"


def set_activation_range(module: nn.Module, full_range: bool) -> nn.Module:
    """Make every int8 dynamic ``Linear`` of ``module`` take 8-bit (True) or 7-bit (False) inputs."""
    for layer in module.modules():
        if isinstance(layer, DynamicLinear):
            layer.__class__ = FullRangeDynamicLinear if full_range else DynamicLinear
    return module


def count_full_range(module: nn.Module) -> int:
    """The number of int8 layers of ``module`` that take 8-bit inputs."""
    return sum(type(m) is FullRangeDynamicLinear for m in module.modules())


def quantize_linears(module: nn.Module, per_channel: bool = True,
                     full_range: Optional[bool] = None) -> nn.Module:
    """Replace, in place, every ``nn.Linear`` of ``module`` by an int8 dynamic one.

    module (nn.Module): an fp32 module on the CPU.
    per_channel (bool): one weight scale per output channel (True: more accurate and, on
        MiniLM, faster) or one per matrix (False).
    full_range (Optional[bool]): inputs quantized to 8 bits (True) or 7 (False); None: 8 where
        the CPU has AVX512-VNNI (module docstring).
    RETURNS (nn.Module): ``module`` itself, quantized and in eval mode.
    """
    from torch.ao.quantization import (
        default_dynamic_qconfig,
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    module.eval()
    with warnings.catch_warnings():
        # torch >= 2.10 announces that eager-mode quantization moves to the torchao package;
        # the API still works and is the one torch ships, so the notice is not the user's concern
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        warnings.filterwarnings("ignore", message=".*quantize_per_channel.*")
        quantize_dynamic(module, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True)
    return set_activation_range(module, full_range_default() if full_range is None else full_range)


@contextlib.contextmanager
def record_input_ranges(module: nn.Module) -> Iterator[Dict[str, torch.Tensor]]:
    """Record, while the block runs, the largest absolute input value of every input channel of
    each ``nn.Linear`` of ``module`` (over every forward pass inside the block).

    module (nn.Module): an fp32 module.
    YIELDS (Dict[str, torch.Tensor]): filled as the module runs: {linear layer name: tensor of
        shape (in_features,)}; a layer that did not run has no entry.
    """
    ranges: Dict[str, torch.Tensor] = {}

    def record(name: str):
        def hook(layer: nn.Module, args: Any) -> None:
            x = args[0].detach()
            top = x.abs().reshape(-1, x.shape[-1]).amax(0).float().cpu()
            ranges[name] = torch.maximum(ranges[name], top) if name in ranges else top
        return hook

    handles = [layer.register_forward_pre_hook(record(name))
               for name, layer in module.named_modules() if isinstance(layer, nn.Linear)]
    try:
        yield ranges
    finally:
        for handle in handles:
            handle.remove()


def _smooth_input(layer: nn.Module, args: Any) -> Any:
    """Forward pre-hook of a smoothed layer: its input divided channel-wise by the smoothing."""
    return (args[0] * getattr(layer, SMOOTH_BUFFER),) + tuple(args[1:])


def add_smoothing(layer: nn.Module, inverse: torch.Tensor) -> None:
    """Give ``layer`` the input multipliers ``inverse`` (a buffer saved with its weights) and the
    pre-hook that applies them; a layer that has them gets the new values only."""
    if SMOOTH_BUFFER in layer._buffers:
        setattr(layer, SMOOTH_BUFFER, inverse)
        return
    layer.register_buffer(SMOOTH_BUFFER, inverse)
    layer.register_forward_pre_hook(_smooth_input)


def smooth_and_quantize(module: nn.Module, ranges: Dict[str, torch.Tensor], alpha: float = 0.8,
                        per_channel: bool = True, full_range: Optional[bool] = None) -> int:
    """Smooth every ``nn.Linear`` of ``module`` that has an input range (module docstring), then
    quantize every ``nn.Linear`` of it (``quantize_linears``).

    module (nn.Module): an fp32 module on the CPU.
    ranges (Dict[str, torch.Tensor]): from ``record_input_ranges``.
    alpha (float): how much of the input range moves into the weights, in (0, 1].
    per_channel, full_range: see ``quantize_linears``.
    RETURNS (int): the number of smoothed layers.
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha (the smoothing strength) must be in (0, 1], got {alpha!r}")
    scales: Dict[str, torch.Tensor] = {}
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Linear) and name in ranges:
            if ranges[name].shape != (layer.in_features,):
                raise ValueError(f"the input range of {name} has shape {tuple(ranges[name].shape)}, "
                                 f"not ({layer.in_features},)")
            weight = layer.weight.detach()
            top_w = weight.abs().amax(0).float().clamp(min=1e-5)
            scale = (ranges[name].to(top_w.device).clamp(min=1e-5).pow(alpha)
                     / top_w.pow(1 - alpha)).clamp(min=1e-5)
            with torch.no_grad():
                layer.weight.mul_(scale.to(weight.dtype))
            scales[name] = scale
    quantize_linears(module, per_channel=per_channel, full_range=full_range)
    for name, scale in scales.items():
        add_smoothing(module.get_submodule(name), (1.0 / scale).float())
    return len(scales)


def count_smoothed(module: nn.Module) -> int:
    """The number of layers of ``module`` with smoothing multipliers."""
    return sum(SMOOTH_BUFFER in m._buffers for m in module.modules())


def _on_cpu() -> bool:
    from thinc.api import get_torch_default_device

    # spacy-transformers loads weights onto this device (HFShim.from_bytes): it is CUDA when
    # the pipeline runs with --gpu-id / spacy.require_gpu, where int8 dynamic layers cannot run
    return get_torch_default_device().type == "cpu"


def restore_float_linears(module: nn.Module) -> nn.Module:
    """Replace, in place, every int8 dynamic ``Linear`` of ``module`` by an fp32 ``nn.Linear`` of
    the same shape (its weights uninitialised: for loading fp32 weights into it).

    module (nn.Module): a quantized module (on the CPU).
    RETURNS (nn.Module): ``module`` itself.
    """
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, DynamicLinear):
                setattr(parent, name, nn.Linear(child.in_features, child.out_features,
                                                bias=child.bias() is not None))
    return module


class _LoadHooks:
    """The load hooks of an int8 encoder (a plain object: it pickles with the module). Before a
    load, the encoder takes the structure of the state dict (int8 or fp32 linear layers); after
    it, fp32 linear layers are quantized.

    per_channel, full_range: see ``quantize_linears``.
    """

    def __init__(self, per_channel: bool = True, full_range: Optional[bool] = None) -> None:
        self.per_channel = per_channel
        self.full_range = full_range

    def before_load(self, module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
        if prefix:
            return
        packed = any(key.endswith(PACKED_SUFFIX) for key in state_dict)
        if packed and not is_quantized(module):
            # int8 weights: what a quantized pipeline saves
            if not _on_cpu():
                raise ValueError(
                    f"This pipeline's transformer is int8-quantized ({SETTING}), which runs on "
                    "CPU only. Load it without --gpu-id / spacy.require_gpu, or load the fp32 "
                    "pipeline it was made from on the GPU."
                )
            quantize_linears(module, per_channel=self.per_channel, full_range=self.full_range)
        if packed:
            # smoothed layers (smooth_and_quantize): their multipliers are loaded into a buffer
            # that must exist first
            suffix = "." + SMOOTH_BUFFER
            for key, value in state_dict.items():
                if key.endswith(suffix):
                    add_smoothing(module.get_submodule(key[: -len(suffix)]),
                                  torch.ones(value.shape, dtype=value.dtype))
        elif is_quantized(module):
            # fp32 weights into an encoder already quantized: spacy-transformers retries a
            # failed strict load (weights of another transformers version) with strict=False,
            # after the first try was quantized by after_load
            restore_float_linears(module)

    def after_load(self, module: nn.Module, incompatible_keys: Any) -> None:
        """fp32 weights just loaded are quantized (on CPU)."""
        if is_quantized(module):
            return
        if _on_cpu():
            quantize_linears(module, per_channel=self.per_channel, full_range=self.full_range)
        else:
            warnings.warn(
                f"{SETTING}: the transformer runs on a GPU, where int8 dynamic quantization is "
                "not available; it stays fp32 (the setting applies when the pipeline loads on "
                "CPU).",
                stacklevel=2,
            )


def _no_training(module: nn.Module, args: Any) -> None:
    """Forward pre-hook: an int8 encoder has no weight gradients, so it cannot be trained."""
    if torch.is_grad_enabled() and is_quantized(module):
        raise RuntimeError(
            f"This pipeline's transformer is int8-quantized ({SETTING}), for inference only. "
            "Train or fine-tune the fp32 pipeline (components.transformer.model @architectures = "
            '"spacy-transformers.TransformerModel.v3") and quantize the result with '
            "`python -m spacy_crossner quantize`."
        )


def add_int8_hooks(module: nn.Module, per_channel: bool = True, full_range: Optional[bool] = None) -> nn.Module:
    """Make ``module`` quantize itself whenever weights are loaded into it.

    module (nn.Module): a freshly built (fp32) Hugging Face encoder.
    per_channel, full_range: see ``quantize_linears``.
    RETURNS (nn.Module): ``module``, with load and forward hooks registered.
    """
    hooks = _LoadHooks(per_channel, full_range)
    module.register_load_state_dict_pre_hook(hooks.before_load)
    module.register_load_state_dict_post_hook(hooks.after_load)
    module.register_forward_pre_hook(_no_training)
    return module


class Int8ModelLoader:
    """The ``model_cls`` of spacy-transformers' ``HFShim``: builds the encoder that weights are
    loaded into (``HFShim.from_bytes`` calls ``model_cls.from_config(config)``), with the int8
    hooks. A plain object holding one setting, so it deep-copies and pickles.

    per_channel, full_range: see ``quantize_linears``.
    """

    def __init__(self, per_channel: bool = True, full_range: Optional[bool] = None) -> None:
        self.per_channel = per_channel
        self.full_range = full_range

    def from_config(self, config: Any, **kwargs: Any) -> nn.Module:
        from transformers import AutoModel

        return add_int8_hooks(AutoModel.from_config(config, **kwargs), self.per_channel, self.full_range)


__all__: List[str] = [
    "FullRangeDynamicLinear", "Int8ModelLoader", "add_int8_hooks", "add_smoothing", "count_full_range", "count_int8_linears",
    "count_smoothed", "cpu_has_avx512_vnni", "full_range_default", "set_activation_range",
    "is_quantized", "quantize_linears", "record_input_ranges", "restore_float_linears",
    "smooth_and_quantize",
]
