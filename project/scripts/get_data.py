"""Put the CrossNER files of some domains into assets/, from a local copy or the downloaded assets.

    python scripts/get_data.py --domains conll2003,ai --local ../../shared/data/crossner

With ``--local DIR`` (a folder laid out like upstream's ner_data/: DIR/<domain>/<split>.txt) the
files are copied into ``assets/crossner/<domain>/``; without it (or when DIR does not exist) the
files must already be there, fetched by ``spacy project assets``. Either way every file is
checked against the md5 checksum declared for it in project.yml, so a local copy must be the
pinned upstream version (commit 2e7ba2a).
"""
import argparse
import hashlib
import shutil
import sys
from pathlib import Path

import srsly

PROJECT_DIR = Path(__file__).resolve().parents[1]
SPLITS = ("train", "dev", "test")


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def declared_checksums() -> dict:
    """dest path (relative to the project) -> md5, from project.yml's assets."""
    config = srsly.read_yaml(PROJECT_DIR / "project.yml")
    return {a["dest"]: a.get("checksum") for a in config.get("assets", []) if "dest" in a}


def get_data(domains, local, assets_dir: Path) -> int:
    checksums = declared_checksums()
    use_local = bool(local) and Path(local).is_dir()
    if local and not use_local:
        print(f"Local copy {local} not found: using the downloaded assets in {assets_dir}")
    problems = []
    for domain in domains:
        for split in SPLITS:
            dest = assets_dir / domain / f"{split}.txt"
            rel = f"assets/crossner/{domain}/{split}.txt"  # the asset's dest in project.yml
            expected = checksums.get(rel)
            if expected is None:
                problems.append(f"{rel}: not an asset of project.yml (unknown domain '{domain}'?)")
                continue
            if use_local:
                source = Path(local) / domain / f"{split}.txt"
                if not source.is_file():
                    problems.append(f"{source}: missing in the local copy")
                    continue
                if md5(source) != expected:
                    problems.append(f"{source}: checksum differs from project.yml (not the "
                                    "pinned upstream file)")
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                if not dest.exists() or md5(dest) != expected:
                    shutil.copyfile(source, dest)
            elif not dest.is_file():
                problems.append(f"{rel}: missing; run `spacy project assets` (needs internet) or "
                                "pass --vars.local_data DIR (a copy of CrossNER's ner_data/)")
            elif md5(dest) != expected:
                problems.append(f"{rel}: checksum differs from project.yml; delete it and run "
                                "`spacy project assets` again")
    if problems:
        print("Error: cannot get the data:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    where = f"copied from {local}" if use_local else "downloaded assets"
    print(f"CrossNER {', '.join(domains)}: {len(domains) * len(SPLITS)} files ready in "
          f"{assets_dir} ({where}, checksums verified)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", required=True, help="Comma-separated domains, e.g. conll2003,ai")
    parser.add_argument("--local", default="", help="Folder with <domain>/<split>.txt files to copy "
                        "from (empty: use the assets fetched by `spacy project assets`)")
    parser.add_argument("--assets", default="assets/crossner", help="Destination folder")
    args = parser.parse_args()
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    if not domains:
        parser.error("--domains is empty")
    assets = Path(args.assets)
    if not assets.is_absolute():
        assets = (Path.cwd() / assets).resolve()
    return get_data(domains, args.local, assets)


if __name__ == "__main__":
    sys.exit(main())
