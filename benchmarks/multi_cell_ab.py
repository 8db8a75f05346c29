"""Interleaved A/B of the multi-cell emitter: this checkout's ``MultiCellEmitter`` against the
one of another commit, a training forward + backward (NER scores and the entity-type and
attention losses) on the same random batch, in one process.

Usage (from the repository root)::

    python benchmarks/multi_cell_ab.py --old 000fbf4 [--types 22] [--rounds 8]

``--types 22``: two domains, O + 4 CoNLL types and O + 17 science types (22 cells), the
batch half each (as benchmarks/speed.py's 22-type set); ``--types 10``: one domain, O + 9
types. Both emitters get the same parameters; the script prints the largest differences of
their outputs and of every parameter's gradient with dropout off (they compute the same
function), then the median time of each with the configs' dropout 0.5 (rounds alternate
which goes first). torch on one thread.
"""
import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from old_module import import_old, interleaved_medians  # noqa: E402

SCIENCE = ["academicjournal", "astronomicalobject", "award", "chemicalcompound", "chemicalelement",
           "country", "discipline", "enzyme", "event", "location", "misc", "organisation", "person",
           "protein", "scientist", "theory", "university"]
POLITICS = ["country", "election", "event", "location", "misc", "organisation", "person",
            "politicalparty", "politician"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="commit of the other emitter")
    parser.add_argument("--types", type=int, default=22, choices=(10, 22))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=40, help="longest sentence")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from spacy_crossner.decoding import bio_tags
    from spacy_crossner.models import pytorch_multi_cell as new

    stack = ExitStack()
    old = import_old(args.old, "pytorch_multi_cell", stack)
    stack.close()  # the module stays imported; its file is not needed any more
    if args.types == 22:
        domain_tags = {"conll2003": bio_tags(["PER", "LOC", "ORG", "MISC"]), "science": bio_tags(SCIENCE)}
        target = "science"
    else:
        domain_tags = {"politics": bio_tags(POLITICS)}
        target = "politics"
    B, T, D, d = args.batch, args.length, 150, 100
    emitters = {}
    for key, module in (("new", new), ("old", old)):
        torch.manual_seed(0)
        emitter = module.MultiCellEmitter(width=d, dropout=0.5, identical_init=False)
        sources = [x for x in domain_tags if x != target]
        config = {module.TYPES_KEY: module.cell_inventory(domain_tags, (), sources), module.TARGET_KEY: target}
        emitter.setup(D, domain_tags, config)
        emitters[key] = emitter.train()
    emitters["old"].load_state_dict(emitters["new"].state_dict())
    cells = len(emitters["new"].types)
    torch.manual_seed(1)
    X = torch.randn(B, T, D)
    lengths = torch.randint(5, T + 1, (B,))
    lengths[0] = T
    names = list(domain_tags)
    domains = [names[b % len(names)] for b in range(B)]
    gold = torch.full((B, T), -1)
    for b, dom in enumerate(domains):
        gold[b, : lengths[b]] = torch.randint(0, len(domain_tags[dom]), (int(lengths[b]),))

    def run(key, grads=False):
        emitter = emitters[key]
        emitter.zero_grad()
        scores, losses = emitter(X, lengths, domains, gold=gold)
        real = (torch.arange(T)[None, :] < lengths[:, None])[:, :, None]
        (scores * real).sum().add(sum(losses.values())).backward()
        if grads:
            return scores * real, losses, {n: p.grad for n, p in emitter.named_parameters()}

    for emitter in emitters.values():
        emitter.dropout.p = 0.0
    s_new, l_new, g_new = run("new", True)
    s_old, l_old, g_old = run("old", True)
    grad_diff = max(
        float((g_new[n] - (g_old[n] if g_old[n] is not None else 0)).abs().max())
        for n in g_new if g_new[n] is not None
    )
    print(f"{cells} cells, {len(names)} domain(s), {B} sentences, {int(lengths.sum())} tokens: "
          f"max |scores new - old| {float((s_new - s_old).detach().abs().max()):.1e}, "
          f"losses new {', '.join(f'{k} {float(v.detach()):.6f}' for k, v in l_new.items())}; "
          f"old {', '.join(f'{k} {float(v.detach()):.6f}' for k, v in l_old.items())}; max |grad new - old| {grad_diff:.1e}")
    for emitter in emitters.values():
        emitter.dropout.p = 0.5
    med = interleaved_medians(run, args.rounds)
    print(f"forward + backward: new {med['new']:.3f} s, old {med['old']:.3f} s, old/new {med['old'] / med['new']:.2f}")


if __name__ == "__main__":
    main()
