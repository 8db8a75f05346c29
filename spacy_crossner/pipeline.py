"""The ``crossner`` component: one trainable pipe, many cross-domain architectures.

It owns the label sets per domain (``cfg["labels"]``), the domain used for docs without one
(``target_domain``), the domain of every doc of a batch (resolved once, here, and passed to the
model), where entities and their probabilities are written, and serialization. The
architecture (``[components.crossner.model]``) owns the loss and decoding (its head,
:mod:`spacy_crossner.models.head`). Training-time helpers (the ``configure_crossner``
callback, inferring the target domain from a corpus) live in :mod:`spacy_crossner.callbacks`.
"""
import copy
from itertools import islice
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy
import srsly
from spacy import util
from spacy.attrs import ORTH
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.scorer import get_ner_prf
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.util import registry
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer

from .batching import length_batches
from .callbacks import infer_target_domain
from .callbacks import make_configure_callback  # noqa: F401  (its old home: installs made before it moved)
from .decoding import bio_tags
from .domains import doc_domain, example_domain, labelled_domain
from .heap import TRIM_EVERY, release_freed_memory
from .training_checks import check_initialize
from .training_summary import print_training_summary
from .models.base import TaggerInput, TaggerOutput
from .models.head import Decoded, copy_domain_rows
from .models.head import decode as head_decode
from .models.head import get_loss as head_loss

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
        "spans_key": "crossner",
        "threshold": 0.0,
        "missing_as": "o",
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
    spans_key: str,
    threshold: float,
    scorer: Optional[Callable],
    missing_as: str = "o",
) -> "CrossNER":
    """Create a cross-domain entity recognizer.

    model (Model[List[Doc], TaggerOutput]): the architecture, e.g. spacy_crossner.BiLSTMCRF.v1.
    target_domain (Optional[str]): the domain whose labels are predicted for a doc whose
        ``doc._.domain`` is unset. Defaults to the only domain when there is one.
    domain_aliases (Dict[str, str]): domains without labels of their own, each mapped to the
        labelled domain whose labels, head and CRF tag it (zero-shot and unsupervised
        adaptation, e.g. ``{"ai": "conll2003"}``). Architectures that model domains (e.g. PGN's
        domain embeddings) still see the doc's own domain.
    spans_key (str): the entities are also written to ``doc.spans[spans_key]``, with their
        probabilities in ``doc.spans[spans_key].attrs["scores"]`` (as spaCy's ``spancat``).
    threshold (float): entities whose probability is below it are not written (0: all are).
    scorer (Optional[Callable]): scoring function (entity P/R/F overall and per type).
    missing_as (str): how the loss reads a token whose gold entity tag is missing
        (``token.ent_iob_ == ""``, or misaligned tokenization) in a doc that has annotation:
        "o" as O (the whole doc is trained as one tag sequence), "missing" as unknown (a CRF
        head marginalises over its tags, a softmax head gives it no loss), e.g. for
        pseudo-labels that keep only confident entities. Docs without any annotation (raw
        text) give no NER loss either way.
    """
    return CrossNER(
        nlp.vocab,
        model,
        name,
        target_domain=target_domain,
        domain_aliases=domain_aliases,
        spans_key=spans_key,
        threshold=threshold,
        scorer=scorer,
        missing_as=missing_as,
    )


@registry.scorers("spacy_crossner.entity_scorer.v1")
def make_entity_scorer() -> Callable:
    """Entity-level exact-match P/R/F, overall (``ents_p/r/f``) and per type."""
    return score_entities


def score_entities(examples: Iterable[Example], **kwargs) -> Dict[str, Any]:
    return get_ner_prf(examples, **kwargs)


class CrossNER(TrainablePipe):
    """Cross-domain NER: per-domain label sets, one shared architecture, constrained decoding,
    entity probabilities."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "crossner",
        *,
        target_domain: Optional[str] = None,
        domain_aliases: Optional[Dict[str, str]] = None,
        spans_key: str = "crossner",
        threshold: float = 0.0,
        scorer: Optional[Callable] = score_entities,
        missing_as: str = "o",
    ) -> None:
        if not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(
                f"[components.{name}] threshold = {threshold}: an entity probability threshold "
                "must be between 0 and 1"
            )
        check_missing_as(missing_as, name)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        settings = {
            "target_domain": target_domain,
            "domain_aliases": dict(domain_aliases or {}),
            "spans_key": spans_key,
            "threshold": float(threshold),
            "missing_as": missing_as,
        }
        # cfg["config_settings"]: what the pipeline's config says, kept once; a saved pipeline
        # loaded with other values (spacy.load with config overrides) takes these instead of
        # its saved ones (see _load_cfg).
        self.cfg: Dict[str, Any] = {
            "labels": {},
            **settings,
            "domain_aliases": dict(settings["domain_aliases"]),
            "config_settings": settings,
            "build_config": {},
            # {domain: T}: the calibrated temperature of each labelled domain's entity
            # probabilities (spacy_crossner.calibrate); a domain without one has T = 1.
            "temperatures": {},
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

    @property
    def missing_as(self) -> str:
        """How the loss reads tokens without gold annotation: "o" or "missing" (factory docs)."""
        return self.cfg.get("missing_as", "o")

    @missing_as.setter
    def missing_as(self, value: str) -> None:
        self.cfg["missing_as"] = check_missing_as(value, self.name)

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

    def init_domain_from(self, source: str, target: str) -> int:
        """Start ``target``'s output rows (heads, CRF) from ``source``'s for the tags they share
        by name: fine-tuning then starts from the pre-trained output layer for those tags.

        RETURNS (int): the number of shared tags (``O`` included).
        """
        for domain in (source, target):
            if domain not in self.cfg["labels"]:
                raise ValueError(
                    f"init_domain_from: '{domain}' has no labels (labelled domains: "
                    f"{sorted(self.cfg['labels'])}); add the target's labels first"
                )
        if not self._is_initialized():
            raise ValueError("init_domain_from: the component is not initialized")
        return copy_domain_rows(self.model, source, target, self.domain_tags())

    def _is_initialized(self) -> bool:
        return bool(self.cfg.get("build_config"))

    def _sync_model_attrs(self) -> None:
        # The one place the model's view of the labels and domains is set from cfg.
        self.model.attrs["domain_tags"] = self.domain_tags()
        self.model.attrs["target_domain"] = self.default_domain()
        self.model.attrs["domain_aliases"] = dict(self.cfg.get("domain_aliases") or {})
        self.model.attrs["temperatures"] = dict(self.cfg.get("temperatures") or {})

    def set_temperatures(self, temperatures: Dict[str, float]) -> None:
        """Set the temperature of labelled domains' entity probabilities (kept in
        ``cfg["temperatures"]``, so saved and loaded with the pipeline). The probabilities of a
        domain's entities become the CRF marginals (or softmax products) of its scores divided by
        T; the predicted entities do not change. T = 1 removes a domain's calibration.

        temperatures (Dict[str, float]): {labelled domain: T}, T > 0 and finite.
        """
        current = dict(self.cfg.get("temperatures") or {})
        for domain, value in temperatures.items():
            if domain not in self.cfg["labels"]:
                raise ValueError(
                    f"[components.{self.name}] temperature of '{domain}': not a labelled domain "
                    f"(labelled domains: {sorted(self.cfg['labels'])})"
                )
            value = float(value)
            if not (numpy.isfinite(value) and value > 0.0):
                raise ValueError(
                    f"[components.{self.name}] temperature of '{domain}' = {value}: a temperature "
                    "must be a positive finite number"
                )
            if value == 1.0:
                current.pop(domain, None)
            else:
                current[domain] = value
        self.cfg["temperatures"] = current
        self._sync_model_attrs()

    def default_domain(self) -> Optional[str]:
        """The domain of docs without ``doc._.domain``: target_domain, or the only domain."""
        if self.cfg["target_domain"] is not None:
            return self.cfg["target_domain"]
        if len(self.cfg["labels"]) == 1:
            return next(iter(self.cfg["labels"]))
        return None

    def doc_labels(self, doc: Doc) -> List[str]:
        """The labels this component can give a doc (those of its labelled domain)."""
        domain = labelled_domain(
            doc_domain(doc, self.default_domain()), self.cfg["labels"], self.cfg["domain_aliases"]
        )
        return list(self.cfg["labels"][domain])

    def _setup_model(self) -> None:
        # Outputs that grow are new parameters to the optimizer (the model's resize_output).
        self._sync_model_attrs()
        self.model.attrs["resize_output"](self.model, self.domain_tags(), self.cfg["build_config"])
        self.cfg["build_config"] = dict(self.model.attrs["build_config"])

    def make_input(
        self, docs: List[Doc], own: Optional[List[str]] = None, gold=None
    ) -> TaggerInput:
        """The model's input for a batch: the docs with their own and their labelled domains
        (resolved here, once per batch) and, in training, their gold tag ids.

        docs (List[Doc]): the batch.
        own (Optional[List[str]]): the docs' own domains, if already known (default: each
            doc's ``doc._.domain``, else the component's default domain).
        gold: per doc, gold tag ids or None (raw text); None at prediction.
        """
        default = self.default_domain()
        if own is None:
            own = [doc_domain(doc, default) for doc in docs]
        known = self.cfg["labels"]
        aliases = self.cfg["domain_aliases"]
        labelled = [labelled_domain(d, known, aliases) for d in own]
        return TaggerInput(list(docs), labelled, list(own), gold)

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
        self.cfg["temperatures"] = {}  # a calibration is of the weights it was fitted for
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
        check_initialize(self.cfg["labels"], nlp)
        self._validate_domains()
        if self.cfg["target_domain"] is None and len(self.cfg["labels"]) > 1 and nlp is not None:
            self.cfg["target_domain"] = infer_target_domain(nlp, self)
        self._sync_model_attrs()
        init_corpus = self.model.attrs.get("init_corpus")
        if init_corpus is not None:
            # e.g. a language model's vocabulary, built from all training text.
            self.model.attrs["build_config"] = {}
            init_corpus(self.model, get_examples)
        sample = [eg.predicted for eg in islice(get_examples(), 10) if len(eg.predicted)]
        for doc in sample:
            if doc_domain(doc, self.default_domain()) is None:
                raise ValueError(
                    "Training docs have no domain and the crossner component has several: "
                    "convert with --domain or set target_domain."
                )
        self.model.initialize(X=self.make_input(sample) if sample else None)
        self.cfg["build_config"] = dict(self.model.attrs["build_config"])
        if nlp is not None:
            print_training_summary(nlp, self, get_examples)

    def _validate_domains(self) -> None:
        """domain_aliases point at labelled domains (checked at initialize and load)."""
        where = f"[components.{self.name}]"
        for alias, domain in self.cfg["domain_aliases"].items():
            if domain not in self.cfg["labels"]:
                raise ValueError(
                    f"{where} domain_aliases maps '{alias}' to '{domain}', which has no labels "
                    f"(labelled domains: {sorted(self.cfg['labels'])})"
                )

    def _check_not_aliased(self, domain: str) -> None:
        aliases = self.cfg["domain_aliases"]
        if domain in aliases:
            raise ValueError(
                f"Labelled training data of domain '{domain}', which domain_aliases maps to "
                f"'{aliases[domain]}': an aliased domain has no labels of its own. Remove it "
                "from domain_aliases, or give its training data as raw text."
            )

    def _example_domain(self, eg: Example) -> str:
        domain = example_domain(eg, self.default_domain())
        if domain is None:
            raise ValueError(
                "A training doc has no domain (doc._.domain) and target_domain is not set: "
                "convert the data with `python -m spacy_crossner convert --domain NAME` or "
                "set target_domain in [components.crossner]."
            )
        return domain

    # -- prediction ---------------------------------------------------------------------------

    #: ``pipe`` predicts each batch in sub-batches of docs of similar length, each at most this
    #: many padded tokens (docs x longest doc); None or 0: the whole batch at once. Not a config
    #: setting (configs stay as they are); set it on the loaded component. Off by default:
    #: benchmarks/throughput.py measured no gain for transformer pipelines (the transformer
    #: sorts its own batches) and a loss for the BiLSTM (more, shorter decoding loops).
    max_batch_items: Optional[int] = None

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of docs, ``batch_size`` at a time; each batch is predicted in
        sub-batches of docs of similar length (less padding, see ``max_batch_items``), and the
        docs come out in the order they went in.

        stream (Iterable[Doc]): the docs.
        batch_size (int): the number of docs buffered at a time.
        YIELDS (Doc): the docs, annotated, in order.
        """
        error_handler = self.get_error_handler()
        for docs in util.minibatch(stream, size=batch_size):
            try:
                for sub in length_batches([len(doc) for doc in docs], self.max_batch_items):
                    part = [docs[i] for i in sub]
                    self.set_annotations(part, self.predict(part))
                yield from docs
            except Exception as e:
                error_handler(self.name, self, docs, e)

    def predict(self, docs: Iterable[Doc]) -> List[Decoded]:
        """The tags, entities and entity probabilities of each doc. Does not modify docs."""
        docs = list(docs)
        if not docs:
            return []
        if not any(len(doc) for doc in docs):
            return [Decoded([], [], []) for _ in docs]
        output = self.model.predict(self.make_input(docs))
        return head_decode(self.model, output, [[t.is_space for t in doc] for doc in docs])

    def set_annotations(self, docs: Iterable[Doc], decoded: List[Decoded]) -> None:
        """Write the entities to ``doc.ents`` (other tokens become O) and, with their
        probabilities, to ``doc.spans[spans_key]``; entities below ``threshold`` are left out."""
        key = self.cfg["spans_key"]
        threshold = self.cfg["threshold"]
        for doc, result in zip(docs, decoded):
            kept = [(span, p) for span, p in zip(result.spans, result.probs) if p >= threshold]
            ents = [Span(doc, start, end, label=label) for (start, end, label), _ in kept]
            doc.ents = ents
            group = SpanGroup(doc, name=key, spans=ents)
            group.attrs["scores"] = numpy.asarray([p for _, p in kept], dtype="float32")
            doc.spans[key] = group

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
        ``drop`` is not used: the dropout rates are the model's own settings.
        Every ``heap.TRIM_EVERY`` updates the heap's free pages go back to the OS
        (:mod:`spacy_crossner.heap`: LM objectives otherwise grow the process without bound).
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
        own = [self._example_domain(eg) for eg in batch]
        for eg, domain in zip(batch, own):
            if not eg.reference.has_annotation("ENT_IOB"):
                continue
            self._check_not_aliased(domain)
            if domain not in self.cfg["labels"]:
                self.cfg["labels"][domain] = []
                self._setup_model()
            for ent in eg.reference.ents:
                if ent.label_ not in self.cfg["labels"][domain]:
                    self.add_label(ent.label_, domain=domain)
        for eg, domain in zip(batch, own):
            if not eg.reference.has_annotation("ENT_IOB"):
                target = self.cfg["domain_aliases"].get(domain, domain)
                if target not in self.cfg["labels"]:
                    raise ValueError(
                        f"Raw-text docs of domain '{target}', which has no labels: map it to a "
                        "labelled domain with domain_aliases in [components.crossner] "
                        f"(labelled domains: {sorted(self.cfg['labels'])})."
                    )
        inputs = self.make_input([eg.predicted for eg in batch], own)
        gold = self._gold(batch, inputs.domains)
        output, backprop = self.model.begin_update(inputs._replace(gold=gold))
        loss, d_scores = self._head_loss(output, gold)
        backprop(d_scores)
        if sgd is not None:
            self.finish_update(sgd)
        # freed gradient buffers go back to the OS now and then (glibc keeps them otherwise)
        self._n_updates = getattr(self, "_n_updates", 0) + 1
        if TRIM_EVERY and self._n_updates % TRIM_EVERY == 0:
            release_freed_memory()
        losses[self.name] += loss
        for name, value in output.losses.items():
            key = f"{self.name}_{name}"
            losses[key] = losses.get(key, 0.0) + value
        return losses

    def _gold(self, examples: List[Example], domains: List[str]) -> List[Optional[List[int]]]:
        domain_tags = self.domain_tags()
        missing = MISSING if self.missing_as == "missing" else 0
        return [
            _gold_tag_ids(eg, domain_tags[domain], missing)
            if eg.reference.has_annotation("ENT_IOB") else None
            for eg, domain in zip(examples, domains)
        ]

    def get_loss(self, examples: Iterable[Example], output: TaggerOutput) -> Tuple[float, Any]:
        """The NER loss of a batch and its gradient with respect to the scores (the model's
        head computes both: a CRF's negative log-likelihood, or softmax cross-entropy)."""
        return self._head_loss(output, self._gold(list(examples), output.domains))

    def _head_loss(self, output: TaggerOutput, gold) -> Tuple[float, Any]:
        loss, d_scores = head_loss(self.model, output, gold)
        if not numpy.isfinite(loss):
            raise ValueError(
                f"The crossner loss is {loss}: training diverged. Lower the learning rate "
                "([training.optimizer]) or check the input features."
            )
        return loss, d_scores

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
            "cfg": lambda b: self._load_cfg(srsly.json_loads(b)),
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
            "cfg": lambda p: self._load_cfg(srsly.read_json(p)),
            "vocab": lambda p: self.vocab.from_disk(p, exclude=exclude),
            "model": lambda p: self._load_model(p.open("rb").read()),
        }
        util.from_disk(path, deserialize, exclude)
        return self

    def _load_cfg(self, saved: Dict[str, Any]) -> None:
        """Take the saved cfg, except the settings the config now gives other values (e.g.
        ``spacy.load(path, config={"components": {"crossner": {"target_domain": ...}}})``):
        settings given at load time win, and are validated."""
        given = self.cfg["config_settings"]
        self.cfg.update(saved)
        was = saved.get("config_settings") or {}
        for key, value in given.items():
            if key in was and was[key] != value:
                self.cfg[key] = copy.deepcopy(value)
        self.cfg["config_settings"] = given
        self.cfg.setdefault("missing_as", "o")  # saved before the setting existed
        check_missing_as(self.cfg["missing_as"], self.name)
        self._validate_domains()
        target = self.cfg["target_domain"]
        if target is not None and target != was.get("target_domain") and \
                target not in self.cfg["labels"] and target not in self.cfg["domain_aliases"]:
            raise ValueError(
                f"[components.{self.name}] target_domain = '{target}' has no labels and is not "
                f"in domain_aliases (labelled domains: {sorted(self.cfg['labels'])})"
            )

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


MISSING_AS = ("o", "missing")
MISSING = -1  # the gold tag id of a missing token (``missing_as = "missing"``)


def check_missing_as(value: str, name: str = "crossner") -> str:
    if value not in MISSING_AS:
        raise ValueError(
            f"[components.{name}] missing_as = {value!r}: choose \"o\" (a token without gold "
            "annotation is trained as O) or \"missing\" (its tag is unknown: marginalised)"
        )
    return value


def _gold_tag_ids(eg: Example, tags: Sequence[str], missing: int = 0) -> List[int]:
    """Gold IOB2 tag ids aligned to the predicted tokens.

    Tokens whose gold is unknown (misaligned tokenization, missing annotation) get ``missing``:
    0, the id of O (``missing_as = "o"``: the doc is one whole tag sequence), or ``MISSING``
    (``missing_as = "missing"``: the head marginalises over the token's tag).
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
            if iob in ("B", "I"):
                ids.append(index[f"{iob}-{token.ent_type_}"])
            else:
                ids.append(0 if iob == "O" else missing)
        return ids
    ids = []
    for biluo in eg.get_aligned_ner():
        if biluo == "O":
            ids.append(0)
            continue
        if biluo is None or biluo in ("-", ""):
            ids.append(missing)
            continue
        prefix, label = biluo.split("-", 1)
        iob = ("B-" if prefix in ("B", "U") else "I-") + label
        ids.append(index[iob])
    return ids
