"""Dynamic int8 quantization of a Hugging Face encoder for CPU inference (issue 50).

``torch.ao.quantization.quantize_dynamic`` swaps every ``nn.Linear`` of a module for an int8
one: weights stored as int8 (per output channel by default), activations quantized on the fly
per batch. It runs on CPU only and carries no weight gradients, so it is an inference path.

The helpers here are load hooks of the encoder built by
``spacy_crossner.Int8TransformerModel.v1``: when a state dict is loaded into it, fp32 weights
are loaded and then quantized, and int8 weights (the state a quantized pipeline saves) are
loaded into an encoder quantized first. Everything is a module-level function or a plain
object, so a pipeline holding them pickles.
"""
import warnings
from typing import Any, List

import torch
from torch import nn

PACKED_SUFFIX = "_packed_params._packed_params"
SETTING = "spacy_crossner.Int8TransformerModel.v1"


def is_quantized(module: nn.Module) -> bool:
    """Whether ``module`` holds dynamically quantized linear layers.

    module (nn.Module): any torch module.
    RETURNS (bool): True if at least one int8 dynamic ``Linear`` is inside.
    """
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return any(isinstance(m, DynamicLinear) for m in module.modules())


def count_int8_linears(module: nn.Module) -> int:
    """The number of int8 dynamic ``Linear`` layers inside ``module``."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return sum(isinstance(m, DynamicLinear) for m in module.modules())


def quantize_linears(module: nn.Module, per_channel: bool = True) -> nn.Module:
    """Replace, in place, every ``nn.Linear`` of ``module`` by an int8 dynamic one.

    module (nn.Module): an fp32 module on the CPU.
    per_channel (bool): one weight scale per output channel (True: more accurate and, on
        MiniLM, faster) or one per matrix (False).
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
    return module


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
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

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

    per_channel (bool): see ``quantize_linears``.
    """

    def __init__(self, per_channel: bool = True) -> None:
        self.per_channel = per_channel

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
            quantize_linears(module, per_channel=self.per_channel)
        elif not packed and is_quantized(module):
            # fp32 weights into an encoder already quantized: spacy-transformers retries a
            # failed strict load (weights of another transformers version) with strict=False,
            # after the first try was quantized by after_load
            restore_float_linears(module)

    def after_load(self, module: nn.Module, incompatible_keys: Any) -> None:
        """fp32 weights just loaded are quantized (on CPU)."""
        if is_quantized(module):
            return
        if _on_cpu():
            quantize_linears(module, per_channel=self.per_channel)
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


def add_int8_hooks(module: nn.Module, per_channel: bool = True) -> nn.Module:
    """Make ``module`` quantize itself whenever weights are loaded into it.

    module (nn.Module): a freshly built (fp32) Hugging Face encoder.
    per_channel (bool): see ``quantize_linears``.
    RETURNS (nn.Module): ``module``, with load and forward hooks registered.
    """
    hooks = _LoadHooks(per_channel)
    module.register_load_state_dict_pre_hook(hooks.before_load)
    module.register_load_state_dict_post_hook(hooks.after_load)
    module.register_forward_pre_hook(_no_training)
    return module


class Int8ModelLoader:
    """The ``model_cls`` of spacy-transformers' ``HFShim``: builds the encoder that weights are
    loaded into (``HFShim.from_bytes`` calls ``model_cls.from_config(config)``), with the int8
    hooks. A plain object holding one setting, so it deep-copies and pickles.

    per_channel (bool): see ``quantize_linears``.
    """

    def __init__(self, per_channel: bool = True) -> None:
        self.per_channel = per_channel

    def from_config(self, config: Any, **kwargs: Any) -> nn.Module:
        from transformers import AutoModel

        return add_int8_hooks(AutoModel.from_config(config, **kwargs), self.per_channel)


__all__: List[str] = [
    "Int8ModelLoader", "add_int8_hooks", "count_int8_linears", "is_quantized", "quantize_linears",
    "restore_float_linears",
]
