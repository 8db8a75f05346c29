"""What holds PGN SDA back against its baseline (issue 19 section 1): learning curves per domain
and the size of each update of the LSTM weights, PGN's generated ones against a plain BiLSTM's.

Each variant is ``spacy train`` on a config (the same training as the study's runs), in this
process, with a ``before_update`` probe that every ``--probe-every`` steps takes the LSTM weights
before one update and after it:

- ``bilstm_joint``: configs/bilstm_joint.cfg (the baseline), the ``nn.LSTM``'s weights;
- ``pgn_sda``: configs/pgn_sda.cfg (like for like: Adam 0.001, target x10), the BiLSTM weights
  generated for (target, ner) and (source, ner), and the domain and task embeddings;
- ``pgn_sda_no_lm``: the same with both LM loss weights 0;
- ``pgn_sda_lr``: the same with Adam's learning rate times ``--lr-scale``;
- ``pgn_sda_meta``: the same with the model's ``meta_scale = --meta-scale`` (Adam's step on the
  meta tensor alone shortened).

A generated weight is a sum over V x U products t_v d_u W[v, u, :]; Adam moves each of the V*U
entries of W by about its learning rate, so one step can move the generated weights by up to
(sum |t_v|)(sum |d_u|) times as much as it moves a plain LSTM's weights. The probe measures the
relative update ||dtheta|| / ||theta|| that actually happens, and, at every evaluation, the
source-domain dev F1 (``--source-dev-limit`` sentences) beside spaCy's target dev F1.

    python benchmarks/pgn_diagnosis.py run --variants bilstm_joint pgn_sda --max-steps 2000
    python benchmarks/pgn_diagnosis.py report
    python benchmarks/pgn_diagnosis.py amplification   # synthetic, seconds: Adam on W vs on theta

One JSON per variant and seed in ``--results`` (skipped when it exists); ``report`` writes
benchmarks/results/pgn_diagnosis_runs.md from them. torch on one thread.
"""
import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model, utc_now  # noqa: E402

VARIANTS = {
    "bilstm_joint": ("bilstm_joint.cfg", {}),
    "pgn_sda": ("pgn_sda.cfg", {}),
    "pgn_sda_no_lm": ("pgn_sda.cfg", {"components.crossner.model.lm_weight_source": 0.0,
                                      "components.crossner.model.lm_weight_target": 0.0}),
    "pgn_sda_lr": ("pgn_sda.cfg", {}),  # learn_rate set from --lr-scale
    "pgn_sda_meta": ("pgn_sda.cfg", {}),  # meta_scale set from --meta-scale
}
PROBE: Dict = {}


def flat(tensors) -> "torch.Tensor":
    import torch

    return torch.cat([t.detach().reshape(-1).float().cpu() for t in tensors])


def lstm_weights(nlp, source: str, target: str) -> Dict[str, "torch.Tensor"]:
    """The LSTM weights the NER of each domain reads, and PGN's embeddings."""
    import torch

    from spacy_crossner.models.base import get_emitter

    emitter = get_emitter(nlp.get_pipe("crossner").model)
    generator = getattr(emitter, "generator", None)
    if generator is None:
        return {"lstm": flat(emitter.lstm.parameters())}
    with torch.no_grad():
        thetas = generator([(target, "ner"), (source, "ner")])
    out = {f"theta_{target}_ner": thetas[0].clone(), f"theta_{source}_ner": thetas[1].clone(),
           "W": flat([generator.W])}
    for name, row in list(generator.domain_embeddings.items()) + list(generator.task_embeddings.items()):
        out[f"emb_{name}"] = flat([row])
    return out


def source_dev_f(nlp) -> Optional[float]:
    examples = PROBE.get("source_dev")
    if not examples:
        return None
    return nlp.evaluate(examples).get("ents_f")


def make_probe(every: int, eval_every: int):
    def probe(nlp, info: Dict) -> None:
        step = info["step"]
        state = PROBE
        if state.get("before") is not None and step == state["before_step"] + 1:
            after = lstm_weights(nlp, state["source"], state["target"])
            row = {"step": state["before_step"]}
            for key, old in state["before"].items():
                new = after[key]
                row[key] = {"norm": round(float(old.norm()), 4),
                            "rel_update": float((new - old).norm() / old.norm().clamp(min=1e-12))}
            state["probes"].append(row)
            state["before"] = None
        if step % every == 0:
            state["before"] = lstm_weights(nlp, state["source"], state["target"])
            state["before_step"] = step
        if step and step % eval_every == 0:
            state["source_curve"].append({"step": step, "source_dev_f": source_dev_f(nlp)})

    return probe


def training_rows(log: str) -> List[Dict]:
    """Every row of spaCy's training table: step, losses, ENTS_F and score."""
    header, rows = None, []
    for line in log.splitlines():
        cells = line.split()
        if cells[:2] == ["E", "#"]:
            header = cells
            continue
        if header and len(cells) > 3 and cells[0].isdigit() and cells[1].isdigit():
            try:
                score, f1 = float(cells[-1]), float(cells[-(len(header) - header.index("ENTS_F"))])
            except (ValueError, IndexError):
                continue
            rows.append({"step": int(cells[1]), "ents_f": f1, "score": score,
                         "losses": [float(c) for c in cells[2:-4]]})
    return rows


def run_variant(args, variant: str, seed: int) -> Path:
    import spacy
    import torch
    from spacy.cli.train import train
    from spacy.util import registry

    out = args.results / f"{variant}-{args.target}-s{seed}.json"
    if out.exists():
        print(f"skip {out.name} (done)", flush=True)
        return out
    config_name, overrides = VARIANTS[variant]
    corpus = args.corpus
    overrides = {
        **overrides,
        "paths.source_train": str(corpus / args.source / "train.spacy"),
        "paths.target_train": str(corpus / args.target / "train.spacy"),
        "paths.target_dev": str(corpus / args.target / "dev.spacy"),
        "vars.source_domain": args.source, "vars.target_domain": args.target,
        "system.seed": seed, "training.max_steps": args.max_steps,
        "training.eval_frequency": args.eval_frequency, "training.patience": args.patience,
        "training.before_update": {"@callbacks": "pgn_diagnosis.probe.v1"},
    }
    if variant == "pgn_sda_lr":
        overrides["training.optimizer.learn_rate"] = 0.001 * args.lr_scale
    if variant == "pgn_sda_meta":
        overrides["components.crossner.model.meta_scale"] = args.meta_scale
    if args.vectors:
        overrides["paths.vectors"] = str(args.vectors)
        overrides["components.crossner.model.tok2vec.include_static_vectors"] = True
    torch.set_num_threads(1)
    registry.callbacks.register("pgn_diagnosis.probe.v1", func=lambda: make_probe(args.probe_every, args.eval_frequency))
    nlp0 = spacy.blank("en")
    from spacy_crossner.readers import create_domain_corpus

    PROBE.clear()
    PROBE.update(source=args.source, target=args.target, before=None, probes=[], source_curve=[],
                 source_dev=list(create_domain_corpus(str(corpus / args.source / "dev.spacy"), domain=args.source,
                                                      limit=args.source_dev_limit)(nlp0)))
    work = args.workdir / f"{variant}-{args.target}-s{seed}"
    log = io.StringIO()
    start, cpu0 = time.time(), time.process_time()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        train(ROOT / "configs" / config_name, work, use_gpu=-1, overrides=overrides)
    wall, cpu = time.time() - start, time.process_time() - cpu0
    (args.workdir / f"{out.stem}.log").write_text(log.getvalue(), encoding="utf8")
    rows = training_rows(log.getvalue())
    best = max(rows, key=lambda r: (r["score"], r["ents_f"])) if rows else None  # ties of the 2-decimal score: F1
    record = {
        "variant": variant, "config": f"configs/{config_name}", "seed": seed,
        "overrides": {k: v for k, v in overrides.items() if not k.startswith("paths.")},
        "source": args.source, "target": args.target, "source_dev_limit": args.source_dev_limit,
        "target_curve": [{"step": r["step"], "ents_f": r["ents_f"], "losses": r["losses"]} for r in rows],
        "source_curve": PROBE["source_curve"], "probes": PROBE["probes"],
        "best_step": best["step"] if best else None, "best_dev_f": best["ents_f"] if best else None,
        "last_step": rows[-1]["step"] if rows else None,
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "command": "python benchmarks/pgn_diagnosis.py " + " ".join(sys.argv[1:]),
        "machine": f"{os.cpu_count()} CPU cores, {cpu_model()}, {platform.platform()}",
        "load_5min": round(os.getloadavg()[1], 2),
        "date": utc_now(),
    }
    args.results.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf8")
    print(f"{out.name}: best target dev F1 {record['best_dev_f']} at step {record['best_step']} "
          f"(last {record['last_step']}), {wall / 60:.1f} min", flush=True)
    return out


def median_update(probes: List[Dict], key_prefix: str, steps: range) -> Optional[float]:
    values = [v["rel_update"] for p in probes if p["step"] in steps
              for k, v in p.items() if k != "step" and k.startswith(key_prefix)]
    return statistics.median(values) if values else None


def amplification(args) -> List[Dict]:
    """Synthetic: how far one Adam step moves PGN's generated BiLSTM weights against a plain
    weight vector of the same size and init, under the same gradients on the weights (a fixed
    direction plus noise: ``--noise`` times its scale), at Adam's default betas."""
    import torch

    from spacy_crossner.models.pytorch_pgn import ParameterGenerator

    torch.manual_seed(args.seeds[0])
    gen = ParameterGenerator(args.n_in, args.hidden)
    gen.add_domain("target")
    bound = 1.0 / args.hidden ** 0.5
    plain = torch.nn.Parameter(torch.empty(gen.n_params).uniform_(-bound, bound))
    lr = 0.001
    opt_gen, opt_plain = torch.optim.Adam(gen.parameters(), lr=lr), torch.optim.Adam([plain], lr=lr)
    direction = torch.randn(gen.n_params)
    rows = []
    for step in range(args.synthetic_steps):
        grad = direction + args.noise * torch.randn(gen.n_params)
        before = gen([("target", "ner")])[0].detach()
        opt_gen.zero_grad()
        (gen([("target", "ner")])[0] * grad).sum().backward()
        opt_gen.step()
        after = gen([("target", "ner")])[0].detach()
        old = plain.detach().clone()
        opt_plain.zero_grad()
        (plain * grad).sum().backward()
        opt_plain.step()
        moved_gen, moved_plain = float((after - before).norm()), float((plain.detach() - old).norm())
        rows.append({"step": step, "gen_norm": float(before.norm()), "plain_norm": float(old.norm()),
                     "gen_rel": moved_gen / float(before.norm()), "plain_rel": moved_plain / float(old.norm()),
                     "ratio": moved_gen / moved_plain})
    return rows


def report(args) -> Path:
    runs = [json.loads(p.read_text()) for p in sorted(args.results.glob("*.json"))]
    if not runs:
        raise SystemExit(f"no results in {args.results} (--results)")
    lines = ["# PGN SDA against BiLSTM-CRF joint: learning curves and update sizes (issue 19)", "",
             "Written by `python benchmarks/pgn_diagnosis.py report` from the JSON files of "
             f"`{args.results.relative_to(ROOT) if args.results.is_relative_to(ROOT) else args.results}`.", "",
             "## Runs", "",
             "| variant | seed | best target dev F1 (step) | last step | source dev F1 at best | "
             "median relative update of the NER LSTM weights, steps < 500 / >= 500 | minutes | date, load |",
             "|---|---:|---|---:|---:|---|---:|---|"]
    for r in runs:
        source_at = {c["step"]: c["source_dev_f"] for c in r["source_curve"]}.get(r["best_step"])
        prefix = "lstm" if r["variant"] == "bilstm_joint" else "theta_"
        early = median_update(r["probes"], prefix, range(0, 500))
        late = median_update(r["probes"], prefix, range(500, 10 ** 9))
        fmt = lambda x: "–" if x is None else f"{x:.2e}"  # noqa: E731
        lines.append(f"| {r['variant']} | {r['seed']} | {r['best_dev_f']} ({r['best_step']}) | {r['last_step']} | "
                     f"{'–' if source_at is None else f'{100 * source_at:.2f}'} | {fmt(early)} / {fmt(late)} | "
                     f"{r['wall_s'] / 60:.1f} | {r['date']}, {r['load_5min']} |")
    lines += ["", "## Learning curves (dev F1 x100: target from spaCy's table, source on the first "
              "source dev sentences)", ""]
    for r in runs:
        source = {c["step"]: c["source_dev_f"] for c in r["source_curve"]}
        points = ", ".join(f"{c['step']}: {c['ents_f']:.1f}"
                           + (f" / {100 * source[c['step']]:.1f}" if source.get(c["step"]) is not None else "")
                           for c in r["target_curve"])
        lines.append(f"- {r['variant']} s{r['seed']} (target / source): {points}")
    lines += ["", "## Commands", ""] + [f"- {r['variant']} s{r['seed']}: `{r['command']}`; overrides "
                                        f"`{json.dumps(r['overrides'])}`" for r in runs]
    path = args.output
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["run", "report", "amplification"])
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    p.add_argument("--seeds", nargs="*", type=int, default=[555])
    p.add_argument("--corpus", type=Path, default=ROOT / "project" / "corpus",
                   help="folder of <domain>/{train,dev}.spacy (python -m spacy_crossner convert)")
    p.add_argument("--source", default="conll2003")
    p.add_argument("--target", default="ai")
    p.add_argument("--vectors", type=Path, default=None, help="spaCy vectors dir (static vectors on)")
    p.add_argument("--max-steps", type=int, default=3000)
    p.add_argument("--eval-frequency", type=int, default=200)
    p.add_argument("--patience", type=int, default=1600)
    p.add_argument("--probe-every", type=int, default=25, help="steps between update-size probes")
    p.add_argument("--lr-scale", type=float, default=0.2, help="pgn_sda_lr: Adam learning rate x this")
    p.add_argument("--meta-scale", type=float, default=0.125,
                   help="pgn_sda_meta: the model's meta_scale (Adam's step on the meta tensor x this)")
    p.add_argument("--source-dev-limit", type=int, default=500)
    p.add_argument("--n-in", type=int, default=150, help="amplification: LSTM input width (WordCharEmbed: 150)")
    p.add_argument("--hidden", type=int, default=100, help="amplification: LSTM width per direction")
    p.add_argument("--noise", type=float, default=0.5, help="amplification: gradient noise / signal")
    p.add_argument("--synthetic-steps", type=int, default=50, help="amplification: Adam steps")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "pgn_diagnosis")
    p.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "pgn_diagnosis_runs.md")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/crossner_pgn_diagnosis"))
    args = p.parse_args(argv)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.command == "report":
        print(f"Wrote {report(args)}")
        return 0
    if args.command == "amplification":
        rows = amplification(args)
        print("| Adam step | generated ||theta|| | plain ||w|| | generated ||dtheta||/||theta|| | "
              "plain ||dw||/||w|| | ||dtheta|| / ||dw|| |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["step"] in (0, 1, 4, 9, 24, 49) or r["step"] == len(rows) - 1:
                print(f"| {r['step'] + 1} | {r['gen_norm']:.1f} | {r['plain_norm']:.1f} | {r['gen_rel']:.4f} | "
                      f"{r['plain_rel']:.4f} | {r['ratio']:.1f} |")
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for seed in args.seeds:
        for variant in args.variants:
            run_variant(args, variant, seed)
    print(f"Wrote {report(args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
