"""The project's one report generator: the `all` workflow's report and the study's.

    python scripts/report.py study [--results ../project/study/results]
    python scripts/report.py --output reports/ai --title "CrossNER ai test ..." \\
        --run bilstm_joint training/ai/bilstm_joint/train.log metrics/ai/bilstm_joint.json \\
        --peer spacy_ner training/ai/spacy_ner/train.log metrics/ai/spacy_ner.json \\
        --zero moee_zero training/zero/moee_zero/train.log metrics/zero/ai/moee_zero.json

Each run is NAME, its training log (``scripts/timed.py --log``) and its test metrics
(``python -m spacy_crossner evaluate``); ``--run`` is one of our pipelines, ``--peer`` a spaCy
pipeline beside them, ``--zero`` a source-only run scored on the source's types. From the log
(``scripts/training_log.py``) each run is one of:

- *levelled*: the best dev F1 came after step 0 and before the last evaluation, with at least two
  evaluations after it that did not beat it. Its test scores are results: the tables,
  ``report.json`` ``runs``, the per-type heatmap ``f1_per_type.png``.
- *demo*: the method ran end to end (trained, saved, scored), but its dev F1 had not levelled
  (still rising at its last evaluations, or never above step 0's). Its test score is NOT shown: a number from a model
  that has not converged says nothing about the method; the converged comparison is the study's
  (``project/study/study.md``). Listed with what its log says.
- *skipped*: the training said why it did not run (a spaCy pipeline that is not installed).

Every row says which features the model read (the ``[features]`` line of ``scripts/train.py``).
Writes ``report.md``, ``report.json`` and ``f1_per_type.png`` in ``--output``; the per-run tables
and the heatmap are the library's (``spacy_crossner.report``, what ``python -m spacy_crossner
report`` writes).

``study`` writes the study's report from its result JSONs (one per run of ``scripts/study.py``):
``study.md`` (every row per domain, mean ± sd over seeds; the papers' own numbers with the
encoder they used; gains over the baseline with the sd of the paired difference and a verdict;
spaCy peers; coverage), ``study_summary.md`` (the short table for the README) and
``study_f1.png`` (a heatmap of test F1 per method and domain), beside the results folder; and
``study_raw_size.md`` with ``study_raw_size.png``: test F1 against the size of the selected
in-domain text (the runs of ``study.py run --raw-sizes``, whose JSONs have ``raw_text``; they are
kept out of the other tables, which compare the runs on the target's own text). The same JSONs
give the same bytes.
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import srsly

import training_log
from study import (BY_NAME, COVERAGE_GOAL, CROSSNER_DOMAINS, DEFAULT_RESULTS, FEATURES, PAPER,
                   PAPER_ELSEWHERE, UNKNOWN_GPU, config_eval_frequency, dapt_variant, flag_values, rel,
                   variant_named)
from timed import format_seconds

ROOT = Path(__file__).resolve().parents[2]
STUDY = "project/study/study.md"
KINDS = {"run": "ours", "peer": "spaCy peer", "zero": "ours, zero-resource"}


def dev_set(log: training_log.TrainingLog) -> str:
    """Which dev set selected the model, from the training command."""
    command = log.command
    if "--paths.target_dev" in command:
        return "target dev"
    if "--paths.source_dev" in command:
        limit = training_log.option_value(command, "--corpora.dev.limit", int)
        return "source dev" + (f" (first {limit:,})" if limit else "")
    if "--paths.dev" in command:
        return "target dev"
    return "dev"


def read_runs(specs: List[tuple]) -> List[Dict]:
    """Each run's name, kind, log (parsed), metrics path and status."""
    runs = []
    for option, (name, log_path, metrics) in specs:
        log = training_log.read(log_path)
        status = "skipped" if log.skipped else "levelled" if log.levelled else "demo"
        if status == "levelled" and not Path(metrics).exists():
            sys.exit(f"{name}: metrics not found: {metrics} (the evaluate step writes it)")
        runs.append({"name": name, "option": option, "kind": KINDS[option], "log": log,
                     "log_path": str(log_path), "metrics": str(metrics), "status": status})
    return runs


def dev_cell(log: training_log.TrainingLog) -> str:
    cap = f" (max {log.max_steps:,})" if log.max_steps else ""
    return (f"{log.best_score:.2f} at step {log.best_step:,}; last eval. {log.last_step:,}{cap}; "
            f"{dev_set(log)}")


def time_cell(log: training_log.TrainingLog) -> str:
    return format_seconds(log.seconds) if log.seconds is not None else "–"


def status_record(run: Dict, scores: Optional[Dict] = None) -> Dict:
    log = run["log"]
    record = {"name": run["name"], "kind": run["kind"], "status": run["status"],
              "features": log.features, "dev_set": dev_set(log), "log": run["log_path"],
              **{k: v for k, v in training_log.summary(log).items() if k != "features"}}
    if scores is not None:
        record["overall"] = scores
    return record


def scores_table(runs: List[Dict], loaded: Dict) -> List[str]:
    from spacy_crossner.report import format_percent

    lines = ["| run | | features | test F1 | P | R | dev F1 (best step; last evaluation; dev set) | train time |",
             "|---|---|---|---:|---:|---:|---|---:|"]
    for run in runs:
        p, r, f = loaded[run["name"]].overall
        lines.append(f"| {run['name']} | {run['kind']} | {run['log'].features or '–'} | "
                     f"**{format_percent(f)}** | {format_percent(p)} | {format_percent(r)} | "
                     f"{dev_cell(run['log'])} | {time_cell(run['log'])} |")
    return lines


def headline(levelled: List[Dict], loaded: Dict, baseline: str = "spacy_ner") -> str:
    """The report's first line: which levelled pipeline of ours won, and by how much over spaCy's
    ``ner`` (the peer named ``baseline``) when that levelled too."""
    from spacy_crossner.report import format_percent

    ours = [r for r in levelled if r["option"] == "run"]
    if not ours:
        return ("No pipeline of ours levelled at this budget, so none has a test score here; see the "
                "demo runs below and the converged numbers of the study.")
    best = max(ours, key=lambda r: loaded[r["name"]].overall[2])
    f = loaded[best["name"]].overall[2]
    text = f"**Best: {best['name']}**, test F1 {format_percent(f)}"
    peer = next((r for r in levelled if r["option"] == "peer" and r["name"] == baseline), None)
    if peer is None:
        return text + f"; spaCy's `ner` ({baseline}) has no test score here to compare with."
    gain = f - loaded[peer["name"]].overall[2]
    return (text + f", {gain:+.2f} over spaCy's `ner` ({baseline}, "
            f"{format_percent(loaded[peer['name']].overall[2])}) on the same test set.")


def workflow_main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for option, what in (("run", "one of our pipelines"), ("peer", "a spaCy pipeline beside ours"),
                         ("zero", "a source-only run scored on the source's types")):
        parser.add_argument(f"--{option}", nargs=3, action="append", default=[],
                            metavar=("NAME", "LOG", "METRICS"), help=f"A run: {what}.")
    parser.add_argument("--output", type=Path, required=True, help="Folder for the report.")
    parser.add_argument("--title", default="Test scores")
    parser.add_argument("--zero-title", default="Zero-resource: trained on the source only, scored "
                        "on the source's types (other target types count as O)")
    args = parser.parse_args(argv)
    from spacy_crossner.report import PLOT_NAME, ReportError, load_runs, markdown_report, plot_f1, report_json

    specs = ([("run", s) for s in args.run] + [("peer", s) for s in args.peer]
             + [("zero", s) for s in args.zero])
    if not specs:
        sys.exit("Give at least one --run, --peer or --zero")
    try:
        runs = read_runs(specs)
    except FileNotFoundError as err:
        sys.exit(str(err))
    levelled = [r for r in runs if r["status"] == "levelled" and r["option"] != "zero"]
    zero = [r for r in runs if r["status"] == "levelled" and r["option"] == "zero"]
    demo = [r for r in runs if r["status"] == "demo"]
    skipped = [r for r in runs if r["status"] == "skipped"]
    try:
        loaded = {run.name: run for run in load_runs([f"{r['name']}={r['metrics']}" for r in levelled + zero])} \
            if levelled + zero else {}
    except ReportError as err:
        sys.exit(str(err))

    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    study = os.path.relpath(ROOT / STUDY, out.resolve())
    top = headline(levelled, loaded)
    lines = [f"# {args.title}", "", top, "",
             "Each model kept its best checkpoint on a dev set, evaluated during training (the "
             "settings are in the first line of each training log). A test score is shown only "
             "where the dev F1 **levelled**: its best evaluation came after step 0 and before the "
             f"last one, with at least {training_log.EVALS_AFTER_BEST} evaluations after it that did "
             "not beat it. Test scores: entity-level exact match, ×100.", "",
             "## Trained to a levelled dev F1 (best step before the last evaluation)", ""]
    if levelled:
        lines += scores_table(levelled, loaded)
    else:
        lines.append("No run levelled.")
    if zero:
        lines += ["", f"### {args.zero_title}", ""] + scores_table(zero, loaded)
    lines += ["", f"## Demo runs, not converged: see [{STUDY}]({study})", ""]
    if demo:
        lines += ["These methods ran end to end (trained, saved, scored on the test set), at a budget "
                  "where their dev F1 had not levelled: their test scores are not results and are "
                  f"not shown. The converged comparison of the methods is in `{STUDY}`.", "",
                  "| run | | features | what the training log says | train time |", "|---|---|---|---|---:|"]
        lines += [f"| {r['name']} | {r['kind']} | {r['log'].features or '–'} | {r['log'].verdict()} | "
                  f"{time_cell(r['log'])} |" for r in demo]
    else:
        lines.append("None: every run levelled.")
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- **{r['name']}**: {r['log'].skipped}" for r in skipped]
    plot = out / PLOT_NAME
    if levelled:
        per_type = [loaded[r["name"]] for r in levelled]
        plot_f1(per_type, plot, title=f"{args.title}: F1 per type of the levelled runs")
        body = markdown_report(per_type, title="x", plot_name=PLOT_NAME).split("\n", 2)[2]
        lines += ["", "## The levelled runs in detail", "", body.replace("\n## ", "\n### ")]
    elif plot.exists():
        plot.unlink()  # no stale heatmap of an earlier run
    (out / "report.md").write_text("\n".join(lines).rstrip() + "\n", encoding="utf8")

    data = report_json([loaded[r["name"]] for r in levelled], title=args.title) if levelled else \
        {"title": args.title, "types": [], "scale": "percent", "runs": []}
    for record, run in zip(data["runs"], levelled):
        record.update(status_record(run))
    data["zero"] = {"title": args.zero_title,
                    "runs": [status_record(r, loaded[r["name"]].to_dict()["overall"]) for r in zero]}
    data["demo"] = [status_record(r) for r in demo]
    data["skipped"] = [status_record(r) for r in skipped]
    data["headline"] = top
    srsly.write_json(out / "report.json", data)
    print(top.replace("**", ""))
    for run in runs:
        print(f"{run['name']:<24} {run['status']:<9} {run['log'].verdict()}")
    print(f"Wrote {out / 'report.md'}, {out / 'report.json'}" + (f" and {plot}" if levelled else ""))


# -- the study's report: every method against its baseline, over domains and seeds ------------



def load_results(path: Path) -> List[Dict]:
    results = [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]
    for result in results:  # the several-sources variants (--extra-sources) are known by name only
        variant_named(str(result.get("method", "")))
    return results


def mean_sd(values: List[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def verdict(diffs: List[float]) -> str:
    if len(diffs) < 2:
        return "too few seeds"
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
    if abs(mean) <= sd:
        return "within noise"
    return "reproduced in direction" if mean > 0 else "not reproduced"


def baseline_score(method: str, base: Dict) -> Optional[float]:
    """The baseline's F1 a method is compared on: for the zero-shot rows, the source-only
    model's score on the source's types."""
    kind = BY_NAME[method].kind if method in BY_NAME else None
    if kind == "zero":
        scores = base.get("test_source_types")
        return scores["f"] if scores else None
    return base["test"]["f"]


def paired(results: List[Dict], method: str, base: str, features: str, domain: Optional[str]) -> Tuple[List[float], int]:
    """Paired differences method - baseline (same domain, seed, features); and how many of the
    method's runs had a baseline run without the score it is compared on."""
    index = {(r["method"], r["domain"], r["seed"], r["features"]): r for r in results}
    diffs, unscored = [], 0
    for r in results:
        if r["method"] != method or r["features"] != features or (domain and r["domain"] != domain):
            continue
        b = index.get((base, r["domain"], r["seed"], features))
        if b is None:
            continue
        score = baseline_score(method, b)
        if score is None:
            unscored += 1
            continue
        diffs.append(r["test"]["f"] - score)
    return diffs, unscored


def paper_gain(method: str, base: str, domains: List[str]) -> str:
    """The paper's own gain of a method over its baseline, averaged over ``domains``, where both
    numbers are given for the same encoder and every domain."""
    m, b = PAPER.get(method), PAPER.get(base)
    if not m or not b or m.encoder != b.encoder or not domains:
        return "–"
    if any(d not in m.f1 or d not in b.f1 for d in domains):
        return "–"
    gain = f"{statistics.mean(m.f1[d] - b.f1[d] for d in domains):+.2f}"
    return f"{gain} ({m.gain_note})" if m.gain_note else gain


def summarise(results: List[Dict]):
    """{(row, method, features): {domain: [F1 per seed]}}, the domains, and per-group means."""
    groups: Dict[tuple, Dict[str, List[float]]] = {}
    for r in results:
        groups.setdefault((r["row"], r["method"], r["features"]), {}).setdefault(r["domain"], []).append(r["test"]["f"])
    domains = sorted({r["domain"] for r in results})
    return dict(sorted(groups.items())), domains


def source_type_scores(results: List[Dict], method: str, features: str) -> Dict[str, List[float]]:
    """{domain: [F1 per seed]} of a source-only method's runs scored on the source's types."""
    scores: Dict[str, List[float]] = {}
    for r in results:
        if r["method"] == method and r["features"] == features and r.get("test_source_types"):
            scores.setdefault(r["domain"], []).append(r["test_source_types"]["f"])
    return scores


def domain_means(by_domain: Dict[str, List[float]]) -> Dict[str, float]:
    return {d: statistics.mean(v) for d, v in by_domain.items() if v}


def peer_gaps(groups) -> Dict[tuple, Dict[str, Tuple[float, int]]]:
    """For each of our groups trained on target labels (as the peers are), per spaCy peer
    ("method (features)"): (our mean - the peer's mean over the domains both have, how many)."""
    peers = {key: domain_means(v) for key, v in groups.items()
             if BY_NAME.get(key[1]) and BY_NAME[key[1]].kind.startswith("spacy")}
    gaps = {}
    for key, by_domain in groups.items():
        if key in peers or BY_NAME.get(key[1]) is None or BY_NAME[key[1]].kind in ("source", "zero", "uda"):
            continue
        ours = domain_means(by_domain)
        each = {}
        for peer_key, theirs in peers.items():
            shared = sorted(set(ours) & set(theirs))
            if shared:
                each[f"{peer_key[1]} ({peer_key[2]})"] = (statistics.mean(ours[d] - theirs[d] for d in shared), len(shared))
        if each:
            gaps[key] = each
    return gaps


def strongest_peer(each: Dict[str, Tuple[float, int]]) -> Tuple[float, str]:
    """(gap, peer) for the peer with the smallest gap: the strongest over the shared domains."""
    peer = min(each, key=lambda p: each[p][0])
    return each[peer][0], peer


def stopping_used(result: Dict) -> str:
    """The stopping rule a run trained under, from its ``spacy train`` overrides (what the command
    really had; results written before eval_frequency was recorded have it only there)."""
    given = flag_values(result.get("overrides", []))
    steps = given.get("--training.max_steps", result.get("max_steps"))
    every = given.get("--training.eval_frequency", result.get("eval_frequency"))
    patience = given.get("--training.patience", result.get("patience"))
    if every is None and patience is None:
        return f"at most {steps} steps, the config's own evaluation and stopping rule"
    if every is None and result.get("method") in BY_NAME:
        every = f"{config_eval_frequency(result['method'], result['features'])} (the config's)"
    return f"at most {steps} steps, evaluated every {every} with patience {patience}"


def stopping_lines(results: List[Dict]) -> List[str]:
    """One line per stopping rule of the report's runs: how many, and which methods/features."""
    rules: Dict[str, List[Dict]] = {}
    for r in results:
        rules.setdefault(stopping_used(r), []).append(r)
    lines = ["Stopping rules (each run's `spacy train` overrides):", ""]
    for rule, runs in sorted(rules.items(), key=lambda kv: -len(kv[1])):
        kinds = sorted({f"{r['method']} ({r['features']})" for r in runs})
        what = ", ".join(kinds) if len(kinds) <= 6 else f"{len(kinds)} method/features pairs"
        lines.append(f"- {rule}: {len(runs)} run{'s' if len(runs) != 1 else ''}, {what}")
    return lines + [""]


def study_report(*, results_dir: Path) -> int:
    """Write study.md, study_summary.md and study_f1.png next to ``results_dir`` (one JSON per
    run of ``scripts/study.py``)."""
    results = load_results(results_dir)
    if not results:
        raise SystemExit(f"--results: no result JSON files in {results_dir}")
    # runs on selected in-domain text of a size: their own report (raw_size_report), not pooled
    # with the runs on the target's own text
    sized = [r for r in results if r.get("raw_text")]
    # DAPT with other settings than the study's on the target's own text: named, not pooled
    variants = sorted(f"{r['method']}-{r['domain']}-s{r['seed']} ({run_variant(r)})"
                      for r in results if not r.get("raw_text") and run_variant(r))
    results = [r for r in results if not r.get("raw_text") and not run_variant(r)]
    if not results:
        raise SystemExit(f"--results: {results_dir} holds only runs on selected text (`raw_text`); their "
                         "baselines' and the other runs' JSONs are needed too")
    groups, domains = summarise(results)
    out_dir = results_dir.parent
    out, summary_path, png = out_dir / "study.md", out_dir / "study_summary.md", out_dir / "study_f1.png"
    lines = ["# The study: each method against its baseline", "",
             f"Generated by `python project/scripts/report.py study` from {len(results)} runs in "
             f"`{rel(results_dir)}` (one JSON per run, with its command). Test F1 x100 "
             "(`spacy_crossner evaluate`, exact-match entities, per sentence), mean ± sd over seeds; "
             "each model is `model-best` on the target's dev F1 (source-only and zero-shot models: "
             "on the source's dev F1). Zero-shot rows are scored on the source's types only "
             "(the only ones they can predict), source-only rows on all of the target's types and, "
             "in a second line (*on the source's types*), on the source's types (each source-only "
             "JSON's `test_source_types`): the score the gains table compares a zero-shot row with. "
             "Short version: "
             f"[{summary_path.name}]({summary_path.name}).", ""]
    adopted = sorted({str(Path(r["adopted_from"]).parent) for r in results if r.get("adopted_from")})
    if adopted:
        n = sum(1 for r in results if r.get("adopted_from"))
        lines += [f"{n} of these runs were trained by benchmarks/pretrained_inputs.py (the same training: "
                  "config, data, seed, early stopping) and taken in by `python project/scripts/study.py adopt`; "
                  f"each JSON names its run in `adopted_from` ({', '.join(f'`{a}`' for a in adopted)}).", ""]
    if variants:
        lines += [f"Not in these tables: {len(variants)} run(s) with other DAPT settings than the study's "
                  f"(`study.py run --dapt-*`): {', '.join(variants)}; their JSONs are in `{rel(results_dir)}`.", ""]
    lines += stopping_lines(results)
    present = sorted({r["features"] for r in results}, key=lambda f: list(FEATURES).index(f) if f in FEATURES else 99)
    lines += ["Features: " + "; ".join(f"`{f}` = {FEATURES.get(f, '?')}" for f in present) + ".", ""]
    lines += ["| row | method | features | " + " | ".join(domains) + " | mean over domains |",
              "|---|---|---|" + "---:|" * (len(domains) + 1)]
    heat = []

    def add_row(label: str, heat_label: str, by_domain: Dict[str, List[float]]):
        """One line of the table (mean ± sd per domain, mean over domains) and its heatmap row."""
        means = domain_means(by_domain)
        mean = f"{statistics.mean(means.values()):.2f}" + (
            f" ({len(means)} of {len(domains)})" if len(means) < len(domains) else "")
        lines.append(f"| {label} | " + " | ".join(mean_sd(by_domain.get(d, [])) for d in domains) + f" | {mean} |")
        heat.append((heat_label, [means.get(d, float("nan")) for d in domains]))

    for (row, method, features), by_domain in groups.items():
        kind = BY_NAME[method].kind if method in BY_NAME else ""
        scored = {"zero": ", source types", "source": ", all types"}.get(kind, "")
        add_row(f"{row} | {method} | {features}", f"{method} ({features}{scored})", by_domain)
        on_source = source_type_scores(results, method, features) if kind == "source" else {}
        if on_source:  # the same models on the source's types: what the zero-shot rows are compared with
            add_row(f"{row} | {method}, on the source's types | {features}",
                    f"{method} ({features}, source types)", on_source)

    # the papers' numbers for the methods that ran
    with_paper = [m for m in dict.fromkeys(k[1] for k in groups) if m in PAPER]
    paper_domains = [d for d in domains if d in CROSSNER_DOMAINS]
    if with_paper:
        lines += ["", "## The papers' own numbers", "",
                  "Test F1 as published (BERT-base or word+char, CrossNER's data, the authors' "
                  "scoring, three-run means): what each method reached in its paper, with the "
                  "encoder it used. Ours are MiniLM (6 layers) or word/char with 50-d GloVe on CPU "
                  "budgets, so compare directions and gains, not absolute numbers.", "",
                  "| method | paper encoder | paper setting | " + " | ".join(paper_domains) + " | avg (5) | source |",
                  "|---|---|---|" + "---:|" * (len(paper_domains) + 1) + "---|"]
        for m in with_paper:
            p = PAPER[m]
            lines.append(f"| {m} | {p.encoder} | {p.setting} | " + " | ".join(
                f"{p.f1[d]:.2f}" for d in paper_domains) + f" | {p.f1['avg']:.2f} | {p.source} |")
    elsewhere = [m for m in dict.fromkeys(k[1] for k in groups) if m in PAPER_ELSEWHERE]
    if elsewhere:
        lines += ["", "Reported only on other data (not comparable with any CrossNER column): " +
                  "; ".join(f"{m}: {PAPER_ELSEWHERE[m]}" for m in elsewhere) + "."]

    lines += ["", "## Gains over the baseline (paired by domain, seed and features)", "",
              "Gain = method − baseline, test F1 points, mean ± sd of the paired differences; "
              "*all* pools every (domain, seed) pair. Verdict: *reproduced in direction* when "
              "the mean gain is positive and larger than its sd, *not reproduced* when negative "
              "and larger than its sd, else *within noise* (fewer than two pairs: *too few seeds*). "
              "Zero-shot rows are compared with the source-only model scored on the same source "
              "types. Paper gain: the same difference in the papers' numbers, where both are "
              "given for the same encoder (*all*: over the same domains). A baseline marked *(same "
              "features)* is a diagnostic one, the same model family on the method's own features: "
              "it shows what the method adds apart from the features, and is not its verdict.", "",
              "| row | method | baseline | features | domain | pairs | gain (mean ± sd) | verdict | paper gain |",
              "|---|---|---|---|---|---:|---:|---|---:|"]
    unscored_total = 0
    verdicts = {}
    for (row, method, features), by_domain in groups.items():
        base = BY_NAME[method].baseline_of if method in BY_NAME else None
        if not base:
            continue
        paired_domains = []  # the domains with a (method, baseline) pair: the paper's gain is over these
        for d in domains:
            diffs, _ = paired(results, method, base, features, d)
            if diffs:
                paired_domains.append(d)
                lines.append(f"| {row} | {method} | {base} | {features} | {d} | {len(diffs)} | "
                             f"{mean_sd(diffs)} | {verdict(diffs)} | {paper_gain(method, base, [d])} |")
        diffs, unscored = paired(results, method, base, features, None)
        unscored_total += unscored
        if diffs:
            verdicts[(row, method, features)] = (diffs, verdict(diffs))
            if len({d for d in by_domain}) > 1:
                lines.append(f"| {row} | {method} | {base} | {features} | all | {len(diffs)} | "
                             f"{mean_sd(diffs)} | {verdict(diffs)} | {paper_gain(method, base, paired_domains)} |")
        like = BY_NAME[method].like_for_like
        if like:
            # what the method adds over the same model family on its own features: no paper number
            by_like = {d: paired(results, method, like, features, d)[0] for d in domains}
            by_like = {d: diffs for d, diffs in by_like.items() if diffs}
            if len(by_like) > 1:
                by_like["all"] = paired(results, method, like, features, None)[0]
            for d, diffs in by_like.items():
                lines.append(f"| {row} | {method} | {like} (same features) | {features} | {d} | "
                             f"{len(diffs)} | {mean_sd(diffs)} | {verdict(diffs)} | – |")
    if unscored_total:
        lines += ["", f"{unscored_total} zero-shot run(s) not paired: their source-only baseline has "
                  "no score on the source types (`test_source_types`); `study.py run` with the same "
                  "options adds it from the saved model."]

    gaps = peer_gaps(groups)
    if gaps:
        peer_names = sorted({p for each in gaps.values() for p in each})
        lines += ["", "## Against spaCy's own ner (row 9)", "",
                  "Mean test F1 difference to each spaCy peer over the domains both ran (in brackets: "
                  "how many), and to the strongest of them; negative: the spaCy peer is better, and our "
                  "pipeline is not worth using over it. Compare like with like where you can: the CNN "
                  "peers use no pretrained input (as `wordchar`), `spacy_sm` is pretrained on OntoNotes, "
                  "`minilm` shares our transformer. The rows without target labels (source-only, UDA, "
                  "zero-shot) are left out: the peers train on the target's labels.", "",
                  "| row | method | features | " + " | ".join(peer_names) + " | strongest peer (gap) |",
                  "|---|---|---|" + "---:|" * len(peer_names) + "---|"]
        for (row, method, features), each in gaps.items():
            gap, peer = strongest_peer(each)
            cells = [f"{each[p][0]:+.2f} ({each[p][1]})" if p in each else "–" for p in peer_names]
            lines.append(f"| {row} | {method} | {features} | " + " | ".join(cells) + f" | {peer} ({gap:+.2f}) |")
        below = [f"{m} ({f})" for (_, m, f), each in gaps.items() if strongest_peer(each)[0] < 0]
        if below:
            lines += ["", "Below a spaCy peer: " + ", ".join(below) + "."]

    lines += ["", "## Coverage", "", "| row | method | features | domains (seeds) | device | goal (issue 13) |",
              "|---|---|---|---|---|---|"]
    for (row, method, features), by_domain in groups.items():
        runs = [r for r in results if (r["row"], r["method"], r["features"]) == (row, method, features)]
        cover = domains_and_seeds(runs, "; ")
        devices = where_run(runs)
        lines.append(f"| {row} | {method} | {features} | {cover} | {devices} | {COVERAGE_GOAL.get(row, '')} |")
    # a row whose runs are all on selected text (row 11) has its results in study_raw_size.md
    missing_rows = sorted(set(COVERAGE_GOAL) - {k[0] for k in groups} - {r["row"] for r in sized})
    if missing_rows:
        lines += ["", "No results yet for row(s) " + ", ".join(map(str, missing_rows)) + "."]
    dapt = [r["dapt"] for r in results if r.get("dapt")]
    if dapt:
        d0 = dapt[0]
        lines += ["", f"DAPT (row 8): on the target's own train+dev text ({d0['corpus_lines']:,} lines, "
                  f"{d0['corpus_tokens']:,} tokens for {Path(d0['corpus']).stem}; the paper's corpora are "
                  "millions of tokens, 5.2M for AI), " + ", ".join(sorted({
                      f"{x['epochs']:g} epochs / max {x['max_steps']} steps, batch {x['batch_size']}, "
                      f"blocks of {x['max_length']}, lr {x['learning_rate']:g}" for x in dapt})) +
                  " (the paper: 15 epochs, blocks of 512)."]
    not_converged = [r for r in results if not r.get("best_not_last")]
    if not_converged:
        lines += ["", f"{len(not_converged)} run(s) had their best dev F1 at the last evaluation "
                  "(not converged: dev F1 may still have been rising): " + ", ".join(
                      f"{r['method']}/{r['domain']}/{r['features']}/s{r['seed']}" for r in not_converged)]
    raw_md, raw_png = out_dir / "study_raw_size.md", out_dir / "study_raw_size.png"
    if sized:
        lines += ["", f"{len(sized)} run(s) on selected in-domain text of a stated size (`raw_text` in their "
                  f"JSON) are not in the tables above: [{raw_md.name}]({raw_md.name})."]
    plot_heatmap(heat, domains, png)
    lines += ["", f"![F1 per method and domain]({png.name})", ""]
    out.write_text("\n".join(lines), encoding="utf8")
    summary_path.write_text(summary_table(groups, domains, verdicts, gaps, results), encoding="utf8")
    raw_size_report(sized, results, raw_md, raw_png)
    print(f"Wrote {out}, {summary_path}, {png} and {raw_md}")
    return 0


def run_variant(run: Dict) -> str:
    """'' for a run with the study's DAPT settings (or no DAPT), else its DAPT settings (``dapt_e15``)."""
    return dapt_variant(run.get("dapt") or {})


def method_label(method: str, variant: str) -> str:
    """A method as the raw-size tables name it: with its DAPT settings when they are not the study's."""
    return f"{method} ({variant})" if variant else method


def raw_size_key(run: Dict) -> tuple:
    """What makes runs on selected text replicas: method, features, domain, source, scorer, size,
    DAPT settings."""
    raw = run["raw_text"]
    return (run["row"], run["method"], run["features"], run["domain"], raw["source"], raw["scorer"], raw["size"],
            run_variant(run))


def paired_runs(runs: List[Dict], results: List[Dict], base: str) -> List[float]:
    """Test F1 of each of ``runs`` minus its baseline's run of the same domain, seed and features."""
    index = {(r["method"], r["domain"], r["seed"], r["features"]): r for r in results}
    diffs = []
    for run in runs:
        b = index.get((base, run["domain"], run["seed"], run["features"]))
        score = baseline_score(run["method"], b) if b else None
        if score is not None:
            diffs.append(run["test"]["f"] - score)
    return diffs


def raw_size_report(sized: List[Dict], results: List[Dict], path: Path, png: Path) -> None:
    """study_raw_size.md (and study_raw_size.png when there are runs): test F1 of the methods run
    on selected in-domain text (``study.py run --raw-sizes``) against the size of that text, each
    paired with its baseline (same domain, seed, features) and beside the method's runs on the
    target's own train+dev text only."""
    lines = ["# Test F1 against the size of the selected in-domain text", "",
             "Rows 4 (PGN UDA), 5 (multi-cell UDA), 8 (DAPT span / token), 10 (DAPT then pre-train -> fine-tune) and 11 (self-training and distillation), "
             "run on the target's own train+dev text plus the text `spacy_crossner select-corpus` ranks best in a "
             "general corpus (row 11: the selected text only, pseudo-labelled by its teacher), up to a size in "
             "word tokens (`study.py run --raw-sizes N ... --raw-source "
             "select:PATH --raw-scorer lexical|minilm`; the target's dev and test sentences excluded). "
             "Generated by `python project/scripts/report.py study`.", ""]
    if not sized:
        lines += ["None yet: no result JSON with `raw_text` (run `python project/scripts/study.py run --rows 4 5 8 "
                  "--raw-sizes 20000 100000 500000 --raw-source select:../shared/data/raw ...`).", ""]
        path.write_text("\n".join(lines), encoding="utf8")
        png.unlink(missing_ok=True)  # a plot of runs no longer there would mislead
        return
    groups: Dict[tuple, List[Dict]] = {}
    for run in sized:
        groups.setdefault(raw_size_key(run), []).append(run)
    lines += ["Test F1 x100, mean ± sd over seeds; tokens: the selected text's word tokens (requested size) "
              "and, in brackets, all the raw text the method read (its own train+dev text included). Gain: "
              "paired with the baseline by domain and seed, verdict as in study.md. *own text only*: the "
              "method's runs on the target's train+dev text alone (study.md's). Cost: CPU minutes per run, "
              "mean over its runs, of the training itself + what it needed first (the selection, DAPT, the "
              "pseudo-labelling and a stage 1 on a DAPT encoder; not the teacher, which is the baseline "
              "pipeline); CPU time, so load from other processes does not inflate it.", "",
              "| row | method | features | domain | source | scorer | size | tokens selected (all) | seeds | test F1 "
              "| baseline | gain (mean ± sd) | verdict | cost (CPU min: train + before) |",
              "|---|---|---|---|---|---|---:|---:|---|---:|---|---:|---|---:|"]
    own_done = set()
    series: Dict[tuple, List[Tuple[int, List[float]]]] = {}
    baselines: Dict[tuple, List[float]] = {}
    for key in sorted(groups, key=lambda k: (k[:4], k[4], k[5], k[6], k[7])):
        row, method, features, domain, source, scorer, size, variant = key
        label = method_label(method, variant)
        runs = groups[key]
        base = BY_NAME[method].baseline_of if method in BY_NAME else None
        if (method, features, domain) not in own_done:
            own_done.add((method, features, domain))
            own = [r["test"]["f"] for r in results
                   if (r["method"], r["features"], r["domain"]) == (method, features, domain) and not run_variant(r)]
            if own:
                diffs = paired(results, method, base, features, domain)[0] if base else []
                lines.append(f"| {row} | {method} | {features} | {domain} | own text only | – | 0 | – | "
                             f"{len(own)} | {mean_sd(own)} | {base or '–'} | {mean_sd(diffs) if diffs else '–'} | "
                             f"{verdict(diffs) if base else '–'} | – |")
        f1 = [r["test"]["f"] for r in runs]
        diffs = paired_runs(runs, results, base) if base else []
        selected = sorted({r["raw_text"].get("selected_tokens") for r in runs}, key=str)
        # a row-11 student reads only the selected text (pseudo-labelled), not the target's own
        total = sorted({None if r.get("pseudo") else r["raw_text"].get("tokens") for r in runs}, key=str)
        tokens = "/".join(f"{t:,}" if isinstance(t, int) else "?" for t in selected) + " (" + "/".join(
            f"{t:,}" if isinstance(t, int) else "–" for t in total) + ")"
        seeds = ", ".join(str(s) for s in sorted(r["seed"] for r in runs))
        lines.append(f"| {row} | {label} | {features} | {domain} | {source} | {scorer} | {size:,} | {tokens} | "
                     f"{seeds} | {mean_sd(f1)} | {base or '–'} | {mean_sd(diffs) if diffs else '–'} | "
                     f"{verdict(diffs) if base else '–'} | {format_cost(runs)} |")
        series.setdefault((domain, label, features, source, scorer), []).append((size, f1))
        if base:
            scores = [r["test"]["f"] for r in results
                      if (r["method"], r["features"], r["domain"]) == (base, features, domain)]
            if scores:
                baselines[(domain, base, features)] = scores
    lines += pooled_lines(groups, results)
    lines += pseudo_label_table(sized)
    shas = sorted({(r["raw_text"]["source"], r["raw_text"]["scorer"], r["raw_text"]["size"], r["domain"],
                    r["raw_text"].get("sha256", "?")[:12]) for r in sized})
    lines += ["", "The texts read (SHA-256, first 12 hex digits): " + "; ".join(
        f"{d} {src} {sc} {size:,}: {sha}" for src, sc, size, d, sha in shas) + ".", "",
        f"![test F1 against selected text size]({png.name})", ""]
    path.write_text("\n".join(lines), encoding="utf8")
    plot_raw_size(series, baselines, png)


def run_cost(run: Dict) -> Tuple[Optional[float], float]:
    """CPU minutes of a run on selected text: its training, and what it needed before it (the
    selection, DAPT, pseudo-labelling, and its stage 1 when that trained on a DAPT encoder, so
    was made for this target); None for a training without a recorded CPU time."""
    train = run.get("cpu_s")
    before = sum(float(run.get(part, {}).get("cpu_s") or 0.0) for part in ("raw_text", "dapt", "pseudo"))
    if run.get("dapt") and run.get("stage1"):
        before += float(run["stage1"].get("cpu_s") or 0.0)
    return (None if train is None else float(train) / 60.0), before / 60.0


def format_cost(runs: List[Dict]) -> str:
    """'T + B' CPU minutes, means over the runs (T over those that recorded it)."""
    costs = [run_cost(r) for r in runs]
    trains = [t for t, _ in costs if t is not None]
    if not trains:
        return "–"
    return f"{statistics.mean(trains):.0f} + {statistics.mean(b for _, b in costs):.0f}"


def pooled_lines(groups: Dict[tuple, List[Dict]], results: List[Dict]) -> List[str]:
    """Over the domains: for each method, features and text (source, scorer, size) run on more
    than one domain, the mean of its per-domain mean F1 and the paired gain over every (domain,
    seed) pair, with its verdict."""
    pooled: Dict[tuple, List[List[Dict]]] = {}
    for key, runs in groups.items():
        row, method, features, domain, source, scorer, size, variant = key
        pooled.setdefault((row, method, features, source, scorer, size, variant), []).append(runs)
    lines = []
    for (row, method, features, source, scorer, size, variant), by_domain in sorted(pooled.items()):
        if len(by_domain) < 2:
            continue
        base = BY_NAME[method].baseline_of if method in BY_NAME else None
        runs = [r for domain_runs in by_domain for r in domain_runs]
        diffs = paired_runs(runs, results, base) if base else []
        means = [statistics.mean(r["test"]["f"] for r in domain_runs) for domain_runs in by_domain]
        domains = ", ".join(sorted(domain_runs[0]["domain"] for domain_runs in by_domain))
        if not lines:
            lines = ["", "Over the domains: the mean of the per-domain mean test F1, and the gain over every "
                     "(domain, seed) pair.", "",
                     "| row | method | features | domains | source | scorer | size | runs | mean test F1 | baseline | "
                     "gain (mean ± sd, pairs) | verdict |",
                     "|---|---|---|---|---|---|---:|---:|---:|---|---:|---|"]
        label = method_label(method, variant)
        lines.append(f"| {row} | {label} | {features} | {domains} | {source} | {scorer} | {size:,} | {len(runs)} | "
                     f"{statistics.mean(means):.2f} | {base or '–'} | "
                     f"{f'{mean_sd(diffs)}, {len(diffs)}' if diffs else '–'} | {verdict(diffs) if base else '–'} |")
    return lines


def pseudo_label_table(sized: List[Dict]) -> List[str]:
    """Row 11's pseudo-labelled texts, one line each (shared by the students of one teacher, text,
    mode and threshold): the teacher, how the threshold was set, what was kept."""
    labelled = {}
    for run in sized:
        if run.get("pseudo"):
            labelled.setdefault(run["pseudo"]["path"], (run, []))[1].append(run["method"])
    if not labelled:
        return []
    lines = ["", "Row 11's pseudo-labels (`spacy_crossner pseudo-label` on the selected text): the teacher's model and "
             "its test F1, the mode, the threshold on its entity probabilities (chosen on the target's dev set as "
             "the smallest whose kept dev entities reach the precision, or fixed), the entities kept and left out, "
             "and the sentences with any annotation.", "",
             "| domain | size | teacher (seed: test F1) | mode | threshold | dev precision (entities kept of "
             "predicted) | entities kept / left out | sentences annotated | students |",
             "|---|---:|---|---|---:|---|---:|---:|---|"]
    for path, (run, methods) in sorted(labelled.items(), key=lambda item: (item[1][0]["domain"], item[0])):
        p, teacher = run["pseudo"], run["pseudo"]["teacher"]
        test_f = "?" if teacher.get("test_f") is None else f"{teacher['test_f']:.2f}"
        dev = p.get("dev")
        chosen = (f"{dev['precision']:.3f} ({dev['kept']:,} of {dev['predicted']:,}; target "
                  f"{p['min_precision']:g})") if dev else "– (fixed)"
        lines.append(f"| {run['domain']} | {run['raw_text']['size']:,} | {teacher['method']} (s{teacher['seed']}: "
                     f"{test_f}) | {p['mode']} | {p['threshold']:.3f} | {chosen} | {p['kept']:,} / "
                     f"{p['rejected']:,} | {p['docs'] - p['unlabelled_docs']:,} of {p['docs']:,} | "
                     f"{', '.join(sorted(set(methods)))} |")
    return lines


def plot_raw_size(series: Dict[tuple, List[Tuple[int, List[float]]]], baselines: Dict[tuple, List[float]],
                  path: Path) -> None:
    """One panel per domain: mean test F1 (error bars: sd over seeds) against the selected text's
    size, a line per method (features, source, scorer); each baseline's mean as a dashed line."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit('The study\'s raw-text size plot needs matplotlib: pip install "spacy_crossner[project]"')

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    domains = sorted({key[0] for key in series})
    fig, axes = plt.subplots(1, len(domains), figsize=(5.5 * len(domains), 4.2), squeeze=False)
    for ax, domain in zip(axes[0], domains):
        for (d, method, features, source, scorer), points in sorted(series.items()):
            if d != domain:
                continue
            points = sorted(points)
            xs = [size for size, _ in points]
            ys = [statistics.mean(f1) for _, f1 in points]
            errs = [statistics.stdev(f1) if len(f1) > 1 else 0.0 for _, f1 in points]
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=f"{method} ({features}, {scorer})")
        for (d, base, features), scores in sorted(baselines.items()):
            if d == domain:
                ax.axhline(statistics.mean(scores), linestyle="--", color="grey", linewidth=1)
                ax.annotate(f"{base} ({features})", (0.01, statistics.mean(scores)), xycoords=("axes fraction", "data"),
                            fontsize=7, color="grey", va="bottom")
        ax.set_xscale("log")
        sizes = sorted({size for key, points in series.items() if key[0] == domain for size, _ in points})
        ax.set_xticks(sizes, [f"{size:,}" for size in sizes])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("selected in-domain text (word tokens)")
        ax.set_ylabel("test F1")
        ax.set_title(domain, fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def domains_and_seeds(runs: List[Dict], sep: str) -> str:
    """"ai (555, 666)<sep>music (777)": each domain of the runs with its seeds."""
    return sep.join(f"{d} ({', '.join(str(s) for s in sorted(r['seed'] for r in runs if r['domain'] == d))})"
                    for d in sorted({r["domain"] for r in runs}))


def device_label(run: Dict) -> str:
    """A run's device, with the card for a GPU run ("gpu0 (H200)"), taken from the `machine` that
    machine_name recorded ("NVIDIA H200 (GPU 0), x86_64, 16 cores"): runs on two different cards
    are not replicas of one another."""
    device = run.get("device", "?")
    machine = run.get("machine") or ""
    if not device.startswith("gpu") or " (GPU " not in machine:
        return device
    card = machine.split(" (GPU ", 1)[0].strip()
    card = card[len("NVIDIA "):] if card.startswith("NVIDIA ") else card
    return f"{device} ({card})" if card and card != UNKNOWN_GPU else device


def where_run(runs: List[Dict]) -> str:
    """The devices of a method's runs; with more than one, which runs ran on each (e.g.
    "cpu: ai (555, 666); gpu0 (H200): ai (777), music (777)")."""
    labels = [device_label(r) for r in runs]
    devices = sorted(set(labels))
    if len(devices) == 1:
        return devices[0]
    parts = []
    for device in devices:
        mine = [r for r, label in zip(runs, labels) if label == device]
        parts.append(f"{device}: {domains_and_seeds(mine, ', ')}")
    return "; ".join(parts)


def summary_table(groups, domains, verdicts, gaps, results) -> str:
    """The README's table: one line per method and features."""
    lines = ["| row | method | features | runs | mean test F1 | baseline | gain (all pairs) | verdict | "
             "vs best spaCy peer | paper (avg, encoder) |", "|---|---|---|---:|---:|---|---:|---|---:|---|"]
    for key, by_domain in groups.items():
        row, method, features = key
        means = domain_means(by_domain)
        n = sum(len(v) for v in by_domain.values())
        base = BY_NAME[method].baseline_of if method in BY_NAME else None
        diffs, v = verdicts.get(key, ([], "–"))
        gain = mean_sd(diffs) if diffs else "–"
        gap = f"{strongest_peer(gaps[key])[0]:+.2f}" if key in gaps else "–"
        paper = PAPER.get(method)
        paper_cell = f"{paper.f1['avg']:.2f} ({paper.encoder})" if paper else "–"
        lines.append(f"| {row} | {method} | {features} | {n} ({len(means)} domain{'s' if len(means) > 1 else ''}) | "
                     f"{statistics.mean(means.values()):.2f} | {base or '–'} | {gain} | {v if base else '–'} | "
                     f"{gap} | {paper_cell} |")
    devices = sorted({device_label(r) for r in results})
    return ("Test F1 x100, mean over the domains each method ran (" + ", ".join(domains) + "), seeds "
            + ", ".join(str(s) for s in sorted({r["seed"] for r in results})) + "; device(s): " + ", ".join(devices)
            + ". Generated by `python project/scripts/report.py study`; details in study.md.\n\n"
            + "\n".join(lines) + "\n")


def plot_heatmap(rows, domains, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit('The study\'s heatmap needs matplotlib: pip install "spacy_crossner[project]"')

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy

    values = numpy.array([m for _, m in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(max(1.4 * len(domains) + 4, 8), 0.45 * len(rows) + 1.5))
    image = ax.imshow(numpy.ma.masked_invalid(values), cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(domains)), domains)
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    middle = numpy.nanmean(values) if numpy.isfinite(values).any() else 0.0
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if values[i, j] == values[i, j]:
                ax.text(j, i, f"{values[i, j]:.1f}", ha="center", va="center",
                        color="white" if values[i, j] < middle else "black")
    fig.colorbar(image, ax=ax, label="test F1")
    ax.set_title("Test F1 per method (features) and domain, mean over seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def study_main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="report.py study", description="The study's report: "
                                     "study.md, study_summary.md and study_f1.png beside --results.")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help="Folder of the study's result JSONs (scripts/study.py run --results).")
    args = parser.parse_args(argv)
    sys.exit(study_report(results_dir=args.results))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["study"]:
        study_main(argv[1:])
    else:
        workflow_main(argv)


if __name__ == "__main__":
    main()
