"""The ``init-config`` command."""
from pathlib import Path
from typing import Optional

import typer

from ..init_config import (
    ARCHS, FEATURES, SETTINGS, SOURCE_SETTINGS, InitConfigError, init_config, parse_overrides,
)
from ._util import app, fail


def _listing(choices) -> str:
    return "; ".join(f"{name}: {choice.help}" for name, choice in choices.items())


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
    force: bool = typer.Option(False, "--force", "-F", help="Overwrite OUTPUT if it exists."),
) -> None:
    """Write a complete training config: an architecture's partial, input features and a training
    setting, filled with spaCy's defaults. Any further --section.key value is laid over the pieces,
    as `spacy train` overrides are (e.g. --training.max_steps 5000)."""
    try:
        overrides = parse_overrides(ctx.args)
        init_config(output, arch=arch, features=features, setting=setting,
                    overrides=overrides, force=force, source_count=source_count)
    except (InitConfigError, OSError) as err:
        fail(str(err))
    if str(output) != "-":
        typer.echo(f"Wrote {output}; the first lines say how to train it.")
