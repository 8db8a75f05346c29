"""The ``dapt`` and ``select-corpus`` commands of ``python -m spacy_crossner``.

Single process (CPU or one GPU)::

    python -m spacy_crossner dapt corpus.txt models/politics_dapt --masking span

Several processes (GPUs, or CPU processes with the gloo backend), one machine::

    torchrun --nproc_per_node 2 -m spacy_crossner dapt corpus.txt models/politics_dapt
    accelerate launch --multi_gpu --num_processes 2 -m spacy_crossner dapt corpus.txt models/politics_dapt

``--multi_gpu`` is what makes ``accelerate launch`` start several processes (without it, and
without an ``accelerate config`` file, it starts one); on a machine without a GPU the processes
then train on CPU with the gloo backend, like under torchrun. ``torchrun`` sets
OMP_NUM_THREADS=1 per process unless it is set.

Several machines: ``torchrun --nnodes N --node_rank R --master_addr HOST --master_port PORT
--nproc_per_node G -m spacy_crossner dapt ...`` on each (or ``accelerate launch`` with a config
made by ``accelerate config``). ``--batch-size`` is per process: the effective batch is
batch size x processes x accumulation steps.
"""
from pathlib import Path
from typing import List, Optional

import typer

from ..dapt.corpus import DEFAULT_MAX_LINE_CHARS, DaptInputError
from ._util import app, fail



@app.command("dapt")
def dapt_command(
    corpus: Path = typer.Argument(..., help="Raw text (UTF-8), one sentence or paragraph per line."),
    output_dir: Path = typer.Argument(
        ..., help="Output directory: model + tokenizer, usable as a spacy-transformers 'name'."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="Start model: local directory or hub name. Default: the bundled MiniLM."
    ),
    masking: str = typer.Option("span", "--masking", help="'span' (CrossNER span-level) or 'token' (BERT)."),
    probability: float = typer.Option(0.2, "--probability", "-p", help="Masking rate (CrossNER: 0.2)."),
    epochs: float = typer.Option(15.0, "--epochs", help="Training epochs (CrossNER: 15)."),
    max_steps: int = typer.Option(-1, "--max-steps", help="Total optimiser steps; overrides --epochs when > 0."),
    batch_size: int = typer.Option(8, "--batch-size", "-b", help="Blocks per process and step (CrossNER: 8)."),
    learning_rate: float = typer.Option(5e-5, "--learning-rate", "--lr", help="Peak AdamW learning rate, linear decay."),
    seed: int = typer.Option(42, "--seed", help="Random seed (head init, shuffling, masking)."),
    max_length: int = typer.Option(512, "--max-length", help="Block length in word pieces, [CLS]/[SEP] included."),
    held_out: float = typer.Option(0.05, "--held-out", help="Fraction of lines (the last) kept for the held-out loss."),
    max_held_out_blocks: int = typer.Option(100, "--max-held-out-blocks", help="Cap on held-out blocks."),
    save_steps: int = typer.Option(10_000, "--save-steps", help="Save a checkpoint every N steps."),
    logging_steps: int = typer.Option(100, "--logging-steps", help="Log the training loss every N steps."),
    gradient_accumulation_steps: int = typer.Option(1, "--grad-accum", help="Steps accumulated per update."),
    head_warmup_steps: int = typer.Option(
        0, "--head-warmup-steps",
        help="First train the masked-LM head alone for N steps (encoder frozen): for a start model "
        "without one, such as the bundled MiniLM. 0: none (CrossNER).",
    ),
    head_learning_rate: float = typer.Option(
        1e-3, "--head-lr", help="Constant learning rate of the head warm-up.",
    ),
    resume: bool = typer.Option(
        False, "--resume",
        help="Continue from the last checkpoint in OUTPUT_DIR/checkpoints (one whose save a stopped "
        "run left unfinished is skipped). Promised: the "
        "weights, optimizer and learning-rate schedule, step count and tokens seen continue from "
        "the checkpoint, training ends at the same total --max-steps/--epochs, the held-out "
        "loss is measured on the same blocks and masks, and the corpus and options must be "
        "those of the first run (checked; only --max-steps/--epochs may grow). Not promised: "
        "the same result as an uninterrupted run; the batches after the checkpoint are "
        "shuffled and masked anew, so the final loss differs a little.",
    ),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress",
        help="--progress: a progress bar; --no-progress: a line (step, loss, time left) every "
        "--logging-steps steps. Default: the bar on a terminal, else the lines.",
    ),
    max_line_chars: int = typer.Option(
        DEFAULT_MAX_LINE_CHARS, "--max-line-chars", help="Longest corpus line accepted, in characters."
    ),
) -> None:
    """Domain-adaptive pre-training: continue masked-LM training of an encoder on raw text.

    One process (CPU or one GPU): python -m spacy_crossner dapt CORPUS OUTPUT_DIR.
    Several processes (GPUs, or CPU with gloo): torchrun --nproc_per_node 2 -m spacy_crossner
    dapt CORPUS OUTPUT_DIR, or accelerate launch --multi_gpu --num_processes 2 -m spacy_crossner
    dapt CORPUS OUTPUT_DIR (--multi_gpu also on CPU). --batch-size is per process. Ends with a
    summary: tokens seen and the held-out masked-LM loss before and after.
    """
    from ..dapt.train import format_summary, run_dapt

    try:
        summary = run_dapt(
            corpus=corpus, output_dir=output_dir, model=model, masking=masking,
            probability=probability, epochs=epochs, max_steps=max_steps, batch_size=batch_size,
            learning_rate=learning_rate, seed=seed, max_length=max_length, held_out=held_out,
            max_held_out_blocks=max_held_out_blocks, save_steps=save_steps,
            logging_steps=logging_steps, gradient_accumulation_steps=gradient_accumulation_steps,
            resume=resume, progress=progress, max_line_chars=max_line_chars,
            head_warmup_steps=head_warmup_steps, head_learning_rate=head_learning_rate,
        )
    except DaptInputError as err:
        fail(str(err))
    if _is_main_process():
        typer.echo(format_summary(summary))


def _is_main_process() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


@app.command("select-corpus")
def select_corpus_command(
    corpus: Path = typer.Argument(
        ..., help="Raw text (UTF-8), one paragraph or sentence per line, or JSONL (see --input-format)."
    ),
    output_dir: Path = typer.Argument(
        ..., help="Where domain/entity/task/integrated .txt (or, with --scorer, selected.txt) are written."
    ),
    entities: List[Path] = typer.Option(
        [], "--entities", "-e",
        help="Entity list: 'surface' or 'surface<TAB>type,...' per line (untyped: the file stem). "
        "Repeatable. Needed for the levels; when ranking, default: the --target's annotated entities.",
    ),
    task_types: Optional[str] = typer.Option(
        None, "--task-types", "-t", help="Comma-separated domain-specialised types for the task level (default: all)."
    ),
    min_entities: int = typer.Option(2, "--min-entities", help="Mentions a sentence needs for the entity level."),
    split: bool = typer.Option(True, "--split/--no-split", help="Split lines into sentences (else line = sentence)."),
    ignore_case: bool = typer.Option(False, "--ignore-case", help="Match entities case-insensitively."),
    max_line_chars: int = typer.Option(
        DEFAULT_MAX_LINE_CHARS, "--max-line-chars", help="Longest corpus line accepted, in characters."
    ),
    input_format: str = typer.Option(
        "auto", "--input-format", help="text, jsonl, or auto (jsonl for *.jsonl, *.ndjson, *.json)."
    ),
    text_field: str = typer.Option("text", "--text-field", help="The JSONL field that holds the text."),
    exclude: List[Path] = typer.Option(
        [], "--exclude", "-x",
        help="Dev/test corpus (column file, .spacy, plain text, or a folder): corpus sentences "
        "duplicating one of its sentences are dropped and counted. Repeatable.",
    ),
    exclude_ngram: int = typer.Option(
        13, "--exclude-ngram",
        help="Also drop sentences sharing this many consecutive words with an excluded one (0: exact only).",
    ),
    target: List[Path] = typer.Option(
        [], "--target", "-T",
        help="The target's labelled text (column file, .spacy or plain text; repeatable): what --scorer ranks against.",
    ),
    scorer: Optional[str] = typer.Option(
        None, "--scorer", "-s",
        help="Rank the corpus instead of building the levels: 'lexical' (TF-IDF cosine to the "
        "target) or 'minilm' (sentence-embedding cosine, the bundled MiniLM or --model).",
    ),
    top_n: Optional[int] = typer.Option(None, "--top-n", "-n", help="Ranking: keep the N best sentences."),
    top_tokens: Optional[int] = typer.Option(
        None, "--top-tokens", help="Ranking: keep the best sentences until they hold N word tokens."
    ),
    top_share: Optional[float] = typer.Option(
        None, "--top-share", help="Ranking: keep this share (0-1] of the sentences scored."
    ),
    rank_level: str = typer.Option(
        "domain", "--rank-level",
        help="Ranking: rank only the sentences of this level: domain (all), entity (>= --min-entities "
        "mentions) or task (a mention of --task-types).",
    ),
    entity_weight: float = typer.Option(
        0.0, "--entity-weight", help="Ranking: added to a sentence's score per entity mention."
    ),
    min_tokens: int = typer.Option(5, "--min-tokens", help="Ranking: fewest word tokens of a sentence (0: none)."),
    max_tokens: int = typer.Option(200, "--max-tokens", help="Ranking: most word tokens of a sentence (0: no limit)."),
    background: int = typer.Option(
        20_000, "--background",
        help="Lexical scorer: the first N corpus sentences are the general sample its IDF is counted on.",
    ),
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="minilm scorer: encoder directory or hub name (default: the bundled MiniLM)."
    ),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Sentences scored at once."),
    gpu_id: Optional[int] = typer.Option(
        None, "--gpu-id", help="minilm scorer: GPU to use; -1: CPU. Default: a GPU when torch sees one."
    ),
    threads: int = typer.Option(0, "--threads", help="torch CPU threads (0: torch's default)."),
    output_format: str = typer.Option(
        "txt", "--format", "-f",
        help="Ranking output: txt (one tokenised sentence per line) or spacy (DocBin, for raw-text config sections).",
    ),
    domain: Optional[str] = typer.Option(None, "--domain", "-d", help="doc._.domain of --format spacy output."),
    lang: str = typer.Option("en", "--lang", help="Ranking: spaCy language whose tokenizer splits the sentences written."),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress", help="A progress bar on stderr (default: on a terminal)."
    ),
) -> None:
    """Build CrossNER's DAPT corpus levels, or rank a general corpus by similarity to the target.

    Without --scorer: the domain-, entity-, task-level and integrated corpora (sentences
    de-duplicated; entity mentions are leftmost-longest gazetteer matches on word boundaries,
    rule in the docstring of spacy_crossner.dapt.corpus). With --scorer and --target: the
    corpus's sentences are ranked and the best written to selected.txt, for dapt, the raw-text
    sections of the UDA configs and self-training (scorers: spacy_crossner.dapt.rank). The
    corpus is streamed once; --exclude drops sentences of dev/test text. A summary is printed.
    """
    from ..dapt.corpus import format_selection, select_corpus

    types = [t for t in task_types.split(",") if t.strip()] if task_types is not None else None
    if threads < 0:
        fail(f"--threads must be >= 0, got {threads}")
    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        summary = select_corpus(
            corpus=corpus, entities=entities, output_dir=output_dir, task_types=types,
            min_entities=min_entities, split=split, ignore_case=ignore_case,
            max_line_chars=max_line_chars, input_format=input_format, text_field=text_field,
            exclude=exclude, exclude_ngram=exclude_ngram, target=target, scorer=scorer,
            top_n=top_n, top_tokens=top_tokens, top_share=top_share, rank_level=rank_level,
            entity_weight=entity_weight, min_tokens=min_tokens, max_tokens=max_tokens,
            background=background, model=model, batch_size=batch_size, gpu_id=gpu_id,
            output_format=output_format, domain=domain, lang=lang, progress=progress,
        )
    except DaptInputError as err:
        fail(str(err))
    typer.echo(format_selection(summary))
