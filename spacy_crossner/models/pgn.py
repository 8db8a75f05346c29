"""``spacy_crossner.PGNBiLSTM.v2`` (and v1): parameter generation network with cross-domain
language modelling (Jia, Liang & Zhang, ACL 2019).

A meta tensor and embeddings of domains and tasks generate the weights of a one-layer BiLSTM
for each (domain, task) pair: (source, NER), (source, LM), (target, NER), (target, LM). A doc's
NER pass uses its own domain's weights (in unsupervised adaptation the target's NER weights are
never trained on target labels: they come from the target domain embedding, which the language
model trains, and the NER task embedding, which the source trains); its emissions go to the
linear map and output head (e.g. a CRF) of its labelled domain (``domain_aliases`` ties an
unlabelled target to the source's). Language models (forward and backward, one sampled-softmax
output table) run on raw text and, by default, on the labelled sentences. The torch modules are in
:mod:`~spacy_crossner.models.pytorch_pgn`; see ``../shared/specs/pgn.md``.

The LM passes need context-free input features (``spacy_crossner.WordCharEmbed.v1``): with a
contextual tok2vec or a transformer the forward LM could read the next word from its input.
"""
from typing import Any, Callable, Dict, Iterable, List

from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from ..domains import example_domain
from ..lm import build_lm_vocab, lm_word_ids
from .head import head_for
from .base import TaggerInput, TaggerOutput, build_crossner_model, get_emitter
from .embed import require_context_free
from .pytorch_pgn import PGNEmitter

SETTINGS = ("supervised", "unsupervised", "combined")


@registry.architectures("spacy_crossner.PGNBiLSTM.v2")
def build_pgn_bilstm_v2(
    tok2vec: Model[List[Doc], List[Floats2d]],
    head: Model,
    hidden_size: int = 100,
    domain_width: int = 8,
    task_width: int = 8,
    dropout: float = 0.5,
    setting: str = "supervised",
    ner_weight_source: float = 1.0,
    ner_weight_target: float = 2.0,
    lm_weight_source: float = 1.0,
    lm_weight_target: float = 1.0,
    lm_on_labelled: bool = True,
    lm_vocab_size: int = 20000,
    lm_min_count: int = 1,
    lm_lowercase: bool = False,
    lm_samples: int = 50,
    lm_sampled: bool = True,
    logq_correction: bool = True,
    meta_scale: float = 1.0,
) -> Model[TaggerInput, TaggerOutput]:
    """BiLSTMs generated per (domain, task) from a meta tensor, NER through a linear map per
    labelled domain and the output head, forward/backward LMs with a sampled softmax.

    tok2vec (Model[List[Doc], List[Floats2d]]): context-free token features (default
        ``spacy_crossner.WordCharEmbed.v1``; the LM passes read the same features).
    head (Model): the NER output head, e.g. ``spacy_crossner.CRFHead.v1`` (a CRF per labelled
        domain: the paper's) or ``spacy_crossner.SoftmaxHead.v1``.
    hidden_size (int): LSTM width per direction (paper: 100).
    domain_width (int): width U of the domain embeddings (paper: 8).
    task_width (int): width V of the task embeddings (paper: 8).
    dropout (float): dropout on the BiLSTM output before the NER head and the LM (paper: 0.5;
        the input dropout is the tok2vec's).
    setting (str): "supervised" (labelled source and target; SDA), "unsupervised" (labelled
        source, raw target text, the target in the component's ``domain_aliases``; UDA) or
        "combined" (labelled target and raw text; the authors' V2). Checked at initialize
        against the training data.
    ner_weight_source, ner_weight_target (float): NER loss weights (SDA code: 1 and 2; V2: 0.8
        and 1).
    lm_weight_source, lm_weight_target (float): LM loss weights (V1 code: 1 and 1; V2
        supervised: 0.5 and 0.5). 0 switches that LM off (the paper's CO-NER ablation).
    lm_on_labelled (bool): labelled sentences also train their domain's LM (SDA code: the LM
        text is the NER training text; UDA code: the NER sentences join the raw text).
    lm_vocab_size (int): LM vocabulary size, UNK included (0 = no limit); frequency-sorted,
        from the LM training text only (the authors' vocab is first-seen order over all
        splits; see the spec).
    lm_min_count (int): words seen fewer times are UNK (UDA code: 5, V2: 4).
    lm_lowercase (bool): lower-case words for the LM vocabulary.
    lm_samples (int): negatives per sampled-softmax call (paper: 50).
    lm_sampled (bool): sampled softmax in training (False: full softmax).
    logq_correction (bool): subtract ln E(k) from sampled logits, as the authors' code does
        (False: the paper's plain negative sampling over the same log-uniform law).
    meta_scale (float): the meta tensor W is stored divided by this and multiplied back when
        generating (same function, same initial weights). Adam moves each of W's V x U entries
        per generated weight by about the learning rate, so a step moves the generated BiLSTM
        weights far more than a plain BiLSTM's (benchmarks/results/pgn_diagnosis.md); a
        meta_scale below 1 shortens that step for W alone. 1.0 is the authors' parametrisation
        (their optimizer is SGD, which has no such amplification).
    """
    if not meta_scale > 0:
        raise ValueError(f"spacy_crossner.PGNBiLSTM: meta_scale must be positive (got {meta_scale})")
    if setting not in SETTINGS:
        raise ValueError(
            f"spacy_crossner.PGNBiLSTM: setting = {setting!r}; use one of {list(SETTINGS)}"
        )
    if hidden_size < 1 or domain_width < 1 or task_width < 1 or lm_samples < 1:
        raise ValueError(
            "spacy_crossner.PGNBiLSTM: hidden_size, domain_width, task_width and lm_samples "
            f"must be positive (got {hidden_size}, {domain_width}, {task_width}, {lm_samples})"
        )
    require_context_free(
        tok2vec, architecture="spacy_crossner.PGNBiLSTM",
        lm_weights={"lm_weight_source": lm_weight_source, "lm_weight_target": lm_weight_target},
    )
    emitter = PGNEmitter(
        hidden_size=hidden_size,
        domain_width=domain_width,
        task_width=task_width,
        dropout=dropout,
        n_samples=lm_samples,
        logq_correction=logq_correction,
        lm_sampled=lm_sampled,
        lm_on_labelled=lm_on_labelled,
        ner_weights={"source": ner_weight_source, "target": ner_weight_target},
        lm_weights={"source": lm_weight_source, "target": lm_weight_target},
        meta_scale=meta_scale,
    )
    model = build_crossner_model(
        "pgn_bilstm", tok2vec, emitter, head=head, extra_inputs=pgn_extra_inputs
    )
    model.attrs.update(
        uses_raw_text=True,
        init_corpus=pgn_init_corpus,
        setting=setting,
        lm_on_labelled=lm_on_labelled,
        lm_vocab_size=lm_vocab_size,
        lm_min_count=lm_min_count,
        lm_lowercase=lm_lowercase,
        uses_lm=bool(lm_weight_source or lm_weight_target),
    )
    return model


@registry.architectures("spacy_crossner.PGNBiLSTM.v1")
def build_pgn_bilstm(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_size: int = 100,
    domain_width: int = 8,
    task_width: int = 8,
    dropout: float = 0.5,
    setting: str = "supervised",
    ner_weight_source: float = 1.0,
    ner_weight_target: float = 2.0,
    lm_weight_source: float = 1.0,
    lm_weight_target: float = 1.0,
    lm_on_labelled: bool = True,
    lm_vocab_size: int = 20000,
    lm_min_count: int = 1,
    lm_lowercase: bool = False,
    lm_samples: int = 50,
    lm_sampled: bool = True,
    logq_correction: bool = True,
    use_crf: bool = True,
    meta_scale: float = 1.0,
) -> Model[TaggerInput, TaggerOutput]:
    """``spacy_crossner.PGNBiLSTM.v2`` with its head given by a flag (kept for the configs that
    use it; the same computation).

    use_crf (bool): a CRF per labelled domain (True, ``CRFHead.v1``: the paper) or a softmax
        per token (False, ``SoftmaxHead.v1``). The other settings are v2's.
    """
    return build_pgn_bilstm_v2(
        tok2vec,
        head_for(use_crf),
        hidden_size=hidden_size,
        domain_width=domain_width,
        task_width=task_width,
        dropout=dropout,
        setting=setting,
        ner_weight_source=ner_weight_source,
        ner_weight_target=ner_weight_target,
        lm_weight_source=lm_weight_source,
        lm_weight_target=lm_weight_target,
        lm_on_labelled=lm_on_labelled,
        lm_vocab_size=lm_vocab_size,
        lm_min_count=lm_min_count,
        lm_lowercase=lm_lowercase,
        lm_samples=lm_samples,
        lm_sampled=lm_sampled,
        logq_correction=logq_correction,
        meta_scale=meta_scale,
    )


def pgn_init_corpus(model: Model, get_examples: Callable[[], Iterable[Example]]) -> None:
    """Record the domains (labelled, aliased, raw) and build the LM vocabulary at initialize."""
    attrs = model.attrs
    target = attrs["target_domain"]
    aliases = dict(attrs.get("domain_aliases") or {})
    domains = list(attrs["domain_tags"]) + [a for a in aliases if a not in attrs["domain_tags"]]
    raw_domains = set()
    lm_text: List[List[str]] = []
    for eg in get_examples():
        domain = example_domain(eg, target)
        is_raw = not eg.reference.has_annotation("ENT_IOB")
        if domain is not None and domain not in domains:
            domains.append(domain)
        if is_raw:
            raw_domains.add(domain)
        if is_raw or attrs["lm_on_labelled"]:
            lm_text.append([t.text for t in eg.reference])
    _check_setting(attrs["setting"], target, aliases, raw_domains)
    build_config = attrs["build_config"]
    build_config["pgn_domains"] = domains
    if attrs["uses_lm"]:
        vocab = build_lm_vocab(lm_text, max_size=attrs["lm_vocab_size"],
                               min_count=attrs["lm_min_count"], lowercase=attrs["lm_lowercase"])
        if len(vocab) < 2:
            raise ValueError(
                "spacy_crossner.PGNBiLSTM: no text for the language models (no raw-text "
                "corpus with raw = true, and lm_on_labelled = false, or lm_min_count too "
                "high). Add raw text in [corpora.train.domains] or set both LM weights to 0."
            )
        build_config["lm_vocab"] = vocab
        build_config["lm_lowercase"] = attrs["lm_lowercase"]


def _check_setting(setting: str, target, aliases: Dict[str, str], raw_domains: set) -> None:
    where = "[components.crossner.model] setting"
    if target is None:
        return
    if setting == "supervised" and target in aliases:
        raise ValueError(
            f"{where} = \"supervised\" but the target domain '{target}' is in domain_aliases "
            "(it has no labels): use setting = \"unsupervised\"."
        )
    if setting == "unsupervised":
        if target not in aliases:
            raise ValueError(
                f"{where} = \"unsupervised\": the target domain '{target}' must have no labels of "
                "its own; map it to the source in [components.crossner] domain_aliases (the "
                "configs build it from --vars.target_domain and --vars.source_domain)."
            )
        if target not in raw_domains:
            raise ValueError(
                f"{where} = \"unsupervised\" needs raw text of the target domain '{target}': add a "
                "[corpora.train.domains.*] section with raw = true and that domain."
            )
    if setting == "combined":
        if target in aliases:
            raise ValueError(
                f"{where} = \"combined\" needs labelled target data, but '{target}' is in "
                "domain_aliases: use setting = \"unsupervised\"."
            )
        if target not in raw_domains:
            raise ValueError(
                f"{where} = \"combined\" needs raw text of the target domain '{target}' "
                "(a [corpora.train.domains.*] section with raw = true)."
            )


def pgn_extra_inputs(model: Model, docs: List[Doc], own_domains: List[str], is_train: bool) -> Dict[str, Any]:
    """The docs' own domains (which generated weights to use) and, in training, LM word ids."""
    extra: Dict[str, Any] = {"own_domains": list(own_domains), "target_domain": model.attrs["target_domain"]}
    build_config = model.attrs.get("build_config") or {}
    vocab = build_config.get("lm_vocab")
    if is_train and vocab:
        emitter = get_emitter(model)
        cached = getattr(emitter, "_lm_index", None)
        if cached is None or cached[0] is not vocab:
            cached = (vocab, {w: i for i, w in enumerate(vocab)})
            emitter._lm_index = cached
        extra["word_ids"] = lm_word_ids(docs, cached[1], build_config.get("lm_lowercase", False))
    return extra


def get_generated_weights(model: Model, domain: str, task: str):
    """The eight BiLSTM tensors the model uses for (domain, task) at prediction (cached).

    For deployment, these can be copied into a plain ``nn.LSTM`` (with the domain's head and
    CRF), dropping the meta tensor and the LM table.
    """
    import torch

    emitter = get_emitter(model)
    with torch.no_grad():
        return emitter.generate([(domain, task)])[(domain, task)]
