"""Self-training and distillation: pseudo-label raw text with a trained pipeline, then train a
student on gold + pseudo-labelled text (issue 47, part 4).

``python -m spacy_crossner pseudo-label MODEL TEXT OUTPUT --threshold T | --threshold-from-dev DEV``
``python -m spacy_crossner self-train TEACHER CONFIG TEXT OUTPUT_DIR ... [spacy train overrides]``

The teacher labels every sentence with its ``crossner`` component at threshold 0, so every decoded
entity and its probability is in ``doc.spans[spans_key]`` (``attrs["scores"]``). An entity is kept
when its probability is >= the threshold. The output docs carry the domain and:

- mode ``missing``: the kept entities; every other token is unannotated (``ent_iob_ == ""``),
  not O.
- mode ``confident-o``: the kept entities, and O on every token outside all the entities the
  teacher decoded (its Viterbi path says O there); the tokens of a decoded entity whose
  probability is below the threshold stay unannotated, since the teacher is unsure of them.

The threshold chosen on dev (``--threshold-from-dev``) is the smallest threshold at which the
teacher's dev entities with probability >= it reach ``min_precision`` (exact-match entity
precision): the most pseudo-labels at that precision.

How the component learns from them is its setting ``missing_as``: with ``"missing"`` an
unannotated token of an annotated doc is unknown (the CRF head marginalises over its tag, a
softmax head gives it no loss); with ``"o"``, the default of every config, it is read as O, so
the two modes would train alike. ``self_train`` therefore trains the student with
``missing_as = "missing"`` (``--missing-as``), in both modes: in ``confident-o`` mode the
unannotated tokens are those of entities the teacher was unsure of. It is set in the student's
``[components.crossner]`` block, or, for a sourced component (whose block only names its
source), in the ``spacy_crossner.configure_crossner.v1`` callback of ``[initialize.after_init]``.
A pseudo-labelled file trained by hand needs ``--components.crossner.missing_as missing``.
A sentence without a kept entity has no annotation at all and gives no NER loss (the component
treats it as raw text) whatever the setting.

``self_train`` adds the pseudo-labelled corpus to an existing config's
``[corpora.train.domains]`` as the section ``pseudo``, with the *target* domain: it is more train
data for the target's labels and head (as its own domain it would get a head and CRF of its own
and teach the target's nothing). Each round's student is the next round's teacher.
"""
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy
import spacy
from spacy import util
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span

from .docbin import read_docbin, spacy_files
from .domains import get_domain, set_domain

MODES = ("missing", "confident-o")
MISSING_AS = ("missing", "o")  # the component's settings (pipeline.MISSING_AS)
PSEUDO_SECTION = "pseudo"
MULTI_DOMAIN_READERS = ("spacy_crossner.MultiDomainCorpus.v1", "spacy_crossner.MultiDomainCorpus.v2")
CONFIGURE_CALLBACK = "spacy_crossner.configure_crossner.v1"


class PseudoLabelError(ValueError):
    """A user error: a model without the component, a bad threshold, empty text, ..."""


# -- the teacher ------------------------------------------------------------------------------


def crossner_name(nlp: Language, model: Union[str, Path] = "the pipeline") -> str:
    """The name of the pipeline's ``crossner`` component (the first one)."""
    for name in nlp.pipe_names:
        if nlp.get_pipe_meta(name).factory == "crossner":
            return name
    raise PseudoLabelError(
        f"{model} has no crossner component (its pipes: {nlp.pipe_names or 'none'}): "
        "a pipeline trained with spacy_crossner is needed (its entity probabilities)"
    )


def load_teacher(model: Union[str, Path], gpu_id: int = -1) -> Tuple[Language, str]:
    """The pipeline ``model`` with its crossner component writing every decoded entity
    (threshold 0), and that component's name; on GPU ``gpu_id`` (-1: CPU)."""
    if gpu_id >= 0:
        try:
            spacy.require_gpu(gpu_id)
        except ValueError as err:  # thinc: no CuPy, or no such GPU
            raise PseudoLabelError(f"--gpu-id {gpu_id}: {err}; use --gpu-id -1 for the CPU") from None
    try:
        nlp = spacy.load(model)
    except (OSError, IOError) as err:
        raise PseudoLabelError(f"Cannot load the pipeline {model}: {err}") from None
    name = crossner_name(nlp, model)
    if nlp.get_pipe(name).cfg.get("threshold", 0.0) > 0.0:
        # A config override at load time wins over the saved threshold (CrossNER._load_cfg).
        nlp = spacy.load(model, config={"components": {name: {"threshold": 0.0}}})
    return nlp, name


def check_domain(nlp: Language, name: str, domain: Optional[str]) -> str:
    """The domain the pseudo-labels are given: ``domain``, else the component's default."""
    pipe = nlp.get_pipe(name)
    known = list(pipe.domains) + sorted(pipe.cfg.get("domain_aliases") or {})
    if domain is None:
        domain = pipe.default_domain()
        if domain is None:
            raise PseudoLabelError(
                f"The pipeline's {name} component has no target_domain: give --domain, one of "
                f"its domains {known}"
            )
    if domain not in known:
        raise PseudoLabelError(
            f"Unknown domain '{domain}': the pipeline's {name} component has labels for "
            f"{known}; give one of them with --domain"
        )
    return domain


def check_threshold(threshold: float, setting: str = "--threshold") -> float:
    threshold = float(threshold)
    if not 0.0 <= threshold <= 1.0:
        raise PseudoLabelError(
            f"{setting} = {threshold}: an entity probability threshold must be between 0 and 1"
        )
    return threshold


# -- raw text ---------------------------------------------------------------------------------


def read_sentences(path: Union[str, Path]) -> List[List[str]]:
    """The sentences of raw text, as tokens: a ``.txt`` file with one tokenised sentence a line
    (what ``select-corpus`` writes; blank lines are skipped), or ``.spacy`` DocBins (a file or a
    folder)."""
    path = Path(path)
    if not path.exists():
        raise PseudoLabelError(f"Text {path} does not exist")
    if path.is_file() and path.suffix == ".txt":
        from .convert import looks_like_columns
        from .formats import FormatError, read_utf8

        try:
            text = read_utf8(path)  # drops a BOM; a bad byte is reported with its line
        except FormatError as err:
            raise PseudoLabelError(str(err)) from None
        if looks_like_columns(text):
            # Its tags would be labelled as words of the sentences.
            raise PseudoLabelError(
                f"Text {path} is a token/tag column file, not raw text: give one tokenised "
                "sentence a line (python -m spacy_crossner raw-text turns a column file into that)"
            )
        sentences = [line.split() for line in text.splitlines() if line.strip()]
    elif path.is_dir() or path.suffix == ".spacy":
        files = spacy_files(path)
        if not files:
            raise PseudoLabelError(f"{path}: no .spacy file in this folder")
        sentences = []
        for file in files:
            try:
                sentences.extend([t.text for t in doc] for doc in read_docbin(file, spacy.blank("en").vocab))
            except Exception as err:  # DocBin raises several types for a file that is not one
                raise PseudoLabelError(f"{file}: not a readable .spacy DocBin ({err})") from None
        sentences = [s for s in sentences if s]
    else:
        raise PseudoLabelError(
            f"Text {path}: unknown suffix '{path.suffix}' (expected .txt, one tokenised sentence "
            "a line, or .spacy)"
        )
    if not sentences:
        raise PseudoLabelError(f"Text {path} holds no sentence (every line is blank)")
    return sentences


def _make_doc(nlp: Language, words: Sequence[str], domain: Optional[str]) -> Doc:
    doc = Doc(nlp.vocab, words=list(words), spaces=[True] * (len(words) - 1) + [False])
    set_domain(doc, domain)
    return doc


def label(nlp: Language, docs: Iterable[Doc], batch_size: int = 64) -> List[Doc]:
    """The docs run through the pipeline (the teacher: threshold 0, see :func:`load_teacher`)."""
    return list(nlp.pipe(docs, batch_size=batch_size))


# -- pseudo-labels ----------------------------------------------------------------------------


def scored_entities(doc: Doc, spans_key: str) -> List[Tuple[Span, float]]:
    """The entities of ``doc.spans[spans_key]`` with their probabilities."""
    if spans_key not in doc.spans:
        return []
    group = doc.spans[spans_key]
    scores = group.attrs.get("scores")
    if scores is None or len(scores) != len(group):
        raise PseudoLabelError(
            f'doc.spans["{spans_key}"] has no attrs["scores"] for each of its {len(group)} '
            "spans: the entities must come from a crossner component"
        )
    return [(span, float(p)) for span, p in zip(group, scores)]


def pseudo_labelled(doc: Doc, spans_key: str, threshold: float, mode: str = "missing") -> Doc:
    """A new doc with the words and domain of ``doc`` and its pseudo-labels (module docstring).

    doc (Doc): a doc the teacher labelled at threshold 0.
    spans_key (str): the component's ``spans_key``.
    threshold (float): entities with probability >= it are kept.
    mode (str): "missing" or "confident-o".
    """
    if mode not in MODES:
        raise PseudoLabelError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    out = Doc(doc.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
    set_domain(out, get_domain(doc))
    scored = scored_entities(doc, spans_key)
    # the scores are float32: compare at that precision, so a threshold of 0.7 keeps a 0.7
    cut = numpy.float32(threshold)
    kept = [Span(out, s.start, s.end, label=s.label_) for s, p in scored if numpy.float32(p) >= cut]
    outside: List[Span] = []
    if mode == "confident-o":
        decoded = [False] * len(doc)
        for span, _ in scored:
            for i in range(span.start, span.end):
                decoded[i] = True
        outside = [Span(out, i, i + 1) for i, inside in enumerate(decoded) if not inside]
    out.set_ents(kept, outside=outside, default="missing")
    return out


def threshold_for_precision(scored: Sequence[Tuple[float, bool]], min_precision: float) -> Tuple[float, float, int]:
    """The smallest threshold whose kept entities reach ``min_precision``.

    scored (Sequence[Tuple[float, bool]]): (probability, correct) of each predicted dev entity.
    Returns (threshold, precision of the kept entities, number kept). Raises PseudoLabelError
    when no threshold reaches ``min_precision``, naming the best precision there is.
    """
    ranked = sorted(scored, key=lambda x: -x[0])
    best: Optional[Tuple[float, float, int]] = None
    top = (0.0, 0.0)  # the highest precision seen and its threshold
    correct = 0
    for i, (p, ok) in enumerate(ranked):
        correct += ok
        # only a threshold at the last entity of a run of equal probabilities keeps exactly these
        if i + 1 < len(ranked) and ranked[i + 1][0] == p:
            continue
        precision = correct / (i + 1)
        if precision > top[0]:
            top = (precision, p)
        if precision >= min_precision:
            best = (p, precision, i + 1)
    if best is None:
        if not ranked:
            raise PseudoLabelError("The teacher predicts no entity on the dev corpus: no threshold to choose")
        raise PseudoLabelError(
            f"No threshold reaches --min-precision {min_precision:.2f} on dev: the best precision "
            f"is {top[0]:.3f} (threshold {top[1]:.3f}); lower --min-precision or give --threshold"
        )
    return best


@dataclass
class ThresholdChoice:
    threshold: float
    precision: float
    kept: int
    predicted: int
    gold: int

    @property
    def recall(self) -> float:
        return self.precision * self.kept / self.gold if self.gold else 0.0


def choose_threshold(
    nlp: Language, name: str, dev: Union[str, Path], domain: str, min_precision: float = 0.9,
    batch_size: int = 64,
) -> ThresholdChoice:
    """The threshold of :func:`threshold_for_precision` on a labelled dev corpus (``.spacy``);
    dev docs without a domain get ``domain``."""
    check_threshold(min_precision, "--min-precision")
    dev = Path(dev)
    if not dev.exists():
        raise PseudoLabelError(f"--threshold-from-dev {dev} does not exist")
    try:
        gold_docs = [d for f in spacy_files(dev) for d in read_docbin(f, nlp.vocab)]
    except Exception as err:
        raise PseudoLabelError(f"--threshold-from-dev {dev}: not a readable .spacy DocBin ({err})") from None
    gold_docs = [d for d in gold_docs if len(d) and d.has_annotation("ENT_IOB")]
    if not gold_docs:
        raise PseudoLabelError(f"--threshold-from-dev {dev} holds no doc with entity annotation")
    docs = [_make_doc(nlp, [t.text for t in d], get_domain(d) or domain) for d in gold_docs]
    key = nlp.get_pipe(name).cfg["spans_key"]
    scored: List[Tuple[float, bool]] = []
    n_gold = 0
    for gold, pred in zip(gold_docs, label(nlp, docs, batch_size)):
        truth = {(e.start, e.end, e.label_) for e in gold.ents}
        n_gold += len(truth)
        scored.extend((p, (s.start, s.end, s.label_) in truth) for s, p in scored_entities(pred, key))
    threshold, precision, kept = threshold_for_precision(scored, min_precision)
    return ThresholdChoice(threshold, precision, kept, len(scored), n_gold)


@dataclass
class PseudoLabelSummary:
    output: str
    domain: str
    mode: str
    threshold: float
    docs: int = 0
    unlabelled_docs: int = 0
    # whether the docs without any annotation were left out of the output (counted above)
    dropped_unannotated: bool = False
    kept: int = 0
    rejected: int = 0
    entity_tokens: int = 0
    o_tokens: int = 0
    missing_tokens: int = 0
    dev: Optional[ThresholdChoice] = None

    def describe(self) -> str:
        how = (f"chosen on dev: precision {self.dev.precision:.3f} on {self.dev.kept} of "
               f"{self.dev.predicted} dev entities" if self.dev else "given")
        return (
            f"{self.docs:,} docs ({self.domain}, mode {self.mode}): kept {self.kept:,} entities "
            f"with probability >= {self.threshold:.3f} ({how}), left out {self.rejected:,}; "
            f"tokens: {self.entity_tokens:,} in entities, {self.o_tokens:,} O, "
            f"{self.missing_tokens:,} missing; {self.unlabelled_docs:,} docs without any "
            f"annotation{' (left out)' if self.dropped_unannotated else ''} -> {self.output}"
        )

    def to_dict(self) -> Dict[str, Any]:
        """The summary as JSON-ready values (the dev choice with its recall)."""
        record = asdict(self)
        if self.dev is not None:
            record["dev"]["recall"] = self.dev.recall
        return record


def pseudo_label(
    *,
    model: Union[str, Path],
    text: Union[str, Path],
    output: Union[str, Path],
    domain: Optional[str] = None,
    threshold: Optional[float] = None,
    dev: Optional[Union[str, Path]] = None,
    min_precision: float = 0.9,
    mode: str = "missing",
    batch_size: int = 64,
    gpu_id: int = -1,
    progress: Optional[bool] = None,
    drop_unannotated: bool = False,
) -> PseudoLabelSummary:
    """Label raw text with a trained pipeline and write the confident entities as a DocBin.

    model (Union[str, Path]): a pipeline with a crossner component (path or package name).
    text (Union[str, Path]): raw text, see :func:`read_sentences`.
    output (Union[str, Path]): the ``.spacy`` file written (a labelled corpus for
        MultiDomainCorpus, every doc with ``doc._.domain``).
    domain (Optional[str]): the domain of the text, one of the component's (default: its
        target_domain).
    threshold (Optional[float]): keep entities with probability >= it; or None with ``dev``.
    dev (Optional[Union[str, Path]]): a labelled ``.spacy`` dev corpus to choose the threshold on
        (:func:`threshold_for_precision`).
    min_precision (float): the dev precision the chosen threshold must reach.
    mode (str): "missing" or "confident-o" (module docstring).
    batch_size (int): ``nlp.pipe`` batch size.
    gpu_id (int): GPU the teacher runs on (-1: CPU).
    progress (Optional[bool]): show a progress bar (None: when writing to a terminal).
    drop_unannotated (bool): leave the docs without any annotation (no entity kept, and in
        mode "missing" no O either) out of the output; they give a student no NER loss, only
        work. They are counted in the summary either way (``unlabelled_docs``).
    """
    from tqdm import tqdm

    if (threshold is None) == (dev is None):
        raise PseudoLabelError("Give either --threshold or --threshold-from-dev (one of them)")
    if threshold is not None:
        threshold = check_threshold(threshold)
    if mode not in MODES:
        raise PseudoLabelError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    if batch_size < 1:
        raise PseudoLabelError(f"--batch-size must be at least 1, got {batch_size}")
    output = Path(output)
    if output.suffix != ".spacy":
        raise PseudoLabelError(f"Output {output}: give a .spacy file name")
    _check_output(output, Path(text))
    sentences = read_sentences(text)
    nlp, name = load_teacher(model, gpu_id)
    domain = check_domain(nlp, name, domain)
    other = _other_domains(Path(text), domain, nlp.get_pipe(name).cfg.get("domain_aliases") or {})
    if other:
        # The docs' own domain would be replaced by the chosen one, silently.
        raise PseudoLabelError(
            f"Text {text}: its docs carry the domain(s) {other}, but would be pseudo-labelled as "
            f"'{domain}'; give --domain {other[0]} if that is the text's domain, or write the "
            "docs without a domain"
        )
    choice = None
    if dev is not None:
        choice = choose_threshold(nlp, name, dev, domain, min_precision, batch_size)
        threshold = choice.threshold
    key = nlp.get_pipe(name).cfg["spans_key"]
    summary = PseudoLabelSummary(str(output), domain, mode, threshold, dev=choice,
                                 dropped_unannotated=drop_unannotated)
    docbin = DocBin(store_user_data=True)
    docs = (_make_doc(nlp, words, domain) for words in sentences)
    bar = tqdm(total=len(sentences), unit="sent", disable=None if progress is None else not progress)
    for doc in nlp.pipe(docs, batch_size=batch_size):
        bar.update(1)
        out = pseudo_labelled(doc, key, threshold, mode)
        n_kept = len(out.ents)
        summary.docs += 1
        summary.kept += n_kept
        summary.rejected += len(doc.spans[key]) - n_kept if key in doc.spans else 0
        iob = [t.ent_iob_ for t in out]
        summary.entity_tokens += sum(i in ("B", "I") for i in iob)
        summary.o_tokens += iob.count("O")
        summary.missing_tokens += iob.count("")
        annotated = out.has_annotation("ENT_IOB")
        summary.unlabelled_docs += not annotated
        if annotated or not drop_unannotated:
            docbin.add(out)
    bar.close()
    if summary.unlabelled_docs == summary.docs:
        raise PseudoLabelError(
            f"No token of {text} got a pseudo-label: no entity reached the threshold "
            f"{threshold:.3f} (and mode {mode} marks no O); lower the threshold or use "
            "--mode confident-o"
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    docbin.to_disk(output)
    return summary


def _other_domains(text: Path, domain: str, aliases: Dict[str, str]) -> List[str]:
    """The domains, other than ``domain`` (after ``aliases``), that the docs of a .spacy text carry."""
    if not (text.is_dir() or text.suffix == ".spacy"):
        return []
    found = set()
    for file in spacy_files(text):
        for doc in read_docbin(file, spacy.blank("en").vocab):
            name = get_domain(doc)
            if name is not None and aliases.get(name, name) != aliases.get(domain, domain):
                found.add(name)
    return sorted(found)


def _check_output(output: Path, text: Path) -> None:
    """Refuse, before any labelling, an output that cannot be written or would replace the text."""
    if output.is_dir():
        raise PseudoLabelError(f"Output {output} is a folder: give the path of the .spacy file to write")
    if output.exists() and text.exists():
        inputs = spacy_files(text) if text.is_dir() else [text]
        if any(output.resolve() == Path(f).resolve() for f in inputs):
            raise PseudoLabelError(
                f"Output {output} is also the text to label: writing it would replace that text; "
                "give another output path"
            )
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise PseudoLabelError(f"Output {output}: {parent} is a file, not a folder")
            break


# -- self-training / distillation -------------------------------------------------------------


@dataclass
class RoundResult:
    round: int
    teacher: str
    pseudo: PseudoLabelSummary
    student: str
    dev_f1: Optional[float]


@dataclass
class SelfTrainSummary:
    output_dir: str
    rounds: List[RoundResult] = field(default_factory=list)

    @property
    def student(self) -> str:
        return self.rounds[-1].student


def load_student_config(config: Union[str, Path], overrides: Dict[str, Any]):
    """The student's config with ``overrides``, checked: ``[corpora.train]`` must be a
    MultiDomainCorpus without a ``pseudo`` section of its own."""
    config = Path(config)
    if not config.exists():
        raise PseudoLabelError(f"Config {config} does not exist")
    try:
        cfg = util.load_config(config, overrides=overrides, interpolate=False)
    except Exception as err:  # confection's ConfigValidationError and parse errors
        raise PseudoLabelError(f"Config {config}: {err}") from None
    train = cfg.get("corpora", {}).get("train", {})
    if train.get("@readers") not in MULTI_DOMAIN_READERS or "domains" not in train:
        raise PseudoLabelError(
            f"Config {config}: [corpora.train] must be spacy_crossner.MultiDomainCorpus.v1 or .v2 "
            "with [corpora.train.domains] (as configs/bilstm_joint.cfg and configs/trf_joint.cfg)"
        )
    if PSEUDO_SECTION in train["domains"]:
        raise PseudoLabelError(
            f"Config {config} already has [corpora.train.domains.{PSEUDO_SECTION}], the section "
            "self-train writes: rename it"
        )
    return cfg


def with_pseudo_corpus(
    cfg, pseudo: Union[str, Path], domain: str, upsample: float, missing_as: str = "missing"
):
    """A copy of the student's config with the pseudo-labelled corpus as the section
    ``[corpora.train.domains.pseudo]`` of domain ``domain`` (the target's), and its crossner
    component reading unannotated tokens as ``missing_as`` (:func:`set_missing_as`)."""
    cfg = cfg.copy()
    set_missing_as(cfg, missing_as)
    # Pseudo-labels are more train data of the target's domain, on purpose: the sections that
    # already hold that domain say so too, or the reader refuses two corpora of one domain
    # (spacy_crossner.training_checks.check_distinct_domains).
    for name in _sections_of_domain(cfg, domain):
        cfg["corpora"]["train"]["domains"][name]["domain"] = domain
    section = {"path": str(Path(pseudo).resolve()), "domain": domain, "upsample": upsample}
    train = cfg["corpora"]["train"]
    if not _mixes_by_factor(train, upsample):
        del section["upsample"]
    train["domains"][PSEUDO_SECTION] = section
    return cfg


def set_missing_as(cfg, missing_as: str) -> List[str]:
    """Set the ``missing_as`` of the config's crossner components (in place): in the block of
    each one built by the crossner factory, and, for a sourced one, in the
    ``configure_crossner`` callback of ``[initialize.after_init]`` that names it (a sourced
    block holds only its source). Returns the names of the components set; raises
    PseudoLabelError when there is none."""
    if missing_as not in MISSING_AS:
        raise PseudoLabelError(f"--missing-as {missing_as!r}: choose one of {', '.join(MISSING_AS)}")
    components = cfg.get("components", {})
    named = [name for name, block in components.items() if block.get("factory") == "crossner"]
    for name in named:
        components[name]["missing_as"] = missing_as
    after = cfg.get("initialize", {}).get("after_init") or {}
    if after.get("@callbacks") == CONFIGURE_CALLBACK:
        target = after.get("component", "crossner")
        if target not in named and "source" in components.get(target, {}):
            after["missing_as"] = missing_as
            named.append(target)
    if not named:
        raise PseudoLabelError(
            "The student's config has no crossner component whose missing_as self-train can set: "
            "none built by the crossner factory, and no sourced one named by "
            f"[initialize.after_init] {CONFIGURE_CALLBACK} (add it there with component = "
            "the pipe's name, as configs/trf_finetune.cfg does)"
        )
    return named


def _check_missing_as_overrides(overrides: Dict[str, Any], missing_as: str) -> None:
    """A ``missing_as`` given as a spacy train override must agree with ``--missing-as``."""
    for key, value in overrides.items():
        if key.split(".")[-1] == "missing_as" and value != missing_as:
            raise PseudoLabelError(
                f"--{key} {value}: self-train sets the student's missing_as from --missing-as "
                f"(now {missing_as!r}); give --missing-as {value} instead"
            )


def _mixes_by_factor(train: Dict[str, Any], upsample: float) -> bool:
    """Whether ``[corpora.train]`` samples its corpora by ``upsample`` factors (v1, or v2 with
    mix = "upsample"); v2's other mixes go by the corpora's sizes, where a factor other than 1
    is an error."""
    if train.get("@readers") != "spacy_crossner.MultiDomainCorpus.v2" or train.get("mix", "sqrt") == "upsample":
        return True
    if upsample != 1.0:
        raise PseudoLabelError(
            f"--pseudo-upsample {upsample}: the config's MultiDomainCorpus.v2 mixes its corpora by "
            f"mix = {train.get('mix', 'sqrt')!r}, not by factors; leave --pseudo-upsample out, or "
            "set mix = \"upsample\" in [corpora.train] to use factors"
        )
    return False


def _sections_of_domain(cfg, domain: str) -> List[str]:
    """The labelled sections of ``[corpora.train.domains]`` without a ``domain`` setting whose
    docs carry ``domain`` (read from their .spacy files)."""
    from spacy.vocab import Vocab

    from .docbin import read_docbin, spacy_files
    from .domains import get_domain

    sections = cfg.interpolate()["corpora"]["train"]["domains"]
    names = []
    for name, section in sections.items():
        if section.get("raw") or section.get("domain") is not None or not section.get("path"):
            continue
        if not isinstance(section["path"], (str, Path)):
            raise PseudoLabelError(
                f"[corpora.train.domains.{name}] path = {section['path']!r} is not a path (an "
                "override such as --paths.source_train given without its value?)"
            )
        files = [f for f in spacy_files(section["path"]) if f.suffix == ".spacy" and f.is_file()]
        if any(get_domain(doc) == domain for f in files for doc in read_docbin(f, Vocab())):
            names.append(name)
    return names


def _dev_f1(model_dir: Path) -> Optional[float]:
    meta = model_dir / "meta.json"
    if not meta.exists():
        return None
    score = json.loads(meta.read_text(encoding="utf8")).get("performance", {}).get("ents_f")
    return None if score is None else float(score)


def self_train(
    *,
    teacher: Union[str, Path],
    config: Union[str, Path],
    text: Union[str, Path],
    output_dir: Union[str, Path],
    domain: Optional[str] = None,
    threshold: Optional[float] = None,
    dev: Optional[Union[str, Path]] = None,
    min_precision: float = 0.9,
    mode: str = "missing",
    missing_as: str = "missing",
    rounds: int = 1,
    pseudo_upsample: float = 1.0,
    overrides: Optional[Dict[str, Any]] = None,
    gpu_id: int = -1,
    batch_size: int = 64,
    drop_unannotated: bool = False,
) -> SelfTrainSummary:
    """Pseudo-label ``text`` with ``teacher``, train a student with ``config`` on its corpora +
    the pseudo-labels, and repeat with the student as teacher for ``rounds`` rounds.

    teacher (Union[str, Path]): the first round's labelling pipeline.
    config (Union[str, Path]): the student's training config (e.g. configs/trf_joint.cfg for
        self-training, configs/bilstm_joint.cfg for distillation into the word/char BiLSTM-CRF),
        with ``[corpora.train]`` a MultiDomainCorpus.
    text (Union[str, Path]): raw text (:func:`read_sentences`).
    output_dir (Union[str, Path]): ``round<N>/pseudo.spacy``, ``round<N>/config.cfg`` and
        ``round<N>/training/model-{best,last}`` for each round.
    domain, threshold, dev, min_precision, mode, batch_size: as :func:`pseudo_label`; with
        ``dev`` the threshold is chosen again for each round's teacher.
    missing_as (str): how the student's loss reads the tokens the pseudo-labels leave
        unannotated: "missing" (marginalised; the default, in both modes) or "o" (as O).
    rounds (int): labelling + training rounds (1: plain distillation / one self-training step).
    pseudo_upsample (float): the pseudo-labelled section's ``upsample``.
    overrides (Optional[Dict[str, Any]]): ``spacy train`` overrides (``paths.source_train`` ...).
    gpu_id (int): GPU for labelling and training (-1: CPU).
    drop_unannotated (bool): as :func:`pseudo_label`.
    """
    from spacy.cli.train import train as spacy_train

    if rounds < 1:
        raise PseudoLabelError(f"--rounds must be at least 1, got {rounds}")
    if not (0 < pseudo_upsample < float("inf")):
        raise PseudoLabelError(f"--pseudo-upsample must be a positive number, got {pseudo_upsample}")
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise PseudoLabelError(f"Output {output_dir} is a file, not a folder")
    _check_missing_as_overrides(dict(overrides or {}), missing_as)
    base = load_student_config(config, dict(overrides or {}))
    set_missing_as(base.copy(), missing_as)  # a config it cannot be set in fails before labelling
    _mixes_by_factor(base["corpora"]["train"], pseudo_upsample)  # refuse a factor v2 would not use
    summary = SelfTrainSummary(str(output_dir))
    current = str(teacher)
    for n in range(1, rounds + 1):
        here = output_dir / f"round{n}"
        pseudo = pseudo_label(model=current, text=text, output=here / "pseudo.spacy", domain=domain,
                              threshold=threshold, dev=dev, min_precision=min_precision, mode=mode,
                              batch_size=batch_size, gpu_id=gpu_id, drop_unannotated=drop_unannotated)
        cfg = with_pseudo_corpus(base, here / "pseudo.spacy", pseudo.domain, pseudo_upsample, missing_as)
        cfg.to_disk(here / "config.cfg")
        spacy_train(here / "config.cfg", here / "training", use_gpu=gpu_id)
        best = here / "training" / "model-best"
        student = best if best.exists() else here / "training" / "model-last"
        summary.rounds.append(RoundResult(n, current, pseudo, str(student), _dev_f1(student)))
        current = str(student)
    return summary
