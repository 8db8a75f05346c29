"""The ``convert`` and ``raw-text`` commands."""
from pathlib import Path
from typing import List, Optional

import typer

from ..convert import convert, summary_table, write_raw_text
from ._util import app, fail


@app.command("convert")
def convert_cli(
    input_path: Path = typer.Argument(
        ..., help="A column file, or a directory whose data files (*.txt, *.tsv, *.conll, *.bio, "
        "*.bioes, *.bmes, *.iob, *.train, *.dev, *.test, *.eval ...) are all converted."
    ),
    output_dir: Path = typer.Argument(..., help="Directory for the .spacy files (one per input)."),
    domain: Optional[str] = typer.Option(
        None, "--domain", "-d",
        help="Domain stored in doc._.domain. Default: the input directory's name (for a file: "
        "its parent directory's name).",
    ),
    scheme: str = typer.Option(
        "auto", "--scheme", "-s",
        help="Tag scheme: auto, IOB1, IOB2, BIOES, BILOU or BMES.",
    ),
    sep: str = typer.Option(
        "auto", "--sep", help="Column separator: auto (tab if any line has a tab), tab or space."
    ),
    by_document: bool = typer.Option(
        False, "--by-document",
        help="One Doc per document (between -DOCSTART- lines or 2+ empty lines) instead of one "
        "Doc per sentence.",
    ),
    progress: bool = typer.Option(
        True, "--progress/--no-progress",
        help="Show a progress bar (on stderr) for inputs of 50,000 tokens or more.",
    ),
    label_map: Optional[str] = typer.Option(
        None, "--label-map",
        help='Rename entity labels: a JSON file or inline JSON, e.g. \'{"PER": "person"}\'. '
        "Labels not in it are kept.",
    ),
    strict: bool = typer.Option(
        False, "--strict",
        help="Fail on an input without a single token line (default: warn and write an empty "
        ".spacy file).",
    ),
) -> None:
    """Convert token/tag column files (CoNLL-style) to .spacy DocBins tagged with a domain."""
    try:
        summary = convert(
            input_path, output_dir, domain=domain, scheme=scheme, sep=sep,
            by_document=by_document, show_progress=progress, label_map=label_map, strict=strict,
        )
    except (ValueError, OSError) as err:
        fail(str(err))
    typer.echo(summary_table(summary))
    _warn(summary.warnings)
    if summary.skipped:
        typer.secho(
            f"Skipped {len(summary.skipped)} entr{'y' if len(summary.skipped) == 1 else 'ies'} of "
            f"{input_path} (see the table); name a file directly to convert it.",
            fg=typer.colors.YELLOW, err=True,
        )
    n_repairs = sum(f.n_repairs for f in summary.files)
    if n_repairs:
        typer.secho(
            f"{n_repairs:,} malformed tag sequences were read the conlleval way (see the table).",
            fg=typer.colors.YELLOW,
        )
    typer.secho(
        f"Wrote {len(summary.files)} file(s) to {output_dir}", fg=typer.colors.GREEN
    )


@app.command("raw-text")
def raw_text_cli(
    inputs: List[Path] = typer.Argument(
        ..., help="Column files (tags ignored) and/or plain-text files with one "
        "whitespace-tokenised sentence per line; a directory stands for its data files."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="The file to write."),
    domain: str = typer.Option(..., "--domain", "-d", help="Domain stored in doc._.domain."),
    fmt: Optional[str] = typer.Option(
        None, "--format", "-f",
        help="txt: one sentence per line, tokens joined by a space; spacy: a DocBin of Docs "
        "without entities. Default: spacy if the output ends with .spacy, else txt.",
    ),
    input_format: str = typer.Option(
        "auto", "--input-format",
        help="columns, text, or auto (a column file has 2+ fields on every non-empty line, the "
        "last one a tag).",
    ),
    sep: str = typer.Option("auto", "--sep", help="Column separator of column files: auto, tab "
                            "or space."),
    dedup: bool = typer.Option(
        False, "--dedup/--no-dedup", help="Drop exact repeats of a sentence (counted)."
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Fail on an input without a sentence (default: warn)."
    ),
) -> None:
    """Write a raw-text corpus (for language-model objectives and DAPT) from labelled or plain
    text files."""
    if fmt is None:
        fmt = "spacy" if output.suffix == ".spacy" else "txt"
    try:
        summary = write_raw_text(
            inputs, output, domain=domain, fmt=fmt, input_format=input_format, sep=sep,
            dedup=dedup, strict=strict,
        )
    except (ValueError, OSError) as err:
        fail(str(err))
    _warn(summary.warnings)
    for path, why in summary.skipped:
        typer.secho(f"Skipped {path} ({why}); name it directly to read it.",
                    fg=typer.colors.YELLOW, err=True)
    typer.echo(
        f"Wrote {summary.sentences:,} sentences ({summary.tokens:,} tokens) to {output}; "
        f"skipped {summary.empty_lines:,} empty lines; dropped {summary.duplicates:,} duplicates."
    )
    if summary.split_tokens:
        typer.secho(
            f"{summary.split_tokens:,} tokens held spaces (e.g. 'New York') and were written as "
            "their parts, counted as such (--format spacy keeps them whole).",
            fg=typer.colors.YELLOW,
        )


def _warn(warnings: List[str]) -> None:
    for warning in warnings:
        typer.secho(f"Warning: {warning}", fg=typer.colors.YELLOW, bold=True, err=True)
