"""``spacy_crossner.MoEE.v2`` (and v1): entity-detection multi-task learning and a mixture of entity
experts for zero-resource cross-domain NER (Liu, Winata & Fung 2020; specs/moee.md).

Token features -> BiLSTM (or none, on transformer vectors) -> H, then

- Task 1 (``use_mtl``): entity vs non-entity tags (O / B-ENT / I-ENT) from H, with a CRF of
  their own (a softmax without ``task1_crf``); its loss is an auxiliary loss.
- MoEE (``use_moee``): one linear expert per entity type plus a non-entity expert, computed as
  one stacked matrix product, and a softmax gate supervised by the gold type (auxiliary loss);
  the gate-weighted meta feature M feeds Task 2.
- Task 2: a linear map per domain onto the full tag set, then the output head (ref ``"head"``,
  e.g. ``spacy_crossner.CRFHead.v1``), which gives the main loss and the tags.

Both switches off give the BiLSTM-CRF row of the paper's Table 1. At prediction the experts are
folded into the Task-2 head (``U_a = W_a V``), which costs E x K instead of E x d_e per token.
For zero-resource transfer, train on the source only and tag target docs with the source's
labels through the component's ``domain_aliases`` (e.g. ``{"ai": "conll2003"}``).
"""
from typing import List

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from .head import head_for
from .base import TaggerInput, TaggerOutput, build_crossner_model, get_emitter
from .pytorch_moee import TASK1_TAGS, MoEEEmitter


@registry.architectures("spacy_crossner.MoEE.v2")
def build_moee_v2(
    tok2vec: Model[List[Doc], List[Floats2d]],
    head: Model,
    hidden_size: int = 200,
    depth: int = 2,
    expert_width: int = 200,
    use_mtl: bool = True,
    use_moee: bool = True,
    task1_crf: bool = True,
    dropout: float = 0.3,
    task1_weight: float = 1.0,
    gate_weight: float = 1.0,
    coarse_tags: str = "bio",
    concat_hidden: bool = False,
) -> Model[TaggerInput, TaggerOutput]:
    """Multi-task entity detection and a mixture of entity experts over any token features,
    Task 2 decoded by the head.

    tok2vec (Model[List[Doc], List[Floats2d]]): token features, e.g.
        ``spacy_crossner.WordCharEmbed.v1``, a spaCy tok2vec or a transformer listener.
    head (Model): Task 2's output head, e.g. ``spacy_crossner.CRFHead.v1`` (the paper's) or
        ``spacy_crossner.SoftmaxHead.v1`` (the paper's BERT variant).
    hidden_size (int): BiLSTM width per direction (the paper's 200, so H is 400 wide).
    depth (int): BiLSTM layers; 0 = no BiLSTM, H = the features (the paper's BERT variant).
    expert_width (int): width d_e of each expert's output and of the meta feature M.
    use_mtl (bool): Task 1, entity vs non-entity, as an auxiliary task.
    use_moee (bool): the mixture of entity experts (off: Task 2 reads H directly).
    task1_crf (bool): the auxiliary Task 1's loss: a CRF's negative log-likelihood (True, the
        paper with a CRF head) or per-token cross-entropy (False, the paper's BERT variant).
        Task 1 is never decoded, so this is a choice of loss only.
    dropout (float): dropout on the input features and between BiLSTM layers.
    task1_weight (float): weight of the Task-1 loss (the paper: 1).
    gate_weight (float): weight of the gate loss (the paper: 1).
    coarse_tags (str): Task-1 tags, "bio" (O, B-ENT, I-ENT; the paper) or "binary" (O, ENT).
    concat_hidden (bool): Task 2 reads [M; H] instead of M alone.
    """
    name = "spacy_crossner.MoEE"
    if hidden_size < 1 or depth < 0 or expert_width < 1:
        raise ValueError(
            f"{name}: hidden_size and expert_width must be positive and depth >= 0 "
            f"(got hidden_size={hidden_size}, depth={depth}, expert_width={expert_width})"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{name}: dropout must be in [0, 1), got {dropout}")
    if task1_weight < 0 or gate_weight < 0:
        raise ValueError(f"{name}: task1_weight and gate_weight must be >= 0")
    if coarse_tags not in TASK1_TAGS:
        raise ValueError(f"{name}: coarse_tags must be one of {sorted(TASK1_TAGS)}, not {coarse_tags!r}")
    if concat_hidden and not use_moee:
        raise ValueError(f"{name}: concat_hidden needs use_moee = true")
    emitter = MoEEEmitter(
        hidden_size,
        depth,
        expert_width,
        use_mtl=use_mtl,
        use_moee=use_moee,
        task1_crf=task1_crf,
        dropout=dropout,
        task1_weight=task1_weight,
        gate_weight=gate_weight,
        coarse_tags=coarse_tags,
        concat_hidden=concat_hidden,
    )
    return build_crossner_model("moee", tok2vec, emitter, head=head)


@registry.architectures("spacy_crossner.MoEE.v1")
def build_moee(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_size: int = 200,
    depth: int = 2,
    expert_width: int = 200,
    use_mtl: bool = True,
    use_moee: bool = True,
    use_crf: bool = True,
    dropout: float = 0.3,
    task1_weight: float = 1.0,
    gate_weight: float = 1.0,
    coarse_tags: str = "bio",
    concat_hidden: bool = False,
) -> Model[TaggerInput, TaggerOutput]:
    """``spacy_crossner.MoEE.v2`` with its heads given by a flag (kept for the configs that use
    it; the same computation).

    use_crf (bool): CRFs for Task 1 and Task 2 (True: ``task1_crf`` and ``CRFHead.v1``) or a
        softmax per token for both (False: ``SoftmaxHead.v1``, as in the paper's BERT variant).
        The other settings are v2's.
    """
    return build_moee_v2(
        tok2vec,
        head_for(use_crf),
        hidden_size=hidden_size,
        depth=depth,
        expert_width=expert_width,
        use_mtl=use_mtl,
        use_moee=use_moee,
        task1_crf=use_crf,
        dropout=dropout,
        task1_weight=task1_weight,
        gate_weight=gate_weight,
        coarse_tags=coarse_tags,
        concat_hidden=concat_hidden,
    )


def get_moee_emitter(model: Model) -> MoEEEmitter:
    """The torch module of a ``spacy_crossner.MoEE`` model (experts, gate, Task 1)."""
    emitter = get_emitter(model)
    if not isinstance(emitter, MoEEEmitter):
        raise ValueError(f"Not a spacy_crossner.MoEE model: its emitter is {type(emitter).__name__}")
    return emitter
