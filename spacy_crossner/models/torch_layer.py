"""Torch modules as thinc layers.

:func:`wrap_torch` is ``PyTorchWrapper_v2(module, convert_inputs, convert_outputs)`` (the same
forward, converters, name and serialization), on a :class:`TorchModuleShim`: thinc's
``PyTorchShim`` with the module it wraps as a public ``module``. Data crosses into torch
through the converters; what sizes, decodes with or inspects a layer's module asks
:func:`torch_module`, never a shim's private state.
"""
import torch
from thinc.api import Model
from thinc.layers.pytorchwrapper import forward
from thinc.shims import PyTorchShim


class TorchModuleShim(PyTorchShim):
    """thinc's PyTorchShim, exposing the torch module it wraps."""

    @property
    def module(self) -> torch.nn.Module:
        return self._model


def wrap_torch(module: torch.nn.Module, convert_inputs, convert_outputs) -> Model:
    """A thinc layer running ``module`` (PyTorchWrapper_v2's layer: same name, forward and
    serialization, so saved pipelines load as before)."""
    return Model(
        "pytorch",
        forward,
        attrs={"convert_inputs": convert_inputs, "convert_outputs": convert_outputs},
        shims=[TorchModuleShim(module)],
        dims={"nI": None, "nO": None},
    )


def torch_shim(layer: Model) -> TorchModuleShim:
    """The shim of a layer built by :func:`wrap_torch`."""
    (shim,) = layer.shims
    if not isinstance(shim, TorchModuleShim):
        raise TypeError(f"Layer '{layer.name}' was not built by wrap_torch")
    return shim


def torch_module(layer: Model) -> torch.nn.Module:
    """The torch module of a layer built by :func:`wrap_torch`."""
    return torch_shim(layer).module


def torch_device(layer: Model) -> torch.device:
    """The device the layer's module runs on."""
    return torch_shim(layer).device
