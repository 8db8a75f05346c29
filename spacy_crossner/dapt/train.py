"""Domain-adaptive pre-training (DAPT): continue masked-LM training of an encoder on raw text.

The run follows CrossNER's ``run_language_modeling.py`` (spec ``dapt.md`` 2-3) on top of the
Hugging Face ``Trainer``, so one code path serves CPU, one GPU and ``torchrun`` /
``accelerate launch`` with several processes:

- the corpus is tokenised line by line without special tokens, the pieces are concatenated and cut
  into blocks of ``max_length - 2`` pieces, each wrapped in [CLS] ... [SEP]; the last partial
  training block is dropped (as ``TextDataset``); line boundaries are otherwise ignored;
- the last ``held_out`` fraction of the lines (at least one line) is kept out of training; its
  blocks (the partial one included, at most ``max_held_out_blocks``) are masked once with the
  seed, and the masked-LM loss on them is measured before and after training;
- masking is ours (``masking.py``): "span" (CrossNER span-level) or "token" (BERT), p = 0.2;
- AdamW, linear decay to 0, no warm-up, no weight decay, gradient clipping 1.0, seed 42 (defaults);
- the output directory receives the model (``save_pretrained``), its tokenizer and
  ``dapt_summary.json``; checkpoints go to ``<output_dir>/checkpoints`` for ``resume``.

The output directory can be given as ``name`` of ``spacy-transformers.TransformerModel.v3``: the
masked-LM head is ignored there.

The bundled MiniLM (``spacy_crossner.misc.bundled_transformer()``) is a sentence-transformers
export of a BERT encoder: it has no masked-LM head. ``AutoModelForMaskedLM`` loads its encoder and
ties the decoder to the word embeddings, but ``cls.predictions.transform.*`` and the output bias
are freshly initialised (seeded), so the "before" loss is that of a random head (about ln(30522) =
10.3) and the first steps mostly train the head. The summary lists those weights. A model
directory with a real masked-LM head (e.g. ``bert-base-cased``) has no such warning.

``head_warmup_steps`` > 0 trains the masked-LM head alone first (every weight of the encoder,
the word embeddings and so the tied decoder included, frozen; its own learning rate
``head_learning_rate``, constant), so that the encoder's own DAPT steps follow gradients
through a fitted head rather than a random one. The held-out loss after the warm-up is in the
summary. A resumed run does not repeat it (the checkpoint holds the head).
"""
import json
import logging
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from transformers import TrainerCallback

from .checkpoints import CHECKPOINT_DIR, checkpoint_folders, last_complete_checkpoint
from .corpus import DEFAULT_MAX_LINE_CHARS, DaptInputError, iter_lines
from ..misc import format_seconds
from .masking import (
    MASKING_SCHEMES, RANDOM_SHARE_OF_REST, MaskedLMCollator, PaddingCollator, mask_tokens,
)

SUMMARY_FILE = "dapt_summary.json"
_TOKENIZE_BATCH = 1000

logger = logging.getLogger(__name__)


@dataclass
class DaptSummary:
    """What a DAPT run did, written to ``<output_dir>/dapt_summary.json``.

    tokens_seen counts the word pieces fed to the model in training over all processes ([CLS] and
    [SEP] included; training blocks are never padded). The losses are the mean masked-LM loss
    over the batches of the held-out slice, masked once with the seed. loss_unigram is the same
    loss for a model that knows only how often each piece occurs in the training blocks
    (add-one smoothed). loss_context_free is the loss of a model without context: those
    frequencies, and where the masking left a piece visible (a selected piece that is not
    [MASK] kept its own id as often as it got a random one), that piece with half the
    probability. A masked LM that learned nothing of context is at loss_context_free, one that
    uses context is below it.
    """

    model: str
    output_dir: str
    masking: str
    probability: float
    max_length: int
    seed: int
    world_size: int
    train_blocks: int
    held_out_blocks: int
    steps: int
    epochs: float
    tokens_seen: int
    train_seconds: float
    tokens_per_second: float
    loss_before: float
    loss_after: float
    resumed_from: Optional[str] = None
    newly_initialised: List[str] = field(default_factory=list)
    loss_unigram: Optional[float] = None
    loss_context_free: Optional[float] = None
    head_warmup_steps: int = 0
    head_learning_rate: Optional[float] = None
    head_warmup_seconds: float = 0.0
    loss_after_head_warmup: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def format_summary(summary: DaptSummary) -> str:
    """A short report for people."""
    lines = [
        f"DAPT of {summary.model} -> {summary.output_dir}",
        f"  masking {summary.masking} (p={summary.probability}), blocks of {summary.max_length} "
        f"pieces, {summary.world_size} process(es), seed {summary.seed}",
        f"  {summary.steps:,} steps ({summary.epochs:.2f} epochs) on {summary.train_blocks:,} "
        f"blocks; tokens seen: {summary.tokens_seen:,} "
        f"({summary.tokens_per_second:,.0f} tokens/s over {summary.train_seconds:.1f} s)",
        f"  held-out masked-LM loss ({summary.held_out_blocks} blocks): "
        f"before {summary.loss_before:.4f}, after {summary.loss_after:.4f}"
        + (f" (piece frequencies alone: {summary.loss_unigram:.4f})" if summary.loss_unigram is not None else ""),
    ]
    if summary.loss_context_free is not None:
        lines.append(
            f"  without context (piece frequencies, and copying a piece the masking left visible): "
            f"{summary.loss_context_free:.4f}; a masked LM that uses context is below it"
        )
    if summary.loss_after_head_warmup is not None:
        lines.append(
            f"  head warm-up first: {summary.head_warmup_steps:,} steps on the masked-LM head alone "
            f"(learning rate {summary.head_learning_rate:g}, {summary.head_warmup_seconds:.1f} s); "
            f"held-out loss after it {summary.loss_after_head_warmup:.4f}"
        )
    if summary.resumed_from:
        lines.append(f"  resumed from {summary.resumed_from}")
    if summary.newly_initialised:
        lines.append(
            "  note (expected for the bundled MiniLM, not an error): the start model had no weights "
            f"for {', '.join(summary.newly_initialised)}, so they were freshly initialised (a "
            "sentence-transformers export has no masked-LM head) and the loss before is that of "
            "a random head."
        )
    return "\n".join(lines)


def default_model() -> str:
    """The bundled MiniLM directory (offline)."""
    from ..misc import bundled_transformer

    return bundled_transformer()


_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model",
                    "sentencepiece.bpe.model", "tokenizer.model")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _offline() -> bool:
    return any(
        os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _looks_local(model: str) -> bool:
    """True when ``model`` is written as a path rather than a hub name ("name" or "org/name")."""
    if model.startswith((".", "~", "/")) or "\\" in model or model.endswith("/"):
        return True
    parts = model.split("/")
    # "models/bert" beside a models/ folder is a path, whatever the hub holds
    return len(parts) > 2 or (len(parts) == 2 and Path(parts[0]).is_dir())


def check_model_source(model: str) -> None:
    """Check a ``--model`` before transformers is asked for it, so that mistakes fail at once
    (a mistyped relative path would otherwise be looked up on the hub, with network retries).

    A local directory must hold config.json, weights and tokenizer files (all that is missing
    is named). A name written as a path (``./x``, ``../x``, ``/x``, ``a/b/c``, ``dir/x`` beside a
    folder ``dir``) must exist. Anything else is a hub name: it must look like one
    (``name`` or ``org/name``) and be in the local Hugging Face cache, or, unless HF offline
    mode is set (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE), be found by one hub look-up (10 s
    timeout). Raises DaptInputError.
    """
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise DaptInputError(f"--model {model} is a file; give a model directory or a hub name")
        names = {p.name for p in path.iterdir()}
        missing = []
        if "config.json" not in names:
            missing.append("config.json")
        if not names & set(_WEIGHT_FILES):
            missing.append(f"weights ({', '.join(_WEIGHT_FILES[:3])} ...)")
        if not names & set(_TOKENIZER_FILES):
            missing.append(
                f"tokenizer files ({', '.join(_TOKENIZER_FILES[:3])} ...; save them with "
                "tokenizer.save_pretrained(dir))"
            )
        if missing:
            raise DaptInputError(
                f"The model directory {model} is incomplete: it has no {'; no '.join(missing)}"
                + (" (the directory is empty)" if not names else "")
            )
        return
    if _looks_local(model) or not _HUB_NAME.match(model):
        raise DaptInputError(
            f"Model directory not found: {model} (looked for {path.resolve()}); give an existing "
            "model directory or a hub name such as bert-base-cased"
        )
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return  # in the local Hugging Face cache
    if _offline():
        raise DaptInputError(
            f"--model {model}: no such local directory, and Hugging Face offline mode is set "
            "(HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE) while the model is not in the local "
            "cache; give a model directory, or download it first"
        )
    # One quick look-up instead of transformers' retries (about a minute without a network).
    from huggingface_hub import HfApi
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().model_info(model, timeout=10)
    except GatedRepoError:
        return  # exists; transformers reports what access it needs
    except RepositoryNotFoundError:
        raise DaptInputError(
            f"--model {model}: no such local directory (looked for {path.resolve()}) and no "
            "such model on the Hugging Face hub"
        ) from None
    except Exception as err:  # no network, proxy, DNS...
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise DaptInputError(
            f"--model {model}: no such local directory (looked for {path.resolve()}), and the "
            f"Hugging Face hub cannot be reached ({type(err).__name__}: {reason})"
        ) from None


def load_tokenizer(model: str):
    """The tokenizer of a model directory or hub name, with a clear error when there is none.

    model (str): a local directory or a Hugging Face hub name (cached, when offline).
    Raises DaptInputError when no usable tokenizer can be loaded (see check_model_source).
    """
    from transformers import AutoTokenizer

    check_model_source(str(model))
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
    except Exception as err:  # transformers raises OSError, ValueError, TypeError, KeyError...
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0].rstrip(".")
        raise DaptInputError(
            f"Cannot load a tokenizer from '{model}': {reason}. A model directory needs its "
            "tokenizer files (e.g. tokenizer.json or vocab.txt, tokenizer_config.json); save them "
            "with tokenizer.save_pretrained(dir)."
        ) from None
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise DaptInputError(f"The tokenizer of '{model}' has no mask token: it cannot do masked-LM")
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise DaptInputError(f"The tokenizer of '{model}' lacks [CLS]/[SEP]-style tokens")
    return tokenizer


def load_model(model: str):
    """A masked-LM model and the names of the weights that were freshly initialised."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    # The "newly initialized" warning is reported in our summary instead, in plainer words.
    hf_logging.set_verbosity_error()
    try:
        mlm, info = AutoModelForMaskedLM.from_pretrained(model, output_loading_info=True)
    except Exception as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0].rstrip(".")
        raise DaptInputError(f"Cannot load a masked-LM model from '{model}': {reason}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys", []))
    return mlm, missing


def _check_output_dir(output_dir: Path) -> None:
    """The output directory must be a directory or creatable as one."""
    for path in (output_dir, *output_dir.parents):
        if path.exists():
            if not path.is_dir():
                where = "is a file" if path == output_dir else f"is inside {path}, which is a file"
                raise DaptInputError(
                    f"The output directory {output_dir} {where}; give a directory path"
                )
            return


def read_corpus_lines(corpus: Union[str, Path], *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> List[str]:
    """The non-blank lines of a UTF-8 corpus; DaptInputError when it is empty or unreadable."""
    lines = [line.strip() for line in iter_lines(corpus, max_line_chars=max_line_chars)]
    lines = [line for line in lines if line]
    if not lines:
        raise DaptInputError(f"The corpus {corpus} is empty (no non-blank line)")
    return lines


def tokenize_lines(lines: Sequence[str], tokenizer) -> numpy.ndarray:
    """All word pieces of the lines, concatenated, without special tokens (int64 array)."""
    parts = []
    for start in range(0, len(lines), _TOKENIZE_BATCH):
        encoded = tokenizer(
            list(lines[start : start + _TOKENIZE_BATCH]),
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )["input_ids"]
        parts.extend(numpy.asarray(ids, dtype=numpy.int64) for ids in encoded)
    return numpy.concatenate(parts) if parts else numpy.zeros(0, dtype=numpy.int64)


def make_blocks(pieces: numpy.ndarray, *, block_pieces: int, keep_remainder: bool) -> List[numpy.ndarray]:
    """Consecutive blocks of ``block_pieces`` pieces; the last partial one only if asked."""
    n_full = len(pieces) // block_pieces
    blocks = [pieces[i * block_pieces : (i + 1) * block_pieces] for i in range(n_full)]
    if keep_remainder and len(pieces) > n_full * block_pieces:
        blocks.append(pieces[n_full * block_pieces :])
    return blocks


class BlockDataset(torch.utils.data.Dataset):
    """Blocks of piece ids, each returned with [CLS] and [SEP] around it."""

    def __init__(self, blocks: Sequence[numpy.ndarray], cls_id: int, sep_id: int) -> None:
        self.blocks = list(blocks)
        self.cls_id = cls_id
        self.sep_id = sep_id

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> Dict[str, List[int]]:
        return {"input_ids": [self.cls_id] + self.blocks[index].tolist() + [self.sep_id]}


class MaskedDataset(torch.utils.data.Dataset):
    """Features masked once (held-out slice), so every evaluation sees the same inputs."""

    def __init__(self, features: List[Dict[str, List[int]]]) -> None:
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> Dict[str, List[int]]:
        return self.features[index]


def mask_held_out(dataset: BlockDataset, tokenizer, *, probability: float, scheme: str, seed: int):
    """Mask every held-out block once with a generator of its own, seeded."""
    generator = torch.Generator().manual_seed(seed)
    special = set(tokenizer.all_special_ids)
    features = []
    for i in range(len(dataset)):
        ids = torch.tensor([dataset[i]["input_ids"]])
        protected = torch.tensor([[t in special for t in ids[0].tolist()]])
        inputs, labels = mask_tokens(
            ids,
            special_tokens_mask=protected,
            mask_token_id=tokenizer.mask_token_id,
            vocab_size=len(tokenizer),
            probability=probability,
            scheme=scheme,
            generator=generator,
        )
        if (labels != -100).any():
            features.append({"input_ids": inputs[0].tolist(), "labels": labels[0].tolist()})
    return MaskedDataset(features)


def run_dapt(
    *,
    corpus: Union[str, Path],
    output_dir: Union[str, Path],
    model: Optional[str] = None,
    masking: str = "span",
    probability: float = 0.2,
    epochs: float = 15.0,
    max_steps: int = -1,
    batch_size: int = 8,
    learning_rate: float = 5e-5,
    seed: int = 42,
    max_length: int = 512,
    held_out: float = 0.05,
    max_held_out_blocks: int = 100,
    save_steps: int = 10_000,
    save_total_limit: Optional[int] = 2,
    logging_steps: int = 100,
    gradient_accumulation_steps: int = 1,
    resume: bool = False,
    progress: Optional[bool] = None,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    head_warmup_steps: int = 0,
    head_learning_rate: float = 1e-3,
) -> DaptSummary:
    """Continue masked-LM training of an encoder on a raw-text corpus and save it.

    corpus (Union[str, Path]): UTF-8 raw text, one sentence or paragraph per line.
    output_dir (Union[str, Path]): receives model, tokenizer and ``dapt_summary.json``; usable as
        a spacy-transformers ``name``. Checkpoints go to ``<output_dir>/checkpoints``.
    model (Optional[str]): start model, a local directory or hub name; None = bundled MiniLM.
    masking (str): "span" (CrossNER span-level) or "token" (BERT token-level).
    probability (float): masking rate p (CrossNER: 0.2).
    epochs (float): training epochs (CrossNER: 15). Ignored when ``max_steps`` > 0.
    max_steps (int): optimiser steps to run in total; -1 = from epochs.
    batch_size (int): blocks per device and step (CrossNER: 8).
    learning_rate (float): peak AdamW learning rate, decayed linearly to 0 (CrossNER: 5e-5).
    seed (int): seeds model head initialisation, shuffling, masking and the held-out masks.
    max_length (int): block length in word pieces, [CLS] and [SEP] included (CrossNER: 512).
    held_out (float): fraction of the corpus lines (the last ones) kept for the held-out loss.
    max_held_out_blocks (int): cap on held-out blocks, to keep evaluation cheap.
    save_steps (int): save a checkpoint every this many steps.
    save_total_limit (Optional[int]): checkpoints kept (None = all).
    logging_steps (int): log the training loss every this many steps.
    gradient_accumulation_steps (int): steps accumulated per optimiser update.
    resume (bool): continue from the last checkpoint in ``<output_dir>/checkpoints``.
    progress (Optional[bool]): True: a progress bar; False: a line (step, loss, time left) on
        stderr every ``logging_steps`` steps and at the end; None: the bar when stderr is a
        terminal, else the lines (logs of ``spacy project run``, CI).
    max_line_chars (int): the longest corpus line accepted.
    head_warmup_steps (int): steps training the masked-LM head alone before DAPT (encoder and
        word embeddings frozen); 0 = none (CrossNER). Skipped when resuming.
    head_learning_rate (float): the warm-up's constant AdamW learning rate.
    RETURNS (DaptSummary): tokens seen, held-out loss before/after, timing.
    Raises DaptInputError for user errors (bad corpus, model without tokenizer, ...).
    """
    from transformers import Trainer, TrainingArguments, set_seed

    if masking not in MASKING_SCHEMES:
        raise DaptInputError(f"Unknown masking '{masking}': use one of {', '.join(MASKING_SCHEMES)}")
    if not 0.0 < probability < 1.0:
        raise DaptInputError(f"The masking probability must be in (0, 1), got {probability}")
    if not 0.0 < held_out < 1.0:
        raise DaptInputError(f"held_out must be a fraction in (0, 1), got {held_out}")
    if max_length < 8:
        raise DaptInputError(f"max_length must be at least 8 word pieces, got {max_length}")
    for name, value in (("batch_size", batch_size), ("max_held_out_blocks", max_held_out_blocks),
                        ("save_steps", save_steps), ("logging_steps", logging_steps),
                        ("gradient_accumulation_steps", gradient_accumulation_steps)):
        if value < 1:
            raise DaptInputError(f"{name} must be at least 1, got {value}")
    if max_steps <= 0 and epochs <= 0:
        raise DaptInputError("Give a positive number of epochs or max_steps")
    if head_warmup_steps < 0:
        raise DaptInputError(f"head_warmup_steps must be 0 or more, got {head_warmup_steps}")
    if head_warmup_steps and not head_learning_rate > 0:
        raise DaptInputError(f"head_learning_rate must be positive, got {head_learning_rate}")
    model = model or default_model()
    output_dir = Path(output_dir)
    _check_output_dir(output_dir)
    checkpoint_dir = output_dir / CHECKPOINT_DIR
    last_checkpoint = last_complete_checkpoint(checkpoint_dir, say=_say if resume else None)
    if resume and last_checkpoint is None:
        raise DaptInputError(f"Cannot resume: no complete checkpoint in {checkpoint_dir}" + (
            " (only ones whose save was stopped: remove them to start again)"
            if checkpoint_folders(checkpoint_dir) else ""))
    if not resume and checkpoint_folders(checkpoint_dir):
        raise DaptInputError(
            f"{checkpoint_dir} holds checkpoints of an earlier run: pass --resume to continue it, "
            "or choose another output directory" if last_checkpoint is not None else
            f"{checkpoint_dir} holds only checkpoints whose save was stopped: remove it to start "
            "again, or choose another output directory"
        )
    recorded = _check_resume_settings(output_dir, resume, {
        "corpus_sha256": _sha256(Path(corpus)), "model": model, "masking": masking,
        "probability": probability, "batch_size": batch_size, "learning_rate": learning_rate,
        "seed": seed, "max_length": max_length, "held_out": held_out,
        "max_held_out_blocks": max_held_out_blocks,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        **({"head_warmup_steps": head_warmup_steps, "head_learning_rate": head_learning_rate}
           if head_warmup_steps else {}),
    })

    tokenizer = load_tokenizer(model)
    limit = min(
        getattr(tokenizer, "model_max_length", max_length) or max_length, 1_000_000
    )
    if max_length > limit:
        raise DaptInputError(f"max_length {max_length} exceeds the model's limit of {limit} pieces")
    lines = read_corpus_lines(corpus, max_line_chars=max_line_chars)
    if len(lines) < 2:
        raise DaptInputError(
            f"The corpus {corpus} has a single non-blank line: DAPT needs at least two lines "
            "(training text and a held-out slice). Give one sentence or paragraph per line."
        )
    n_held = min(len(lines) - 1, max(1, math.ceil(held_out * len(lines))))
    block_pieces = max_length - 2
    train_blocks = make_blocks(
        tokenize_lines(lines[:-n_held], tokenizer), block_pieces=block_pieces, keep_remainder=False
    )
    if not train_blocks:
        raise DaptInputError(
            f"The training part of {corpus} ({len(lines) - n_held} lines) is shorter than one block "
            f"of {block_pieces} word pieces: give more text or a smaller max_length"
        )
    held_blocks = make_blocks(
        tokenize_lines(lines[-n_held:], tokenizer), block_pieces=block_pieces, keep_remainder=True
    )[:max_held_out_blocks]
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    train_set = BlockDataset(train_blocks, cls_id, sep_id)
    held_set = mask_held_out(
        BlockDataset(held_blocks, cls_id, sep_id), tokenizer,
        probability=probability, scheme=masking, seed=seed,
    )
    if len(held_set) == 0:
        raise DaptInputError(f"The held-out slice of {corpus} is too short to mask; raise held_out")

    # Seed before loading: a missing masked-LM head is initialised from the global RNG.
    set_seed(seed)
    mlm, missing = load_model(model)
    if max_length > getattr(mlm.config, "max_position_embeddings", max_length):
        raise DaptInputError(
            f"max_length {max_length} exceeds the model's {mlm.config.max_position_embeddings} positions"
        )
    show_bar = _isatty(sys.stderr) if progress is None else progress

    def make_trainer(label: str, **overrides) -> "Trainer":
        settings = dict(
            output_dir=str(checkpoint_dir),
            num_train_epochs=epochs,
            max_steps=max_steps if max_steps > 0 else -1,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=batch_size,
            gradient_accumulation_steps=gradient_accumulation_steps,
            learning_rate=learning_rate,
            weight_decay=0.0,
            adam_epsilon=1e-8,
            warmup_steps=0,
            lr_scheduler_type="linear",
            max_grad_norm=1.0,
            seed=seed,
            save_strategy="steps",
            save_steps=save_steps,
            save_total_limit=save_total_limit,
            logging_steps=logging_steps,
            report_to=[],
            disable_tqdm=not show_bar,
            include_num_input_tokens_seen=True,
            remove_unused_columns=False,
            prediction_loss_only=True,
            dataloader_num_workers=0,
            dataloader_pin_memory=torch.cuda.is_available(),
            use_cpu=_cpu_only(),
        )
        settings.update(overrides)
        made = Trainer(
            model=mlm,
            args=TrainingArguments(**settings),
            train_dataset=train_set,
            eval_dataset=held_set,
            data_collator=MaskedLMCollator(tokenizer, probability=probability, scheme=masking),
            processing_class=tokenizer,
        )
        if not show_bar:
            from transformers.trainer_callback import PrinterCallback

            # our lines replace the Trainer's raw dicts of logged values
            made.remove_callback(PrinterCallback)
            made.add_callback(_ProgressLines(label))
        return made

    warm_steps = 0 if resume else head_warmup_steps
    warmup = make_trainer("DAPT head warm-up", max_steps=warm_steps, learning_rate=head_learning_rate,
                          lr_scheduler_type="constant", save_strategy="no") if warm_steps else None
    first = warmup or make_trainer("DAPT")
    if not show_bar and first.is_world_process_zero():
        _say(f"DAPT of {model}: {len(train_set):,} training blocks of {max_length} pieces, "
             f"held-out loss on {len(held_set):,} blocks before and after")
    loss_before = _evaluate(first, held_set, tokenizer)
    loss_after_head = None
    warm_seconds = 0.0
    if warmup is not None:
        warm_clock = _Clock()
        warmup.add_callback(warm_clock)
        with _encoder_frozen(mlm):
            warmup.train()
        warm_seconds = warm_clock.seconds
        loss_after_head = _evaluate(warmup, held_set, tokenizer)
        warmup = first = None  # frees the head's optimizer state
    # A new Trainer re-seeds: shuffling and masking as in a run without the warm-up.
    trainer = first or make_trainer("DAPT")
    args = trainer.args
    clock = _Clock()
    trainer.add_callback(clock)
    trainer.train(resume_from_checkpoint=last_checkpoint if resume else None)
    train_seconds = clock.seconds
    loss_after = _evaluate(trainer, held_set, tokenizer)
    tokens_seen = int(trainer.state.num_input_tokens_seen)
    summary = DaptSummary(
        model=str(model),
        output_dir=str(output_dir),
        masking=masking,
        probability=probability,
        max_length=max_length,
        seed=seed,
        world_size=int(args.world_size),
        train_blocks=len(train_set),
        held_out_blocks=len(held_set),
        steps=int(trainer.state.global_step),
        epochs=float(trainer.state.epoch or 0.0),
        tokens_seen=tokens_seen,
        train_seconds=round(train_seconds, 3),
        tokens_per_second=round((tokens_seen - clock.tokens_at_begin) / max(train_seconds, 1e-9), 1),
        loss_before=float(loss_before),
        loss_unigram=unigram_loss(train_blocks, held_set, vocab_size=len(tokenizer)),
        loss_context_free=context_free_loss(train_blocks, held_set, vocab_size=len(tokenizer),
                                            mask_token_id=tokenizer.mask_token_id),
        loss_after=float(loss_after),
        resumed_from=str(last_checkpoint) if resume else None,
        newly_initialised=missing,
        # a resumed run's head had the first run's warm-up (its run settings record it)
        head_warmup_steps=int(recorded.get("head_warmup_steps", 0)),
        head_learning_rate=recorded.get("head_learning_rate"),
        head_warmup_seconds=round(warm_seconds, 3),
        loss_after_head_warmup=None if loss_after_head is None else float(loss_after_head),
    )
    trainer.save_model(str(output_dir))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(output_dir))
        (output_dir / SUMMARY_FILE).write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf8")
    return summary


RUN_SETTINGS_FILE = "dapt_run_settings.json"


def _piece_probabilities(blocks: Sequence[numpy.ndarray], vocab_size: int) -> numpy.ndarray:
    """The add-one smoothed frequency of each piece id in ``blocks``."""
    pieces = numpy.concatenate(list(blocks)) if len(blocks) else numpy.zeros(0, dtype=numpy.int64)
    counts = numpy.bincount(pieces, minlength=vocab_size)[:vocab_size].astype(numpy.float64)
    return (counts + 1.0) / (counts.sum() + vocab_size)


def _held_out_targets(held: "MaskedDataset") -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The labels of the held-out slice's masked positions and the input id at each."""
    pairs = [(t, x) for feature in held.features
             for t, x in zip(feature["labels"], feature["input_ids"]) if t != -100]
    targets = numpy.asarray([t for t, _ in pairs], dtype=numpy.int64)
    inputs = numpy.asarray([x for _, x in pairs], dtype=numpy.int64)
    return targets, inputs


def unigram_loss(blocks: Sequence[numpy.ndarray], held: "MaskedDataset", *, vocab_size: int) -> Optional[float]:
    """The held-out masked-LM loss (mean cross-entropy over the masked positions, nats) of the
    add-one smoothed piece frequencies of ``blocks``, whatever the input shows."""
    targets, _ = _held_out_targets(held)
    if not len(targets):
        return None
    # the mean over masked positions (the model's held-out loss averages batch means: close)
    return float(-numpy.log(_piece_probabilities(blocks, vocab_size)[targets]).mean())


def context_free_loss(blocks: Sequence[numpy.ndarray], held: "MaskedDataset", *, vocab_size: int,
                      mask_token_id: int) -> Optional[float]:
    """The held-out masked-LM loss of a model without context: at a [MASK], the smoothed piece
    frequencies of ``blocks``; where the input shows a piece, that piece or a random one with
    the masking's odds (kept as often as replaced, mask_tokens' step 3), so the piece shown gets
    that share of the probability and the frequencies the rest."""
    targets, inputs = _held_out_targets(held)
    if not len(targets):
        return None
    p = _piece_probabilities(blocks, vocab_size)[targets]
    kept = 1.0 - RANDOM_SHARE_OF_REST
    shown = inputs != mask_token_id
    p = numpy.where(shown, kept * (inputs == targets) + (1.0 - kept) * p, p)
    return float(-numpy.log(p).mean())


class _encoder_frozen:
    """Within the block only the masked-LM head trains: every parameter of the model's base
    (encoder and embeddings, so a decoder tied to the word embeddings too) has requires_grad
    off, and is restored after. DaptInputError when nothing would be left to train."""

    def __init__(self, mlm) -> None:
        self.mlm = mlm
        self.saved: Dict[str, bool] = {}

    def __enter__(self):
        base = {id(p) for p in self.mlm.base_model.parameters()}
        self.saved = {name: p.requires_grad for name, p in self.mlm.named_parameters()}
        trainable = []
        for name, param in self.mlm.named_parameters():
            if id(param) in base:
                param.requires_grad_(False)
            elif param.requires_grad:
                trainable.append(name)
        if not trainable:
            self.__exit__(None, None, None)
            raise DaptInputError(
                "head warm-up: the model has no masked-LM head weights outside its encoder to "
                "train; run without head warm-up steps"
            )
        return trainable

    def __exit__(self, *exc) -> None:
        for name, param in self.mlm.named_parameters():
            param.requires_grad_(self.saved.get(name, True))


def _sha256(path: Path) -> Optional[str]:
    import hashlib

    if not path.is_file():
        return None  # read_corpus_lines reports it
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_resume_settings(output_dir: Path, resume: bool, settings: Dict[str, Any]) -> Dict[str, Any]:
    """A resumed run continues the run that wrote the checkpoints: the same corpus (by content)
    and the same settings, except the length (--max-steps / --epochs), which may grow. The first
    run records them in OUTPUT_DIR/dapt_run_settings.json. RETURNS the recorded settings (the
    first run's, on resume)."""
    path = output_dir / RUN_SETTINGS_FILE
    if resume and path.exists():
        try:
            saved = json.loads(path.read_text(encoding="utf8"))
        except ValueError as err:
            raise DaptInputError(f"{path}: not readable JSON ({err}); it records the first run's settings") from None
        changed = [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in settings.items() if saved.get(k) != v]
        if changed:
            raise DaptInputError(
                f"--resume continues the run in {output_dir}, but these settings differ from that "
                f"run's ({path}): {'; '.join(changed)}. Resume with the first run's corpus and "
                "options, or start a new run in another output directory."
            )
        return saved
    if _is_main_process_env():
        output_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=2), encoding="utf8")
    return settings


def _is_main_process_env() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _cpu_only() -> bool:
    """True without a GPU: accelerate then sets up several processes as MULTI_CPU with gloo.

    Without ``use_cpu``, processes started by torchrun on a machine without CUDA would each train
    alone (accelerate only detects multi-process runs on an accelerator otherwise).
    """
    if torch.cuda.is_available():
        return False
    mps = getattr(torch.backends, "mps", None)
    several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return several or mps is None or not mps.is_available()


class _Clock(TrainerCallback):
    """Times the training loop itself and notes the tokens already seen when it starts (resume)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.seconds = 0.0
        self.tokens_at_begin = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.tokens_at_begin = int(state.num_input_tokens_seen)
        self.start = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = time.perf_counter() - self.start


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _ProgressLines(TrainerCallback):
    """Progress without a bar (process 0 only): a line at each logging step and at the end."""

    def __init__(self, label: str = "DAPT") -> None:
        self.label = label
        self.start = 0.0
        self.first_step = 0
        self.last_line = -1

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()
        self.first_step = int(state.global_step)
        if state.is_world_process_zero:
            _say(f"{self.label}: training to step {state.max_steps:,}, a line every {args.logging_steps:,} "
                 "steps" + (f" (resumed at step {self.first_step:,})" if self.first_step else ""))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            self._line(state, f"loss {float(logs['loss']):.3f}")

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.last_line < state.global_step:
            mean = next((h["train_loss"] for h in reversed(state.log_history) if "train_loss" in h), None)
            self._line(state, f"mean training loss {mean:.3f}" if mean is not None else "")

    def _line(self, state, loss: str) -> None:
        step = int(state.global_step)
        self.last_line = step
        elapsed = time.perf_counter() - self.start
        done = step - self.first_step
        eta = ""
        if 0 < done and step < state.max_steps:
            eta = f", about {format_seconds((state.max_steps - step) * elapsed / done)} left"
        _say(f"{self.label} step {step:,}/{state.max_steps:,} ({100 * step / max(state.max_steps, 1):.0f}%)"
             + (f", {loss}" if loss else "") + f", {format_seconds(elapsed)} elapsed{eta}")


def _evaluate(trainer, dataset, tokenizer) -> float:
    """Mean masked-LM loss on pre-masked features (the training collator would re-mask them)."""
    collator = trainer.data_collator
    trainer.data_collator = PaddingCollator(tokenizer.pad_token_id)
    try:
        metrics = trainer.evaluate(eval_dataset=dataset)
    finally:
        trainer.data_collator = collator
    return float(metrics["eval_loss"])
