"""Memory of a training with a language-model objective, with and without the heap trims of
``spacy_crossner.heap`` (``SPACY_CROSSNER_TRIM_EVERY=0`` turns them off).

    python benchmarks/heap.py --corpus C --raw R/ai.txt --dictionary D --output benchmarks/results/heap.md

``configs/multi_cell_uda.cfg`` (labelled source C/conll2003, raw target text R/ai.txt, entity
dictionary D) trains ``--steps`` updates in a fresh process per setting, one torch thread,
source dev limited to 300 sentences; the resident set size (RSS) of the process is read every
``--every`` seconds. Settings alternate (off, on, off, on, ...) over ``--repeats`` rounds, so a
change of machine load hits both.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_model  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def train(args, trim_every: int, workdir: Path) -> dict:
    out = workdir / f"trim{trim_every}"
    cmd = [sys.executable, "-m", "spacy", "train", str(ROOT / "configs" / "multi_cell_uda.cfg"),
           "--output", str(out), "--system.seed", "555", "--training.max_steps", str(args.steps),
           "--training.eval_frequency", str(args.steps), "--corpora.dev.limit", "300",
           "--paths.source_train", f"{args.corpus}/{args.source}/train.spacy",
           "--paths.source_dev", f"{args.corpus}/{args.source}/dev.spacy",
           "--vars.source_domain", args.source, "--paths.target_raw", str(args.raw),
           "--vars.target_domain", args.target, "--paths.dictionary", str(args.dictionary)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", SPACY_CROSSNER_TRIM_EVERY=str(trim_every))
    log = workdir / f"trim{trim_every}.log"
    start = time.perf_counter()
    series = []
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            try:
                series.append(round(rss_mb(proc.pid)))
            except OSError:
                break
            time.sleep(args.every)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"spacy train failed (exit {proc.returncode}): {log.read_text()[-2000:]}")
    return {"trim_every": trim_every, "wall_s": round(wall, 1), "peak_rss_mb": max(series),
            "last_rss_mb": series[-1], "rss_mb_every_s": series}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, required=True, help="folder of <domain>/{train,dev}.spacy")
    p.add_argument("--source", default="conll2003")
    p.add_argument("--target", default="ai")
    p.add_argument("--raw", type=Path, required=True, help="raw target text (one sentence per line)")
    p.add_argument("--dictionary", type=Path, required=True, help="entity dictionary folder")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--every", type=float, default=5.0, help="seconds between two RSS readings")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--load-note", default="", help="what else ran on the machine, for the report")
    p.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "heap.md")
    args = p.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for every in (0, 50):
                runs.append(train(args, every, Path(tmp)))
                print(json.dumps({k: v for k, v in runs[-1].items() if k != "rss_mb_every_s"}), flush=True)
    off = [r for r in runs if r["trim_every"] == 0]
    on = [r for r in runs if r["trim_every"] == 50]
    command = " ".join(["python", "benchmarks/heap.py", *sys.argv[1:]])
    lines = [
        "# Heap trims: memory of a training with an LM objective",
        "",
        f"`{command}` on {datetime.date.today()}, {cpu_model()}, {os.cpu_count()} cores; load "
        f"when it started: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
        + (f" ({args.load_note})." if args.load_note else "."),
        "",
        f"`configs/multi_cell_uda.cfg`, {args.steps} updates, one torch thread, source "
        f"{args.source}, raw target text `{args.raw.name}`; each setting a fresh process; RSS read "
        f"every {args.every:g} s. `SPACY_CROSSNER_TRIM_EVERY=0`: no trims (the behaviour before "
        "`spacy_crossner.heap`); 50: the default.",
        "",
        "| trims | runs | peak RSS (MB) | RSS at the end (MB) | wall (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rs in (("off (0)", off), ("every 50 updates", on)):
        lines.append(f"| {name} | {len(rs)} | {statistics.mean(r['peak_rss_mb'] for r in rs):.0f} | "
                     f"{statistics.mean(r['last_rss_mb'] for r in rs):.0f} | "
                     f"{statistics.mean(r['wall_s'] for r in rs):.1f} |")
    ratio = statistics.mean(r["wall_s"] for r in on) / statistics.mean(r["wall_s"] for r in off)
    lines += ["", f"Wall time with trims / without: {ratio:.2f}.", "",
              "RSS series (MB, one reading per interval):", ""]
    for r in runs:
        lines.append(f"- trims {r['trim_every'] or 'off'}: {' '.join(map(str, r['rss_mb_every_s']))}")
    args.output.write_text("\n".join(lines) + "\n", encoding="utf8")
    args.output.with_suffix(".json").write_text(json.dumps({"command": command, "runs": runs}, indent=1) + "\n",
                                                encoding="utf8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
