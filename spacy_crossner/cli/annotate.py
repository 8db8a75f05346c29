"""The ``annotate`` command: a corpus in shards on a Dask cluster."""
from pathlib import Path
from typing import Optional

import typer

from ..annotate import AnnotateError, annotate
from ._util import app, fail


@app.command("annotate")
def annotate_cli(
    model: str = typer.Argument(
        ..., help="Pipeline directory or installed pipeline package name; every worker loads it."
    ),
    inputs: Path = typer.Argument(
        ..., help=".spacy DocBin, .txt (one doc per line) or .jsonl ({\"text\": ..., optional "
        "\"domain\": ...}) file, or a folder searched for them."
    ),
    output_dir: Path = typer.Argument(
        ..., help="Folder for one <shard>.spacy per shard and shards.json (the plan)."
    ),
    scheduler: str = typer.Option(
        "local", "--scheduler", "-s",
        help="Dask scheduler address (tcp://HOST:8786), or 'local' for a cluster of --workers "
        "processes on this machine.",
    ),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-w", help="Worker processes of the local cluster (default 2)."
    ),
    shard_size: int = typer.Option(
        1000, "--shard-size", help="Docs per shard: the unit of work, of output files and of reruns."
    ),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="nlp.pipe batch size on a worker."),
    domain: Optional[str] = typer.Option(
        None, "--domain", "-d",
        help="Domain of docs without one (text lines, JSONL records without \"domain\"). "
        "Default: the component's target_domain.",
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id on each worker, -1 for CPU."),
    redo_all: bool = typer.Option(
        False, "--redo-all", help="Annotate every shard again, finished ones included (e.g. with "
        "a new model in a folder annotated by an old one)."
    ),
    mix_models: bool = typer.Option(
        False, "--mix-models", help="Keep finished shards annotated by another model (or other "
        "pipeline files) and annotate only the rest with MODEL. Default: refuse."
    ),
) -> None:
    """Annotate a large corpus in shards on a Dask cluster (local processes or many machines).

    Each worker loads the pipeline once; each shard becomes OUTPUT_DIR/<shard>.spacy with every
    doc's domain and entity probabilities (doc.spans["crossner"].attrs["scores"]). A failed
    shard is named and the others are kept; rerunning the command skips finished shards whose
    output is complete and whose input and model are unchanged (recorded in
    OUTPUT_DIR/<shard>.done.json), and annotates stale or incomplete ones again."""
    try:
        summary = annotate(model=model, inputs=inputs, output_dir=output_dir, scheduler=scheduler,
                           workers=workers, shard_size=shard_size, batch_size=batch_size,
                           domain=domain, gpu_id=gpu_id, redo_all=redo_all, mix_models=mix_models)
    except (AnnotateError, OSError) as err:
        fail(str(err))
    typer.echo(
        f"{summary.shards} shards: {summary.done} annotated, {summary.skipped} already done. "
        f"{summary.docs:,} docs, {summary.words:,} words in {summary.seconds:.1f} s "
        f"({summary.words_per_second:,.0f} words/s) -> {summary.output_dir}"
    )
    if summary.redone:
        typer.echo(f"{summary.redone} of the annotated shards were stale, incomplete or "
                   "unverifiable outputs of an earlier run, annotated again.")
    if summary.mixed:
        typer.secho(f"Warning: {summary.mixed} shards annotated by another model were kept "
                    "(--mix-models).", fg=typer.colors.YELLOW, err=True)
