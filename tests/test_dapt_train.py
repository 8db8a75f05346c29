"""A tiny DAPT run on the bundled MiniLM: loss, resume, spaCy loading, torchrun, bad input.

Kept small for CPU: a few hundred short sentences, blocks of 32 pieces, a handful of steps.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy  # noqa: E402
import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from spacy_crossner.cli import app  # noqa: E402
from spacy_crossner.dapt.corpus import DaptInputError  # noqa: E402
from spacy_crossner.dapt.train import SUMMARY_FILE, format_seconds, run_dapt  # noqa: E402
from spacy_crossner.misc import bundled_transformer  # noqa: E402

MAX_LENGTH = 32
TINY = dict(max_length=MAX_LENGTH, batch_size=8, learning_rate=5e-4, held_out=0.1, logging_steps=1,
            progress=False, seed=7)


def _sentences(n, seed=0):
    rng = random.Random(seed)
    subj = ["The senator", "The party", "Parliament", "The minister", "The president", "Labour",
            "The committee", "The coalition", "The opposition leader", "The governor"]
    verb = ["voted against", "proposed", "criticised", "supported", "debated", "rejected", "amended"]
    obj = ["the budget bill", "the new election law", "a tax reform", "the health care act",
           "the trade agreement", "the climate policy", "the referendum"]
    tail = ["on Monday.", "in the capital.", "after a long debate.", "before the election.",
            "with a narrow majority.", "despite protests."]
    return [" ".join([rng.choice(subj), rng.choice(verb), rng.choice(obj), rng.choice(tail)]) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("dapt_corpus") / "politics.txt"
    path.write_text("\n".join(_sentences(300)) + "\n", encoding="utf8")
    return path


@pytest.fixture(scope="module")
def resumed_run(corpus, tmp_path_factory):
    """3 steps with a checkpoint at step 3, then ``resume`` up to 6 steps."""
    out = tmp_path_factory.mktemp("dapt_out") / "politics_dapt"
    first = run_dapt(corpus=corpus, output_dir=out, max_steps=3, save_steps=3, **TINY)
    second = run_dapt(corpus=corpus, output_dir=out, max_steps=6, save_steps=3, resume=True, **TINY)
    return first, second, out


def test_tiny_run_lowers_held_out_loss(resumed_run):
    first, second, out = resumed_run
    assert first.loss_after < first.loss_before
    assert second.loss_after < second.loss_before
    assert second.loss_before == pytest.approx(first.loss_before)  # both measured on the start model
    # the start model's random head is worse than piece frequencies alone
    assert 0 < first.loss_unigram < first.loss_before
    assert 0 < first.loss_context_free < first.loss_unigram
    # The bundled MiniLM is a sentence-transformers export: its masked-LM head is missing.
    assert any(name.startswith("cls.predictions") for name in first.newly_initialised)
    saved = json.loads((out / SUMMARY_FILE).read_text(encoding="utf8"))
    assert saved["steps"] == 6 and saved["loss_after"] == pytest.approx(second.loss_after)


def test_resume_continues_from_checkpoint(resumed_run):
    first, second, _ = resumed_run
    assert first.steps == 3 and first.resumed_from is None
    assert second.resumed_from.endswith("checkpoint-3")
    assert second.steps == 6
    # Training blocks are never padded: every step sees batch x max_length pieces.
    assert first.tokens_seen == 3 * 8 * MAX_LENGTH
    assert second.tokens_seen == 6 * 8 * MAX_LENGTH
    assert first.train_blocks == second.train_blocks > 0
    assert second.world_size == 1


def test_resume_skips_a_checkpoint_whose_save_was_stopped(corpus, resumed_run, tmp_path, capsys):
    """A run killed while saving leaves checkpoint-N without all of the Trainer's last files (its
    state, truncated or missing; the RNG state): --resume continues from the newest complete
    checkpoint and says which it skipped; without --resume, a folder of only such checkpoints gets
    a message that says so."""
    from transformers.trainer import TRAINER_STATE_NAME

    from spacy_crossner.dapt.checkpoints import CHECKPOINT_DIR, TRAINER_STATE_FILE

    assert TRAINER_STATE_FILE == TRAINER_STATE_NAME
    _, _, out = resumed_run
    copy = tmp_path / "politics_dapt"
    shutil.copytree(out, copy)
    checkpoints = copy / CHECKPOINT_DIR
    assert sorted(p.name for p in checkpoints.iterdir())[-1] == "checkpoint-6"
    truncated, no_rng = checkpoints / "checkpoint-7", checkpoints / "checkpoint-8"
    for partial in (truncated, no_rng):
        shutil.copytree(checkpoints / "checkpoint-6", partial)
        state = json.loads((partial / TRAINER_STATE_NAME).read_text())
        (partial / TRAINER_STATE_NAME).write_text(json.dumps(dict(state, global_step=int(partial.name[11:]))))
    (truncated / TRAINER_STATE_NAME).write_text("")
    for rng in no_rng.glob("rng_state*.pth"):
        rng.unlink()
    only_stopped = tmp_path / "only_stopped"  # (the resumed run's rotation may remove the partial ones)
    shutil.copytree(truncated, only_stopped / CHECKPOINT_DIR / truncated.name)
    summary = run_dapt(corpus=corpus, output_dir=copy, max_steps=9, save_steps=3, resume=True, **TINY)
    assert summary.resumed_from.endswith("checkpoint-6") and summary.steps == 9
    err = capsys.readouterr().err
    assert f"{no_rng} is incomplete" in err and f"{truncated} is incomplete" in err
    with pytest.raises(DaptInputError, match="holds only checkpoints whose save was stopped"):
        run_dapt(corpus=corpus, output_dir=only_stopped, max_steps=1, **TINY)
    with pytest.raises(DaptInputError, match="no complete checkpoint .* remove them"):
        run_dapt(corpus=corpus, output_dir=only_stopped, max_steps=1, resume=True, **TINY)


def test_output_loads_offline_in_spacy(resumed_run):
    import spacy

    _, _, out = resumed_run
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt"):
        assert (out / name).exists(), name

    def encode(model_name):
        nlp = spacy.blank("en")
        nlp.add_pipe("transformer", config={"model": {
            "@architectures": "spacy-transformers.TransformerModel.v3",
            "name": str(model_name),
            "tokenizer_config": {"use_fast": True},
        }})
        nlp.initialize()
        doc = nlp("The senator criticised the budget bill in the capital.")
        return doc._.trf_data.wordpieces.strings[0], doc._.trf_data.tensors[0]

    pieces, adapted = encode(out)
    assert pieces[0] == "[CLS]" and "senator" in pieces
    assert adapted.shape == (1, len(pieces), 384)
    _, original = encode(bundled_transformer())
    # The pipeline uses the DAPT weights, not the start model's.
    assert not numpy.allclose(adapted, original)


def test_cli_token_masking(corpus, tmp_path):
    out = tmp_path / "token_dapt"
    result = CliRunner().invoke(app, [
        "dapt", str(corpus), str(out), "--masking", "token", "--max-steps", "2", "--batch-size", "4",
        "--max-length", str(MAX_LENGTH), "--lr", "5e-4", "--held-out", "0.1", "--logging-steps", "1",
    ])
    assert result.exit_code == 0, result.output
    assert "tokens seen: 256" in result.output
    # not a terminal: no bar, a line per logging step with the loss and the time left
    assert "DAPT: training to step 2, a line every 1 steps" in result.output
    assert re.search(r"DAPT step 1/2 \(50%\), loss \d+\.\d{3}, \d+ s elapsed, about \d+ s left", result.output)
    assert re.search(r"DAPT step 2/2 \(100%\), loss \d+\.\d{3}, \d+ s elapsed\n", result.output)
    assert "{'loss'" not in result.output
    assert "held-out masked-LM loss" in result.output and "freshly initialised" in result.output
    assert re.search(r"\(piece frequencies alone: \d+\.\d{4}\)", result.output)
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf8"))
    assert summary["masking"] == "token" and summary["loss_after"] < summary["loss_before"]


def _write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf8")
    return path


def _model_without_tokenizer(tmp_path):
    model = tmp_path / "no_tokenizer"
    model.mkdir()
    source = Path(bundled_transformer())
    for name in ("config.json", "model.safetensors"):
        os.symlink(source / name, model / name)
    return model


@pytest.mark.parametrize(
    "case,message",
    [
        ("empty", "is empty"),
        ("one_huge_line", "longer than 100,000 characters"),
        ("one_line", "single non-blank line"),
        ("latin1", "not UTF-8"),
        ("too_short", "shorter than one block"),
        ("no_tokenizer", "is incomplete: it has no tokenizer files"),
        ("missing_model", "Model directory not found"),
        ("resume_nothing", "Cannot resume"),
        ("bad_masking", "Unknown masking"),
        ("negative_head_warmup", "head_warmup_steps must be 0 or more"),
    ],
)
def test_bad_input_gives_one_clear_error(case, message, corpus, tmp_path):
    args = ["dapt", str(corpus), str(tmp_path / "out"), "--max-steps", "1", "--no-progress",
            "--max-length", str(MAX_LENGTH)]
    if case == "empty":
        args[1] = str(_write(tmp_path / "empty.txt", "\n \n\n"))
    elif case == "one_huge_line":
        args[1] = str(_write(tmp_path / "huge.txt", "lorem ipsum " * 20_000))
    elif case == "one_line":
        args[1] = str(_write(tmp_path / "one.txt", "Just one sentence here.\n"))
    elif case == "latin1":
        args[1] = str(_write(tmp_path / "latin1.txt", "Caf\u00e9 in M\u00fcnchen.\nZweite Zeile.\n".encode("latin1")))
    elif case == "too_short":
        args[1] = str(_write(tmp_path / "short.txt", "A b.\nC d.\nE f.\n"))
    elif case == "no_tokenizer":
        args += ["--model", str(_model_without_tokenizer(tmp_path))]
    elif case == "missing_model":
        args += ["--model", str(tmp_path / "nowhere")]
    elif case == "resume_nothing":
        args += ["--resume"]
    elif case == "bad_masking":
        args += ["--masking", "word"]
    elif case == "negative_head_warmup":
        args += ["--head-warmup-steps", "-1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "Error:" in result.output and message in result.output, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, DaptInputError)


def test_refuses_to_overwrite_checkpoints_without_resume(corpus, resumed_run):
    _, _, out = resumed_run
    with pytest.raises(DaptInputError, match="pass --resume"):
        run_dapt(corpus=corpus, output_dir=out, max_steps=1, **TINY)


def test_torchrun_two_cpu_processes(corpus, tmp_path):
    """The distributed path (DDP over gloo) without a GPU: two processes share the batches."""
    out = tmp_path / "ddp_dapt"
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    command = [
        torchrun, "--standalone", "--nproc_per_node", "2", "-m", "spacy_crossner", "dapt",
        str(corpus), str(out), "--max-steps", "2", "--batch-size", "4", "--max-length", str(MAX_LENGTH),
        "--lr", "5e-4", "--held-out", "0.1", "--no-progress", "--seed", "7",
        "--head-warmup-steps", "2", "--head-lr", "1e-2",
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("tokens seen:") == 1  # only rank 0 reports
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf8"))
    assert summary["world_size"] == 2
    # the head warm-up (frozen encoder under DDP) ran first and is not counted in tokens seen
    assert summary["head_warmup_steps"] == 2
    assert summary["loss_after_head_warmup"] < summary["loss_before"]
    # 2 steps x 2 processes x 4 blocks x 32 pieces.
    assert summary["tokens_seen"] == 2 * 2 * 4 * MAX_LENGTH
    assert summary["loss_after"] < summary["loss_before"]
    from transformers import AutoModel, AutoTokenizer

    assert AutoModel.from_pretrained(str(out)).config.hidden_size == 384
    assert AutoTokenizer.from_pretrained(str(out)).mask_token == "[MASK]"


def test_encoder_frozen_trains_the_head_alone():
    """Inside the block an optimiser step moves the masked-LM head only; the encoder and the word
    embeddings (the decoder is tied to them) stay as they were; requires_grad is restored."""
    import torch

    from spacy_crossner.dapt.train import _encoder_frozen, load_model

    torch.manual_seed(0)
    mlm, missing = load_model(bundled_transformer())
    before = {name: p.detach().clone() for name, p in mlm.named_parameters()}
    assert mlm.get_output_embeddings().weight is mlm.base_model.embeddings.word_embeddings.weight
    with _encoder_frozen(mlm) as trainable:
        assert trainable and all(name.startswith("cls.") for name in trainable)
        assert set(missing) <= {*trainable, "cls.predictions.decoder.bias"}
        params = [p for p in mlm.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=1.0)
        ids = torch.tensor([[101, 2023, 103, 1037, 3231, 102]])
        labels = torch.full_like(ids, -100)
        labels[0, 2] = 2003
        mlm(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
    after = dict(mlm.named_parameters())
    assert all(p.requires_grad for p in after.values())
    moved = {name for name, p in after.items() if not torch.equal(p.detach(), before[name])}
    assert moved and moved <= set(trainable)
    assert "bert.embeddings.word_embeddings.weight" not in moved


def test_head_warmup_comes_first_and_is_reported(corpus, tmp_path):
    out = tmp_path / "warm_dapt"
    result = CliRunner().invoke(app, [
        "dapt", str(corpus), str(out), "--max-steps", "2", "--batch-size", "4",
        "--max-length", str(MAX_LENGTH), "--lr", "5e-4", "--held-out", "0.1", "--logging-steps", "1",
        "--head-warmup-steps", "3", "--head-lr", "1e-2", "--seed", "7", "--save-steps", "2",
    ])
    assert result.exit_code == 0, result.output
    assert "DAPT head warm-up: training to step 3" in result.output
    assert result.output.index("DAPT head warm-up step 3/3") < result.output.index("DAPT: training to step 2")
    assert "head warm-up first: 3 steps on the masked-LM head alone (learning rate 0.01" in result.output
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf8"))
    assert summary["head_warmup_steps"] == 3 and summary["head_learning_rate"] == pytest.approx(1e-2)
    assert summary["loss_after_head_warmup"] < summary["loss_before"]
    assert summary["loss_after"] < summary["loss_before"]
    # the warm-up's pieces are not DAPT's: 2 steps x 4 blocks x 32 pieces
    assert summary["steps"] == 2 and summary["tokens_seen"] == 2 * 4 * MAX_LENGTH
    settings = json.loads((out / "dapt_run_settings.json").read_text(encoding="utf8"))
    assert settings["head_warmup_steps"] == 3
    # resumed, the run does not warm the head up again, and its summary still says the head had it
    resumed = CliRunner().invoke(app, [
        "dapt", str(corpus), str(out), "--max-steps", "3", "--batch-size", "4",
        "--max-length", str(MAX_LENGTH), "--lr", "5e-4", "--held-out", "0.1", "--seed", "7",
        "--head-warmup-steps", "3", "--head-lr", "1e-2", "--save-steps", "2", "--resume",
    ])
    assert resumed.exit_code == 0, resumed.output
    assert "DAPT head warm-up" not in resumed.output
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf8"))
    assert summary["steps"] == 3 and summary["resumed_from"].endswith("checkpoint-2")
    assert summary["head_warmup_steps"] == 3 and summary["head_learning_rate"] == pytest.approx(1e-2)


def test_unigram_loss_is_the_smoothed_piece_frequency_loss():
    import math

    from spacy_crossner.dapt.train import MaskedDataset, unigram_loss

    blocks = [numpy.array([1, 1, 2]), numpy.array([1, 3])]
    held = MaskedDataset([
        {"input_ids": [0, 9, 5], "labels": [-100, 1, -100]},
        {"input_ids": [0, 9], "labels": [-100, 0]},
    ])
    # counts 0:0 1:3 2:1 3:1 over 5 pieces, add-one over a vocabulary of 4
    expected = -(math.log(4 / 9) + math.log(1 / 9)) / 2
    assert unigram_loss(blocks, held, vocab_size=4) == pytest.approx(expected)
    assert unigram_loss(blocks, MaskedDataset([{"input_ids": [1], "labels": [-100]}]), vocab_size=4) is None


def test_context_free_loss_copies_a_visible_piece_with_the_masking_odds():
    import math

    from spacy_crossner.dapt.train import MaskedDataset, context_free_loss, unigram_loss

    blocks = [numpy.array([1, 1, 2]), numpy.array([1, 3])]
    mask = 9
    held = MaskedDataset([
        # a [MASK] over 1; a piece 2 left as it was; a random 3 over 1
        {"input_ids": [0, mask, 2, 3], "labels": [-100, 1, 2, 1]},
    ])
    p = {1: 4 / 9, 2: 2 / 9, 3: 2 / 9}  # add-one over a vocabulary of 4, as above
    expected = -(math.log(p[1]) + math.log(0.5 + 0.5 * p[2]) + math.log(0.5 * p[1])) / 3
    assert context_free_loss(blocks, held, vocab_size=4, mask_token_id=mask) == pytest.approx(expected)
    # copying what the input shows pays where the masking kept the piece (80/10/10)
    kept = MaskedDataset([{"input_ids": [2, 3], "labels": [2, 3]}])
    assert context_free_loss(blocks, kept, vocab_size=4, mask_token_id=mask) < unigram_loss(blocks, kept, vocab_size=4)
    empty = MaskedDataset([{"input_ids": [1], "labels": [-100]}])
    assert context_free_loss(blocks, empty, vocab_size=4, mask_token_id=mask) is None


def test_format_seconds():
    assert [format_seconds(s) for s in (0.4, 48, 185, 3720)] == ["0 s", "48 s", "3 min 05 s", "1 h 02 min"]
