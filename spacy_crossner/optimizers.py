"""A better fine-tune of a pre-trained encoder: a warm-up + linear decay learning rate that ends
with training, and Adam with one learning rate for the head and decaying ones down the encoder.

thinc's optimizer has one learning rate, and Adam normalises the gradient's scale away, so
scaling gradients per layer would change nothing: the rate has to act on the step itself.
thinc's ``Optimizer.__call__`` takes an ``lr_scale`` per call (it multiplies Adam's step and the
weight decay), and it is called once per parameter with the key ``(id, name)``; the name of a
parameter of a Hugging Face model in spacy-transformers is the torch one
(``encoder.layer.3.attention.self.query.weight``, ``embeddings.word_embeddings.weight``), the
parameters of the crossner head are named ``heads.…``, ``crfs.…``, ``W``. The optimizer has no
model to walk (spaCy builds it from ``[training.optimizer]`` alone), so the groups are read from
that name, as spacy-curated-transformers' ``transformer_discriminative`` schedule does.
"""
import re
from typing import Dict, Iterable, Optional, Tuple

from spacy.util import registry
from thinc.api import Optimizer
from thinc.optimizers import FloatOrSeq
from thinc.schedules import warmup_linear

# The parameter names of BERT-family encoders (BERT, RoBERTa, XLM-R, ELECTRA, MiniLM; DistilBERT's
# ``transformer.layer.N``): group 1 is the layer's index, counted from the bottom.
LAYER_PATTERN = r"^(?:encoder|transformer)\.layer\.(\d+)\."
EMBEDDINGS_PATTERN = r"^embeddings\."


@registry.schedules("spacy_crossner.warmup_linear.v1")
def create_warmup_linear(initial_rate: float, warmup_steps: int, total_steps: int) -> Iterable[float]:
    """thinc's ``warmup_linear.v1`` with its settings checked: the rate rises linearly from 0 at
    step 0 to ``initial_rate`` at ``warmup_steps``, then falls linearly to 0 at ``total_steps``.

    initial_rate (float): the peak learning rate. warmup_steps (int): steps of the rise.
    total_steps (int): the step where the rate reaches 0; configs set it to
        ``${training.max_steps}`` so the decay ends when training does.
    """
    where = "[training.optimizer.learn_rate]"
    if not initial_rate > 0:
        raise ValueError(f"{where} initial_rate must be > 0 (got {initial_rate}).")
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"{where} warmup_steps must be a whole number >= 0 (got {warmup_steps!r}).")
    if not isinstance(total_steps, int) or total_steps <= warmup_steps:
        why = (" training.max_steps = 0 ends training by max_epochs, so the decay has no end: set "
               "--training.max_steps N, or total_steps to a number of steps.") if total_steps == 0 else ""
        raise ValueError(
            f"{where} total_steps ({total_steps!r}, usually ${{training.max_steps}}) must be larger "
            f"than warmup_steps ({warmup_steps}): the rate decays to 0 from warmup_steps to "
            f"total_steps.{why}"
        )
    return warmup_linear(initial_rate, warmup_steps, total_steps)


class GroupedOptimizer(Optimizer):
    """thinc's Optimizer (Adam) whose step size is scaled per parameter: parameters of the
    encoder's layer ``i`` (of ``num_layers``) by ``layer_decay ** (num_layers - 1 - i)``, those of
    its embeddings by ``layer_decay ** num_layers``, every other parameter (the head) by
    ``head_lr_multiplier``. Scales of 1.0 are thinc's Optimizer exactly."""

    def __init__(
        self,
        learn_rate: FloatOrSeq,
        *,
        head_lr_multiplier: float = 1.0,
        layer_decay: float = 1.0,
        num_layers: Optional[int] = None,
        layer_pattern: str = LAYER_PATTERN,
        embeddings_pattern: str = EMBEDDINGS_PATTERN,
        **settings,
    ):
        where = "[training.optimizer]"
        if not head_lr_multiplier > 0:
            raise ValueError(f"{where} head_lr_multiplier must be > 0 (got {head_lr_multiplier}).")
        if not 0 < layer_decay <= 1:
            raise ValueError(
                f"{where} layer_decay must be in (0, 1] (got {layer_decay}): each layer down the "
                f"encoder learns at layer_decay times the rate of the one above; 1.0 = off."
            )
        if num_layers is not None and (not isinstance(num_layers, int) or num_layers < 1):
            raise ValueError(f"{where} num_layers must be a whole number >= 1 or null (got {num_layers!r}).")
        if layer_decay != 1.0 and num_layers is None:
            raise ValueError(
                f"{where} layer_decay = {layer_decay} needs num_layers, the encoder's number of "
                f"layers (the top one learns at learn_rate; MiniLM has 6, BERT-base 12)."
            )
        patterns = {}
        for name, pattern in (("layer_pattern", layer_pattern), ("embeddings_pattern", embeddings_pattern)):
            try:
                patterns[name] = re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{where} {name} {pattern!r} is not a regular expression: {err}.") from None
        if patterns["layer_pattern"].groups < 1:
            raise ValueError(
                f"{where} layer_pattern {layer_pattern!r} needs a group that captures the layer's "
                f"index, as in {LAYER_PATTERN!r}."
            )
        super().__init__(learn_rate, **settings)
        self.head_lr_multiplier = head_lr_multiplier
        self.layer_decay = layer_decay
        self.num_layers = num_layers
        self.layer_pattern = patterns["layer_pattern"]
        self.embeddings_pattern = patterns["embeddings_pattern"]
        self._scales: Dict[Tuple[int, str], float] = {}
        self._layers_seen: Dict[int, str] = {}
        self._n_encoder = 0
        self._checked = False

    @property
    def grouped(self) -> bool:
        """Whether any group learns at another rate than learn_rate."""
        return self.head_lr_multiplier != 1.0 or self.layer_decay != 1.0

    @property
    def lr_scales(self) -> Dict[Tuple[int, str], float]:
        """The factor on learn_rate of every parameter key updated so far."""
        return dict(self._scales)

    def group(self, key: Tuple[int, str]) -> Tuple[str, Optional[int]]:
        """The group of a parameter key: ``("layer", i)``, ``("embeddings", None)`` or
        ``("head", None)``."""
        name = str(key[1])
        match = self.layer_pattern.search(name)
        if match:
            return "layer", int(match.group(1))
        if self.embeddings_pattern.search(name):
            return "embeddings", None
        return "head", None

    def lr_scale_of(self, key: Tuple[int, str]) -> float:
        """The factor on learn_rate for the parameter ``key``."""
        if key in self._scales:
            return self._scales[key]
        kind, layer = self.group(key)
        if kind == "head":
            scale = self.head_lr_multiplier
        else:
            self._n_encoder += 1
            if kind == "embeddings":
                depth = self.num_layers or 0
            else:
                self._layers_seen.setdefault(layer, key[1])
                if self.num_layers is not None and layer >= self.num_layers:
                    raise ValueError(
                        f"The encoder has a layer {layer} (parameter {key[1]!r}) but [training.optimizer] "
                        f"num_layers = {self.num_layers}: set num_layers to the encoder's number of "
                        f"layers (e.g. --training.optimizer.num_layers {layer + 1} or more)."
                    )
                depth = (self.num_layers - 1 - layer) if self.num_layers is not None else 0
            scale = self.layer_decay ** depth
        self._scales[key] = scale
        return scale

    def _check_groups(self) -> None:
        """After every parameter was updated once: the settings acted on what they name."""
        self._checked = True
        if not self.grouped:
            return
        if not self._n_encoder:
            raise ValueError(
                "[training.optimizer] head_lr_multiplier / layer_decay: no parameter updated in the "
                f"first step is an encoder's (none matched layer_pattern {self.layer_pattern.pattern!r} "
                f"or embeddings_pattern {self.embeddings_pattern.pattern!r}): the encoder is frozen or "
                "names its parameters otherwise. Set the patterns, or leave both settings at 1.0 and "
                "set learn_rate."
            )
        if self.layer_decay != 1.0 and self._layers_seen:
            top = max(self._layers_seen)
            if top + 1 != self.num_layers:
                raise ValueError(
                    f"[training.optimizer] num_layers = {self.num_layers}, but the encoder's top "
                    f"layer is {top} ({self._layers_seen[top]!r}): set num_layers = {top + 1}."
                )

    def __call__(self, key, weights, gradient, *, lr_scale: float = 1.0):
        # A key updated before (its scale is known): every parameter has had its first step.
        if not self._checked and key in self._scales:
            self._check_groups()
        return super().__call__(key, weights, gradient, lr_scale=lr_scale * self.lr_scale_of(key))


@registry.optimizers("spacy_crossner.GroupedAdam.v1")
def create_grouped_adam(
    learn_rate: FloatOrSeq = 0.001,
    *,
    L2: FloatOrSeq = 0.01,
    beta1: FloatOrSeq = 0.9,
    beta2: FloatOrSeq = 0.999,
    eps: FloatOrSeq = 1e-08,
    grad_clip: FloatOrSeq = 1.0,
    L2_is_weight_decay: bool = True,
    use_averages: bool = False,
    head_lr_multiplier: float = 1.0,
    layer_decay: float = 1.0,
    num_layers: Optional[int] = None,
    layer_pattern: str = LAYER_PATTERN,
    embeddings_pattern: str = EMBEDDINGS_PATTERN,
) -> Optimizer:
    """thinc's ``Adam.v1`` (same settings, spaCy's defaults) with a learning rate per group.

    learn_rate (FloatOrSeq): the rate of the encoder's top layer (a float or a schedule).
    head_lr_multiplier (float): every parameter that is not the encoder's (the tagger's
        emitter, heads and CRF) learns at learn_rate times this; > 0, 1.0 = off.
    layer_decay (float): in (0, 1]; layer ``i`` of ``num_layers`` (0 = bottom) learns at
        learn_rate * layer_decay ** (num_layers - 1 - i), the embeddings at
        learn_rate * layer_decay ** num_layers; 1.0 = off.
    num_layers (Optional[int]): the encoder's number of layers; needed when layer_decay < 1.
    layer_pattern (str): a regular expression on a parameter's name whose group 1 is its
        encoder layer's index. embeddings_pattern (str): one matching the embeddings' names.
    The other settings are Adam's (thinc's ``Adam.v1``).
    """
    return GroupedOptimizer(
        learn_rate, L2=L2, beta1=beta1, beta2=beta2, eps=eps, grad_clip=grad_clip,
        L2_is_weight_decay=L2_is_weight_decay, use_averages=use_averages,
        head_lr_multiplier=head_lr_multiplier, layer_decay=layer_decay, num_layers=num_layers,
        layer_pattern=layer_pattern, embeddings_pattern=embeddings_pattern,
    )
