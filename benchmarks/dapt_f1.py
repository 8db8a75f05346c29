"""F1 of TransformerTagger on a CrossNER domain with and without DAPT (issue 7, "Measured").

One run does everything, from the CrossNER column files to the markdown table:

1. ``python -m spacy_crossner convert`` the domain (default AI) into ``<workdir>/corpus/<domain>``;
2. ``python -m spacy_crossner raw-text`` of the domain's train + dev text -> ``<workdir>/raw``
   (the default corpus of the project's ``dapt`` command; test text is never used);
3. ``python -m spacy_crossner dapt`` twice on that text, span-level and token-level masking,
   same start model (bundled MiniLM), seed, epochs/steps, batch and block length;
4. ``spacy train configs/trf_target.cfg`` (TransformerTagger, linear head) once per arm and
   fine-tuning seed: no DAPT (bundled MiniLM), span DAPT, token DAPT (``--paths.transformer``),
   same seed, steps, evaluation frequency and every other setting; model-best is picked on the
   domain's dev set (as the paper's early stopping);
5. ``python -m spacy_crossner evaluate model-best test.spacy`` (exact-match P/R/F, per sentence),
   then a markdown table with the settings, the held-out masked-LM loss of each DAPT run and the
   paper's reference (CrossNER Table 2, Directly Fine-tune).

    python benchmarks/dapt_f1.py --dapt-epochs 2 --steps 60 --eval-frequency 30 \
        --learn-rate 2e-4 --seeds 555 --jobs 3      # the defaults; ~35 min here under load

CPU-sized: a few hundred sentences of DAPT text (the paper: millions), a few dozen DAPT steps, a
few hundred fine-tuning steps, MiniLM (6 layers, 384 hidden) instead of BERT-base. The numbers
say what these settings give here, not whether the paper's result reproduces.

Every subprocess gets OMP_NUM_THREADS=MKL_NUM_THREADS=``--threads`` (1 by default: on this
2-core shared machine one thread per process is the fastest, see dapt_throughput.md) and up to
``--jobs`` of them run at the same time (the two DAPT runs, then the fine-tuning runs); the
results should not depend on ``--jobs`` (each run is seeded and single-threaded), only the
wall-clock. ``--learn-rate`` overrides the config's 5e-5 for all arms (default 2e-4: in a few
dozen steps the linear head learns nothing at 5e-5).
The work directory (default ``benchmarks/dapt_work``, git-ignored) is reused: a step whose output
exists is skipped unless ``--fresh``.
"""
import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "crossner"
CONFIG = ROOT / "configs" / "trf_target.cfg"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py
from machine import utc_now  # noqa: E402
sys.path.insert(1, str(ROOT / "project" / "scripts"))  # the study: project/scripts/study.py
from study import best_step as training_table  # noqa: E402  (spaCy's training table: best step)
PYTHON = sys.executable
BIN = Path(sys.executable).parent
ARMS = ("none", "span", "token")
ARM_NAMES = {"none": "w/o DAPT", "span": "DAPT, span masking", "token": "DAPT, token masking"}
# CrossNER (Liu et al., AAAI 2021) Table 2, AI column, "Directly Fine-tune" (BERT-base, F1).
PAPER_AI = [
    ("w/o DAPT", "50.37"),
    ("token-level masking, domain-level corpus", "53.66"),
    ("span-level masking, domain-level corpus", "(no such row)"),
    ("span-level masking, integrated corpus", "56.36"),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="CrossNER ner_data/ copy")
    p.add_argument("--domain", default="ai")
    p.add_argument("--workdir", type=Path, default=ROOT / "benchmarks" / "dapt_work")
    p.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "dapt_f1.md")
    p.add_argument("--dapt-epochs", type=float, default=2.0)
    p.add_argument("--dapt-max-steps", type=int, default=-1, help="overrides --dapt-epochs if > 0")
    p.add_argument("--dapt-batch-size", type=int, default=8)
    p.add_argument("--dapt-lr", type=float, default=5e-5)
    p.add_argument("--dapt-seed", type=int, default=42, help="seed of both DAPT runs")
    p.add_argument("--max-length", type=int, default=128, help="DAPT block length (pieces)")
    p.add_argument("--steps", type=int, default=60, help="fine-tuning steps of every arm")
    p.add_argument("--eval-frequency", type=int, default=30)
    p.add_argument("--learn-rate", type=float, default=2e-4,
                   help="training.optimizer.learn_rate of all arms (config: 5e-5); < 0: the config's")
    p.add_argument("--seeds", type=int, nargs="+", default=[555],
                   help="fine-tuning seeds (CrossNER: 555 666 777)")
    p.add_argument("--jobs", type=int, default=3, help="subprocesses run at the same time")
    p.add_argument("--threads", type=int, default=1, help="OMP/MKL threads per subprocess")
    p.add_argument("--fresh", action="store_true", help="delete the work directory first")
    return p.parse_args(argv)


def env(threads: int) -> dict:
    e = dict(os.environ)
    if threads:
        e["OMP_NUM_THREADS"] = e["MKL_NUM_THREADS"] = str(threads)
    e.setdefault("TOKENIZERS_PARALLELISM", "false")
    return e


def show(cmd) -> str:
    return " ".join(shlex.quote(str(c)) for c in cmd)


def run(cmd, log: Path, threads: int) -> None:
    print(f"$ {show(cmd)}  > {log}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf8") as fh:
        rc = subprocess.call([str(c) for c in cmd], stdout=fh, stderr=subprocess.STDOUT,
                             env=env(threads), cwd=ROOT)
    if rc:
        sys.exit(f"failed ({rc}): {show(cmd)}; see {log}")


def run_parallel(jobs, n: int, threads: int) -> None:
    """jobs: list of (cmd, log). At most n at a time; any failure stops the benchmark."""
    pending = list(jobs)
    running = []
    while pending or running:
        while pending and len(running) < max(1, n):
            cmd, log = pending.pop(0)
            print(f"$ {show(cmd)}  > {log}", flush=True)
            log.parent.mkdir(parents=True, exist_ok=True)
            fh = log.open("w", encoding="utf8")
            proc = subprocess.Popen([str(c) for c in cmd], stdout=fh, stderr=subprocess.STDOUT,
                                    env=env(threads), cwd=ROOT)
            running.append((proc, fh, cmd, log, time.time()))
        time.sleep(2)
        for item in list(running):
            proc, fh, cmd, log, t0 = item
            if proc.poll() is None:
                continue
            fh.close()
            running.remove(item)
            print(f"  done in {time.time() - t0:.0f} s: {log.name}", flush=True)
            if proc.returncode:
                for other in running:
                    other[0].terminate()
                sys.exit(f"failed ({proc.returncode}): {show(cmd)}; see {log}")


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    import transformers
    import spacy
    return (f"{os.cpu_count()} CPU(s) (`nproc` {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()}), "
            f"{cpu}, no GPU; Python {platform.python_version()}, torch {torch.__version__}, "
            f"transformers {transformers.__version__}, spaCy {spacy.__version__}")


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.learn_rate is not None and args.learn_rate < 0:
        args.learn_rate = None
    load_start = loadavg()
    started = utc_now()
    work = args.workdir.resolve()
    if args.fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    src = args.data / args.domain
    corpus = work / "corpus" / args.domain
    raw = work / "raw" / f"{args.domain}.txt"
    logs = work / "logs"
    timings_file = work / "timings.json"
    saved = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    started = saved.setdefault("started", started)
    load_start = saved.setdefault("load_start", load_start)
    stage_times = saved.setdefault("stages", {})
    timings = {}

    def stage(name: str, t0: float, ran: bool) -> None:
        """Record a stage's wall-clock; a stage skipped (outputs reused) keeps its saved time."""
        if ran:
            stage_times[name] = time.time() - t0
            saved["load_end"] = loadavg()
            timings_file.write_text(json.dumps(saved, indent=2))
        timings[name] = stage_times.get(name, 0.0)

    # 1-2. data
    t0 = time.time()
    ran = not (corpus / "test.spacy").exists() or not raw.exists()
    if not (corpus / "test.spacy").exists():
        run([PYTHON, "-m", "spacy_crossner", "convert", src, corpus, "--domain", args.domain],
            logs / "convert.log", args.threads)
    if not raw.exists():
        run([PYTHON, "-m", "spacy_crossner", "raw-text", src / "train.txt", src / "dev.txt",
             "--output", raw, "--domain", args.domain], logs / "raw_text.log", args.threads)
    stage("convert + raw text", t0, ran)
    raw_lines = [l for l in raw.read_text(encoding="utf8").splitlines() if l.strip()]
    raw_tokens = sum(len(l.split()) for l in raw_lines)

    # 3. DAPT, span and token
    t0 = time.time()
    dapt_dirs = {m: work / "dapt" / f"{m}_seed{args.dapt_seed}" for m in ("span", "token")}
    dapt_cmds = {}
    jobs = []
    for masking, out in dapt_dirs.items():
        cmd = [PYTHON, "-m", "spacy_crossner", "dapt", raw, out, "--masking", masking,
               "--epochs", args.dapt_epochs, "--max-steps", args.dapt_max_steps,
               "-b", args.dapt_batch_size, "--lr", args.dapt_lr, "--seed", args.dapt_seed,
               "--max-length", args.max_length, "--no-progress", "--save-steps", 1000000,
               "--logging-steps", 10]
        dapt_cmds[masking] = cmd
        if not (out / "dapt_summary.json").exists():
            if out.exists():
                shutil.rmtree(out)
            jobs.append((cmd, logs / f"dapt_{masking}.log"))
    run_parallel(jobs, args.jobs, args.threads)
    dapt_ran = bool(jobs)
    summaries = {}
    for masking, out in dapt_dirs.items():
        summaries[masking] = json.loads((out / "dapt_summary.json").read_text())
        shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the final model is enough
    stage("DAPT (2 runs)", t0, dapt_ran)

    # 4. fine-tuning
    t0 = time.time()
    train_cmds = {}
    jobs = []
    for seed in args.seeds:
        for arm in ARMS:
            out = work / "train" / f"{arm}_seed{seed}"
            cmd = [BIN / "spacy", "train", CONFIG, "--output", out,
                   "--paths.target_train", corpus / "train.spacy",
                   "--paths.target_dev", corpus / "dev.spacy",
                   "--vars.target_domain", args.domain,
                   "--training.max_steps", args.steps,
                   "--training.eval_frequency", args.eval_frequency,
                   "--system.seed", seed, "--gpu-id", -1]
            if args.learn_rate is not None:
                cmd += ["--training.optimizer.learn_rate", args.learn_rate]
            if arm != "none":
                cmd += ["--paths.transformer", dapt_dirs[arm]]
            train_cmds[(arm, seed)] = cmd
            if not (out / "model-best" / "meta.json").exists():
                if out.exists():
                    shutil.rmtree(out)
                jobs.append((cmd, logs / f"train_{arm}_seed{seed}.log"))
    run_parallel(jobs, args.jobs, args.threads)
    stage("fine-tuning", t0, bool(jobs))

    # 5. evaluation on test
    t0 = time.time()
    metrics_files = {}
    jobs = []
    for seed in args.seeds:
        for arm in ARMS:
            out = work / "metrics" / f"{arm}_seed{seed}.json"
            metrics_files[(arm, seed)] = out
            model = work / "train" / f"{arm}_seed{seed}" / "model-best"
            if not out.exists():
                jobs.append(([PYTHON, "-m", "spacy_crossner", "evaluate", model,
                              corpus / "test.spacy", "--output", out],
                             logs / f"evaluate_{arm}_seed{seed}.log"))
    run_parallel(jobs, args.jobs, args.threads)
    metrics = {k: json.loads(v.read_text()) for k, v in metrics_files.items()}
    stage("evaluation", t0, bool(jobs))
    timings["total"] = sum(timings.values())

    best_steps = {k: best_step(work / "logs" / f"train_{k[0]}_seed{k[1]}.log") for k in metrics}
    text = report(args, argv, started, load_start, saved.get("load_end", "?"), raw_lines, raw_tokens, summaries,
                  dapt_cmds, train_cmds, metrics, best_steps, timings)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf8")
    print(text)
    print(f"Wrote {args.output}")


def best_step(log: Path):
    """(step, dev F1 in %) of the best evaluation in a spacy train log, or None (the study's
    reading of spaCy's training table)."""
    if not log.exists():
        return None
    f1, step, _ = training_table(log.read_text(encoding="utf8", errors="replace"))
    return (step, f1) if step is not None else None


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def mean_sd(values):
    import statistics
    m = statistics.mean(values)
    return f"{100 * m:.2f}" + (f" ± {100 * statistics.stdev(values):.2f}" if len(values) > 1 else "")


def report(args, argv, started, load_start, load_end, raw_lines, raw_tokens, summaries,
           dapt_cmds, train_cmds, metrics, best_steps, timings) -> str:
    seeds = args.seeds
    any_metrics = next(iter(metrics.values()))
    # entity types of the domain: those with gold entities in test
    types = sorted(t for t, c in any_metrics.get("counts_per_type", {}).items()
                   if c.get("tp", 0) + c.get("fn", 0) > 0) or sorted(any_metrics["ents_per_type"])
    argv = sys.argv[1:] if argv is None else argv
    cmdline = "python benchmarks/dapt_f1.py" + (" " + show(argv) if argv else "")
    s0 = next(iter(summaries.values()))
    L = []
    L.append(f"# DAPT on the {args.domain.upper()} domain: F1 of TransformerTagger with and without it\n")
    L.append("**CPU-sized, not the paper's setting**: DAPT on the domain's own train+dev text "
             f"({len(raw_lines):,} sentences, {raw_tokens:,} tokens, vs 5.2M tokens of AI Wikipedia "
             f"text in the paper) for {s0['steps']} steps ({s0['epochs']:.2f} epochs; the paper: 15 "
             f"epochs), blocks of {args.max_length} pieces (paper: 512), the 6-layer MiniLM "
             "(with a freshly initialised masked-LM head) instead of BERT-base, and "
             f"{args.steps} fine-tuning steps with {len(seeds)} seed(s). The numbers below say what "
             "these settings give on this machine; they do not test the paper's claim at its scale.\n")
    L.append(f"- Date: {started}; wall-clock of the whole run {timings['total'] / 60:.1f} min, sum of the stages "
             f"({', '.join(f'{k} {v / 60:.1f} min' for k, v in timings.items() if k != 'total')}); "
             f"1-minute load average {load_start} at the start, {load_end} at the end")
    L.append(f"- Machine: {machine()}")
    L.append(f"- Command: `{cmdline}` (from the repository root, venv Python); subprocesses with "
             f"OMP_NUM_THREADS=MKL_NUM_THREADS={args.threads}, at most {args.jobs} at a time")
    L.append(f"- Data: CrossNER `{args.domain}` ({args.data}), converted with "
             "`python -m spacy_crossner convert`; DAPT text = `python -m spacy_crossner raw-text` of "
             "train.txt + dev.txt (tokens joined by spaces, one sentence per line; test never used)")
    L.append(f"- DAPT: bundled MiniLM, masking p={s0['probability']}, {s0['train_blocks']} training "
             f"blocks + {s0['held_out_blocks']} held-out blocks of {s0['max_length']} pieces, batch "
             f"{args.dapt_batch_size}, AdamW lr {args.dapt_lr} linear decay, seed {args.dapt_seed}, "
             f"{s0['steps']} steps; same for span and token")
    lr = args.learn_rate if args.learn_rate is not None else "5e-05 (config)"
    L.append(f"- Fine-tuning: `configs/trf_target.cfg` (TransformerTagger, linear head, softmax), "
             f"{args.steps} steps of 16 sentences, Adam lr {lr}, dev evaluation every "
             f"{args.eval_frequency} steps, model-best (dev F1) scored on test; seeds {seeds}; "
             "the only difference between arms is `--paths.transformer`")
    L.append("- Scoring: `python -m spacy_crossner evaluate MODEL test.spacy` (exact-match entity "
             "P/R/F, per sentence, micro-averaged over types)")
    if args.learn_rate is not None:
        L.append(f"- Learning rate: the config's 5e-05 is raised to {args.learn_rate} for all three "
                 "arms because the run is a few dozen steps long: the linear head starts from "
                 "scratch, and in a trial at 5e-05 the dev F1 was 0.00 after 20 steps (at 2e-04: "
                 "19.08). The paper fine-tunes at 5e-05 for up to 300 epochs with early stopping.")
    L.append("")

    L.append("## DAPT runs (masked-LM loss on the held-out blocks)\n")
    L.append("| masking | steps | epochs | tokens seen | seconds | tokens/s | loss before | loss after |")
    L.append("|---|---|---|---|---|---|---|---|")
    for m, s in summaries.items():
        L.append(f"| {m} | {s['steps']} | {s['epochs']:.2f} | {s['tokens_seen']:,} | "
                 f"{s['train_seconds']:.0f} | {s['tokens_per_second']:.0f} | "
                 f"{s['loss_before']:.3f} | {s['loss_after']:.3f} |")
    L.append("")
    L.append("The loss before is that of MiniLM with a random masked-LM head (~ln 30522 = 10.3); "
             "the held-out blocks (the last 5% of the lines) are masked once with the run's own "
             "scheme and seed, so span and token losses are not directly comparable (span masks "
             "are harder to fill). The runs shared the machine with each other and with other "
             "jobs: seconds and tokens/s are not a speed benchmark (see dapt_throughput.md).\n")

    L.append(f"## Test F1 ({args.domain.upper()} test, {len(seeds)} seed(s))\n")
    L.append("| arm | P | R | F1 | best dev step / dev F1 |")
    L.append("|---|---|---|---|---|")
    for arm in ARMS:
        ms = [metrics[(arm, s)] for s in seeds]
        bests = "; ".join(f"{b[0]} / {b[1]:.2f}" if b else "?" for b in
                          (best_steps[(arm, s)] for s in seeds))
        L.append(f"| {ARM_NAMES[arm]} | {mean_sd([m['ents_p'] for m in ms])} | "
                 f"{mean_sd([m['ents_r'] for m in ms])} | **{mean_sd([m['ents_f'] for m in ms])}** | "
                 f"{bests} |")
    L.append("")
    if len(seeds) > 1:
        L.append("Mean ± sample standard deviation over the seeds. Per seed (F1): " + "; ".join(
            f"{ARM_NAMES[a]}: " + ", ".join(pct(metrics[(a, s)]['ents_f']) for s in seeds)
            for a in ARMS) + "\n")

    f = {a: sum(metrics[(a, s)]["ents_f"] for s in seeds) / len(seeds) for a in ARMS}
    L.append(f"Differences in test F1 (points): span DAPT − w/o DAPT = "
             f"{100 * (f['span'] - f['none']):+.2f}; token DAPT − w/o DAPT = "
             f"{100 * (f['token'] - f['none']):+.2f}; span − token = "
             f"{100 * (f['span'] - f['token']):+.2f}. Paper (AI): token domain-level − w/o = +3.29, "
             "span integrated − w/o = +5.99.\n")
    L.append("### F1 per entity type" + (" (mean over seeds)" if len(seeds) > 1 else "") + "\n")
    L.append("| type | test gold | " + " | ".join(ARM_NAMES[a] for a in ARMS) + " |")
    L.append("|---|---|" + "---|" * len(ARMS))
    for t in types:
        gold = any_metrics.get("counts_per_type", {}).get(t, {})
        n = gold.get("tp", 0) + gold.get("fn", 0)
        cells = []
        for arm in ARMS:
            vals = [metrics[(arm, s)]["ents_per_type"].get(t, {}).get("f", 0.0) for s in seeds]
            cells.append(f"{100 * sum(vals) / len(vals):.2f}")
        L.append(f"| {t} | {n} | " + " | ".join(cells) + " |")
    L.append("")

    L.append("## Paper reference (not comparable)\n")
    L.append("CrossNER (Liu et al., AAAI 2021) Table 2, AI domain, *Directly Fine-tune* (target train "
             "only), BERT-base-cased, DAPT for 15 epochs on Wikipedia AI text (the authors' run.sh "
             "uses fine-tuning seeds 555, 666, 777):\n")
    L.append("| setting | F1 |")
    L.append("|---|---|")
    for name, f in PAPER_AI:
        L.append(f"| {name} | {f} |")
    L.append("")
    L.append("Table 2 has no span-level row on the domain-level corpus; the closest pair to ours "
             "(domain text, span vs token) is therefore not in the paper: its span row uses the "
             "integrated corpus (entity-level + 2 × task-level).\n")

    L.append("## Exact commands\n")
    for m, cmd in dapt_cmds.items():
        L.append(f"- DAPT {m}: `{rel(show(cmd))}`")
    for (arm, seed), cmd in train_cmds.items():
        L.append(f"- train {arm}, seed {seed}: `{rel(show(cmd))}`")
    L.append(f"- evaluate: `python -m spacy_crossner evaluate {rel(str(args.workdir.resolve()))}"
             "/train/ARM_seedS/model-best "
             f"{rel(str(args.workdir.resolve()))}/corpus/{args.domain}/test.spacy --output M.json`")
    L.append("")
    return "\n".join(L)


def rel(s: str) -> str:
    return s.replace(str(ROOT) + "/", "").replace(PYTHON, "python").replace(str(BIN) + "/", "")


if __name__ == "__main__":
    main()
