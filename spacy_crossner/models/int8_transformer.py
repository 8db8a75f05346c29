"""``spacy_crossner.Int8TransformerModel.v1``: spacy-transformers' TransformerModel, int8 on CPU.

The same model and settings as ``spacy-transformers.TransformerModel.v3``; the difference is
what happens when weights are loaded (``spacy.load``, ``from_disk``, ``from_bytes``): on CPU the
encoder's ``nn.Linear`` layers become int8 dynamically quantized ones (``torch.ao``), about
twice as fast on MiniLM. Swapping the architecture name in the ``[components.transformer.model]``
block of a trained pipeline is the whole switch; ``python -m spacy_crossner quantize`` does it
and saves the int8 weights::

    [components.transformer.model]
    @architectures = "spacy_crossner.Int8TransformerModel.v1"
    name = "..."
    per_channel = true

``initialize`` builds the fp32 encoder from pretrained weights, so a config with this setting
trains in fp32 and its saved pipeline loads as int8. A loaded int8 encoder refuses training.
On GPU (spaCy's CuPy ops) it loads fp32 weights as fp32 with a warning and refuses int8 weights.

How the encoder is reached: spacy-transformers' ``HFShim`` builds the encoder it loads weights
into with ``model_cls.from_config(config)``, and ``HFWrapper`` takes ``model_cls`` as an
argument. This builder makes the ``TransformerModel`` of v3 and gives it an ``HFWrapper`` whose
``model_cls`` adds the int8 load hooks (``pytorch_int8.Int8ModelLoader``), with the input and
output converters of the wrapper v3 built. No shim internals are touched.
"""
from typing import Any, Callable, Dict, List, Optional

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model

from .pytorch_int8 import Int8ModelLoader


@registry.architectures("spacy_crossner.Int8TransformerModel.v1")
def build_int8_transformer_model(
    name: str,
    get_spans: Callable,
    tokenizer_config: Optional[Dict[str, Any]] = None,
    transformer_config: Optional[Dict[str, Any]] = None,
    mixed_precision: bool = False,
    grad_scaler_config: Optional[Dict[str, Any]] = None,
    per_channel: bool = True,
    full_range: Optional[bool] = None,
) -> Model[List[Doc], Any]:
    """spacy-transformers' TransformerModel.v3 whose encoder is int8-quantized on load (CPU).

    name (str): a Hugging Face model name or directory (as in TransformerModel.v3).
    get_spans (Callable[[List[Doc]], List[List[Span]]]): the span getter (as in v3).
    tokenizer_config (Optional[Dict[str, Any]]): settings of the tokenizer (as in v3).
    transformer_config (Optional[Dict[str, Any]]): settings of the forward pass (as in v3).
    mixed_precision (bool): as in v3 (a GPU setting; int8 runs on CPU only).
    grad_scaler_config (Optional[Dict[str, Any]]): as in v3.
    per_channel (bool): one int8 scale per output channel of each weight matrix (True, more
        accurate) or one per matrix (False).
    full_range (Optional[bool]): the int8 layers' inputs quantized to 8 bits (true) or to torch's
        7 (false); null (the default): 8 where the CPU has AVX512-VNNI, which accumulates in 32
        bits (models/pytorch_int8.py). Decided when the pipeline loads; the weights are the same.
    RETURNS (Model[List[Doc], FullTransformerBatch]): a spacy-transformers TransformerModel.
    """
    from spacy_transformers.data_classes import HFObjects
    from spacy_transformers.layers import TransformerModel
    from spacy_transformers.layers.hf_wrapper import HFWrapper

    if not isinstance(per_channel, bool):
        raise ValueError(
            "[components.transformer.model] per_channel of spacy_crossner.Int8TransformerModel.v1 "
            f"must be true or false, got {per_channel!r}"
        )
    if full_range is not None and not isinstance(full_range, bool):
        raise ValueError(
            "[components.transformer.model] full_range of spacy_crossner.Int8TransformerModel.v1 "
            f"must be true, false or null (null: by the CPU), got {full_range!r}"
        )
    tokenizer_config = dict(tokenizer_config or {})
    transformer_config = dict(transformer_config or {})
    model = TransformerModel(
        name,
        get_spans,
        tokenizer_config,
        transformer_config,
        mixed_precision,
        dict(grad_scaler_config or {}),
    )
    plain = model.layers[0]
    # TransformerModel.copy replaces layers[0] the same way
    model.layers[0] = HFWrapper(
        HFObjects(None, None, None, tokenizer_config, transformer_config),
        convert_inputs=plain.attrs["convert_inputs"],
        convert_outputs=plain.attrs["convert_outputs"],
        mixed_precision=mixed_precision,
        grad_scaler_config=dict(grad_scaler_config or {}),
        model_cls=Int8ModelLoader(per_channel, full_range),
    )
    return model
