"""The ``init-config`` command."""
from pathlib import Path
from typing import Optional

import typer

from ..init_config import (
    ARCHS, DEFAULT_MIX, FEATURES, MIX_SETTINGS, MIXES, SCHEDULES, SETTINGS, SOURCE_SETTINGS, FineTune,
    InitConfigError, init_config, parse_overrides,
)
from ._util import app, fail


def _listing(choices) -> str:
    return "; ".join(f"{name}: {choice.help}" for name, choice in choices.items())


def _listing_text(choices) -> str:
    return "; ".join(f"{name}: {text}" for name, text in choices.items())


@app.command(
    "init-config",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def init_config_cli(
    ctx: typer.Context,
    output: Path = typer.Argument(
        ..., help="The config file to write (- = stdout), for `spacy train OUTPUT ...`."
    ),
    arch: str = typer.Option(..., "--arch", "-a", help=f"The architecture. {_listing(ARCHS)}."),
    features: str = typer.Option(
        "wordchar", "--features", "-f", help=f"The input features. {_listing(FEATURES)}."
    ),
    setting: str = typer.Option(..., "--setting", "-s", help=f"The training setting. {_listing(SETTINGS)}."),
    source_count: Optional[int] = typer.Option(
        None, "--source-count", "-n", help=f"Train on N labelled source corpora (settings "
        f"{', '.join(SOURCE_SETTINGS)}), each with its own labels: sections [corpora.train.domains.source_0] "
        "... read from --paths.source_train_0 ... (pretrain: selected on --paths.source_dev_0 ... together); "
        "each source's domain is its docs' doc._.domain, or --vars.source_domain_I NAME. Default: one source, "
        "--paths.source_train. (spaCy's overrides cannot add corpus sections, so the count is chosen here.)"),
    mix: Optional[str] = typer.Option(
        None, "--mix", "-m", help=f"How the {' and '.join(MIX_SETTINGS)} setting mixes its labelled corpora in a "
        f"pass (default {DEFAULT_MIX}). {_listing_text(MIXES)}.",
    ),
    force: bool = typer.Option(False, "--force", "-F", help="Overwrite OUTPUT if it exists."),
    schedule: str = typer.Option(
        "constant", "--schedule", help=f"The learning rate over training. {_listing_text(SCHEDULES)}."
    ),
    warmup_steps: Optional[int] = typer.Option(
        None, "--warmup-steps", help="Steps of the warm-up of --schedule warmup_linear (e.g. a tenth of "
        "training.max_steps); the decay ends at training.max_steps.",
    ),
    head_lr_multiplier: float = typer.Option(
        1.0, "--head-lr-multiplier", help="With --features transformer (or transformer_shape): the tagger above the encoder "
        "(emitter, heads, CRF) learns at learn_rate times this (spacy_crossner.GroupedAdam.v1); 1.0 = off.",
    ),
    layer_decay: float = typer.Option(
        1.0, "--layer-decay", help="With --features transformer (or transformer_shape), in (0, 1]: each encoder layer down learns "
        "at this times the rate of the one above (the top one at learn_rate, the embeddings lowest); 1.0 = off.",
    ),
    num_layers: Optional[int] = typer.Option(
        None, "--num-layers", help="The encoder's number of layers, for --layer-decay (default: read from "
        "the bundled MiniLM, or from a local --paths.transformer folder).",
    ),
) -> None:
    """Write a complete training config: an architecture's partial, input features and a training
    setting, filled with spaCy's defaults. Any further --section.key value is laid over the pieces,
    as `spacy train` overrides are (e.g. --training.max_steps 5000)."""
    try:
        overrides = parse_overrides(ctx.args)
        fine_tune = FineTune(schedule=schedule, warmup_steps=warmup_steps, head_lr_multiplier=head_lr_multiplier,
                             layer_decay=layer_decay, num_layers=num_layers)
        init_config(output, arch=arch, features=features, setting=setting,
                    overrides=overrides, force=force, fine_tune=fine_tune, source_count=source_count,
                    mix=mix)
    except (InitConfigError, OSError) as err:
        fail(str(err))
    if str(output) != "-":
        typer.echo(f"Wrote {output}; the first lines say how to train it.")
