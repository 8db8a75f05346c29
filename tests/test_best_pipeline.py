"""The best-pipeline command (issue 46 item 2): from converted corpora to a loadable pipeline, on
corpora with other domain and label names than CrossNER's, with tiny step budgets."""
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import spacy
from typer.testing import CliRunner

from spacy_crossner.best import BestPipelineError, Budget, best_pipeline, find_corpus
from spacy_crossner.cli import app
from spacy_crossner.convert import convert

DATA = Path(__file__).parents[2] / "shared" / "data" / "crossner"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/crossner")
TINY = Budget(max_steps=4, eval_frequency=2, patience=0, source_max_steps=4)


def sentences(path: Path, start: int, n: int):
    blocks, current = [], []
    for line in path.read_text(encoding="utf8").splitlines():
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks[start:start + n]


def write_corpus(tmp: Path, name: str, domain: str, source: str, counts, prefix: str) -> Path:
    """A converted corpus of `domain` from slices of a CrossNER domain, every label renamed."""
    raw = tmp / "raw" / name
    raw.mkdir(parents=True)
    labels = set()
    offset = 0
    for split, n in counts.items():
        block = sentences(DATA / source / "train.txt", offset, n)
        offset += n
        for sent in block:
            for line in sent:
                tag = line.split()[-1]
                if tag != "O":
                    labels.add(tag[2:])
        (raw / f"{split}.txt").write_text("\n\n".join("\n".join(s) for s in block) + "\n", encoding="utf8")
    out = tmp / "corpus" / name
    convert(raw, out, domain=domain, label_map={label: f"{prefix}{label}" for label in labels})
    return out


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("best")
    source = write_corpus(tmp, "wire", "newswire", "conll2003", {"train": 40, "dev": 10}, "src_")
    target = write_corpus(tmp, "robots", "robotics", "ai", {"train": 24, "dev": 8, "test": 8}, "bot_")
    return tmp, source, target


def entries(cache: Path):
    """The cache's entries, not the hidden lock files beside them."""
    return [p for p in cache.iterdir() if not p.name.startswith(".")]


def labels_of(nlp):
    return nlp.get_pipe("crossner").cfg["labels"]


def test_transformer_recipe_end_to_end_and_cached_source(corpora):
    tmp, source, target = corpora
    said = []
    result = best_pipeline(sources=[source], target=target, output=tmp / "best", budget=TINY, seed=0,
                           threads=1, cache=tmp / "cache", say=said.append)
    assert result.source_cached is False
    assert 0.0 <= result.dev_f <= 100.0 and result.test_f is not None
    assert any("stage 1 of 3" in line for line in said) and any("stage 2 of 3" in line for line in said)
    assert any("s a step, at most" in line for line in said)  # the time left, from the step rate
    nlp = spacy.load(tmp / "best")
    assert nlp.pipe_names == ["transformer", "crossner"]
    labels = labels_of(nlp)
    assert any(label.startswith("bot_") for label in labels["robotics"])
    assert nlp.get_pipe("crossner").cfg.get("target_domain") in (None, "robotics")
    nlp("Robots learn by reinforcement learning in simulation .")
    meta = json.loads((tmp / "best" / "meta.json").read_text())
    assert meta["crossner_best_pipeline"]["target_domain"] == "robotics"
    cached = entries(tmp / "cache")
    assert len(cached) == 1 and (cached[0] / "model-best").is_dir()

    # another target seed with the same source seed reuses the cached source model (CLI)
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp / "best_seed1"), "--source", str(source),
                                   "--max-steps", "4", "--source-max-steps", "4", "--eval-frequency", "2",
                                   "--patience", "0", "--seed", "1", "--source-seed", "0", "--threads", "1",
                                   "--cache", str(tmp / "cache")])
    assert out.exit_code == 0, out.output
    assert "cached, reused" in out.output
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("[best-pipeline] done: dev F1 ") and "test F1 " in last
    assert last.endswith(f"pipeline: {tmp / 'best_seed1'}")
    assert len(entries(tmp / "cache")) == 1
    spacy.load(tmp / "best_seed1")


def test_transformer_recipe_with_shape(corpora):
    """--shape (the study's trf_finetune_shape): the source stage embeds each token's shape beside
    the transformer, the fine-tuned pipeline keeps that embedding, and its source model is cached
    apart from the plain recipe's; the fast recipe refuses it."""
    tmp, source, target = corpora
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp / "shape"), "--source", str(source),
                                   "--shape", "--max-steps", "4", "--source-max-steps", "4", "--eval-frequency",
                                   "2", "--patience", "0", "--threads", "1", "--cache", str(tmp / "cache_shape")])
    assert out.exit_code == 0, out.output
    nlp = spacy.load(tmp / "shape")
    assert nlp.config["components"]["crossner"]["model"]["tok2vec"]["@architectures"] == "spacy_crossner.WithShape.v1"
    doc = nlp("Robots learn by reinforcement learning in simulation .")
    assert len(doc) == 8
    meta = json.loads((tmp / "shape" / "meta.json").read_text())
    assert meta["crossner_best_pipeline"]["shape"] is True
    cached = entries(tmp / "cache_shape")
    assert len(cached) == 1
    config = json.dumps(spacy.util.load_config(cached[0] / "config.cfg"))
    assert "WithShape" in config
    with pytest.raises(BestPipelineError, match="--shape .*--recipe transformer"):
        best_pipeline(sources=[source], target=target, output=tmp / "shape_fast", recipe="fast", shape=True,
                      budget=TINY)


def test_transformer_recipe_adapts_the_encoder_to_dapt_text(corpora, tmp_path):
    """--dapt-text TEXT (the study's row 10, issue 47's keeper as one command): DAPT of the encoder
    on the target's train+dev text then TEXT, cached and reused, before the source stage, whose
    config takes the adapted encoder; the pipeline loads without the cache."""
    tmp, source, target = corpora
    words = [" ".join(line.split()[0] for line in block) for block in sentences(DATA / "ai" / "dev.txt", 0, 30)]
    text = tmp_path / "in_domain.txt"
    text.write_text("\n".join(words[:10]) + "\n\n  \n" + "\n".join(words[10:]) + "\n", encoding="utf8")
    cache = tmp_path / "cache"
    said = []
    result = best_pipeline(sources=[source], target=target, output=tmp_path / "adapted", budget=TINY, seed=0,
                           threads=1, cache=cache, say=said.append, dapt_text=text, dapt_max_steps=2)
    assert any(line.startswith("[best-pipeline] stage 1 of 4: adapt the encoder to the target's domain (DAPT) "
                               f"(the target's train+dev text and {text}: 30 lines, the last 4 held out")
               for line in said), said
    assert any("stage 1 of 4: step 2/2 (100%)" in line for line in said), said
    assert any("stage 2 of 4: pre-train on the source corpora" in line for line in said)
    assert any("stage 3 of 4: fine-tune on the target" in line for line in said)
    dapt = result.summary["dapt"]
    encoder = Path(dapt["model"])
    assert dapt["cached"] is False and dapt["steps"] == 2 and dapt["masking"] == "span"
    assert dapt["max_length"] == 128 and dapt["text_lines"] == 30 and dapt["own_lines"] == 24 + 8
    assert dapt["held_out_lines"] == 4  # 5% of the 62 lines, rounded up: the text's last four
    assert encoder.parent == cache and encoder.name.startswith("dapt-") and (encoder / "config.json").is_file()
    assert not (encoder / "checkpoints").exists() and not list(cache.glob("*.partial"))
    # the corpus: the target's train+dev sentences first, then the text's non-empty lines
    lines = Path(dapt["corpus"]).read_text(encoding="utf8").splitlines()
    assert len(lines) == 62 and lines[32:] == words
    source_config = spacy.util.load_config(Path(result.summary["source_model"]).parent / "config.cfg")
    assert source_config["paths"]["transformer"] == str(encoder)
    assert "adapted to its domain (DAPT)" in json.loads((tmp_path / "adapted" / "meta.json").read_text())["description"]

    # another target seed (CLI): the adapted encoder and the source model are reused
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp_path / "adapted_seed1"), "--source",
                                   str(source), "--dapt-text", str(text), "--dapt-max-steps", "2", "--max-steps",
                                   "4", "--source-max-steps", "4", "--eval-frequency", "2", "--patience", "0",
                                   "--seed", "1", "--source-seed", "0", "--threads", "1", "--cache", str(cache)])
    assert out.exit_code == 0, out.output
    assert f"stage 1 of 4: cached, reused {encoder}" in out.output
    assert "stage 2 of 4: pre-train on the source corpora: cached, reused" in out.output
    made = sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))  # not the hidden lock files
    assert made == sorted([encoder.name, Path(result.summary["source_model"]).parent.name])
    # the pipeline holds its encoder: it loads and tags with the cache gone
    cache.rename(tmp_path / "cache_gone")
    nlp = spacy.load(tmp_path / "adapted")
    assert len(nlp("Robots learn by reinforcement learning in simulation .")) == 8


def test_dapt_settings_are_checked_before_training(corpora, tmp_path):
    tmp, source, target = corpora
    common = dict(sources=[source], target=target, budget=TINY, say=lambda _: None, cache=tmp_path / "cache")
    text = tmp_path / "text.txt"
    text.write_text("Robots learn .\n", encoding="utf8")
    with pytest.raises(BestPipelineError, match="--dapt-text adapts the transformer .*give --recipe transformer"):
        best_pipeline(output=tmp_path / "a", recipe="fast", dapt_text=text, **common)
    with pytest.raises(BestPipelineError, match="--dapt-text .*missing.txt: no such file"):
        best_pipeline(output=tmp_path / "b", dapt_text=tmp_path / "missing.txt", **common)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf8")
    with pytest.raises(BestPipelineError, match="empty.txt: holds no text"):
        best_pipeline(output=tmp_path / "c", dapt_text=empty, **common)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Robots learn .\nCaf\u00e9 robots .\n".encode("latin1"))
    with pytest.raises(BestPipelineError, match="latin.txt, line 2: not UTF-8"):
        best_pipeline(output=tmp_path / "d", dapt_text=latin, **common)
    with pytest.raises(BestPipelineError, match="--dapt-epochs must be a finite number above 0, not 0"):
        best_pipeline(output=tmp_path / "e", dapt_text=text, dapt_epochs=0, **common)
    with pytest.raises(BestPipelineError, match="--dapt-epochs set.* runs only with --dapt-text"):
        best_pipeline(output=tmp_path / "e", dapt_epochs=3, **common)
    # a text so short that the held-out slice (the corpus's last lines) would take all of it
    with pytest.raises(BestPipelineError, match="text.txt: its 1 lines come after the target's 32 sentences.*last 2 "
                                                "lines out of training"):
        best_pipeline(output=tmp_path / "e", dapt_text=text, dapt_max_steps=1, **common)
    assert not (tmp_path / "e").exists()
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp_path / "f"), "--source", str(source),
                                   "--dapt-text", str(text), "--dapt-max-steps", "0"])
    assert out.exit_code == 1 and "--dapt-max-steps must be at least 1 (or -1: from --dapt-epochs), not 0" in out.output
    assert not (tmp_path / "cache").exists() and not (tmp_path / "f").exists()


def test_dapt_stage_resumes_or_finishes_a_stopped_run(monkeypatch, tmp_path):
    """The DAPT stage's cache entry: a run stopped after its child finished is completed without
    training again; one stopped at a checkpoint resumes from it, unless that run started from
    another model (e.g. the bundled MiniLM of another environment), which starts again."""
    import spacy_crossner.best as best
    from spacy_crossner.dapt.train import default_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("robots learn .\nrobots plan .\n", encoding="utf8")
    calls = []

    def child(corpus_, out, model, epochs, max_steps, resume, **kwargs):
        calls.append({"resume": resume, "model": model, "kept": sorted(p.name for p in out.iterdir()) if out.exists() else []})
        out.mkdir(parents=True, exist_ok=True)
        (out / "dapt_summary.json").write_text(json.dumps({"steps": 7, "loss_before": 9.0, "loss_after": 5.0,
                                                           "model": model}))

    monkeypatch.setattr(best, "_run_dapt_child", child)
    run = dict(transformer=None, epochs=15, max_steps=-1, gpu_id=-1, threads=1, log_path=tmp_path / "dapt.log",
               say=lambda _: None, stage="stage 1 of 4")
    cache = tmp_path / "cache"
    first = best.adapt_encoder(corpus, cache, **run)
    assert calls == [{"resume": False, "model": default_model(), "kept": []}] and first["steps"] == 7
    assert Path(first["model"]).name.startswith("dapt-") and not list(cache.glob("*.partial"))
    assert best.adapt_encoder(corpus, cache, **run)["cached"] is True and len(calls) == 1
    # epochs as 15 or 15.0 is one entry; with --dapt-max-steps the epochs do not matter
    assert best.adapt_encoder(corpus, cache, **{**run, "epochs": 15.0})["cached"] is True
    steps = {**run, "max_steps": 9}
    assert best.adapt_encoder(corpus, cache, **steps)["model"] == best.adapt_encoder(corpus, cache, **{**steps, "epochs": 3})["model"]
    assert len(calls) == 2

    other = tmp_path / "other.txt"
    other.write_text("robots learn .\nrobots act .\n", encoding="utf8")
    finished = best.adapt_encoder(other, tmp_path / "probe", **run)  # only to learn the entry's name
    partial = cache / (Path(finished["model"]).name + ".partial")
    # killed after the child finished, before the rename: completed, not trained again
    partial.mkdir()
    (partial / "dapt_summary.json").write_text(json.dumps({"steps": 3, "loss_before": 9.0, "loss_after": 6.0}))
    (partial / "checkpoints").mkdir()
    n = len(calls)
    done = best.adapt_encoder(other, cache, **run)
    assert len(calls) == n and done["steps"] == 3 and done["cached"] is False
    assert not (Path(done["model"]) / "checkpoints").exists() and not partial.exists()

    # stopped at a checkpoint: resumed when the run started from the same model, else started again
    third = tmp_path / "third.txt"
    third.write_text("robots learn .\nrobots sleep .\n", encoding="utf8")
    partial = cache / (Path(best.adapt_encoder(third, tmp_path / "probe", **run)["model"]).name + ".partial")
    for model, resumed in (("/another/env/minilm", False), (default_model(), True)):
        shutil.rmtree(cache / partial.name[:-len(".partial")], ignore_errors=True)
        checkpoint = partial / "checkpoints" / "checkpoint-200"
        checkpoint.mkdir(parents=True)
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 200}))
        (checkpoint / "rng_state.pth").write_bytes(b"0")
        (partial / "dapt_run_settings.json").write_text(json.dumps({"model": model}))
        best.adapt_encoder(third, cache, **run)
        assert calls[-1]["resume"] is resumed
        assert ("checkpoints" in calls[-1]["kept"]) is resumed


def test_source_stage_waits_for_a_run_training_the_same_entry(corpora, monkeypatch, tmp_path):
    """Two runs that need one source model: the second waits on the entry's lock while the
    first trains it, then reuses what the first made instead of training it again."""
    import fcntl
    import os
    import threading

    import spacy_crossner.best as best

    tmp, source, target = corpora
    trained = []

    def training(config, out, overrides, *, index, **kwargs):
        trained.append(Path(out).name)
        raise RuntimeError("stop after the source stage")

    monkeypatch.setattr(best, "run_training", training)
    said = []
    cache = tmp_path / "cache"
    run = dict(sources=[source], target=target, output=tmp_path / "out", budget=TINY, threads=1, cache=cache,
               say=said.append)
    with pytest.raises(RuntimeError):  # stopped in the source stage: learns the entry's name
        best_pipeline(**run)
    entry = [p for p in cache.iterdir() if p.name.endswith(".partial")][0].name[:-len(".partial")]
    assert trained == [f"{entry}.partial"]
    fd = os.open(cache / f".{entry}.lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "another run" holds the entry

    def other_run_finishes():
        deadline = time.time() + 60
        try:
            while not any("waiting for another run" in line for line in said) and time.time() < deadline:
                time.sleep(0.05)
            made = cache / entry / "model-best"
            made.mkdir(parents=True)
            (made / "meta.json").write_text("{}")
        finally:
            os.close(fd)

    said.clear()
    other = threading.Thread(target=other_run_finishes, daemon=True)
    other.start()
    with pytest.raises(RuntimeError):  # now stopped in the fine-tune
        best_pipeline(**run)
    other.join(timeout=60)
    assert not other.is_alive()
    assert trained[-1] == "finetune" and len(trained) == 2
    waited = [i for i, line in enumerate(said) if "waiting for another run that pre-trains the same source model" in line]
    reused = [i for i, line in enumerate(said) if f"cached, reused {cache.resolve() / entry / 'model-best'}" in line
              or f"cached, reused {cache / entry / 'model-best'}" in line]
    assert waited and reused and waited[0] < reused[0]


def test_training_child_shares_the_cache_lock(tmp_path):
    """A child started while a cache lock is held gets the lock's descriptor, so the entry stays
    locked until the child has stopped as well; once released, it is not passed."""
    import spacy_crossner.best as best

    probe = [sys.executable, "-c", "import os, sys; os.fstat(int(sys.argv[1])); print('open')"]
    lines = []
    with best._CacheLock(tmp_path / ".entry.lock", lines.append, "trains the entry") as lock:
        fd = lock.fd
        assert best.run_logged(probe + [str(fd)], best.child_env(1), tmp_path / "held.log", lines.append) == 0
    assert lines == ["open\n"]
    assert not best._HELD_LOCKS
    free = []
    assert best.run_logged(probe + [str(fd)], best.child_env(1), tmp_path / "free.log", free.append) != 0
    assert "open\n" not in free


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_for(condition, seconds: float = 60) -> bool:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.05)
    return condition()


SLEEPER = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); print(os.getpid(), flush=True); "
           "time.sleep(300)")


def test_training_child_stops_when_the_parent_fails(tmp_path):
    """An error (or Ctrl-C) in the process reading a training's output stops the training."""
    import spacy_crossner.best as best

    class Stop(Exception):
        pass

    def fail(line):
        raise Stop(line)

    with pytest.raises(Stop) as err:
        best.run_logged([sys.executable, "-c", SLEEPER, str(tmp_path / "pid")], best.child_env(1),
                        tmp_path / "child.log", fail)
    pid = int(str(err.value))
    assert pid == int((tmp_path / "pid").read_text())
    assert not _running(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's (prctl)")
def test_training_child_stops_when_the_parent_is_killed(tmp_path):
    """A best-pipeline process killed outright (SIGKILL: no handler runs) takes its training child
    with it: nothing goes on holding the machine and the cache entry's lock."""
    import signal
    import subprocess

    pid_file = tmp_path / "pid"
    child = None
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; import spacy_crossner.best as b; "
         "b.run_logged([sys.executable, '-c', sys.argv[1], sys.argv[2]], b.child_env(1), Path(sys.argv[3]), print)",
         SLEEPER, str(pid_file), str(tmp_path / "child.log")])
    try:
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text() != "")
        child = int(pid_file.read_text())
        assert _running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert _wait_for(lambda: not _running(child), 30)
    finally:
        parent.kill()
        parent.wait()
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)


def test_dapt_child_uses_the_gpu_it_was_given(monkeypatch):
    from spacy_crossner.best import cuda_devices_for_child

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda_devices_for_child(-1) == "" and cuda_devices_for_child(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the parent's GPU 1 is the machine's GPU 3
    assert cuda_devices_for_child(1) == "3" and cuda_devices_for_child(-1) == ""
    with pytest.raises(BestPipelineError, match="--gpu-id 2: CUDA_VISIBLE_DEVICES=2,3 lets this process use 2 GPU"):
        cuda_devices_for_child(2)


def test_fast_recipe_with_vectors_from_a_text_file(corpora):
    tmp, source, target = corpora
    glove = tmp / "tiny_glove.txt"
    glove.write_text("the 0.1 0.2 0.3\nrobot 0.3 0.1 0.0\nlearning -0.1 0.2 0.5\n", encoding="utf8")
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp / "fast"), "--source", str(source),
                                   "--recipe", "fast", "--vectors", str(glove), "--max-steps", "4",
                                   "--eval-frequency", "2", "--patience", "0", "--threads", "1"])
    assert out.exit_code == 0, out.output
    assert "stage 2 of 3" in out.output
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("[best-pipeline] done: dev F1 ") and str(tmp / "fast") in last
    nlp = spacy.load(tmp / "fast")
    assert nlp.vocab.vectors.shape[1] == 3
    assert set(labels_of(nlp)) >= {"newswire", "robotics"}


def test_errors_name_what_to_fix(corpora, tmp_path):
    tmp, source, target = corpora
    (tmp_path / "nodev").mkdir()
    (tmp_path / "nodev" / "train.spacy").write_bytes((target / "train.spacy").read_bytes())
    with pytest.raises(BestPipelineError, match="no dev.spacy"):
        find_corpus(tmp_path / "nodev", "--source")
    with pytest.raises(BestPipelineError, match="domain 'newswire' of a --source"):
        best_pipeline(sources=[source], target=source, output=tmp_path / "o", budget=TINY)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp_path / "full"), "--source", str(source)])
    assert out.exit_code == 1 and "--overwrite" in out.output
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp_path / "x"), "--source", str(source),
                                   "--max-steps", "0"])
    assert out.exit_code == 1 and "--max-steps must be at least 1" in out.output


def test_help_lists_every_command_with_its_whole_description():
    """`python -m spacy_crossner --help` wraps each command's first paragraph instead of cutting
    it with "..." (issue 46 item 5); best-pipeline's options all have help."""
    from spacy_crossner.cli._util import first_paragraph

    out = CliRunner().invoke(app, ["--help"], terminal_width=80)
    assert out.exit_code == 0
    listing = " ".join(out.output.split("Commands:")[1].split())
    assert "..." not in listing
    for info in app.registered_commands:
        assert first_paragraph(info.callback.__doc__) in listing, info.name
    assert "best-pipeline Train the best pipeline for your target corpus in one command" in listing
    text = CliRunner().invoke(app, ["best-pipeline", "--help"], terminal_width=100).output
    for option in ("--source", "--test", "--recipe", "--max-steps", "--source-max-steps", "--eval-frequency",
                   "--patience", "--source-limit", "--source-dev-limit", "--source-upsample", "--mix", "--seed",
                   "--source-seed", "--transformer", "--vectors", "--cache", "--workdir", "--gpu-id", "--threads",
                   "--overwrite", "--shape", "--dapt-text", "--dapt-epochs", "--dapt-max-steps"):
        assert option in text, option


def test_output_never_holds_the_inputs(corpora):
    tmp, source, target = corpora
    with pytest.raises(BestPipelineError, match="contains TARGET"):
        best_pipeline(sources=[source], target=target, output=target.parent, overwrite=True, budget=TINY)
    assert (target / "train.spacy").is_file()


def test_fast_recipe_mixes_by_size_unless_told_to_upsample(corpora):
    from spacy_crossner.best import fast_config

    tmp, source, target = corpora
    sources, goal = [find_corpus(source, "--source")], find_corpus(target, "TARGET")
    sized = fast_config(sources, goal, Budget(), seed=0, vectors=None)["corpora"]["train"]
    assert sized["@readers"] == "spacy_crossner.MultiDomainCorpus.v2" and sized["mix"] == "sqrt"
    assert all("upsample" not in section for section in sized["domains"].values())
    limited = fast_config(sources, goal, Budget(source_limit=30), seed=0, vectors=None)["corpora"]["train"]
    assert limited["domains"]["source_0"]["limit"] == 30
    fixed = fast_config(sources, goal, Budget(mix="upsample", source_upsample=0.5), seed=0, vectors=None)
    assert fixed["corpora"]["train"]["@readers"] == "spacy_crossner.MultiDomainCorpus.v1"
    assert fixed["vars"]["target_upsample"] == 10.0
    assert fixed["corpora"]["train"]["domains"]["source_0"]["upsample"] == 0.5
    for budget, option in ((Budget(target_upsample=4), "--target-upsample"), (Budget(source_upsample=0.5), "--source-upsample")):
        with pytest.raises(BestPipelineError, match=f"{option} is a fixed factor of --mix upsample; --mix sqrt"):
            fast_config(sources, goal, budget, seed=0, vectors=None)
    with pytest.raises(BestPipelineError, match="--mix 'by_size': choose one of sqrt, size, equal, upsample"):
        Budget(mix="by_size").check()


def test_fast_recipe_distilled_from_a_teacher(corpora, tmp_path):
    """--distill-from TEACHER --distill-text TEXT: the teacher labels the text (confident-o, the
    threshold chosen on the target's dev set) and the BiLSTM-CRF trains on it beside the corpora."""
    from spacy.cli.train import train

    tmp, source, target = corpora
    # a small teacher that has seen the target's dev set, so that it finds entities there
    seen = tmp_path / "seen"
    seen.mkdir()
    for split in ("train", "dev"):
        (seen / f"{split}.spacy").write_bytes((target / f"{split}.spacy").read_bytes())
    configs = Path(__file__).parents[1] / "configs"
    train(configs / "bilstm_target.cfg", tmp_path / "teacher", use_gpu=-1, overrides={
        "paths.target_train": str(seen), "paths.target_dev": str(target / "dev.spacy"),
        "vars.target_domain": "robotics", "training.max_steps": 80, "training.eval_frequency": 40,
        "training.optimizer.learn_rate": 0.02, "components.crossner.model.hidden_size": 32,
        "components.crossner.model.tok2vec.word_rows": 500, "components.crossner.model.dropout": 0.0})
    teacher = tmp_path / "teacher" / "model-best"
    # raw text of the target's domain: its own train sentences, untagged
    words = [" ".join(line.split()[0] for line in block) for block in sentences(DATA / "ai" / "train.txt", 0, 24)]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(words) + "\n", encoding="utf8")
    said = []
    result = best_pipeline(sources=[source], target=target, output=tmp_path / "student", recipe="fast", vectors="",
                           budget=TINY, threads=1, say=said.append, distill_from=str(teacher),
                           distill_text=text, distill_min_precision=0.01)
    assert any("stage 2 of 4: label the text with the teacher" in line for line in said)
    assert any("24 docs (robotics, mode confident-o)" in line for line in said)
    distill = result.summary["distill"]
    assert distill["teacher"] == str(teacher) and distill["mode"] == "confident-o"
    assert distill["dev"]["precision"] >= 0.01 and distill["docs"] == 24
    config = spacy.util.load_config(tmp_path / "student-training" / "configs" / "fast.cfg", interpolate=False)
    section = config["corpora"]["train"]["domains"]["pseudo"]
    assert section["domain"] == "robotics" and section["path"].endswith("distill/labelled.spacy")
    assert config["components"]["crossner"]["missing_as"] == "missing"
    nlp = spacy.load(tmp_path / "student")
    assert "distilled from" in nlp.meta["description"]
    nlp("Robots learn by reinforcement learning in simulation .")


def test_distillation_settings_are_checked_before_training(corpora, tmp_path):
    tmp, source, target = corpora
    text = tmp_path / "text.txt"
    text.write_text("Robots learn .\n", encoding="utf8")
    common = dict(sources=[source], target=target, budget=TINY, say=lambda _: None)
    with pytest.raises(BestPipelineError, match="--distill-from and --distill-text go together"):
        best_pipeline(output=tmp_path / "a", recipe="fast", distill_from=str(tmp_path), **common)
    with pytest.raises(BestPipelineError, match="give --recipe fast"):
        best_pipeline(output=tmp_path / "b", distill_from=str(tmp_path), distill_text=text, **common)
    with pytest.raises(BestPipelineError, match="--distill-from ./nowhere: no such pipeline folder"):
        best_pipeline(output=tmp_path / "c", recipe="fast", distill_from="./nowhere", distill_text=text, **common)
    with pytest.raises(BestPipelineError, match="--distill-text .*missing.txt: no such file"):
        best_pipeline(output=tmp_path / "d", recipe="fast", distill_from=str(tmp_path),
                      distill_text=tmp_path / "missing.txt", **common)
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp_path / "e"), "--source", str(source),
                                   "--recipe", "fast", "--distill-from", str(tmp_path), "--distill-text", str(text),
                                   "--distill-min-precision", "0"])
    assert out.exit_code == 1 and "--distill-min-precision must be above 0" in out.output
    # a folder that is no pipeline: named, before the joint training
    out = CliRunner().invoke(app, ["best-pipeline", str(target), str(tmp_path / "f"), "--source", str(source),
                                   "--recipe", "fast", "--vectors", "", "--distill-from", str(tmp_path),
                                   "--distill-text", str(text), "--max-steps", "4"])
    assert out.exit_code == 1 and f"--distill-from {tmp_path}" in out.output
    assert "Traceback" not in out.output and not (tmp_path / "f").exists()
