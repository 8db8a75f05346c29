"""The ``calibrate`` command."""
from pathlib import Path
from typing import Optional

import typer

from ..calibrate import DEFAULT_BINS, CalibrationError, calibrate
from ._util import app, fail


@app.command("calibrate")
def calibrate_cli(
    model: str = typer.Argument(..., help="Pipeline with a crossner component (path or package name)."),
    dev: Path = typer.Argument(..., help="Labelled dev corpus: a .spacy file or a folder of them."),
    output: Path = typer.Argument(..., help="Folder to write the calibrated pipeline to."),
    domain: Optional[str] = typer.Option(
        None, "--domain", "-d",
        help="Domain set on every dev doc. Default: each doc's own domain, else the component's "
        "target_domain.",
    ),
    n_bins: int = typer.Option(DEFAULT_BINS, "--bins", help="Probability bins of the ECE and the reliability tables."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Docs per batch."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id, -1 for CPU."),
) -> None:
    """Calibrate a pipeline's entity probabilities on dev: fit a temperature per domain and
    write the calibrated pipeline (same entities, probabilities that match their accuracy).

    Prints per domain the temperature and the expected calibration error (ECE) before and
    after, with the reliability tables."""
    try:
        result = calibrate(model=model, dev=dev, output=output, domain=domain, n_bins=n_bins,
                           batch_size=batch_size, gpu_id=gpu_id)
    except (CalibrationError, OSError) as err:
        fail(str(err))
    for target, r in result["domains"].items():
        before, after = r["before"], r["after"]
        typer.echo(
            f"{target}: temperature {r['temperature']:.3f} (was {r['previous_temperature']:.3f}); "
            f"ECE {before['ece']:.4f} -> {after['ece']:.4f} on {after['n_entities']:,} predicted entities "
            f"of {r['n_docs']:,} docs (accuracy {after['accuracy']:.3f}, mean probability "
            f"{before['mean_confidence']:.3f} -> {after['mean_confidence']:.3f})"
        )
        aliased = [d for d in r["own_domains"] if d != target]
        if aliased:
            typer.echo(f"  (dev docs of {', '.join(aliased)}, which domain_aliases maps to {target}: "
                       f"the temperature is {target}'s, for its docs too)")
        if r["at_bound"]:
            typer.secho(f"  Note: {r['temperature']:.3g} is at the edge of the temperatures searched (0.05 to 20)", fg=typer.colors.YELLOW)
        typer.echo(reliability_pair(before, after))
    typer.secho(f"Wrote {result['output']}", fg=typer.colors.GREEN)



def reliability_pair(before, after) -> str:
    """The reliability tables before and after side by side (bins with entities only)."""
    rows = [("probability", "conf before", "acc before", "n before", "conf after", "acc after", "n after")]
    for b, a in zip(before["bins"], after["bins"]):
        if b["count"] or a["count"]:
            rows.append((f"{b['lower']:.2f}-{b['upper']:.2f}", *_cells(b), *_cells(a)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in rows
    )


def _cells(row):
    if not row["count"]:
        return ("–", "–", "0")
    return (f"{row['confidence']:.3f}", f"{row['accuracy']:.3f}", str(row["count"]))
