"""README.md as a user runs it.

Every bash command of the README is checked: the spacy_crossner command and its options exist,
a config passed to ``spacy train`` exists and has every ``--section.key`` it overrides, a
project step exists in project.yml, an extra of ``pip install -e ".[extra]"`` exists in setup.py.
The blocks marked ``<!-- tested ... -->`` are run, in order, from a folder laid out like a clone
(``configs/`` and a few sentences of each CrossNER file in ``project/assets/crossner/``), with
tiny sizes and two steps appended to ``spacy train``. .ci/run runs the README's test command.
"""
import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import srsly
from thinc.api import Config
from typer.main import get_command

from spacy_crossner.cli import app

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
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


def readme_blocks():
    """(tested, language, code) of every fenced block, in order."""
    return [(bool(m.group(1)), m.group(2), m.group(3)) for m in BLOCK.finditer(README.read_text())]


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


def check_config_overrides(config_path: Path, tokens):
    assert config_path.exists(), f"{config_path} does not exist"
    config = Config().from_disk(config_path, interpolate=False)
    for token in tokens:
        if not token.startswith("--") or "." not in token:
            continue
        *section, key = token[2:].split(".")
        node = config
        for name in section:
            assert name in node, f"{config_path.name} has no section [{'.'.join(section)}] ({token})"
            node = node[name]
        assert key in node, f"{config_path.name} has no setting {'.'.join(section)}.{key} ({token})"


def check_command(cwd: str, tokens):
    """Fail unless the command's program, paths and options exist (see the module docstring)."""
    here = ROOT / cwd
    if "..." in tokens:
        tokens = tokens[:tokens.index("...")]
    if "-m" in tokens and "spacy_crossner" in tokens:
        i = tokens.index("spacy_crossner")
        group = get_command(app)
        assert tokens[i + 1] in group.commands, f"no command spacy_crossner {tokens[i + 1]}"
        known = option_names(group.commands[tokens[i + 1]])
        for token in tokens[i + 2:]:
            if re.match(r"-[-a-zA-Z]", token):
                assert token.split("=")[0] in known, f"spacy_crossner {tokens[i + 1]} has no option {token}"
        return
    program = tokens[3:] if tokens[:3] == ["python", "-m", "spacy"] else tokens[1:] if tokens[0] == "spacy" else None
    if program is not None:
        from spacy.cli import app as spacy_app

        spacy_group = get_command(spacy_app)
        if program[0] == "project":
            assert program[1] == "run" and cwd == "project", tokens
            config = srsly.read_yaml(here / "project.yml")
            names = {c["name"] for c in config["commands"]} | set(config["workflows"])
            assert program[2] in names, f"project.yml has no command or workflow {program[2]}"
            return
        assert program[0] in spacy_group.commands, tokens
        known = option_names(spacy_group.commands[program[0]])
        if program[0] == "train":
            check_config_overrides(here / program[1], program[2:])
        for token in program[1:]:
            if re.match(r"-[-a-zA-Z]", token) and "." not in token:
                assert token in known, f"spacy {program[0]} has no option {token}"
        return
    if tokens[:3] == ["python", "-m", "pytest"]:
        assert (here / tokens[3]).is_dir()
        if "-n" in tokens:  # pytest-xdist's option: the test extra must install it
            assert any(r.startswith("pytest-xdist") for r in setup_extras()["test"]), "no pytest-xdist in the test extra"
    elif tokens[:2] == ["pip", "install"]:
        for token in tokens:
            if token.startswith(".[") or token.startswith("-e"):
                extras = re.findall(r"\[(.*)\]", token)
                for extra in (extras[0].split(",") if extras else []):
                    assert extra in setup_extras(), f"setup.py has no extra '{extra}'"
    elif tokens[:3] == ["python", "-m", "build"]:
        assert tokens[-1] == "." and (here / "setup.py").exists()
    elif tokens[0] == "dask":
        # Dask's own CLI (the [distributed] extra): the subcommand and its options exist
        dask = Path(sys.executable).with_name("dask")
        res = subprocess.run([str(dask), tokens[1], "--help"], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        for token in tokens[2:]:
            if token.startswith("--"):
                assert token in res.stdout, f"dask {tokens[1]} has no option {token}"
    elif tokens[0] not in ("python3", ".", "mkdir", "python", "torchrun", "accelerate"):
        raise AssertionError(f"the test does not know how to check: {' '.join(tokens)}")
    elif tokens[0] == "python" and tokens[1] != "-c":
        raise AssertionError(f"the test does not know how to check: {' '.join(tokens)}")


def all_commands():
    return [(cwd, tokens) for _, lang, code in readme_blocks() if lang == "bash"
            for cwd, tokens in commands(code)]


@pytest.mark.parametrize("cwd,tokens", all_commands(), ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_every_command_names_what_exists(cwd, tokens):
    check_command(cwd, tokens)


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
    # the same command; CI only adds output options (-q, -p no:cacheprovider)
    assert re.search(r"^python -m pytest tests -n auto --dist worksteal( -q| -p no:cacheprovider)*$", ci, re.M)


def _small_copy(src: Path, dst: Path, sentences: int = 25):
    """The first sentences of a CrossNER file (blank-line separated)."""
    text = src.read_text(encoding="utf8").replace("\r\n", "\n")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n\n".join(text.strip().split("\n\n")[:sentences]) + "\n", encoding="utf8")


def test_tested_blocks_run_as_written(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    for domain in ("ai", "conll2003"):
        for split in ("train", "dev", "test"):
            _small_copy(DATA / domain / f"{split}.txt",
                        tmp_path / "project" / "assets" / "crossner" / domain / f"{split}.txt")
    bin_dir = str(Path(sys.executable).parent)
    env = {"PATH": bin_dir + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    ran = []
    for tested, lang, code in readme_blocks():
        if not tested:
            continue
        if lang == "python":
            res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr[-3000:]
            assert res.stdout.strip().startswith("[")  # the entities
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
    assert (tmp_path / "corpus" / "ai" / "test.spacy").exists() and (tmp_path / "raw" / "ai.txt").exists()
    assert (tmp_path / "training" / "joint" / "model-best" / "config.cfg").exists()
    assert len(ran) == 7, ran


@pytest.mark.parametrize("line,message", [
    ("python -m spacy_crossner convert a b --domian ai", "has no option --domian"),
    ("python -m spacy_crossner konvert a b", "no command spacy_crossner konvert"),
    ("spacy train configs/bilstm_joint.cfg --paths.source_tran x", "has no setting paths.source_tran"),
    ("spacy train configs/nope.cfg", "does not exist"),
    ("(cd project && spacy project run everything)", "no command or workflow everything"),
    ('pip install -e ".[cuda13x]"', "no extra 'cuda13x'"),
    ("cd project && spacy project run all", "leaves the shell in project/"),
])
def test_the_checker_catches_what_a_user_would_hit(line, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        for cwd, tokens in commands(line):
            check_command(cwd, tokens)
