"""The ``crossner`` component: one trainable pipe, many cross-domain architectures.

It owns the label sets per domain (``cfg["labels"]``), the domain used for docs without one
(``target_domain``), the loss (a CRF per domain, or softmax cross-entropy for heads without
CRF), constrained decoding and serialization. The architecture is chosen by
``[components.crossner.model]``.
"""
from itertools import islice
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy
import srsly
import torch
from spacy import util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.attrs import ORTH
from spacy.scorer import get_ner_prf
from spacy.tokens import Doc, Span
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.util import registry
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer, set_dropout_rate, torch2xp, xp2torch

from .decoding import bio_tags, constrained_argmax, tags_to_spans, viterbi_decode
from .domains import get_domain, resolve_domains
from .models.base import (
    TaggerOutput,
    TrainingBatch,
    forget_resized_optimizer_state,
    get_crfs,
    setup_torch_layers,
)

DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_crossner.BiLSTMCRF.v1"
hidden_size = 128
depth = 1
dropout = 0.5
use_crf = true

[model.tok2vec]
@architectures = "spacy_crossner.WordCharEmbed.v1"
word_width = 100
word_rows = 20000
attr = "NORM"
char_width = 30
char_filters = 50
char_window = 1
char_rows = 2000
max_chars = 25
include_static_vectors = false
dropout = 0.5
"""
DEFAULT_MODEL = util.load_config_from_str(DEFAULT_MODEL_CONFIG)["model"]


@Language.factory(
    "crossner",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type"],
    default_config={
        "model": DEFAULT_MODEL,
        "target_domain": None,
        "domain_aliases": {},
        "scorer": {"@scorers": "spacy_crossner.entity_scorer.v1"},
    },
    default_score_weights={"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None},
)
def make_crossner(
    nlp: Language,
    name: str,
    model: Model[List[Doc], TaggerOutput],
    target_domain: Optional[str],
    domain_aliases: Dict[str, str],
    scorer: Optional[Callable],
) -> "CrossNER":
    """Create a cross-domain entity recognizer.

    model (Model[List[Doc], TaggerOutput]): the architecture, e.g. spacy_crossner.BiLSTMCRF.v1.
    target_domain (Optional[str]): the domain whose labels are predicted for a doc whose
        ``doc._.domain`` is unset. Defaults to the only domain when there is one.
    domain_aliases (Dict[str, str]): domains without labels of their own, each mapped to the
        labelled domain whose labels, head and CRF tag it (zero-shot and unsupervised
        adaptation, e.g. ``{"ai": "conll2003"}``). Architectures that model domains (e.g. PGN's
        domain embeddings) still see the doc's own domain.
    scorer (Optional[Callable]): scoring function (entity P/R/F overall and per type).
    """
    return CrossNER(
        nlp.vocab,
        model,
        name,
        target_domain=target_domain,
        domain_aliases=domain_aliases,
        scorer=scorer,
    )


@registry.scorers("spacy_crossner.entity_scorer.v1")
def make_entity_scorer() -> Callable:
    """Entity-level exact-match P/R/F, overall (``ents_p/r/f``) and per type."""
    return score_entities


def score_entities(examples: Iterable[Example], **kwargs) -> Dict[str, Any]:
    return get_ner_prf(examples, **kwargs)


@registry.callbacks("spacy_crossner.configure_crossner.v1")
def make_configure_callback(
    component: str = "crossner",
    target_domain: Optional[str] = None,
    labels: Optional[Dict[str, List[str]]] = None,
    labels_from: Optional[str] = None,
    labels_domain: Optional[str] = None,
) -> Callable[[Language], Language]:
    """An ``[initialize.after_init]`` callback for a sourced crossner component.

    Sourced components keep the settings they were trained with and are not re-initialized;
    this sets the domain to predict and adds labels (e.g. the target domain's) before training.
    component (str): the pipe's name.
    target_domain (Optional[str]): the new target domain.
    labels (Optional[Dict[str, List[str]]]): labels to add, per domain.
    labels_from (Optional[str]): a ``.spacy`` file or folder (e.g. the target's training data)
        whose entity labels are added, per doc domain, before the first update; adding them
        up front keeps the model's size fixed during training.
    labels_domain (Optional[str]): the domain of the docs of ``labels_from`` (default: each
        doc's own ``doc._.domain``, else ``target_domain``).
    """

    def configure(nlp: Language) -> Language:
        if component not in nlp.component_names:
            raise ValueError(
                f"[initialize.after_init] spacy_crossner.configure_crossner.v1: no pipe named "
                f"'{component}' (pipes: {nlp.component_names})"
            )
        pipe = nlp.get_pipe(component)
        if target_domain is not None:
            pipe.target_domain = target_domain
        for domain, domain_labels in (labels or {}).items():
            for label in domain_labels:
                pipe.add_label(label, domain=domain)
        if labels_from:
            for domain, label in _labels_in_corpus(nlp, labels_from, labels_domain, target_domain):
                pipe.add_label(label, domain=domain)
        return nlp

    return configure


def _labels_in_corpus(
    nlp: Language, path: str, domain: Optional[str], fallback: Optional[str]
) -> List[Tuple[str, str]]:
    """(domain, label) pairs of the entities of a ``.spacy`` file or folder, in first-seen order."""
    from pathlib import Path

    from .docbin import read_docbin

    path = Path(path)
    if not path.exists():
        raise ValueError(f"spacy_crossner.configure_crossner.v1: labels_from = {path} does not exist")
    files = sorted(path.glob("**/*.spacy")) if path.is_dir() else [path]
    seen = {}
    for file in files:
        for doc in read_docbin(file, nlp.vocab):
            doc_domain = domain or get_domain(doc) or fallback
            if doc_domain is None:
                raise ValueError(
                    f"spacy_crossner.configure_crossner.v1: the docs of {file} have no domain: "
                    "set labels_domain or target_domain"
                )
            for ent in doc.ents:
                seen.setdefault((doc_domain, ent.label_), None)
    return list(seen)


class CrossNER(TrainablePipe):
    """Cross-domain NER: per-domain label sets, one shared architecture, BIO-constrained decoding."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "crossner",
        *,
        target_domain: Optional[str] = None,
        domain_aliases: Optional[Dict[str, str]] = None,
        scorer: Optional[Callable] = score_entities,
    ) -> None:
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg: Dict[str, Any] = {
            "labels": {},
            "target_domain": target_domain,
            "domain_aliases": dict(domain_aliases or {}),
            "build_config": {},
        }
        self._sync_model_attrs()

    # -- labels and domains -------------------------------------------------------------------

    @property
    def label_data(self) -> Dict[str, List[str]]:
        """The labels of each domain (what ``[initialize.components.crossner.labels]`` takes)."""
        return {d: list(labels) for d, labels in self.cfg["labels"].items()}

    @property
    def labels(self) -> Tuple[str, ...]:
        """All entity labels over all domains, sorted."""
        return tuple(sorted({l for labels in self.cfg["labels"].values() for l in labels}))

    @property
    def domains(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def target_domain(self) -> Optional[str]:
        return self.cfg["target_domain"]

    @target_domain.setter
    def target_domain(self, domain: Optional[str]) -> None:
        self.cfg["target_domain"] = domain
        self._sync_model_attrs()

    def domain_tags(self) -> Dict[str, List[str]]:
        """The IOB2 tags of each domain, in the order the model's outputs use."""
        return {d: bio_tags(labels) for d, labels in self.cfg["labels"].items()}

    def add_label(self, label: str, domain: Optional[str] = None) -> int:
        """Add an entity label to a domain (default: the target domain).

        Returns 1 if it was added, 0 if the domain had it. A model that is already initialized
        grows its heads and CRF for the new label, keeping its weights.
        """
        if not isinstance(label, str) or not label or "-" == label[:1]:
            raise ValueError(f"Invalid entity label {label!r}: a non-empty string is required")
        domain = domain or self.target_domain
        if domain is None:
            raise ValueError(
                f"add_label('{label}'): say which domain (domain=...) or set target_domain"
            )
        labels = self.cfg["labels"].setdefault(domain, [])
        if label in labels:
            return 0
        labels.append(label)
        self.vocab.strings.add(label)
        if self._is_initialized():
            self._setup_model()
        else:
            self._sync_model_attrs()
        return 1

    def _is_initialized(self) -> bool:
        return bool(self.cfg.get("build_config"))

    def _sync_model_attrs(self) -> None:
        self.model.attrs["domain_tags"] = self.domain_tags()
        self.model.attrs["target_domain"] = self.default_domain()
        self.model.attrs["domain_aliases"] = dict(self.cfg.get("domain_aliases") or {})

    def _labelled_domain(self, domain: str) -> str:
        return self.cfg.get("domain_aliases", {}).get(domain, domain)

    def default_domain(self) -> Optional[str]:
        """The domain of docs without ``doc._.domain``: target_domain, or the only domain."""
        if self.cfg["target_domain"] is not None:
            return self.cfg["target_domain"]
        if len(self.cfg["labels"]) == 1:
            return next(iter(self.cfg["labels"]))
        return None

    def _setup_model(self) -> None:
        self._sync_model_attrs()
        setup_torch_layers(self.model, self.domain_tags(), self.cfg["build_config"])
        self.cfg["build_config"] = dict(self.model.attrs["build_config"])
        # Grown parameters: the optimizer's state of their old sizes is dropped at finish_update.
        self._resized = True

    # -- initialization -----------------------------------------------------------------------

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Dict[str, List[str]]] = None,
    ) -> None:
        """Collect the labels of each domain and size the model.

        get_examples (Callable[[], Iterable[Example]]): the training data (all domains).
        labels (Optional[Dict[str, List[str]]]): labels per domain, instead of reading them
            from the data.
        """
        validate_get_examples(get_examples, "CrossNER.initialize")
        self.cfg["labels"] = {}
        self.cfg["build_config"] = {}
        if labels is not None:
            if not isinstance(labels, dict):
                raise ValueError(
                    "[initialize.components.crossner.labels] must map each domain to its labels, "
                    f"e.g. {{\"ai\": [\"algorithm\", ...]}}; got {type(labels).__name__}"
                )
            for domain, domain_labels in labels.items():
                for label in domain_labels:
                    self.add_label(label, domain=domain)
        else:
            for eg in get_examples():
                if not eg.reference.has_annotation("ENT_IOB"):
                    continue  # raw text: no labels to collect
                domain = self._example_domain(eg)
                self._check_not_aliased(domain)
                self.cfg["labels"].setdefault(domain, [])
                for ent in eg.reference.ents:
                    self.add_label(ent.label_, domain=domain)
        if not self.cfg["labels"]:
            raise ValueError(
                "The crossner component found no labelled examples: the training corpus has no "
                "docs with entity annotation. Check [corpora.train] and its paths."
            )
        for domain in self.cfg["labels"]:
            self.cfg["labels"][domain] = sorted(self.cfg["labels"][domain])
        for alias, domain in self.cfg["domain_aliases"].items():
            if domain not in self.cfg["labels"]:
                raise ValueError(
                    f"domain_aliases maps '{alias}' to '{domain}', which has no labels "
                    f"(labelled domains: {sorted(self.cfg['labels'])})"
                )
        self._sync_model_attrs()
        init_corpus = self.model.attrs.get("init_corpus")
        if init_corpus is not None:
            # e.g. a language model's vocabulary, built from all training text.
            self.model.attrs["build_config"] = {}
            init_corpus(self.model, get_examples)
        sample = [eg.predicted for eg in islice(get_examples(), 10) if len(eg.predicted)]
        for doc in sample:
            if get_domain(doc) is None and self.default_domain() is None:
                raise ValueError(
                    "Training docs have no domain and the crossner component has several: "
                    "convert with --domain or set target_domain."
                )
        self.model.initialize(X=sample or None)
        self.cfg["build_config"] = dict(self.model.attrs["build_config"])

    def _check_not_aliased(self, domain: str) -> None:
        aliases = self.cfg["domain_aliases"]
        if domain in aliases:
            raise ValueError(
                f"Labelled training data of domain '{domain}', which domain_aliases maps to "
                f"'{aliases[domain]}': an aliased domain has no labels of its own. Remove it "
                "from domain_aliases, or give its training data as raw text."
            )

    def _example_domain(self, eg: Example) -> str:
        domain = get_domain(eg.reference) or get_domain(eg.predicted) or self.default_domain()
        if domain is None:
            raise ValueError(
                "A training doc has no domain (doc._.domain) and target_domain is not set: "
                "convert the data with `python -m spacy_crossner convert --domain NAME` or "
                "set target_domain in [components.crossner]."
            )
        return domain

    # -- prediction ---------------------------------------------------------------------------

    def predict(self, docs: Iterable[Doc]) -> List[List[str]]:
        """The IOB2 tags of each doc, decoded under BIO constraints. Does not modify docs."""
        docs = list(docs)
        if not docs:
            return []
        if not any(len(doc) for doc in docs):
            return [[] for _ in docs]
        output = self.model.predict(docs)
        return self._decode(output)

    def _decode(self, output: TaggerOutput) -> List[List[str]]:
        domain_tags = self.domain_tags()
        if output.tag_ids is not None:
            return [
                [domain_tags[d][i] for i in ids] for ids, d in zip(output.tag_ids, output.domains)
            ]
        crfs = get_crfs(self.model)
        decoded = []
        cache: Dict[str, Tuple[numpy.ndarray, ...]] = {}
        for scores, domain in zip(output.scores, output.domains):
            tags = domain_tags[domain]
            scores = self.model.ops.to_numpy(scores)
            if crfs is None:
                idx = constrained_argmax(_log_softmax(scores), tags)
            else:
                if domain not in cache:
                    crf = crfs.get(domain)
                    crf.apply_constraints()
                    cache[domain] = tuple(
                        t.detach().cpu().numpy()
                        for t in (
                            crf.transitions,
                            crf.start_transitions,
                            crf.end_transitions,
                            crf.allowed_start,
                            crf.allowed_transitions,
                            crf.allowed_end,
                        )
                    )
                trans, start, end, ok_start, ok_trans, ok_end = cache[domain]
                idx = viterbi_decode(scores, trans, start, end, ok_start, ok_trans, ok_end)
            decoded.append([tags[i] for i in idx])
        return decoded

    def set_annotations(self, docs: Iterable[Doc], tag_seqs: List[List[str]]) -> None:
        """Write the decoded entities to ``doc.ents`` (other tokens become O)."""
        for doc, tags in zip(docs, tag_seqs):
            doc.ents = [Span(doc, start, end, label=label) for start, end, label in tags_to_spans(tags)]

    # -- training -----------------------------------------------------------------------------

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Learn from a batch of examples of any domains.

        Docs without entity annotation (raw text) give no NER loss. Labels and domains not seen
        before (e.g. the target domain after sourcing a pre-trained component) are added.
        """
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        examples = list(examples)
        validate_examples(examples, "CrossNER.update")
        uses_raw = bool(self.model.attrs.get("uses_raw_text"))
        batch = [
            eg
            for eg in examples
            if len(eg.predicted) and (uses_raw or eg.reference.has_annotation("ENT_IOB"))
        ]
        if not batch:
            return losses
        for eg in batch:
            domain = self._example_domain(eg)
            _set_predicted_domain(eg, domain)
            if not eg.reference.has_annotation("ENT_IOB"):
                continue
            self._check_not_aliased(domain)
            if domain not in self.cfg["labels"]:
                self.cfg["labels"][domain] = []
                self._setup_model()
            for ent in eg.reference.ents:
                if ent.label_ not in self.cfg["labels"][domain]:
                    self.add_label(ent.label_, domain=domain)
        domain_tags = self.domain_tags()
        gold = [
            _gold_tag_ids(eg, domain_tags[get_domain(eg.predicted)])
            if eg.reference.has_annotation("ENT_IOB")
            else None
            for eg in batch
        ]
        for eg, g in zip(batch, gold):
            if g is None:
                domain = self._labelled_domain(get_domain(eg.predicted))
                if domain not in domain_tags:
                    raise ValueError(
                        f"Raw-text docs of domain '{domain}', which has no labels: map it to a "
                        "labelled domain with domain_aliases in [components.crossner] "
                        f"(labelled domains: {sorted(domain_tags)})."
                    )
        set_dropout_rate(self.model, drop)
        output, backprop = self.model.begin_update(
            TrainingBatch([eg.predicted for eg in batch], gold)
        )
        loss, d_scores = self._loss(output, gold)
        backprop(d_scores)
        if sgd is not None:
            self.finish_update(sgd)
        losses[self.name] += loss
        for name, value in output.losses.items():
            key = f"{self.name}_{name}"
            losses[key] = losses.get(key, 0.0) + value
        return losses

    def get_loss(self, examples: Iterable[Example], output: TaggerOutput) -> Tuple[float, List]:
        """The NER loss of a batch and its gradient with respect to the scores.

        With CRFs: the negative log-likelihood of the gold tag sequence under each domain's
        CRF, averaged over docs (the CRF's own parameters get their gradients here too).
        Without: softmax cross-entropy per token, averaged over docs.
        """
        examples = list(examples)
        domain_tags = self.domain_tags()
        gold = [
            _gold_tag_ids(eg, domain_tags[domain])
            if eg.reference.has_annotation("ENT_IOB")
            else None
            for eg, domain in zip(examples, output.domains)
        ]
        return self._loss(output, gold)

    def _loss(self, output: TaggerOutput, gold: List[Optional[List[int]]]) -> Tuple[float, List]:
        crfs = get_crfs(self.model)
        if crfs is None:
            loss, d_scores = _softmax_loss(self.model.ops, output.scores, gold)
        else:
            loss, d_scores = _crf_loss(self.model.ops, crfs, output.scores, gold, output.domains)
        if not numpy.isfinite(loss):
            raise ValueError(
                f"The crossner loss is {loss}: training diverged. Lower the learning rate "
                "([training.optimizer]) or check the input features."
            )
        return loss, d_scores

    def finish_update(self, sgd: Optimizer) -> None:
        """Update the weights; after heads or CRFs grew, first drop the optimizer's stale state."""
        if getattr(self, "_resized", False):
            forget_resized_optimizer_state(sgd, self.model)
            self._resized = False
        super().finish_update(sgd)

    # -- serialization ------------------------------------------------------------------------

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        serialize = {
            "cfg": lambda: srsly.json_dumps(self.cfg),
            "vocab": lambda: self.vocab.to_bytes(exclude=exclude),
            "model": lambda: self.model.to_bytes(),
        }
        return util.to_bytes(serialize, exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "CrossNER":
        deserialize = {
            "cfg": lambda b: self.cfg.update(srsly.json_loads(b)),
            "vocab": lambda b: self.vocab.from_bytes(b, exclude=exclude),
            "model": lambda b: self._load_model(b),
        }
        util.from_bytes(bytes_data, deserialize, exclude)
        return self

    def to_disk(self, path, *, exclude: Iterable[str] = tuple()) -> None:
        serialize = {
            "cfg": lambda p: srsly.write_json(p, self.cfg),
            "vocab": lambda p: self.vocab.to_disk(p, exclude=exclude),
            "model": lambda p: p.open("wb").write(self.model.to_bytes()),
        }
        util.to_disk(path, serialize, exclude)

    def from_disk(self, path, *, exclude: Iterable[str] = tuple()) -> "CrossNER":
        deserialize = {
            "cfg": lambda p: self.cfg.update(srsly.read_json(p)),
            "vocab": lambda p: self.vocab.from_disk(p, exclude=exclude),
            "model": lambda p: self._load_model(p.open("rb").read()),
        }
        util.from_disk(path, deserialize, exclude)
        return self

    def _load_model(self, data: bytes) -> None:
        # The torch modules are sized by the labels: build them before loading weights.
        if self._is_initialized():
            self._setup_model()
        try:
            self.model.from_bytes(data)
        except (AttributeError, KeyError, RuntimeError, ValueError) as err:
            raise ValueError(
                f"Cannot load the weights of the crossner component '{self.name}': they do not "
                f"fit its architecture and labels ({err}). Was it saved with another config?"
            ) from err
        self._sync_model_attrs()


def _set_predicted_domain(eg: Example, domain: str) -> None:
    # The model reads the domain from the docs it sees; readers set both, users may set one.
    if get_domain(eg.predicted) is None:
        eg.predicted._.domain = domain


def _gold_tag_ids(eg: Example, tags: Sequence[str]) -> List[int]:
    """Gold IOB2 tag ids aligned to the predicted tokens.

    Tokens whose gold is unknown (misaligned tokenization, missing annotation) count as O: a
    CRF needs a whole sequence.
    """
    index = {tag: i for i, tag in enumerate(tags)}
    predicted, reference = eg.predicted, eg.reference
    if len(predicted) == len(reference) and numpy.array_equal(
        predicted.to_array([ORTH]), reference.to_array([ORTH])
    ):
        # Gold tokenization (our readers keep it): read the tags without aligning.
        ids = []
        for token in reference:
            iob = token.ent_iob_
            ids.append(index[f"{iob}-{token.ent_type_}"] if iob in ("B", "I") else 0)
        return ids
    ids = []
    for biluo in eg.get_aligned_ner():
        if biluo is None or biluo in ("O", "-", ""):
            ids.append(0)
            continue
        prefix, label = biluo.split("-", 1)
        iob = ("B-" if prefix in ("B", "U") else "I-") + label
        ids.append(index[iob])
    return ids


def _log_softmax(scores: numpy.ndarray) -> numpy.ndarray:
    shifted = scores - scores.max(axis=-1, keepdims=True)
    return shifted - numpy.log(numpy.exp(shifted).sum(axis=-1, keepdims=True))


def _softmax_loss(ops, scores: List, gold: List[List[int]]) -> Tuple[float, List]:
    loss = 0.0
    d_scores = []
    n_docs = max(sum(1 for g in gold if g is not None), 1)
    for s, g in zip(scores, gold):
        if s.shape[0] == 0 or g is None:
            d_scores.append(ops.alloc2f(*s.shape))
            continue
        probs = ops.softmax(s, axis=-1)
        target = ops.alloc2f(*s.shape)
        target[ops.xp.arange(len(g)), ops.asarray1i(g)] = 1.0
        loss += float(-(ops.xp.log(probs + 1e-12) * target).sum()) / n_docs
        d_scores.append((probs - target) / n_docs)
    return loss, d_scores


def _crf_loss(ops, crfs, scores: List, gold: List[List[int]], domains: List[str]):
    d_scores = [ops.alloc2f(*s.shape) for s in scores]
    loss = 0.0
    n_docs = max(sum(1 for s, g in zip(scores, gold) if s.shape[0] and g is not None), 1)
    for domain in sorted(set(domains)):
        idx = [
            i
            for i, d in enumerate(domains)
            if d == domain and scores[i].shape[0] and gold[i] is not None
        ]
        if not idx:
            continue
        crf = crfs.get(domain)
        device = crf.transitions.device
        lengths = [scores[i].shape[0] for i in idx]
        padded = ops.pad([scores[i] for i in idx])
        emissions = xp2torch(padded, requires_grad=True, device=device)
        tags = torch.zeros(padded.shape[:2], dtype=torch.long, device=device)
        mask = torch.zeros(padded.shape[:2], dtype=torch.bool, device=device)
        for row, i in enumerate(idx):
            tags[row, : lengths[row]] = torch.tensor(gold[i], dtype=torch.long, device=device)
            mask[row, : lengths[row]] = True
        nll = -crf(emissions, tags, mask=mask, reduction="sum") / n_docs
        nll.backward()
        loss += float(nll.detach().cpu())
        grads = ops.unpad(torch2xp(emissions.grad), lengths)
        for row, i in enumerate(idx):
            d_scores[i] = grads[row]
    return loss, d_scores
