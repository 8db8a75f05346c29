"""torch threads and ``spacy_crossner.torch_threads.v1``: ``spacy benchmark speed`` of one BiLSTM-CRF
pipeline saved twice, with ``[nlp.before_creation]`` ``n_threads = 1`` and with ``n_threads =
null`` (torch's default: one thread per core), and the time ``spacy.load`` takes for each.

    python benchmarks/threads.py --output benchmarks/results/threads.md

The pipeline is configs/bilstm_target.cfg at its default sizes, initialised on AI train (not
trained: speed does not depend on the weights); the data is AI test. Each benchmark runs in a
fresh process without OMP_NUM_THREADS, so only the pipeline's setting differs. Runs alternate
(null, 1, null, 1, ...) so a change of machine load hits both.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_model, utc_now  # noqa: E402

LOAD = ("import time; t = time.perf_counter(); import spacy; nlp = spacy.load(r'{}'); "
        "print(time.perf_counter() - t)")


def build(workdir: Path, data: Path) -> Path:
    env = _env()
    corpus = workdir / "corpus"
    subprocess.run([sys.executable, "-m", "spacy_crossner", "convert", str(data / "ai"), str(corpus),
                    "--domain", "ai", "--no-progress"], check=True, env=env, capture_output=True)
    code = f"""
import spacy
from spacy.training.initialize import init_nlp
from spacy.util import load_config
config = load_config(r"{ROOT / 'configs' / 'bilstm_target.cfg'}", overrides={{
    "paths.target_train": r"{corpus / 'train.spacy'}", "paths.target_dev": r"{corpus / 'dev.spacy'}"}})
for n in ("null", "1"):
    cfg = config.copy()
    cfg["nlp"]["before_creation"] = {{"@callbacks": "spacy_crossner.torch_threads.v1",
                                      "n_threads": None if n == "null" else int(n)}}
    nlp = init_nlp(cfg)
    nlp.to_disk(r"{workdir}" + "/model_" + n)
"""
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    return corpus / "test.spacy"


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return env


def speed(model: Path, data: Path, batches: int) -> float:
    res = subprocess.run([sys.executable, "-m", "spacy", "benchmark", "speed", str(model), str(data),
                          "--batches", str(batches), "--warmup", "1"],
                         capture_output=True, text=True, env=_env(), check=True)
    match = re.search(r"Outliers.*?\n.*?Mean:\s*([\d.,]+)\s*words/s", res.stdout, re.S) or \
        re.search(r"Mean:\s*([\d.,]+)\s*words/s", res.stdout)
    if not match:
        sys.exit(f"no words/s in the output of spacy benchmark speed:\n{res.stdout}")
    return float(match.group(1).replace(",", ""))


def load_seconds(model: Path) -> float:
    res = subprocess.run([sys.executable, "-c", LOAD.format(model)], capture_output=True, text=True,
                         env=_env(), check=True)
    return float(res.stdout.strip().splitlines()[-1])


def import_cost_ms() -> float:
    """Cumulative import time of spacy_crossner once spaCy is imported (median of 3)."""
    times = []
    for _ in range(3):
        res = subprocess.run([sys.executable, "-X", "importtime", "-c", "import spacy; import spacy_crossner"],
                             capture_output=True, text=True, env=_env(), check=True)
        line = next(l for l in res.stderr.splitlines() if l.rstrip().endswith("| spacy_crossner"))
        times.append(int(line.split("|")[1]) / 1000)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "crossner")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "threads.md")
    args = p.parse_args()
    start = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        test = build(tmp, args.data)
        words, loads = {"null": [], "1": []}, {"null": [], "1": []}
        for _ in range(args.repeats):
            for n in ("null", "1"):
                words[n].append(speed(tmp / f"model_{n}", test, args.batches))
                loads[n].append(load_seconds(tmp / f"model_{n}"))
                print(n, words[n][-1], loads[n][-1], flush=True)
    load_after = os.getloadavg()
    import_ms = import_cost_ms()
    import spacy
    import torch

    date = utc_now()
    med = {n: statistics.median(v) for n, v in words.items()}
    lines = [
        "# torch threads: `spacy_crossner.torch_threads.v1` on a BiLSTM-CRF pipeline", "",
        f"- Command (from the repository root): `python benchmarks/threads.py --repeats {args.repeats} "
        f"--batches {args.batches}`",
        f"- Machine: {os.cpu_count()} CPU cores ({cpu_model()}), no GPU; torch {torch.__version__} "
        f"(default threads here: {os.cpu_count()}), spaCy {spacy.__version__}; load average "
        f"{load_before[0]:.1f} before and {load_after[0]:.1f} after the run (other jobs shared the "
        "machine: read the ratio, not the absolute speeds).",
        f"- Date: {date}; total run time {(time.time() - start) / 60:.1f} min.",
        "- Pipeline: configs/bilstm_target.cfg at its default sizes (WordCharEmbed, BiLSTM 128 per "
        "direction, CRF), initialised on CrossNER AI train; data: AI test (converted with "
        "`python -m spacy_crossner convert`). `spacy benchmark speed --batches "
        f"{args.batches} --warmup 1`, each in a fresh process without OMP_NUM_THREADS; runs "
        "alternate between the two settings.", "",
        "| `[nlp.before_creation]` | words/s (median of runs) | runs | `spacy.load` seconds (median) |",
        "|---|---:|---|---:|",
    ]
    for n, label in (("null", "`n_threads = null` (torch's default)"), ("1", "`n_threads = 1`")):
        lines.append(f"| {label} | {med[n]:,.0f} | {', '.join(f'{w:,.0f}' for w in words[n])} | "
                     f"{statistics.median(loads[n]):.2f} |")
    lines += ["", f"Ratio one thread / default: **{med['1'] / med['null']:.2f}×**.", "",
              "`spacy.load`: both pipelines hold the same components and load the same code; the "
              "load times follow the machine's load between runs, not the setting. What the plugin "
              "adds to every `spacy.load` (spaCy imports the `spacy_factories` entry points of all "
              "installed plugins when it creates a pipeline): `import spacy_crossner` after spaCy "
              f"took {import_ms:.0f} ms here (`python -X importtime -c \"import spacy; import "
              "spacy_crossner\"`; torch is already imported by thinc). The callback's module imports "
              "nothing of its own; torch only when the callback runs."]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
