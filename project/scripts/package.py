"""Build wheels of spacy_crossner and of a trained pipeline, and prove they install on their own.

    python scripts/package.py MODEL_DIR OUT_DIR --name crossner_ai --version 0.1.0 [--check TEXTS]

1. ``OUT_DIR/wheels/spacy_crossner-*.whl``: the plugin, built from a copy of its sources (setup.py,
   README.md, spacy_crossner/), so no stale ``build/`` folder of the checkout leaks into it.
2. ``OUT_DIR/en_NAME-VERSION/dist/en_NAME-VERSION-py3-none-any.whl``: ``spacy package --build
   wheel``. spaCy lists the packages whose registered functions the pipeline's config uses in
   its requirements; the script fails unless ``spacy_crossner`` is among them.
3. With ``--check TEXTS`` (a .txt file, one text per line, or a .spacy file): a fresh virtual
   environment in a temporary folder, outside this checkout. Its dependencies come from the
   package index, exactly as a user's would: torch pinned to this environment's version (so the
   same CPU or CUDA build) with spacy_crossner's requirements read from the built wheel. The two
   wheels come only from OUT_DIR (``pip install --no-index --find-links``): nothing is installed
   from, or imported from, this checkout (the check asserts where spacy_crossner was imported
   from). ``spacy.load("en_NAME")`` there must predict the same entities on the texts as the
   pipeline loaded from MODEL_DIR here, with the optional extras' packages (matplotlib, dask)
   neither installed there nor imported by the load and prediction in either run (here they are
   installed: ``sys.modules`` says whether anything imported them). A fresh environment rather than one sharing this one's
   site-packages: this one has spacy_crossner installed (editable), which would hide a missing
   requirement.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# packages of the optional extras (report, distributed, project): a packaged pipeline must load
# and predict without them
OPTIONAL = ("matplotlib", "dask", "distributed")
PREDICT = r"""
import importlib.util, json, sys
OPTIONAL = %r
installed = [name for name in OPTIONAL if importlib.util.find_spec(name) is not None]
import spacy
import spacy_crossner
texts = json.load(open(sys.argv[2], encoding="utf8"))
nlp = spacy.load(sys.argv[1])
ents = [[[e.start_char, e.end_char, e.label_] for e in doc.ents] for doc in nlp.pipe(texts)]
imported = [name for name in OPTIONAL if name in sys.modules]
out = {"spacy_crossner": spacy_crossner.__file__, "installed": installed, "imported": imported, "ents": ents}
json.dump(out, open(sys.argv[3], "w", encoding="utf8"))
""" % (OPTIONAL,)


def run(cmd, quiet: bool = False, **kwargs) -> None:
    """Run a command; with ``quiet``, show its output only if it fails."""
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    if quiet:
        res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
        code = res.returncode
        if code != 0:
            print((res.stdout + res.stderr)[-5000:], file=sys.stderr)
    else:
        code = subprocess.call([str(c) for c in cmd], **kwargs)
    if code != 0:
        sys.exit(f"Failed ({code}): {' '.join(str(c) for c in cmd)}")


def _can_build_without_isolation() -> bool:
    """setuptools 70.1+ builds wheels itself: no isolated build environment to set up."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (70, 1)


def build_plugin_wheel(out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "spacy_crossner_src"
        src.mkdir()
        for name in ("setup.py", "README.md"):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "spacy_crossner", src / "spacy_crossner",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        isolation = [] if not _can_build_without_isolation() else ["--no-isolation"]
        run([sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", out, src], quiet=True)
    wheels = sorted(out.glob("spacy_crossner-*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        sys.exit(f"No spacy_crossner wheel in {out}")
    return wheels[-1]


def wheel_requirements(wheel: Path) -> list:
    """Requires-Dist of a wheel, extras' requirements left out."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(name).decode("utf8").splitlines()
    reqs = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in reqs if "extra ==" not in r]


def build_pipeline_wheel(model: Path, out: Path, name: str, version: str) -> Path:
    run([sys.executable, "-m", "spacy", "package", model, out, "--name", name, "--version", version,
         "--build", "wheel", "--force"], quiet=True)
    full = name if name.startswith("en_") else f"en_{name}"
    wheel = out / f"{full}-{version}" / "dist" / f"{full}-{version}-py3-none-any.whl"
    if not wheel.exists():
        sys.exit(f"spacy package did not write {wheel}")
    reqs = wheel_requirements(wheel)
    if not any(r.replace("-", "_").startswith("spacy_crossner") for r in reqs):
        sys.exit(f"{wheel} does not require spacy_crossner (requirements: {', '.join(reqs)}): is "
                 "spacy_crossner installed as a package in this environment?")
    print(f"{wheel.name} requires: {', '.join(reqs)}", flush=True)
    return wheel


def read_texts(path: Path) -> list:
    if path.suffix == ".spacy":
        import spacy
        from spacy.tokens import DocBin

        docs = DocBin().from_disk(path).get_docs(spacy.blank("en").vocab)
        return [doc.text for _, doc in zip(range(200), docs)]
    return [line.strip() for line in path.read_text(encoding="utf8").splitlines() if line.strip()][:200]


def check_in_fresh_venv(model: Path, wheel_dirs: list, name: str, texts_path: Path) -> None:
    from importlib.metadata import version

    texts = read_texts(texts_path)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "texts.json").write_text(json.dumps(texts), encoding="utf8")
        (tmp / "predict.py").write_text(PREDICT, encoding="utf8")
        here = tmp / "here.json"
        run([sys.executable, tmp / "predict.py", model, tmp / "texts.json", here])
        env_dir = tmp / "venv"
        run([sys.executable, "-m", "venv", env_dir], quiet=True)
        python = env_dir / "bin" / "python"
        if not python.exists():  # Windows
            python = env_dir / "Scripts" / "python.exe"
        plugin = next(Path(wheel_dirs[0]).glob("spacy_crossner-*.whl"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        # no byte-compiling of what pip installs (half of its time here): Python compiles what
        # the check imports when it imports it
        pip = [python, "-m", "pip", "install", "--quiet", "--no-compile"]
        run(pip + [f"torch=={version('torch')}"] + wheel_requirements(plugin), cwd=tmp, env=env)
        full = name if name.startswith("en_") else f"en_{name}"
        links = [arg for d in wheel_dirs for arg in ("--find-links", d)]
        run(pip + ["--no-index"] + links + [full], cwd=tmp, env=env)
        there = tmp / "there.json"
        run([python, tmp / "predict.py", full, tmp / "texts.json", there], cwd=tmp, env=env)
        a = json.loads(here.read_text(encoding="utf8"))
        b = json.loads(there.read_text(encoding="utf8"))
        if not Path(b["spacy_crossner"]).resolve().is_relative_to(env_dir.resolve()):
            sys.exit(f"The fresh environment imported spacy_crossner from {b['spacy_crossner']}")
        if b["installed"]:
            sys.exit(f"The fresh environment has {', '.join(b['installed'])} installed: a requirement "
                     "of spacy_crossner pulls in what only its extras should")
        if a["imported"] or b["imported"]:
            sys.exit(f"spacy.load and prediction imported {', '.join(sorted(set(a['imported'] + b['imported'])))}: "
                     "a packaged pipeline must load without the optional extras")
        if a["ents"] != b["ents"]:
            bad = next(i for i, (x, y) in enumerate(zip(a["ents"], b["ents"])) if x != y)
            sys.exit(f"The installed package predicts other entities: text {bad} ({texts[bad]!r}): "
                     f"{b['ents'][bad]} instead of {a['ents'][bad]}")
        n = sum(len(e) for e in a["ents"])
        print(f"Checked: spacy.load('{full}') in a fresh environment predicts the same {n} "
              f"entities on {len(texts)} texts as {model}", flush=True)
        print(f"Checked: none of {', '.join(OPTIONAL)} is installed there or imported by the load "
              "and prediction", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="Trained pipeline directory (model-best).")
    parser.add_argument("output", type=Path, help="Folder for the wheels (created).")
    parser.add_argument("--name", required=True, help="Package name without the en_ prefix.")
    parser.add_argument("--version", default="0.1.0", help="Package version.")
    parser.add_argument("--check", type=Path, default=None,
                        help="Texts (.txt, one per line, or .spacy) to compare the installed "
                        "package's entities on; omit to only build.")
    args = parser.parse_args()
    if not (args.model / "config.cfg").exists():
        sys.exit(f"Not a pipeline directory (no config.cfg): {args.model}")
    if args.check is not None and not args.check.exists():
        sys.exit(f"--check: file not found: {args.check}")
    args.output.mkdir(parents=True, exist_ok=True)
    wheels = args.output / "wheels"
    plugin = build_plugin_wheel(wheels)
    pipeline = build_pipeline_wheel(args.model, args.output, args.name, args.version)
    print(f"Built {plugin} and {pipeline}", flush=True)
    if args.check is not None:
        check_in_fresh_venv(args.model, [wheels.resolve(), pipeline.parent.resolve()], args.name, args.check)


if __name__ == "__main__":
    main()
