"""Where the sentences of a `select-corpus --scorer` selection came from (issue 47, part 2).

`select-corpus` ranks one general corpus; the study builds it by concatenating several (the US
State of the Union addresses, then the Wikipedia vital-article leads). This script traces each
selected sentence back to the corpus file it occurs in and, for JSONL corpora with a grouping
field (the Wikipedia leads' ``topic``), to that record's group, and prints the share of the
selection's word tokens per (file, group): how much of a domain's "in-domain" text is in fact
off-topic.

    python benchmarks/selection_mix.py SELECTED.txt CORPUS.jsonl [CORPUS ...] \
        [--group-field topic] [--text-field text] [--top-tokens N] [--output mix.md]

A sentence is matched on its normalised text (case-folded, everything but letters and digits
removed, as `select-corpus --exclude` compares sentences), so the selection's tokenisation does
not matter; it goes to the first corpus, in the order given, that contains it, and to
"(not found)" when none does. selected.txt is in rank order (best first), so ``--top-tokens N``
describes (to within how tokens are counted) the selection a smaller ``select-corpus --top-tokens
N`` would have made. The corpora are held in memory: a diagnostic for corpora of tens of MB, not a
streaming tool.
"""
import argparse
import bisect
import json
import re
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

NOT_FOUND = "(not found)"
_NON_WORD = re.compile(r"[\W_]+")


def normalise(text: str) -> str:
    return _NON_WORD.sub("", text.casefold())


class Source:
    """One corpus file: its records' normalised text joined, with each record's start and group."""

    def __init__(self, path: Path, text_field: str, group_field: Optional[str]) -> None:
        self.name = path.name
        self.starts: List[int] = []
        self.groups: List[str] = []
        pieces: List[str] = []
        offset = 0
        jsonl = path.suffix.lower() in (".jsonl", ".ndjson", ".json")
        with path.open(encoding="utf8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                group = "-"
                if jsonl:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as err:
                        raise SystemExit(f"{path}:{number}: not a JSON object ({err.msg})")
                    if not isinstance(record, dict) or text_field not in record:
                        raise SystemExit(f"{path}:{number}: no '{text_field}' field (set --text-field)")
                    text = str(record[text_field])
                    if group_field is not None:
                        group = str(record.get(group_field, "-"))
                else:
                    text = line
                # a separator no normalised sentence holds, so a match never spans two records
                piece = normalise(text) + "|"
                self.starts.append(offset)
                self.groups.append(group)
                pieces.append(piece)
                offset += len(piece)
        self.text = "".join(pieces)

    def find(self, key: str) -> Optional[str]:
        """The group of the record holding the normalised sentence, or None."""
        at = self.text.find(key)
        if at < 0:
            return None
        return self.groups[bisect.bisect_right(self.starts, at) - 1]


def trace(selected: Sequence[str], sources: Sequence[Source]) -> Dict[Tuple[str, str], List[int]]:
    """(file, group) -> [sentences, word tokens] of the selection."""
    mix: Dict[Tuple[str, str], List[int]] = {}
    for sentence in selected:
        key = normalise(sentence)
        if not key:
            continue
        where = (NOT_FOUND, "-")
        for source in sources:
            group = source.find(key)
            if group is not None:
                where = (source.name, group)
                break
        counts = mix.setdefault(where, [0, 0])
        counts[0] += 1
        counts[1] += len(sentence.split())
    return mix


def top_tokens(selected: Sequence[str], limit: int) -> List[str]:
    """The best sentences until they hold ``limit`` whitespace tokens (select-corpus's rule)."""
    out: List[str] = []
    held = 0
    for sentence in selected:
        if held >= limit:
            break
        out.append(sentence)
        held += len(sentence.split())
    return out


def table(mix: Dict[Tuple[str, str], List[int]], title: str) -> str:
    total = sum(tokens for _, tokens in mix.values()) or 1
    by_file: Counter = Counter()
    for (name, _), (_, tokens) in mix.items():
        by_file[name] += tokens
    lines = [
        f"{title}: {sum(n for n, _ in mix.values()):,} sentences, {total:,} word tokens",
        "",
        "| corpus file | group | sentences | tokens | share |",
        "|---|---|---:|---:|---:|",
    ]
    order = sorted(mix.items(), key=lambda item: (-by_file[item[0][0]], -item[1][1], item[0]))
    for (name, group), (sentences, tokens) in order:
        lines.append(f"| {name} | {group} | {sentences:,} | {tokens:,} | {100 * tokens / total:.1f}% |")
    lines.append("")
    for name, tokens in by_file.most_common():
        lines.append(f"- {name}: {100 * tokens / total:.1f}% of the tokens")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selected", type=Path, help="selected.txt of select-corpus (one sentence a line)")
    parser.add_argument("corpora", type=Path, nargs="+", help="the general corpora, text or JSONL")
    parser.add_argument("--text-field", default="text", help="JSONL field of the text (default: text)")
    parser.add_argument("--group-field", default=None, help="JSONL field to group records by (e.g. topic)")
    parser.add_argument("--top-tokens", type=int, default=0, help="only the best sentences holding N tokens (0: all)")
    parser.add_argument("--output", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    for path in [args.selected, *args.corpora]:
        if not path.is_file():
            raise SystemExit(f"selection_mix.py: no such file: {path}")
    selected = [line for line in args.selected.read_text(encoding="utf8").splitlines() if line.strip()]
    if args.top_tokens < 0:
        raise SystemExit(f"selection_mix.py: --top-tokens must be >= 0, got {args.top_tokens}")
    if args.top_tokens:
        selected = top_tokens(selected, args.top_tokens)
    sources = [Source(path, args.text_field, args.group_field) for path in args.corpora]
    out = table(trace(selected, sources), str(args.selected))
    print(out, end="")
    if args.output is not None:
        args.output.write_text(out, encoding="utf8")


if __name__ == "__main__":
    main()
