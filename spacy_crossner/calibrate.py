"""Entity probabilities that mean what they say: a temperature per domain, fitted on dev, and
the expected calibration error (ECE) with its reliability table.

``python -m spacy_crossner calibrate MODEL DEV OUTPUT [--domain D]``

The ``crossner`` component writes each entity's probability to
``doc.spans[spans_key].attrs["scores"]``: a CRF head's marginal probability of the entity's tag
sequence, a softmax head's product of its tokens' probabilities. Trained models are
over-confident (0.97 for an entity with the wrong label). Calibration divides the scores those
probabilities come from by a temperature T per labelled domain (temperature scaling, Guo et al.
2017), stored in the component's ``cfg["temperatures"]`` and so saved and loaded with the
pipeline:

- CRF head: the marginals are those of p_T(y) ∝ exp(score(y) / T), every emission *and* every
  start, transition and end score divided by T. That scales every path's score alike, so the
  best path (Viterbi) is the same for every T: the predicted entities never change, only their
  probabilities (the decoder ranks the untempered scores in any case).
- Softmax and autoregressive heads: token log-probabilities log_softmax(logits / T); decoding
  keeps the untempered ones.

T = 1 (the default, a domain without a temperature) computes exactly what an uncalibrated
pipeline computes.

**Objective.** T minimises, on the dev docs of its domain, the binary log-loss (negative
log-likelihood) of the predicted entities' correctness: -mean(c log p_T + (1 - c) log(1 - p_T))
over the entities the pipeline predicts, c = 1 when the entity matches a gold one exactly
(start, end, label). That is the quantity ECE measures, as a proper scoring rule: smooth in T,
no bins to tune (ECE itself is binned and piecewise constant, a poor thing to minimise). The
search is over log T: a grid on [0.05, 20], then a golden-section refinement around the best
grid point.

**ECE.** Entities are put in ``n_bins`` equal-width bins of their probability ([0, 0.1),
[0.1, 0.2), ..., [0.9, 1.0] for 10); ECE = sum over bins of (count / N) x |accuracy - mean
probability|, accuracy being the share of the bin's entities that are correct. The reliability
table lists, per bin, the mean probability (confidence), the accuracy and the count.
"""
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy

from .docbin import read_docbin, spacy_files
from .domains import UnknownDomainError, get_domain, labelled_domain, set_domain
from .self_train import PseudoLabelError, crossner_name, scored_entities as entity_scores

DEFAULT_BINS = 10
T_BOUNDS = (0.05, 20.0)  # the temperatures searched (a fit at a bound is reported as such)
GRID = 25  # grid points over log T before the golden-section refinement
REFINE_STEPS = 20  # the bracket shrinks to 0.618^20 of two grid steps: T to ~1e-5
EPS = 1e-12  # probabilities are clipped to [EPS, 1 - EPS] in the log-loss (CRF marginals reach 1.0)

Scored = Sequence[Tuple[float, bool]]  # (probability, correct) of each predicted entity


class CalibrationError(ValueError):
    """A user error: a model without the crossner component, an empty or unlabelled dev corpus."""


# -- ECE and reliability (pure functions over (probability, correct) pairs) ---------------------


def _bin_of(probs: numpy.ndarray, n_bins: int) -> numpy.ndarray:
    # [k/n, (k+1)/n) for each bin, the last one closed at 1.0
    return numpy.minimum((probs * n_bins).astype("int64"), n_bins - 1)


def _check(scored: Scored, n_bins: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins = {n_bins}: give a positive whole number of bins")
    probs = numpy.asarray([float(p) for p, _ in scored], dtype="float64")
    correct = numpy.asarray([bool(c) for _, c in scored], dtype="float64")
    if len(probs) and (numpy.isnan(probs).any() or probs.min() < 0.0 or probs.max() > 1.0):
        raise ValueError("entity probabilities must lie in [0, 1]")
    return probs, correct


def reliability_table(scored: Scored, n_bins: int = DEFAULT_BINS) -> List[Dict[str, Any]]:
    """The reliability table of predicted entities: one row per probability bin.

    scored (Sequence[Tuple[float, bool]]): (probability, correct) of each predicted entity.
    n_bins (int): equal-width bins over [0, 1].
    RETURNS (List[Dict[str, Any]]): per bin ``lower``, ``upper``, ``count``, ``confidence``
        (mean probability) and ``accuracy`` (share correct); the last two are None for an
        empty bin.
    """
    probs, correct = _check(scored, n_bins)
    which = _bin_of(probs, n_bins)
    rows = []
    for k in range(n_bins):
        inside = which == k
        n = int(inside.sum())
        rows.append({
            "lower": k / n_bins,
            "upper": (k + 1) / n_bins,
            "count": n,
            "confidence": float(probs[inside].mean()) if n else None,
            "accuracy": float(correct[inside].mean()) if n else None,
        })
    return rows


def expected_calibration_error(scored: Scored, n_bins: int = DEFAULT_BINS) -> float:
    """ECE of predicted entities: sum over probability bins of (count / N) x |accuracy -
    confidence| (the module docstring). Raises ValueError when there is no entity."""
    if not len(scored):
        raise ValueError("no predicted entities: the calibration error is undefined")
    table = reliability_table(scored, n_bins)
    total = sum(row["count"] for row in table)
    return float(sum(
        row["count"] / total * abs(row["accuracy"] - row["confidence"]) for row in table if row["count"]
    ))


def log_loss(scored: Scored) -> float:
    """Mean binary log-loss of the entities' probabilities against their correctness (the
    calibration objective); probabilities clipped to [1e-12, 1 - 1e-12]."""
    probs, correct = _check(scored, 1)
    if not len(probs):
        raise ValueError("no predicted entities: the log-loss is undefined")
    p = numpy.clip(probs, EPS, 1.0 - EPS)
    return float(-(correct * numpy.log(p) + (1.0 - correct) * numpy.log1p(-p)).mean())


def calibration_summary(scored: Scored, n_bins: int = DEFAULT_BINS) -> Dict[str, Any]:
    """ECE, the reliability table and totals of predicted entities (what ``evaluate`` writes).

    RETURNS (Dict[str, Any]): ``ece`` (None without entities), ``n_entities``, ``n_correct``,
        ``mean_confidence``, ``accuracy`` (None without entities), ``n_bins`` and ``bins``
        (:func:`reliability_table`).
    """
    probs, correct = _check(scored, n_bins)
    n = len(probs)
    return {
        "ece": expected_calibration_error(scored, n_bins) if n else None,
        "n_entities": n,
        "n_correct": int(correct.sum()),
        "mean_confidence": float(probs.mean()) if n else None,
        "accuracy": float(correct.mean()) if n else None,
        "n_bins": int(n_bins),
        "bins": reliability_table(scored, n_bins),
    }


def scored_entities(gold, predicted, spans_key: str, labels: Optional[Sequence[str]] = None) -> List[Tuple[float, bool]]:
    """(probability, correct) of each entity the component wrote to ``predicted.spans[spans_key]``,
    correct when it matches an entity of ``gold`` exactly (start, end, label).

    gold (Doc): the gold doc (same tokens as ``predicted``).
    predicted (Doc): the doc the pipeline annotated.
    spans_key (str): the component's ``spans_key``.
    labels (Optional[Sequence[str]]): only entities of these labels (None: all).
    """
    try:
        entities = entity_scores(predicted, spans_key)
    except PseudoLabelError as err:
        raise CalibrationError(str(err)) from None
    keep = None if labels is None else set(labels)
    truth = {(e.start, e.end, e.label_) for e in gold.ents}
    # the scores are float32: read at that precision (0.9 is 0.9, in the bin [0.9, 1.0], not
    # 0.89999998 in the bin below)
    return [
        (float(str(numpy.float32(p))), (s.start, s.end, s.label_) in truth)
        for s, p in entities
        if keep is None or s.label_ in keep
    ]


def format_reliability(summary: Dict[str, Any]) -> str:
    """A plain-text reliability table (bins with entities only) and its ECE."""
    rows = [("probability", "confidence", "accuracy", "count")]
    for row in summary["bins"]:
        if row["count"]:
            rows.append((f"{row['lower']:.2f}-{row['upper']:.2f}", f"{row['confidence']:.3f}",
                         f"{row['accuracy']:.3f}", str(row["count"])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    ece = summary["ece"]
    lines.append(f"ECE {ece:.4f} on {summary['n_entities']:,} entities" if ece is not None
                 else "ECE: no predicted entities")
    return "\n".join(lines)


# -- fitting a temperature ----------------------------------------------------------------------


def fit_temperature(
    loss_at: Callable[[float], float], bounds: Tuple[float, float] = T_BOUNDS, grid: int = GRID,
    refine_steps: int = REFINE_STEPS,
) -> float:
    """The temperature in ``bounds`` minimising ``loss_at(T)``: a grid over log T, then a
    golden-section search between the best grid point's neighbours (the log-loss of a fixed set
    of entities is smooth in T, but not always convex: the grid finds the basin)."""
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    points = numpy.linspace(lo, hi, grid)
    losses = [loss_at(math.exp(x)) for x in points]
    best = int(numpy.argmin(losses))
    a, b = points[max(best - 1, 0)], points[min(best + 1, grid - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = loss_at(math.exp(c)), loss_at(math.exp(d))
    for _ in range(refine_steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss_at(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss_at(math.exp(d))
    x, fx = (c, fc) if fc <= fd else (d, fd)
    if losses[best] < fx:  # the refinement never does worse than the grid
        x = points[best]
    return float(math.exp(x))


class DevBatches:
    """The crossner component's scores on the dev docs of one labelled domain, computed once;
    :meth:`scored` decodes them at any temperature (the head's decoding only: no encoder)."""

    def __init__(self, pipe, gold: List, docs: List, batch_size: int) -> None:
        from .models.head import decode as head_decode

        self._decode = head_decode
        self.pipe = pipe
        self.batches = []
        for i in range(0, len(docs), batch_size):
            batch_docs = docs[i : i + batch_size]
            output = pipe.model.predict(pipe.make_input(batch_docs))
            whitespace = [[t.is_space for t in doc] for doc in batch_docs]
            truth = [{(e.start, e.end, e.label_) for e in g.ents} for g in gold[i : i + batch_size]]
            self.batches.append((output, whitespace, truth))

    def scored(self, domain: str, temperature: float) -> List[Tuple[float, bool]]:
        """(probability, correct) of every predicted entity with ``domain`` at ``temperature``."""
        model = self.pipe.model
        saved = model.attrs.get("temperatures")
        model.attrs["temperatures"] = {**(saved or {}), domain: float(temperature)}
        try:
            out = []
            for output, whitespace, truth in self.batches:
                for decoded, gold in zip(self._decode(model, output, whitespace), truth):
                    out.extend(((p, span in gold) for span, p in zip(decoded.spans, decoded.probs)))
            return out
        finally:
            model.attrs["temperatures"] = saved


# -- the command --------------------------------------------------------------------------------


def _crossner_name(nlp, model) -> str:
    try:
        return crossner_name(nlp, model)
    except PseudoLabelError as err:
        raise CalibrationError(str(err)) from None


def _load_dev(dev: Path, vocab) -> List:
    if not dev.exists():
        raise CalibrationError(f"Dev corpus not found: {dev}")
    files = spacy_files(dev)
    if not files:
        raise CalibrationError(f"No .spacy files in {dev}: give the labelled dev corpus (convert it first)")
    docs = []
    for file in files:
        try:
            docs.extend(read_docbin(file, vocab))
        except Exception as err:  # not a DocBin
            raise CalibrationError(
                f"Cannot read {file} as a .spacy DocBin ({type(err).__name__}): convert token/tag "
                f"columns first (python -m spacy_crossner convert {file} OUTPUT_DIR --domain DOMAIN)"
            ) from None
    if not any(len(d) for d in docs):
        raise CalibrationError(f"{dev} holds no docs: calibration needs the labelled dev corpus")
    labelled = [d for d in docs if len(d) and d.has_annotation("ENT_IOB")]
    if not labelled:
        raise CalibrationError(f"{dev} has no entity annotation: calibration needs a labelled dev corpus")
    if not any(d.ents for d in labelled):
        raise CalibrationError(
            f"{dev} has no gold entities in its {len(labelled):,} docs: calibration compares the "
            "predicted entities with gold ones; give a dev corpus with entities"
        )
    return labelled


def calibrate(
    *,
    model: Union[str, Path],
    dev: Union[str, Path],
    output: Union[str, Path],
    domain: Optional[str] = None,
    n_bins: int = DEFAULT_BINS,
    batch_size: int = 64,
    gpu_id: int = -1,
) -> Dict[str, Any]:
    """Fit a temperature per labelled domain on a dev corpus and save the calibrated pipeline.

    model (Union[str, Path]): a pipeline with a crossner component (path or package name).
    dev (Union[str, Path]): a labelled ``.spacy`` file, or a folder of them.
    output (Union[str, Path]): the folder the calibrated pipeline is written to.
    domain (Optional[str]): domain set on every dev doc (default: each doc's ``doc._.domain``,
        else the component's target domain). A domain in ``domain_aliases`` is calibrated
        through the labelled domain it maps to, whose temperature it shares.
    n_bins (int): probability bins of the ECE and the reliability tables.
    batch_size (int): docs per batch.
    gpu_id (int): GPU to run on, -1 = CPU.
    RETURNS (Dict[str, Any]): ``output``, ``component``, and per labelled domain (``domains``):
        ``temperature`` (fitted), ``previous_temperature``, ``at_bound`` (the fit reached the
        edge of the searched range), ``n_docs``, ``log_loss_before``/``after`` and
        ``before``/``after`` (:func:`calibration_summary`, before = the pipeline as loaded).
    """
    import spacy

    model_path, dev, output = str(model), Path(dev), Path(output)
    if int(n_bins) != n_bins or n_bins < 1:
        raise CalibrationError(f"--bins {n_bins}: give a positive whole number of bins")
    if output.exists() and not output.is_dir():
        raise CalibrationError(f"OUTPUT {output} is a file: give a folder for the calibrated pipeline")
    if gpu_id >= 0:
        try:
            spacy.require_gpu(gpu_id)
        except ValueError as err:
            raise CalibrationError(f"--gpu-id {gpu_id}: {err}; use --gpu-id -1 for the CPU") from None
    if not Path(model_path).exists() and not spacy.util.is_package(model_path):
        raise CalibrationError(f"Model not found: {model_path}")
    try:
        nlp = spacy.load(model_path)
    except (OSError, ValueError) as err:
        raise CalibrationError(f"Cannot load the pipeline {model_path}: {err}") from None
    name = _crossner_name(nlp, model_path)
    pipe = nlp.get_pipe(name)
    gold = _load_dev(dev, nlp.vocab)
    from spacy.tokens import Doc

    docs = []
    for g in gold:
        doc = Doc(nlp.vocab, words=[t.text for t in g], spaces=[bool(t.whitespace_) for t in g])
        set_domain(doc, domain or get_domain(g) or pipe.default_domain())
        docs.append(doc)
    try:
        labelled = [
            labelled_domain(get_domain(d), pipe.domains, pipe.cfg.get("domain_aliases")) for d in docs
        ]
    except UnknownDomainError as err:
        raise CalibrationError(f"{dev}: {err}") from None
    # the pipes before the component (a shared transformer) annotate the docs once
    before = nlp.pipe_names[: nlp.pipe_names.index(name)]
    if before:
        with nlp.select_pipes(enable=before):
            docs = list(nlp.pipe(docs, batch_size=batch_size))
    loaded = dict(pipe.cfg.get("temperatures") or {})
    results: Dict[str, Any] = {}
    for target in sorted(set(labelled)):
        rows = [i for i, d in enumerate(labelled) if d == target]
        batches = DevBatches(pipe, [gold[i] for i in rows], [docs[i] for i in rows], batch_size)
        previous = float(loaded.get(target, 1.0))
        scored_before = batches.scored(target, previous)
        if not scored_before:
            raise CalibrationError(
                f"The pipeline predicts no entity on the {len(rows):,} dev docs of domain "
                f"'{target}' in {dev}: there is no probability to calibrate"
            )

        def loss_at(t: float, target=target, batches=batches) -> float:
            return log_loss(batches.scored(target, t))

        # six significant digits: what the JSON of the saved cfg keeps exactly
        temperature = float(f"{fit_temperature(loss_at):.6g}")
        scored_after = batches.scored(target, temperature)
        results[target] = {
            "temperature": temperature,
            "previous_temperature": previous,
            "at_bound": bool(min(abs(math.log(temperature / b)) for b in T_BOUNDS) < 1e-3),
            "n_docs": len(rows),
            "own_domains": sorted({get_domain(docs[i]) for i in rows}),
            "log_loss_before": log_loss(scored_before),
            "log_loss_after": log_loss(scored_after),
            "before": calibration_summary(scored_before, n_bins),
            "after": calibration_summary(scored_after, n_bins),
        }
    pipe.set_temperatures({d: r["temperature"] for d, r in results.items()})
    nlp.meta["crossner_calibration"] = {
        "component": name,
        "dev": str(dev),
        "objective": "binary log-loss of the predicted entities' correctness",
        "temperatures": dict(pipe.cfg["temperatures"]),
        "ece": {d: {"before": r["before"]["ece"], "after": r["after"]["ece"]} for d, r in results.items()},
    }
    output.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    return {"output": output, "component": name, "domains": results, "n_bins": n_bins}
