"""Interleaved A/B of the head's CRF decoding: this checkout's ``head.decode`` against the one
of another commit, on the same BiLSTM-CRF emissions, in one process (issue 14).

Usage (from the repository root)::

    python benchmarks/decode_ab.py --old 4010c46 [--types 4 10 22] [--rounds 7]

For each label set of benchmarks/speed.py (``--types``), a BiLSTM-CRF (configs/bilstm_target.cfg)
is trained ``--passes`` passes over 64 sentences, and its emissions for ``--docs`` test sentences are
captured in batches of 256 as ``nlp.pipe`` makes them. The two decoders (Viterbi, CRF
forward-backward, entity probabilities) then run on those inputs, alternating which goes first,
with the same CRF weights; the script checks that they give the same tags and spans, prints the
largest difference of their entity probabilities, and the median time of each. torch on one
thread.
"""
import argparse
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))  # this checkout's spacy_crossner
from old_module import import_old, interleaved_medians  # noqa: E402
from speed import LABEL_SETS, build_crossner, make_examples, set_docs  # noqa: E402


def load_old(commit: str, stack) -> tuple:
    """The head modules of ``commit`` (pytorch_heads.py and head.py, the second importing the
    first)."""
    heads = import_old(commit, "pytorch_heads", stack)
    renamed = heads.__name__.rsplit(".", 1)[1]
    head = import_old(commit, "head", stack, {"from .pytorch_heads import": f"from .{renamed} import"})
    return heads, head


def with_old_head(model, old_heads, old_head):
    """A stand-in for ``model`` whose head is the other commit's CRF head with the same weights:
    its ``"head"`` ref is a layer of that commit's converters and decoding around that commit's
    CRFHead, its attrs (domains and tags) are the model's. Both decoders then read their own
    head through the public refs; nothing of a shim is swapped."""
    from thinc.api import Model

    from spacy_crossner.models.head import get_head
    from spacy_crossner.models.torch_layer import torch_module, wrap_torch

    new_module = torch_module(get_head(model))
    old_module = old_heads.CRFHead()
    # the CRF head's setup took (domain_tags) before it took a build_config
    if "build_config" in inspect.signature(old_module.setup).parameters:
        old_module.setup(new_module.domain_tags, {})
    else:
        old_module.setup(new_module.domain_tags)
    old_module.load_state_dict(new_module.state_dict())
    layer = wrap_torch(old_module, old_head._head_inputs, old_head._head_outputs)
    # commits before the heads became registered layers name their decoding by string
    layer.attrs["decoder"] = "crf"
    if hasattr(old_head, "decode_crf"):
        layer.attrs["decode"] = old_head.decode_crf
    return Model(f"{model.name}_old_head", _not_run, layers=[layer], refs={"head": layer}, attrs=model.attrs)


def _not_run(model, X, is_train):
    raise NotImplementedError("the stand-in model only decodes (decode_ab.py)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="commit of the other decoder")
    parser.add_argument("--types", type=int, nargs="+", default=[4, 10, 22], help="label sets")
    parser.add_argument("--docs", type=int, default=300, help="test sentences")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--passes", type=int, default=1,
                        help="training passes over the 64 sentences (1, as in speed.py; 0: untrained, entities everywhere)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crossner_speed"), help="converted corpora")
    args = parser.parse_args()
    import contextlib

    import numpy
    import torch
    from spacy.tokens import Doc
    from thinc.api import fix_random_seed

    import spacy_crossner.pipeline as pipeline
    from spacy_crossner import get_domain, set_domain
    from spacy_crossner.models import head as new_head

    torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        old_heads, old_head = load_old(args.old, stack)
        for n_types in args.types:
            fix_random_seed(0)
            train = set_docs(args.work, n_types, "train", 64, 0)
            test = set_docs(args.work, n_types, "test", args.docs, 0)
            nlp = build_crossner("bilstm_crf", LABEL_SETS[n_types]["target"])
            examples = make_examples(nlp, train)
            optimizer = nlp.initialize(lambda: examples)
            for _ in range(args.passes):
                for i in range(0, len(examples), 16):
                    nlp.update(examples[i : i + 16], sgd=optimizer, drop=0.1)
            captured = []
            original = pipeline.head_decode

            def grab(model, output, whitespace):
                captured.append((output, whitespace))
                return original(model, output, whitespace)

            pipeline.head_decode = grab
            docs = []
            for doc in test:
                new = Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
                set_domain(new, get_domain(doc))
                docs.append(new)
            list(nlp.pipe(docs, batch_size=256))
            pipeline.head_decode = original
            model = nlp.get_pipe("crossner").model
            old_model = with_old_head(model, old_heads, old_head)

            def run(which):
                if which == "old":
                    return [old_head.decode(old_model, o, w) for o, w in captured]
                return [new_head.decode(model, o, w) for o, w in captured]

            results = {k: [d for batch in run(k) for d in batch] for k in ("old", "new")}
            same = all(a.tags == b.tags and a.spans == b.spans for a, b in zip(results["old"], results["new"]))
            p_old = numpy.array([p for d in results["old"] for p in d.probs])
            p_new = numpy.array([p for d in results["new"] for p in d.probs])
            diff = float(numpy.abs(p_old - p_new).max()) if len(p_old) == len(p_new) and len(p_old) else float("nan")
            med = interleaved_medians(run, args.rounds)
            shapes = ", ".join("x".join(map(str, o.scores.shape)) for o, _ in captured)
            print(f"{n_types} types (batches {shapes}): same tags and spans: {same}, {len(p_new)} entities, "
                  f"max |p_new - p_old| {diff:.2e}; decode new {1000 * med['new']:.1f} ms, "
                  f"old {1000 * med['old']:.1f} ms, old/new {med['old'] / med['new']:.2f}")


if __name__ == "__main__":
    main()
