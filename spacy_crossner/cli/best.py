"""The ``best-pipeline`` command."""
from pathlib import Path
from typing import List, Optional

import typer

from ..best import DEFAULT_VECTORS, RECIPES, BestPipelineError, Budget, best_pipeline
from ..init_config import MIXES
from ._util import app, fail

_BUDGET = Budget()


@app.command("best-pipeline")
def best_pipeline_cli(
    target: Path = typer.Argument(..., help="The converted target corpus folder (train.spacy, dev.spacy; "
                                  "test.spacy is scored if present), as `convert ... --domain NAME` writes it."),
    output: Path = typer.Argument(..., help="Folder to write the pipeline to: spacy.load(OUTPUT) loads it."),
    source: List[Path] = typer.Option(..., "--source", "-s", help="A converted source corpus folder "
                                      "(train.spacy, dev.spacy), e.g. corpus/conll2003; repeat for several."),
    test: Optional[Path] = typer.Option(None, "--test", help="A .spacy test file to score the pipeline on "
                                        "(default: TARGET/test.spacy when it exists)."),
    recipe: str = typer.Option("transformer", "--recipe", "-r", help="transformer: the bundled MiniLM "
                               "pre-trained on the sources (cached), then fine-tuned on the target (the "
                               "best measured); fast: word/char BiLSTM-CRF trained jointly on sources and "
                               "target with static vectors (minutes on a CPU)."),
    max_steps: int = typer.Option(_BUDGET.max_steps, "--max-steps", help="Most steps of the target "
                                  "training (fine-tuning, or the fast joint training)."),
    source_max_steps: int = typer.Option(_BUDGET.source_max_steps, "--source-max-steps",
                                         help="Most steps of the transformer recipe's source stage."),
    eval_frequency: int = typer.Option(_BUDGET.eval_frequency, "--eval-frequency",
                                       help="Steps between dev evaluations."),
    patience: int = typer.Option(_BUDGET.patience, "--patience", help="Stop a training after this many "
                                 "steps without a better dev F1 (0: run to the step budget)."),
    source_limit: int = typer.Option(0, "--source-limit", help="Use only the first N docs of each source "
                                     "corpus (0: all)."),
    source_dev_limit: int = typer.Option(0, "--source-dev-limit", help="Select the source stage on the "
                                         "first N docs of each source dev set (0: all)."),
    source_upsample: float = typer.Option(1.0, "--source-upsample", help="Copies of each source corpus's "
                                          "docs per pass, above 0 (1: each once; 0.5: a random half; 1.5: each "
                                          "once plus a random half)."),
    mix: str = typer.Option(_BUDGET.mix, "--mix", help=f"fast recipe: how the joint training mixes sources "
                            f"and target in a pass. {'; '.join(f'{k}: {v}' for k, v in MIXES.items())}."),
    target_upsample: Optional[float] = typer.Option(None, "--target-upsample", help="fast recipe with --mix "
                                                    "upsample: copies of the target's train docs per pass "
                                                    "(default 10, CrossNER's joint setting)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the target training."),
    source_seed: Optional[int] = typer.Option(None, "--source-seed", help="Seed of the source stage "
                                              "(default: --seed); keep it fixed to reuse one cached source "
                                              "model across target seeds."),
    transformer: Optional[str] = typer.Option(None, "--transformer", help="transformer recipe: a Hugging "
                                              "Face model folder or name (default: the bundled MiniLM)."),
    vectors: str = typer.Option(DEFAULT_VECTORS, "--vectors", help="fast recipe: a spaCy vectors folder, "
                                "an installed vectors package or a GloVe/word2vec text file (converted "
                                "once); \"\" for none."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Folder of cached source models and DAPT "
                                         "encoders, one run at a time training an entry (default: "
                                         "$SPACY_CROSSNER_CACHE or ~/.cache/spacy_crossner/source-models)."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Folder for the configs, trainings and "
                                           "logs (default: OUTPUT-training beside OUTPUT)."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id for training and scoring, -1 for CPU."),
    threads: int = typer.Option(0, "--threads", help="Torch threads of each training (0: the environment's "
                                "setting; 1 is fastest on a small shared CPU)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUTPUT if it is not empty."),
    shape: bool = typer.Option(False, "--shape", help="transformer recipe: embed each token's shape (case, "
                               "digits) beside the transformer, from the source stage on; what an uncased "
                               "model such as the bundled MiniLM cannot see (a source model of its own)."),
    dapt_text: Optional[Path] = typer.Option(None, "--dapt-text", help="transformer recipe: raw text of "
                                             "the target's domain, one sentence or paragraph a line (e.g. "
                                             "select-corpus's selected.txt) or .spacy docs: the encoder is "
                                             "first adapted to the domain on it and the target's train+dev "
                                             "text (DAPT, span masking; cached, resumable)."),
    dapt_epochs: Optional[float] = typer.Option(None, "--dapt-epochs", help="With --dapt-text: DAPT epochs "
                                                "(default 15)."),
    dapt_max_steps: Optional[int] = typer.Option(None, "--dapt-max-steps", help="With --dapt-text: most DAPT "
                                                 "steps, overriding --dapt-epochs (default -1: from the epochs)."),
    distill_from: Optional[str] = typer.Option(None, "--distill-from", help="fast recipe: a trained "
                                               "pipeline (e.g. the transformer recipe's) that labels "
                                               "--distill-text for the BiLSTM-CRF to learn from."),
    distill_text: Optional[Path] = typer.Option(None, "--distill-text", help="With --distill-from: raw "
                                                "text of the target's domain, one tokenised sentence a line "
                                                "(e.g. select-corpus's selected.txt) or .spacy docs."),
    distill_min_precision: float = typer.Option(0.8, "--distill-min-precision", help="With --distill-from: "
                                                "keep the teacher's entities from the threshold whose kept dev "
                                                "entities reach this precision."),
) -> None:
    """Train the best pipeline for your target corpus in one command, from converted corpora.

    The transformer recipe pre-trains the bundled MiniLM tagger on all the --source corpora
    together, each with its own labels (cached by their contents, config and seed, and reused for
    other targets and seeds), then fine-tunes it on TARGET with one output layer over the union of
    labels (a tag's rows start from the first --source that has it); with --dapt-text TEXT the
    encoder is first adapted to the target's domain (DAPT) on TEXT; --recipe fast trains the
    word/char BiLSTM-CRF jointly with GloVe vectors instead, and with --distill-from TEACHER
    --distill-text TEXT also on TEXT as labelled by TEACHER. Each training stops early on dev F1.
    Prints the stage it is in and the time left, then dev F1, test F1 and the pipeline's folder."""
    if recipe not in RECIPES:
        fail(f"--recipe {recipe!r}: choose one of {', '.join(RECIPES)}")
    budget = Budget(max_steps=max_steps, eval_frequency=eval_frequency, patience=patience,
                    source_max_steps=source_max_steps, source_limit=source_limit, source_dev_limit=source_dev_limit,
                    source_upsample=source_upsample, target_upsample=target_upsample, mix=mix)
    try:
        result = best_pipeline(sources=source, target=target, output=output, test=test, recipe=recipe,
                               budget=budget, seed=seed, source_seed=source_seed, transformer=transformer,
                               vectors=vectors, gpu_id=gpu_id, threads=threads, cache=cache,
                               workdir=workdir, overwrite=overwrite, say=typer.echo, distill_from=distill_from,
                               distill_text=distill_text, distill_min_precision=distill_min_precision,
                               shape=shape, dapt_text=dapt_text, dapt_epochs=dapt_epochs,
                               dapt_max_steps=dapt_max_steps)
    except (BestPipelineError, OSError) as err:
        fail(str(err))
    typer.echo(result.final_line())
