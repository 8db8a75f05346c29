"""The best-pipeline command (issue 46 item 2): from converted corpora to a loadable pipeline, on
corpora with other domain and label names than CrossNER's, with tiny step budgets."""
import json
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
    cached = list((tmp / "cache").iterdir())
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
    assert len(list((tmp / "cache").iterdir())) == 1
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
    cached = list((tmp / "cache_shape").iterdir())
    assert len(cached) == 1
    config = json.dumps(spacy.util.load_config(cached[0] / "config.cfg"))
    assert "WithShape" in config
    with pytest.raises(BestPipelineError, match="--shape .*--recipe transformer"):
        best_pipeline(sources=[source], target=target, output=tmp / "shape_fast", recipe="fast", shape=True,
                      budget=TINY)


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
                   "--overwrite", "--shape"):
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
