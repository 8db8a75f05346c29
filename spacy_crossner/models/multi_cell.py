"""``spacy_crossner.MultiCellLSTM.v2`` (and v1): the multi-cell compositional LSTM of Jia &
Zhang (ACL 2020) for supervised (SDA) and unsupervised (UDA) domain adaptation.

Entity-typed cells (one per entity type over all domains, 'O' included), a compositional cell
merging them with additive attention, both directions, a linear map per domain and the output
head (ref ``"head"``, e.g. a CRF per domain: ``spacy_crossner.CRFHead.v1``). Each domain uses
only its own cells. Auxiliary losses (entity-type prediction from the typed cells' states,
attention scoring) take their labels from the gold BIO tags, or, for raw text (UDA), from an
entity dictionary; raw text also trains a forward and a backward language model with a sampled
softmax. The torch modules are in
:mod:`~spacy_crossner.models.pytorch_multi_cell`; see ``../shared/specs/multi_cell_lstm.md``.

The cell inventory (and the LM vocabulary) live in ``build_config``, so a saved pipeline rebuilds
the same modules before its weights load.
"""
from typing import Any, Callable, Dict, List, Optional

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from ..lm import EntityDictionary, build_lm_vocab, lm_word_ids
from .head import head_for
from .base import TaggerInput, TaggerOutput, build_crossner_model, crossner_init, get_emitter
from .embed import require_context_free
from .pytorch_multi_cell import (
    LM_VOCAB_KEY,
    TARGET_KEY,
    TYPES_KEY,
    MultiCellEmitter,
    cell_inventory,
)


@registry.architectures("spacy_crossner.MultiCellLSTM.v2")
def build_multi_cell_lstm_v2(
    tok2vec: Model[List[Doc], List[Floats2d]],
    head: Model,
    hidden_size: int = 100,
    dropout: float = 0.5,
    attention_sharing: str = "per_domain_code",
    att_loss_on: str = "probs_code",
    ent_weight: float = 1.0,
    att_weight: float = 1.0,
    domain_weights: Dict[str, float] = {},
    lm_weight: float = 0.0,
    lm_samples: int = 50,
    lm_vocab_size: int = 20000,
    lm_min_count: int = 1,
    lm_lowercase: bool = False,
    lm_logq_correction: bool = False,
    dictionary: Optional[str] = None,
    dictionary_label_map: Dict[str, str] = {},
    identical_init: bool = True,
) -> Model[TaggerInput, TaggerOutput]:
    """Multi-cell compositional BiLSTM, a linear map per domain, then the output head.

    tok2vec (Model[List[Doc], List[Floats2d]]): token features: ``spacy_crossner.WordCharEmbed.v1``
        (the paper's context-free input; required for the LMs, which must not see the word they
        predict), a spaCy tok2vec, or transformer vectors (the +BERT variant).
    head (Model): the output head, e.g. ``spacy_crossner.CRFHead.v1`` (a CRF per domain: the
        paper's) or ``spacy_crossner.SoftmaxHead.v1``.
    hidden_size (int): d, hidden width per direction (the paper: 100); attention width 2d.
    dropout (float): dropout on the hidden and cell states (the paper: 0.5); the input
        dropout is the tok2vec's own.
    attention_sharing (str): "per_domain_code" (one attention set per domain, sources reuse P
        for Q: the authors' code) or "shared" (one set: the paper).
    att_loss_on (str): "probs_code" (averaged attention probabilities used as logits: the code)
        or "scores_paper" (averaged raw attention scores: the paper).
    ent_weight (float): weight of the entity-type prediction loss (SDA code 1, UDA code 0.1).
    att_weight (float): weight of the attention scoring loss (SDA code 1, UDA code 0.5).
    domain_weights (Dict[str, float]): weight of each domain's NER loss, e.g. {"ai": 2.0}
        (the paper's lambda_d; scales the NER gradient into the network, not the CRF's own
        transition gradient). Unlisted domains: 1.0.
    lm_weight (float): weight of each of the forward and backward LM losses on raw text (UDA
        code 0.5); 0 = no LMs.
    lm_samples (int): negatives of the sampled softmax (the code: 50).
    lm_vocab_size (int): LM vocabulary size, UNK included, built from the training text.
    lm_min_count (int): words seen fewer times are UNK for the LM.
    lm_lowercase (bool): lower-case words for the LM vocabulary.
    lm_logq_correction (bool): subtract log Q from sampled logits (the code: no).
    dictionary (Optional[str]): folder of ``<type>.txt`` entity lists that label raw-text tokens
        for the auxiliary losses (multi-word entries match as spans); None = no dictionary.
    dictionary_label_map (Dict[str, str]): file stem -> entity label, e.g.
        {"organization": "organisation"} for CrossNER's CoNLL labels.
    identical_init (bool): typed cells and their aux heads start as copies of one prototype
        (the code), so attention is uniform before training.
    """
    if hidden_size < 1:
        raise ValueError(
            f"spacy_crossner.MultiCellLSTM: hidden_size must be positive, got {hidden_size}"
        )
    if lm_weight < 0 or ent_weight < 0 or att_weight < 0:
        raise ValueError(
            "spacy_crossner.MultiCellLSTM: lm_weight, ent_weight and att_weight must be >= 0"
        )
    require_context_free(
        tok2vec, architecture="spacy_crossner.MultiCellLSTM", lm_weights={"lm_weight": lm_weight}
    )
    emitter = MultiCellEmitter(
        width=hidden_size,
        dropout=dropout,
        attention_sharing=attention_sharing,
        att_loss_on=att_loss_on,
        ent_weight=ent_weight,
        att_weight=att_weight,
        lm_weight=lm_weight,
        lm_samples=lm_samples,
        lm_logq_correction=lm_logq_correction,
        identical_init=identical_init,
        domain_weights=domain_weights,
    )
    use_lm = lm_weight > 0
    model = build_crossner_model(
        "multi_cell_lstm", tok2vec, emitter, head=head,
        extra_inputs=multi_cell_extra_inputs, init=multi_cell_init,
    )
    model.attrs.update(
        uses_raw_text=use_lm or dictionary is not None,
        use_lm=use_lm,
        lm_lowercase=lm_lowercase,
        lm_vocab_size=lm_vocab_size,
        lm_min_count=lm_min_count,
        dictionary=dictionary,
        dictionary_label_map=dict(dictionary_label_map),
    )
    if use_lm:
        model.attrs["init_corpus"] = multi_cell_init_corpus
    return model


@registry.architectures("spacy_crossner.MultiCellLSTM.v1")
def build_multi_cell_lstm(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_size: int = 100,
    dropout: float = 0.5,
    use_crf: bool = True,
    attention_sharing: str = "per_domain_code",
    att_loss_on: str = "probs_code",
    ent_weight: float = 1.0,
    att_weight: float = 1.0,
    domain_weights: Dict[str, float] = {},
    lm_weight: float = 0.0,
    lm_samples: int = 50,
    lm_vocab_size: int = 20000,
    lm_min_count: int = 1,
    lm_lowercase: bool = False,
    lm_logq_correction: bool = False,
    dictionary: Optional[str] = None,
    dictionary_label_map: Dict[str, str] = {},
    identical_init: bool = True,
) -> Model[TaggerInput, TaggerOutput]:
    """``spacy_crossner.MultiCellLSTM.v2`` with its head given by a flag (kept for the configs
    that use it; the same computation).

    use_crf (bool): a CRF per domain (True, ``CRFHead.v1``) or a softmax per token (False,
        ``SoftmaxHead.v1``). The other settings are v2's.
    """
    return build_multi_cell_lstm_v2(
        tok2vec,
        head_for(use_crf),
        hidden_size=hidden_size,
        dropout=dropout,
        attention_sharing=attention_sharing,
        att_loss_on=att_loss_on,
        ent_weight=ent_weight,
        att_weight=att_weight,
        domain_weights=domain_weights,
        lm_weight=lm_weight,
        lm_samples=lm_samples,
        lm_vocab_size=lm_vocab_size,
        lm_min_count=lm_min_count,
        lm_lowercase=lm_lowercase,
        lm_logq_correction=lm_logq_correction,
        dictionary=dictionary,
        dictionary_label_map=dictionary_label_map,
        identical_init=identical_init,
    )


def multi_cell_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    """Record the cell inventory (and the target domain) in build_config, then size the model."""
    domain_tags = model.attrs["domain_tags"]
    target = model.attrs["target_domain"]
    build_config = dict(model.attrs.get("build_config") or {})
    known = get_emitter(model).types  # non-empty when re-initialized: cells keep their places
    sources = sorted(d for d in domain_tags if d != target)
    build_config[TYPES_KEY] = cell_inventory(domain_tags, known, sources)
    build_config[TARGET_KEY] = target
    model.attrs["build_config"] = build_config
    crossner_init(model, X=X, Y=Y)


def multi_cell_init_corpus(model: Model, get_examples: Callable) -> None:
    """Build the LM vocabulary from all training text (it sizes the LM's output table, so it
    is part of build_config)."""
    sentences = ([t.text for t in eg.predicted] for eg in get_examples())
    model.attrs["build_config"][LM_VOCAB_KEY] = build_lm_vocab(
        sentences,
        max_size=model.attrs["lm_vocab_size"],
        min_count=model.attrs["lm_min_count"],
        lowercase=model.attrs["lm_lowercase"],
    )


def multi_cell_extra_inputs(
    model: Model, docs: List[Doc], domains: List[str], is_train: bool
) -> Dict[str, Any]:
    """The emitter's extra training inputs: LM word ids and dictionary type ids (inventory
    ids). The word index and the dictionary are cached on the emitter."""
    if not is_train:
        return {}
    emitter = get_emitter(model)
    cache = emitter.input_cache
    out: Dict[str, Any] = {}
    if model.attrs["use_lm"]:
        vocab = model.attrs["build_config"].get(LM_VOCAB_KEY)
        if vocab is None:
            raise ValueError(
                "spacy_crossner.MultiCellLSTM: lm_weight > 0 but the model has no LM "
                "vocabulary; initialize the pipeline (spacy train does) before training."
            )
        if cache.get("vocab") is not vocab:
            cache["vocab"] = vocab
            cache["index"] = {w: i for i, w in enumerate(vocab)}
        out["lm_ids"] = lm_word_ids(docs, cache["index"], model.attrs["lm_lowercase"])
    dictionary = model.attrs["dictionary"]
    if dictionary is not None:
        types = emitter.types
        if "dictionary" not in cache:
            entries = EntityDictionary.from_dir(dictionary, model.attrs["dictionary_label_map"])
            if not set(entries.types) & set(types):
                raise ValueError(
                    f"spacy_crossner.MultiCellLSTM: no type of the dictionary {dictionary} "
                    f"({entries.types}) is an entity label of the model ({types[1:]}): map "
                    "file stems to labels with dictionary_label_map, e.g. "
                    '{"organization": "organisation"}.'
                )
            cache["dictionary"] = entries
        type_index = {t: i for i, t in enumerate(types)}
        width = max(len(doc) for doc in docs)
        ids = numpy.full((len(docs), width), -1, dtype="int64")
        for i, doc in enumerate(docs):
            ids[i, : len(doc)] = cache["dictionary"].token_types([t.text for t in doc], type_index)
        out["dict_types"] = ids
    return out
