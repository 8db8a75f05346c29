"""Interleaved A/B of the multi-cell encoder: this checkout's ``MultiCellEncoder`` against the
one of another commit, forward + backward on the same random batch, in one process.

Usage (from the repository root)::

    python benchmarks/multi_cell_ab.py --old 481de54 [--sets 2] [--cells 22] [--rounds 6]

Both encoders get the same parameters; the script prints the largest difference of their
hidden states (they compute the same function) and the median time of each (rounds alternate
which goes first). torch on one thread.
"""
import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="commit of the other encoder")
    parser.add_argument("--sets", type=int, default=2, help="attention sets (domains) in the batch")
    parser.add_argument("--cells", type=int, default=22, help="ET cells")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=40, help="longest sentence")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from spacy_crossner.models import pytorch_multi_cell as new

    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.old}:spacy_crossner/models/pytorch_multi_cell.py"],
        check=True, capture_output=True, text=True,
    ).stdout
    folder = ROOT / "spacy_crossner" / "models"
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=folder, prefix="_ab_old_", delete=True) as f:
        f.write(source)
        f.flush()
        name = f"spacy_crossner.models.{Path(f.name).stem}"
        spec = importlib.util.spec_from_file_location(name, f.name)
        old = importlib.util.module_from_spec(spec)
        sys.modules[name] = old
        spec.loader.exec_module(old)
    torch.manual_seed(0)
    B, T, D, d, L, S = args.batch, args.length, 150, 100, args.cells, args.sets
    encoders = {"new": new.MultiCellEncoder(D, d, L, S, identical_init=False),
                "old": old.MultiCellEncoder(D, d, L, S, identical_init=False)}
    encoders["old"].load_state_dict(encoders["new"].state_dict())
    X = torch.randn(B, T, D)
    lengths = torch.randint(5, T + 1, (B,))
    lengths[0] = T
    sets = torch.arange(B) % S
    cells = torch.arange(L)
    mask = torch.rand(B, L) < 0.6
    mask[:, 0] = True
    q_is_p = torch.arange(S) > 0

    def run(enc):
        enc.zero_grad()
        out = enc(X, lengths, cells, mask, sets, q_is_p)
        (out["h"].sum() + out["alpha"].sum()).backward()
        return out["h"].detach()

    print("max |h_new - h_old|:", float((run(encoders["new"]) - run(encoders["old"])).abs().max()))
    times = {"new": [], "old": []}
    for r in range(args.rounds):
        for key in (("new", "old") if r % 2 == 0 else ("old", "new")):
            start = time.perf_counter()
            run(encoders[key])
            times[key].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"sets {S}, cells {L}: new {med['new']:.3f} s, old {med['old']:.3f} s, old/new {med['old'] / med['new']:.2f}")


if __name__ == "__main__":
    main()
