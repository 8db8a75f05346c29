"""Put the CoNLL-2003 entity dictionary (the multi-cell LSTM's UDA labels) into assets/.

    python scripts/get_dictionary.py --local ../../shared/data/dictionaries/conll2003

Copies ``<type>.txt`` files from ``--local`` when that folder exists, else expects the files
fetched by ``spacy project assets``; every file is checked against its md5 in project.yml.
"""
import argparse
import shutil
import sys
from pathlib import Path

from get_data import declared_checksums, md5

DEST = "assets/dictionaries/conll2003"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", default="", help="Folder with the <type>.txt files to copy from")
    args = parser.parse_args()
    checksums = {k: v for k, v in declared_checksums().items() if k.startswith(DEST + "/")}
    use_local = bool(args.local) and Path(args.local).is_dir()
    problems = []
    for rel, expected in sorted(checksums.items()):
        dest = Path(rel)
        if use_local:
            source = Path(args.local) / dest.name
            if not source.is_file() or md5(source) != expected:
                problems.append(f"{source}: missing or not the pinned file (md5 {expected})")
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
        elif not dest.is_file() or md5(dest) != expected:
            problems.append(f"{rel}: missing or changed; run `spacy project assets` or pass "
                            "--vars.local_dictionary DIR")
    if problems:
        print("Error: cannot get the dictionary:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"Dictionary: {len(checksums)} files ready in {DEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
