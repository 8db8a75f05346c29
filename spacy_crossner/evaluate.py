"""Entity-level evaluation of a pipeline on a ``.spacy`` corpus, in two scoring modes.

``python -m spacy_crossner evaluate MODEL DATA --mode sentence|crossner-compat``

- ``sentence``: every doc (sentence) is scored on its own: an entity is correct when its start,
  end and type match a gold entity of the same doc (spaCy's ``Scorer`` semantics).
- ``crossner-compat``: the CrossNER authors' scoring (specs/crossner_benchmark.md section 6): the
  IOB2 tags of all docs of the split are concatenated into one stream with no sentence
  boundaries and chunked with conlleval's rules, so a tag sequence that opens a sentence with
  ``I-X`` continues an ``X`` entity ending the previous sentence. The authors' script reads its
  last column as the prediction, which swaps P and R in their logs (F1 is unchanged); the output
  gives the true P and R and, under ``authors_p``/``authors_r``, the swapped values.

The crossner component decodes under BIO constraints, so its entities always open with ``B-``:
the two modes then differ only where gold sentences open with ``I-`` or where an entity ends a
sentence and the next one starts with the same type's ``I-`` tag.

The metrics JSON has the keys and scale of ``spacy evaluate --output`` (fractions in 0..1):
``token_acc``/``token_p``/``token_r``/``token_f`` (1.0: the gold tokenization is kept), ``ents_p``, ``ents_r``, ``ents_f``,
``ents_per_type`` ({label: {p, r, f}}) and ``speed`` (words per second), so scripts can switch
between the two and both can be given to ``python -m spacy_crossner report``. Unlike
``spacy evaluate``, the docs keep their gold tokens and ``doc._.domain`` (``spacy evaluate``
re-tokenizes the text unless ``--gold-preproc`` is given, and drops the domain, so every doc is
predicted with the labels of the component's ``target_domain``). ``label_map`` renames the gold
labels of the test data before scoring (a model trained on ``person`` scored on data saying
``PER``). Counts (``tp/fp/fn`` overall and per type)
and what was scored (``mode``, ``domain``, ``labels``...) are added. For a pipeline with a
``crossner`` component, ``ents_ece`` and ``calibration`` say how well its entity probabilities
match their accuracy (expected calibration error and reliability table, overall and per domain;
:mod:`spacy_crossner.calibrate`).
"""
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import srsly

from .formats import conlleval_chunks, split_tag
from .labels import LabelMapError, load_label_map, map_label

MODES = ("sentence", "crossner-compat")

Tags = Sequence[str]


class EvaluationError(ValueError):
    """A user error: missing model or data, bad option."""


# -- scoring (pure functions over tag sequences) -------------------------------------------------


def _restrict(tags: Tags, labels: Optional[Set[str]]) -> List[str]:
    if labels is None:
        return list(tags)
    out = []
    for tag in tags:
        prefix, label = split_tag(tag)
        out.append(tag if prefix != "O" and label in labels else "O")
    return out


def _count(
    gold: Iterable[Tuple[int, int, str]], pred: Iterable[Tuple[int, int, str]],
    tp: Counter, fp: Counter, fn: Counter,
) -> None:
    gold_set, pred_set = set(gold), set(pred)
    for span in pred_set:
        (tp if span in gold_set else fp)[span[2]] += 1
    for span in gold_set - pred_set:
        fn[span[2]] += 1


def _prf(tp: int, fp: int, fn: int) -> Dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"p": p, "r": r, "f": f}


def score_tags(
    gold: Sequence[Tags],
    pred: Sequence[Tags],
    *,
    mode: str = "sentence",
    labels: Optional[Iterable[str]] = None,
) -> Dict[str, Any]:
    """Entity-level exact-match P/R/F of predicted tag sequences against gold ones.

    gold (Sequence[Sequence[str]]): gold tags, one sequence per sentence (any scheme conlleval
        reads: IOB1/IOB2/BIOES/BILOU).
    pred (Sequence[Sequence[str]]): predicted tags, aligned with ``gold`` (same lengths).
    mode (str): "sentence" (each sentence chunked and scored on its own) or "crossner-compat"
        (all sentences concatenated into one stream, then chunked; see the module docstring).
    labels (Optional[Iterable[str]]): score only these entity types; tags of other types count
        as O (before chunking). None scores every type.
    RETURNS (Dict[str, Any]): ``ents_p/r/f`` (0..1), ``ents_per_type`` {label: {p, r, f}},
        ``counts`` {tp, fp, fn} and ``counts_per_type`` {label: {tp, fp, fn}}.
    """
    if mode not in MODES:
        raise EvaluationError(f"Unknown mode '{mode}': choose one of {', '.join(MODES)}")
    if len(gold) != len(pred):
        raise EvaluationError(f"{len(gold)} gold sequences but {len(pred)} predicted ones")
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise EvaluationError(
                f"sentence {i}: {len(g)} gold tags but {len(p)} predicted tags"
            )
    keep = None if labels is None else set(labels)
    tp: Counter = Counter()
    fp: Counter = Counter()
    fn: Counter = Counter()
    if mode == "sentence":
        for g, p in zip(gold, pred):
            _count(conlleval_chunks(_restrict(g, keep)), conlleval_chunks(_restrict(p, keep)),
                   tp, fp, fn)
    else:
        stream_gold = [t for g in gold for t in _restrict(g, keep)]
        stream_pred = [t for p in pred for t in _restrict(p, keep)]
        _count(conlleval_chunks(stream_gold), conlleval_chunks(stream_pred), tp, fp, fn)
    types = sorted(set(tp) | set(fp) | set(fn))
    total = _prf(sum(tp.values()), sum(fp.values()), sum(fn.values()))
    result: Dict[str, Any] = {
        "ents_p": total["p"],
        "ents_r": total["r"],
        "ents_f": total["f"],
        "ents_per_type": {t: _prf(tp[t], fp[t], fn[t]) for t in types},
        "counts": {"tp": sum(tp.values()), "fp": sum(fp.values()), "fn": sum(fn.values())},
        "counts_per_type": {t: {"tp": tp[t], "fp": fp[t], "fn": fn[t]} for t in types},
    }
    if mode == "crossner-compat":
        # the authors' conlleval call reads the last column (gold) as the prediction
        result["authors_p"], result["authors_r"] = total["r"], total["p"]
    return result


def doc_tags(doc) -> List[str]:
    """The IOB2 tags of a Doc's entities (O outside them)."""
    return [f"{t.ent_iob_}-{t.ent_type_}" if t.ent_iob_ in ("B", "I") else "O" for t in doc]


# -- evaluation of a pipeline --------------------------------------------------------------------


def _load_docs(data: Path, vocab) -> list:
    from spacy.tokens import DocBin

    if not data.exists():
        raise EvaluationError(f"Data not found: {data}")
    from .docbin import spacy_files

    files = spacy_files(data)
    if not files:
        raise EvaluationError(f"No .spacy files in {data}")
    docs = []
    for file in files:
        try:
            docs.extend(DocBin().from_disk(file).get_docs(vocab))
        except Exception as err:  # a corrupt or non-DocBin file
            raise EvaluationError(_unreadable_docbin(file, err)) from err
    if not docs:
        raise EvaluationError(f"{data} holds no docs")
    return docs


def _unreadable_docbin(file: Path, err: Exception) -> str:
    """What to do about a data file that is not a DocBin. spaCy's E1014 suggests its own
    `spacy convert file.json`, which is not how CrossNER's column files are converted."""
    detail = "" if "E1014" in str(err) else f" ({type(err).__name__}: {err})"
    return (
        f"Cannot read {file} as a .spacy DocBin{detail}. A token/tag column file (CoNLL, "
        f"CrossNER) must be converted first: python -m spacy_crossner convert {file} OUTPUT_DIR "
        "--domain DOMAIN, then evaluate on OUTPUT_DIR"
    )


def evaluate(
    *,
    model: Union[str, Path],
    data: Union[str, Path],
    output: Optional[Union[str, Path]] = None,
    mode: str = "sentence",
    labels: Optional[Sequence[str]] = None,
    domain: Optional[str] = None,
    gpu_id: int = -1,
    batch_size: int = 256,
    nlp=None,
    label_map: Optional[Union[str, Path, Dict[str, str]]] = None,
) -> Dict[str, Any]:
    """Run a pipeline on the gold-tokenized docs of a corpus and score its entities.

    model (Union[str, Path]): a trained pipeline directory (what ``spacy.load`` takes).
    data (Union[str, Path]): a ``.spacy`` file, or a folder of them.
    output (Optional[Union[str, Path]]): write the metrics JSON here (parent dirs are created).
    mode (str): "sentence" or "crossner-compat" (module docstring).
    labels (Optional[Sequence[str]]): score only these types; others count as O.
    domain (Optional[str]): domain set on every doc (default: each doc's ``doc._.domain``; docs
        without one get the crossner component's ``target_domain``).
    gpu_id (int): GPU to run on, -1 = CPU.
    batch_size (int): docs per ``nlp.pipe`` batch.
    nlp (Optional[Language]): an already loaded pipeline, used instead of loading ``model``.
    label_map (Optional[Union[str, Path, Dict[str, str]]]): rename the gold labels of the data
        before scoring: a JSON file, inline JSON or a dict ({"PER": "person"}).
    RETURNS (Dict[str, Any]): the metrics (``score_tags``) plus ``token_acc`` and ``speed`` (as
        ``spacy evaluate``), ``mode``, ``model``, ``data``, ``domain``, ``labels``, ``label_map``,
        ``n_docs``, ``n_words``, ``words_per_second``; with a crossner component, ``ents_ece``
        and ``calibration`` (:func:`entity_calibration`: ECE and reliability table overall and
        per domain).
    """
    import spacy
    from spacy.tokens import Doc

    from .domains import UnknownDomainError, get_domain, set_domain

    if mode not in MODES:
        raise EvaluationError(f"Unknown mode '{mode}': choose one of {', '.join(MODES)}")
    if output is not None and Path(output).is_dir():
        # checked before scoring, not after minutes of it
        raise EvaluationError(f"--output {output} is a folder: give the path of the JSON file to write")
    try:
        label_map = load_label_map(label_map)
    except LabelMapError as err:
        raise EvaluationError(str(err)) from None
    if nlp is None:
        model_path = Path(model)
        if not model_path.exists():
            raise EvaluationError(f"Model not found: {model_path}")
        if gpu_id >= 0:
            spacy.require_gpu(gpu_id)
        try:
            nlp = spacy.load(model_path)
        except (OSError, ValueError) as err:
            raise EvaluationError(f"Cannot load the pipeline {model_path}: {err}") from err
    data_path = Path(data)
    gold_docs = _load_docs(data_path, nlp.vocab)
    same_as_dev = _same_as_dev(nlp, data_path, gold_docs)
    unused_map: List[str] = []
    if label_map:
        gold_docs, unused_map = _map_gold_labels(gold_docs, label_map)
    inputs = []
    for gold in gold_docs:
        doc = Doc(nlp.vocab, words=[t.text for t in gold], spaces=[bool(t.whitespace_) for t in gold])
        set_domain(doc, domain or get_domain(gold))
        inputs.append(doc)
    crossner_pipes = _crossner_pipes(nlp)
    defaulted = _default_to_only_domain(inputs, crossner_pipes) if domain is None else None
    domains_used = sorted({get_domain(d) for d in inputs if get_domain(d)})
    if not domains_used and crossner_pipes:
        target = crossner_pipes[0].default_domain()
        domains_used = [target] if target else []
    known_labels = set()
    for name, pipe in nlp.pipeline:
        known_labels.update(getattr(pipe, "labels", ()) or ())
    gold_labels = {e.label_ for d in gold_docs for e in d.ents}
    predictable = _predictable_labels(nlp, inputs, known_labels)
    gold_counts: Dict[str, int] = {}
    for d in gold_docs:
        for e in d.ents:
            gold_counts[e.label_] = gold_counts.get(e.label_, 0) + 1
    unpredictable = {
        label: n
        for label, n in sorted(gold_counts.items())
        if label not in predictable and (not labels or label in labels)
    }
    if labels:
        unknown = sorted(set(labels) - known_labels - gold_labels)
        if unknown:
            raise EvaluationError(
                f"--labels {', '.join(unknown)}: not a label of the model or the data "
                f"(data labels: {', '.join(sorted(gold_labels)) or 'none'})"
            )
    start = time.perf_counter()
    try:
        predicted = list(nlp.pipe(inputs, batch_size=batch_size))
    except UnknownDomainError as err:
        hint = _domain_hint(crossner_pipes[0], gold_counts) if crossner_pipes else ""
        raise EvaluationError(f"{err}{hint}") from err
    except ValueError as err:  # the component's message says what is wrong
        raise EvaluationError(str(err)) from err
    seconds = time.perf_counter() - start
    n_words = sum(len(d) for d in inputs)
    scores = score_tags(
        [doc_tags(d) for d in gold_docs], [doc_tags(d) for d in predicted],
        mode=mode, labels=labels or None,
    )
    calibration = entity_calibration(
        gold_docs, predicted, crossner_pipes, labels=labels or None, default=domains_used
    )
    result: Dict[str, Any] = {
        **scores,
        "mode": mode,
        "model": str(model) if model is not None else None,
        "data": str(data_path),
        "domain": ", ".join(domains_used) or None,
        "labels": sorted(labels) if labels else None,
        "n_docs": len(gold_docs),
        "n_words": n_words,
        "n_gold_entities": scores["counts"]["tp"] + scores["counts"]["fn"],
        "words_per_second": n_words / seconds if seconds > 0 else None,
        "label_map": label_map,
    }
    if calibration is not None:
        result["ents_ece"] = calibration["overall"]["ece"]
        result["calibration"] = calibration
    # the keys of `spacy evaluate --output`: tokens are the gold ones, speed in words per second
    for key in ("token_acc", "token_p", "token_r", "token_f"):
        result[key] = 1.0
    result["speed"] = result["words_per_second"]
    notes = []
    if labels:
        notes.append(
            f"only the types {', '.join(sorted(labels))} are scored; entities of other types "
            "(gold and predicted) count as O"
        )
    if defaulted:
        notes.append(defaulted)
    if same_as_dev:
        notes.append(same_as_dev)
    if unused_map:
        notes.append(
            "--label-map entries that matched no gold label of the data: " + ", ".join(unused_map)
        )
    result["unpredictable_labels"] = unpredictable
    if unpredictable:
        notes.append(
            "the model cannot predict these gold types of the data (no such label in the domain "
            "it tags these docs with), so they count as misses: "
            + ", ".join(f"{label} ({n})" for label, n in unpredictable.items())
        )
    if notes:
        result["note"] = "; ".join(notes)
    if output is not None:
        out = Path(output)
        out.parent.mkdir(parents=True, exist_ok=True)
        srsly.write_json(out, result)
    return result


def entity_calibration(
    gold_docs: list, predicted: list, pipes: list, *, labels: Optional[Sequence[str]] = None,
    default: Sequence[str] = (), n_bins: Optional[int] = None,
) -> Optional[Dict[str, Any]]:
    """How well the entity probabilities of the (first) crossner component match their accuracy:
    ECE and reliability table (:mod:`spacy_crossner.calibrate`) over all predicted entities and
    per domain. An entity is correct when it matches a gold entity of its doc exactly (the
    ``sentence`` mode, in either mode). None without a crossner component.

    RETURNS (Optional[Dict[str, Any]]): ``overall`` and ``per_domain`` ({domain: summary}, by
        the docs' own domains) :func:`~.calibrate.calibration_summary` dicts, ``spans_key``,
        ``temperatures`` (the component's, {labelled domain: T}; empty: uncalibrated).
    """
    from .calibrate import DEFAULT_BINS, calibration_summary, scored_entities
    from .domains import get_domain

    if not pipes:
        return None
    pipe = pipes[0]
    key = pipe.cfg["spans_key"]
    n_bins = n_bins or DEFAULT_BINS
    fallback = default[0] if len(default) == 1 else None
    every: list = []
    by_domain: Dict[str, list] = {}
    for gold, doc in zip(gold_docs, predicted):
        scored = scored_entities(gold, doc, key, labels)
        every.extend(scored)
        by_domain.setdefault(str(get_domain(doc) or fallback), []).extend(scored)
    return {
        "spans_key": key,
        "temperatures": dict(pipe.cfg.get("temperatures") or {}),
        "overall": calibration_summary(every, n_bins),
        "per_domain": {d: calibration_summary(s, n_bins) for d, s in sorted(by_domain.items())},
    }


def _map_gold_labels(docs: list, label_map: Dict[str, str]) -> Tuple[list, List[str]]:
    """The docs with their entity labels renamed, and the map's keys that matched no label."""
    from spacy.tokens import Span

    seen: Set[str] = set()
    for doc in docs:
        seen.update(e.label_ for e in doc.ents)
        doc.ents = [
            Span(doc, e.start, e.end, label=map_label(e.label_, label_map)) for e in doc.ents
        ]
    return docs, sorted(set(label_map) - seen)


def _same_as_dev(nlp, data_path: Path, gold_docs: list) -> Optional[str]:
    """A note when the scored data is the dev set the pipeline was trained with (its config's
    ``[corpora.dev] path``): the same file, or a file with the same sentences and entities.
    Early stopping chose the model on it, so its score is not a held-out test score."""
    try:
        config = nlp.config.interpolate()
    except Exception:  # a reference that cannot be filled: nothing to compare
        return None
    dev = (config.get("corpora", {}).get("dev") or {}).get("path")
    if not dev:
        return None
    dev_path = Path(str(dev))
    if not dev_path.exists():
        return None  # trained elsewhere; nothing to compare
    same = dev_path.resolve() == data_path.resolve()
    if not same:
        try:
            dev_docs = _load_docs(dev_path, nlp.vocab)
        except EvaluationError:
            return None
        signature = lambda docs: [
            ([t.text for t in d], [(e.start, e.end, e.label_) for e in d.ents]) for d in docs
        ]
        same = signature(dev_docs) == signature(gold_docs)
    if not same:
        return None
    how = "is" if dev_path.resolve() == data_path.resolve() else "has the same sentences and entities as"
    return (
        f"{data_path} {how} the dev set the model was trained with ([corpora.dev] path = "
        f"{dev_path}): early stopping chose the model on it, so this is not a held-out test score"
    )


def _default_to_only_domain(inputs: list, pipes: list) -> Optional[str]:
    """Docs of a domain the model has no labels for are tagged with its only labelled domain
    (a model trained on one labelled domain has one way to tag anything). Returns a note
    saying so, or None when nothing changed."""
    from .domains import get_domain, set_domain

    if len(pipes) != 1 or len(pipes[0].label_data) != 1:
        return None
    pipe = pipes[0]
    only = next(iter(pipe.label_data))
    known = set(pipe.label_data) | set(pipe.cfg.get("domain_aliases") or {})
    changed: Dict[str, int] = {}
    for doc in inputs:
        own = get_domain(doc) or pipe.default_domain()
        if own not in known:
            changed[str(own)] = changed.get(str(own), 0) + 1
            set_domain(doc, only)
    if not changed:
        return None
    which = ", ".join(f"'{d}' ({n:,} docs)" for d, n in sorted(changed.items()))
    return (
        f"docs of the domain {which} were tagged with the labels of '{only}', the model's only "
        f"labelled domain (--domain {only}; pass --domain to choose otherwise)"
    )


def _domain_hint(pipe, gold_counts: Dict[str, int]) -> str:
    """Which --domain to pass, best first: the labelled domains ranked by how many of the
    data's gold entities carry one of their labels (zero-shot on a source's types picks the
    source, scoring target data picks the target)."""
    labelled = list(pipe.label_data)
    if not labelled:
        return ""
    gold = sum(gold_counts.values())

    def covered(domain: str) -> int:
        own = set(pipe.label_data[domain])
        return sum(n for label, n in gold_counts.items() if label in own)

    ranked = sorted(labelled, key=lambda d: (-covered(d), labelled.index(d)))
    options = ", ".join(
        f"--domain {d} (its labels cover {covered(d):,} of the data's {gold:,} gold entities)"
        for d in ranked
    )
    return (
        f" To score this model on data of another domain, tag every doc with one of its "
        f"labelled domains, best match first: {options}"
    )


def _crossner_pipes(nlp) -> list:
    """The pipeline's crossner components (found by factory, whatever their names)."""
    return [
        nlp.get_pipe(name)
        for name in nlp.pipe_names
        if nlp.get_pipe_meta(name).factory == "crossner"
    ]


def _predictable_labels(nlp, docs, known_labels: Set[str]) -> Set[str]:
    """The labels the pipeline can assign to these docs (their domains' label sets)."""
    from .domains import UnknownDomainError

    pipes = _crossner_pipes(nlp)
    if not pipes:
        return set(known_labels)
    out: Set[str] = set()
    for pipe in pipes:
        for doc in docs:
            try:
                out.update(pipe.doc_labels(doc))
            except UnknownDomainError:
                pass  # prediction reports the unknown domain, with the fix
    return out


def summary_table(result: Dict[str, Any]) -> str:
    """A plain-text table of P/R/F (x100) per type and overall."""
    rows = [("type", "P", "R", "F", "gold")]
    counts = result.get("counts_per_type", {})
    for label, prf in sorted(result["ents_per_type"].items()):
        c = counts.get(label, {})
        rows.append((label, f"{100 * prf['p']:.2f}", f"{100 * prf['r']:.2f}",
                     f"{100 * prf['f']:.2f}", str(c.get("tp", 0) + c.get("fn", 0))))
    c = result.get("counts", {})
    rows.append(("OVERALL", f"{100 * result['ents_p']:.2f}", f"{100 * result['ents_r']:.2f}",
                 f"{100 * result['ents_f']:.2f}", str(c.get("tp", 0) + c.get("fn", 0))))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for n, row in enumerate(rows):
        if n == len(rows) - 1:
            lines.append("-" * (sum(widths) + 8))
        lines.append("  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ))
    return "\n".join(lines)


def results_table(result: Dict[str, Any]) -> str:
    """The overall scores as ``spacy evaluate`` prints them (TOK, NER P/R/F x100, SPEED)."""
    from wasabi import table

    speed = result.get("speed")
    rows = [
        ("TOK", f"{100 * result.get('token_acc', 1.0):.2f}"),
        ("NER P", f"{100 * result['ents_p']:.2f}"),
        ("NER R", f"{100 * result['ents_r']:.2f}"),
        ("NER F", f"{100 * result['ents_f']:.2f}"),
        ("SPEED", f"{speed:.0f}" if speed is not None else "-"),
    ]
    return table(rows)
