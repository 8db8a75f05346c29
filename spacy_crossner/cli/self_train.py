"""The ``pseudo-label`` and ``self-train`` commands (self-training and distillation)."""
import json
from pathlib import Path
from typing import Optional

import typer
from spacy.cli._util import parse_config_overrides

from ..self_train import MODES, PseudoLabelError, pseudo_label, self_train
from ._util import app, fail

MODE_HELP = (
    "missing: only the kept entities are annotated, every other token is missing (not O); "
    "confident-o: also O on tokens outside every entity the model decoded."
)
THRESHOLD_HELP = "Keep entities whose probability is >= this (0 to 1)."
DROP_HELP = (
    "Leave the sentences without any annotation out of the output (counted in the summary): "
    "they give a student no NER loss, only work."
)
DEV_HELP = (
    "Labelled .spacy dev corpus: choose the smallest threshold whose kept dev entities reach "
    "--min-precision (instead of --threshold)."
)


def _mode(mode: str) -> str:
    if mode not in MODES:
        fail(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    return mode


@app.command("pseudo-label")
def pseudo_label_cli(
    model: str = typer.Argument(..., help="Pipeline with a crossner component (path or package name)."),
    text: Path = typer.Argument(
        ..., help="Raw text: .txt with one tokenised sentence a line (select-corpus's selected.txt) "
        "or .spacy docs."
    ),
    output: Path = typer.Argument(..., help="The .spacy file of pseudo-labelled docs to write."),
    domain: Optional[str] = typer.Option(
        None, "--domain", "-d", help="Domain of the text, one of the model's (default: its target_domain)."
    ),
    threshold: Optional[float] = typer.Option(None, "--threshold", "-t", help=THRESHOLD_HELP),
    dev: Optional[Path] = typer.Option(None, "--threshold-from-dev", help=DEV_HELP),
    min_precision: float = typer.Option(
        0.9, "--min-precision", help="Dev precision the threshold chosen by --threshold-from-dev must reach."
    ),
    mode: str = typer.Option("missing", "--mode", "-m", help=MODE_HELP),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="nlp.pipe batch size."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id for the model, -1 for CPU."),
    drop_unannotated: bool = typer.Option(False, "--drop-unannotated", help=DROP_HELP),
    summary_path: Optional[Path] = typer.Option(
        None, "--summary", help="Also write the summary (threshold, kept and left-out entities, "
        "token counts, the dev choice) as JSON to this file."
    ),
) -> None:
    """Label raw text with a trained pipeline and keep the confident entities as a labelled
    corpus (a DocBin with each doc's domain) for self-training or distillation."""
    if summary_path is not None and (summary_path.is_dir() or summary_path.suffix.lower() != ".json"):
        fail(f"--summary {summary_path}: give the path of a .json file to write")
    try:
        summary = pseudo_label(model=model, text=text, output=output, domain=domain,
                               threshold=threshold, dev=dev, min_precision=min_precision,
                               mode=_mode(mode), batch_size=batch_size, gpu_id=gpu_id,
                               drop_unannotated=drop_unannotated)
        if summary_path is not None:
            summary_path.parent.mkdir(parents=True, exist_ok=True)
            summary_path.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf8")
    except (PseudoLabelError, OSError) as err:
        fail(str(err))
    typer.echo(summary.describe())


@app.command(
    "self-train",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def self_train_cli(
    ctx: typer.Context,
    teacher: str = typer.Argument(..., help="Pipeline that labels the text in round 1 (path or package)."),
    config: Path = typer.Argument(
        ..., help="The student's training config, e.g. configs/trf_joint.cfg (self-training) or "
        "configs/bilstm_joint.cfg (distillation); extra --section.key value options override it."
    ),
    text: Path = typer.Argument(..., help="Raw text to pseudo-label (.txt, one tokenised sentence a line, or .spacy)."),
    output_dir: Path = typer.Argument(..., help="Folder for round<N>/pseudo.spacy, config.cfg and training/."),
    domain: Optional[str] = typer.Option(
        None, "--domain", "-d", help="Target domain of the text (default: the teacher's target_domain)."
    ),
    threshold: Optional[float] = typer.Option(None, "--threshold", "-t", help=THRESHOLD_HELP),
    dev: Optional[Path] = typer.Option(None, "--threshold-from-dev", help=DEV_HELP + " Chosen again each round."),
    min_precision: float = typer.Option(
        0.9, "--min-precision", help="Dev precision the threshold chosen by --threshold-from-dev must reach."
    ),
    mode: str = typer.Option("missing", "--mode", "-m", help=MODE_HELP),
    missing_as: str = typer.Option(
        "missing", "--missing-as", help="How the student's loss reads the tokens the pseudo-labels "
        "leave unannotated: missing (marginalised over every tag) or o (trained as O)."
    ),
    rounds: int = typer.Option(1, "--rounds", "-r", help="Label + train rounds; each student teaches the next round."),
    pseudo_upsample: float = typer.Option(
        1.0, "--pseudo-upsample", help="upsample of the pseudo-labelled corpus section."
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id for labelling and training, -1 for CPU."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="nlp.pipe batch size when labelling."),
    drop_unannotated: bool = typer.Option(False, "--drop-unannotated", help=DROP_HELP),
) -> None:
    """Self-training / distillation end to end: pseudo-label TEXT with TEACHER, train a student
    with CONFIG on its corpora plus the pseudo-labels (as extra target-domain train data), print
    each round's dev F1 and the student's path."""
    try:
        overrides = parse_config_overrides(ctx.args)
        summary = self_train(teacher=teacher, config=config, text=text, output_dir=output_dir,
                             domain=domain, threshold=threshold, dev=dev,
                             min_precision=min_precision, mode=_mode(mode), missing_as=missing_as, rounds=rounds,
                             pseudo_upsample=pseudo_upsample, overrides=overrides, gpu_id=gpu_id,
                             batch_size=batch_size, drop_unannotated=drop_unannotated)
    except (PseudoLabelError, OSError) as err:
        fail(str(err))
    for r in summary.rounds:
        f1 = "n/a" if r.dev_f1 is None else f"{100 * r.dev_f1:.2f}"
        typer.echo(f"round {r.round}: {r.pseudo.describe()}")
        typer.echo(f"round {r.round}: dev F1 {f1} -> {r.student}")
    typer.echo(f"student: {summary.student}")
