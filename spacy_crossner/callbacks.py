"""Training-time helpers of the ``crossner`` component, kept out of the component (spaCy keeps
its training callbacks in ``spacy/training/callbacks.py``).

- ``spacy_crossner.configure_crossner.v1``: an ``[initialize.after_init]`` callback that sets
  a sourced component's target domain, adds labels (listed, or read from a corpus) and starts
  the target's output rows from a trained domain's (pre-train then fine-tune).
- :func:`infer_target_domain`: the target domain of a component trained on several labelled
  domains with none set, read from the target or the dev corpus (the component's
  ``initialize`` asks it when it is given the pipeline).
"""
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

from spacy import util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.util import registry
from wasabi import msg

from .docbin import read_docbin, spacy_files
from .domains import doc_domain


@registry.callbacks("spacy_crossner.configure_crossner.v1")
def make_configure_callback(
    component: str = "crossner",
    target_domain: Optional[str] = None,
    labels: Optional[Dict[str, List[str]]] = None,
    labels_from: Optional[str] = None,
    labels_domain: Optional[str] = None,
    init_from: Optional[Union[str, List[str]]] = None,
    missing_as: Optional[str] = None,
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
    init_from (Optional[Union[str, List[str]]]): a trained domain (e.g. the source) whose output rows start the
        target domain's for the tags they share by name (the CrossNER authors' fine-tuning,
        which keeps one output layer over the union of labels); a list of trained domains
        (several sources): each tag's rows come from the first domain in the list that has it;
        None: the target's rows start fresh.
    missing_as (Optional[str]): the component's ``missing_as`` for this training ("o" or
        "missing": how the loss reads tokens without gold annotation, e.g. pseudo-labels'),
        which a sourced component's block cannot set; None: keep the sourced one.
    """

    def configure(nlp: Language) -> Language:
        if component not in nlp.component_names:
            raise ValueError(
                f"[initialize.after_init] spacy_crossner.configure_crossner.v1: no pipe named "
                f"'{component}' (pipes: {nlp.component_names})"
            )
        pipe = nlp.get_pipe(component)
        if missing_as is not None:
            pipe.missing_as = missing_as
        if target_domain is not None:
            pipe.target_domain = target_domain
        for domain, domain_labels in (labels or {}).items():
            for label in domain_labels:
                pipe.add_label(label, domain=domain)
        if labels_from:
            for domain, label in _labels_in_corpus(nlp, labels_from, labels_domain, target_domain):
                pipe.add_label(label, domain=domain)
        if pipe.target_domain is None and len(pipe.cfg["labels"]) > 1:
            pipe.target_domain = infer_target_domain(nlp, pipe, labels_from)
        if init_from:
            if pipe.target_domain is None:
                raise ValueError(
                    "[initialize.after_init] spacy_crossner.configure_crossner.v1: init_from "
                    "needs the target domain: set target_domain there (--vars.target_domain NAME)"
                )
            sources = [init_from] if isinstance(init_from, str) else list(init_from)
            # the last first, so for a tag several sources share the first listed one's rows win
            for source in reversed(sources):
                pipe.init_domain_from(source, pipe.target_domain)
        return nlp

    return configure


def _labels_in_corpus(
    nlp: Language, path: str, domain: Optional[str], fallback: Optional[str]
) -> List[Tuple[str, str]]:
    """(domain, label) pairs of the entities of a ``.spacy`` file or folder, in first-seen order."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"spacy_crossner.configure_crossner.v1: labels_from = {path} does not exist")
    seen = {}
    for file in spacy_files(path):
        for doc in read_docbin(file, nlp.vocab):
            own = domain or doc_domain(doc, fallback)
            if own is None:
                raise ValueError(
                    f"spacy_crossner.configure_crossner.v1: the docs of {file} have no domain: "
                    "set labels_domain or target_domain"
                )
            for ent in doc.ents:
                seen.setdefault((own, ent.label_), None)
    return list(seen)


def infer_target_domain(
    nlp: Language, pipe: TrainablePipe, labels_from: Optional[str] = None
) -> Optional[str]:
    """The target domain of a component trained on several labelled domains with no
    ``target_domain`` set: the one labelled domain of the target corpus (``labels_from``, when
    given) or else of the dev corpus (``[training] dev_corpus``). Prints the choice. Returns
    None when there is no corpus to read (a pipeline built in code: its docs carry their
    domains); raises a ValueError naming ``--vars.target_domain`` when the corpus does not
    single one out.

    pipe (TrainablePipe): the crossner component (this module does not import the component's
        module: the component imports it)."""
    if labels_from and Path(labels_from).exists():
        where = f"labels_from = {labels_from}"
        docs = [doc for file in spacy_files(Path(labels_from)) for doc in read_docbin(file, nlp.vocab)]
    else:
        where, docs = _dev_corpus_docs(nlp)
        if docs is None:
            return None
    labelled = sorted(pipe.cfg["labels"])
    domains = [d for d in dict.fromkeys(doc_domain(doc, None) for doc in docs) if d is not None]
    chosen = [d for d in domains if d in pipe.cfg["labels"]]
    if len(chosen) == 1:
        msg.info(
            f"[components.{pipe.name}] target_domain = '{chosen[0]}': the domain of {where} "
            f"(labelled domains: {', '.join(labelled)}); set --vars.target_domain to choose another"
        )
        return chosen[0]
    seen = f"its docs have the domains {domains}" if domains else "its docs have no labelled domain"
    raise ValueError(
        f"[components.{pipe.name}] target_domain is not set and the training data has several "
        f"labelled domains ({', '.join(labelled)}), and {where} does not single one out "
        f"({seen}). Name it: spacy train ... --vars.target_domain NAME (or target_domain in "
        f"[components.{pipe.name}])."
    )


def _dev_corpus_docs(nlp: Language) -> Tuple[str, Optional[List[Doc]]]:
    """The reference docs of the pipeline config's ``[training] dev_corpus``, or None when the
    config has no dev corpus to read (e.g. a pipeline built in code)."""
    name = nlp.config.get("training", {}).get("dev_corpus")
    where = f"the dev corpus [{name}]"
    if not name:
        return where, None
    try:
        corpus = util.resolve_dot_names(nlp.config.interpolate(), [name])[0]
    except Exception:  # no such section, or its paths unset: nothing to read
        return where, None
    return where, [eg.reference for eg in corpus(nlp)]
