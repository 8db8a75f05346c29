"""The GPU path, proven (issue 14): every architecture trains on GPU 0 from the same config as
on CPU, with no silent CPU fallback, and a pipeline trained on the GPU predicts the same on the
CPU.

Usage (from the repository root, on a machine with a CUDA GPU, cupy and a CUDA torch)::

    python benchmarks/gpu_check.py [--steps 30] [--docs 64] [--archs bilstm_crf,...]
        [--data CROSSNER_DIR] [--json OUT.json]

``--data``: the CrossNER folder (default ../shared/data/crossner beside the clone); only its
``ai/`` files are read. ``--json``: the rows and the machine (GPU, torch, CuPy, spaCy, thinc).
Results of the first GPU run: benchmarks/results/gpu.md.

For each architecture (its config in configs/, loaded with ``spacy.util.load_config`` and tiny
overrides: the CrossNER AI domain, a few dozen steps of 16 sentences):

1. ``spacy.require_gpu(0)``; the pipeline is built from the config and initialized on AI train
   sentences (``--docs``) and trained ``--steps`` steps with ``nlp.update``;
2. checks: thinc's ops of every component's model are ``CupyOps``; every parameter and buffer
   of every torch module (PyTorchWrapper_v2 shims and HF transformers) lives on ``cuda``;
3. GPU words/s of training (``nlp.update``) and inference (``nlp.pipe`` over AI test), with
   ``torch.cuda.synchronize()`` before each clock reading;
4. the pipeline is saved, loaded in a subprocess on the CPU (``CUDA_VISIBLE_DEVICES=""``,
   ``spacy.require_cpu()``) and must predict the same entities (and token tags) on the test
   sentences as on the GPU, from the same scores: the crossner model's (T, K) scores of every
   test doc may differ by at most ``MAX_SCORE_DIFF`` relative to their scale (after 30 steps
   most tags are O, so agreeing tags alone say little).

Prints a table and exits 1 if any check fails; prints "no GPU" and exits 0 where there is none.
``--device cpu`` runs the same flow on the CPU (checks: NumpyOps, parameters on cpu), as a
smoke test of the script where no GPU is available.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's spacy_crossner
# the CrossNER folder (<domain>/{train,dev,test}.txt); --data sets it
CROSSNER = [ROOT.parent / "shared" / "data" / "crossner"]
DOMAIN = "ai"
MAX_DIFF_SHARE = 0.01
# the largest score difference between the devices, relative to the scores' scale
MAX_SCORE_DIFF = 1e-3
# architecture -> (config, overrides)
ARCHS = {
    "bilstm_crf": ("bilstm_target.cfg", {}),
    "multi_cell": ("multi_cell_sda.cfg", {}),
    "pgn": ("pgn_sda.cfg", {}),
    "moee": ("moee_zero.cfg", {"vars.source_domain": DOMAIN, "vars.target_domains": []}),
    "transformer_tagger": ("trf_target.cfg", {}),
    "label_aware": ("label_aware_source.cfg", {"vars.source_domain": DOMAIN}),
}


def has_gpu() -> bool:
    try:
        import cupy  # noqa: F401
        import torch

        return torch.cuda.is_available() and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


_CORPUS = []


def corpus_dir() -> Path:
    """CrossNER AI converted once per run (``python -m spacy_crossner convert``'s function)."""
    if not _CORPUS:
        from spacy_crossner.convert import convert

        out = Path(tempfile.mkdtemp(prefix="gpu_check_")) / DOMAIN
        convert(CROSSNER[0] / DOMAIN, out, domain=DOMAIN)
        _CORPUS.append(out)
    return _CORPUS[0]


def read_docs(split: str, limit: int):
    import spacy

    from spacy_crossner.convert import column_file_to_docs
    from spacy_crossner.formats import read_column_file

    vocab = spacy.blank("en").vocab
    docs = list(column_file_to_docs(read_column_file(CROSSNER[0] / DOMAIN / f"{split}.txt"), vocab, domain=DOMAIN))
    return docs[:limit]


def build(arch: str):
    """The pipeline of ``arch``'s config with the AI domain as its target."""
    from spacy.util import load_config, load_model_from_config

    config_name, extra = ARCHS[arch]
    path = ROOT / "configs" / config_name
    # the corpora's paths point at converted AI files (the readers check their paths when the
    # pipeline is initialized; the training data itself comes from this script)
    paths = load_config(path, interpolate=False)["paths"]
    corpus = corpus_dir()
    overrides = {
        f"paths.{key}": str(corpus / ("dev.spacy" if key.endswith("dev") else "train.spacy"))
        for key in paths if key.endswith(("train", "dev"))
    }
    overrides.update({"vars.target_domain": DOMAIN, **extra})
    config = load_config(path, overrides=overrides, interpolate=True)
    return load_model_from_config(config, auto_fill=True, validate=True)


def examples_of(nlp, docs):
    from spacy.tokens import Doc
    from spacy.training import Example

    from spacy_crossner import set_domain

    out = []
    for doc in docs:
        pred = Doc(nlp.vocab, words=[t.text for t in doc])
        set_domain(pred, DOMAIN)
        out.append(Example(pred, doc))
    return out


def fresh(nlp, docs):
    from spacy.tokens import Doc

    from spacy_crossner import set_domain

    out = []
    for doc in docs:
        new = Doc(nlp.vocab, words=[t.text for t in doc])
        set_domain(new, DOMAIN)
        out.append(new)
    return out


def score_arrays(nlp, docs, batch_size: int = 64):
    """The crossner model's (T, K) scores of each doc as NumPy arrays, from docs that went
    through ``nlp.pipe`` (a transformer listener reads their annotations)."""
    pipe = nlp.get_pipe("crossner")
    out = []
    for i in range(0, len(docs), batch_size):
        batch = [d for d in docs[i : i + batch_size] if len(d)]
        if not batch:
            continue
        output = pipe.model.predict(pipe.make_input(batch))
        scores = pipe.model.ops.to_numpy(pipe.model.ops.asarray(output.scores))
        out.extend(scores[b, :n] for b, n in enumerate(output.lengths))
    return out


def max_score_diff(a, b) -> float:
    """The largest difference between two lists of score arrays, relative to the scores' scale
    (max(1, largest finite |score|)); equal infinities count as equal."""
    import numpy

    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        finite = numpy.isfinite(x) & numpy.isfinite(y)
        if (numpy.isfinite(x) != numpy.isfinite(y)).any() or (x[~finite] != y[~finite]).any():
            return float("inf")
        if finite.any():
            scale = max(1.0, float(numpy.abs(x[finite]).max()))
            worst = max(worst, float(numpy.abs(x[finite] - y[finite]).max()) / scale)
    return worst


def predictions(docs):
    return [[(e.start, e.end, e.label_) for e in doc.ents] for doc in docs]


def torch_modules(model):
    """The torch modules of a component's model, each with the layer that runs it, reached
    through public accessors: a crossner layer's shim (``TorchModuleShim.module``) and a
    spacy-transformers ``TransformerModel``'s ``transformer``. A layer with a shim neither
    reaches is returned with None, so that no torch module goes unchecked."""
    from spacy_crossner.models.torch_layer import TorchModuleShim

    try:
        from spacy_transformers.layers import TransformerModel
    except ImportError:  # pragma: no cover - spacy-transformers is a dependency
        TransformerModel = ()
    found, covered = [], set()
    for node in model.walk():
        if isinstance(node, TransformerModel):
            found.append((node, node.transformer))
            covered.update(layer.id for layer in node.walk() if layer is not node)
    for node in model.walk():
        if node.id in covered:
            continue
        for shim in node.shims:
            found.append((node, shim.module if isinstance(shim, TorchModuleShim) else None))
    return found


def device_problems(nlp, device: str):
    """Every component model's ops and every torch tensor's device that is not ``device``."""
    from thinc.api import CupyOps, NumpyOps

    want_ops = CupyOps if device == "cuda" else NumpyOps
    problems = []
    n_tensors = 0
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is None:
            continue
        for node in model.walk():
            if not isinstance(node.ops, want_ops):
                problems.append(f"{name}: layer {node.name} has {type(node.ops).__name__}")
        for node, module in torch_modules(model):
            if module is None:
                problems.append(f"{name}: layer {node.name} has a shim with no public torch module to check")
                continue
            for pname, tensor in list(module.named_parameters()) + list(module.named_buffers()):
                n_tensors += 1
                if tensor.device.type != device:
                    problems.append(f"{name}: {node.name}.{pname} on {tensor.device}")
    return problems, n_tensors


def check(arch: str, args, device: str) -> dict:
    import spacy
    import torch
    from thinc.api import fix_random_seed

    if device == "cuda":
        spacy.require_gpu(0)
    else:
        spacy.require_cpu()
    fix_random_seed(0)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    nlp = build(arch)
    allocator = nlp.config["training"].get("gpu_allocator")
    if device == "cuda" and allocator:
        from thinc.api import set_gpu_allocator

        set_gpu_allocator(allocator)  # as spacy train does with the config's setting
    train = examples_of(nlp, read_docs("train", args.docs))
    test_docs = read_docs("test", args.test_docs)
    optimizer = nlp.initialize(lambda: train)
    batches = [train[i % len(train) : i % len(train) + 16] for i in range(0, 16 * args.steps, 16)]
    nlp.update(batches[0], sgd=optimizer)  # warm-up (kernels, allocator)
    sync()
    start, words = time.perf_counter(), 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in batches[1:]:
            nlp.update(batch, sgd=optimizer)
            words += sum(len(eg) for eg in batch)
        sync()
    train_wps = words / (time.perf_counter() - start)
    # e.g. cuDNN's "RNN module weights are not part of single contiguous chunk of memory": a
    # weight copy on every call
    train_warnings = sorted({str(w.message).splitlines()[0][:200] for w in caught})
    problems, n_tensors = device_problems(nlp, device)
    list(nlp.pipe(fresh(nlp, test_docs[:16])))
    sync()
    docs = fresh(nlp, test_docs)
    start = time.perf_counter()
    docs = list(nlp.pipe(docs, batch_size=256))
    sync()
    infer_wps = sum(len(d) for d in docs) / (time.perf_counter() - start)
    on_device = predictions(docs)
    tags = [[t.ent_iob_ + ("-" + t.ent_type_ if t.ent_type_ else "") for t in d] for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        nlp.to_disk(Path(tmp) / "model")
        words_file = Path(tmp) / "words.json"
        words_file.write_text(json.dumps([[t.text for t in d] for d in docs]))
        scores_file = Path(tmp) / "scores.npz"
        on_device_scores = score_arrays(nlp, docs)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
        proc = subprocess.run(
            [sys.executable, __file__, "--predict-cpu", str(Path(tmp) / "model"), str(words_file),
             str(scores_file)],
            capture_output=True, text=True, env=env,
        )
        cpu_scores = None
        if proc.returncode == 0:
            import numpy

            with numpy.load(scores_file) as saved:
                cpu_scores = [saved[f"d{i}"] for i in range(len(saved.files))]
    if proc.returncode != 0:
        problems.append(f"loading on CPU failed: {proc.stderr[-1500:]}")
    else:
        on_cpu = json.loads(proc.stdout.strip().splitlines()[-1])
        ents_cpu = [[tuple(e) for e in doc] for doc in on_cpu["ents"]]
        n_diff = sum(a != b for a, b in zip(on_device, ents_cpu))
        n_diff_tags = sum(a != b for a, b in zip(tags, on_cpu["tags"]))
        # float32 sums run in another order on the GPU: a near-tie may flip a doc or two; more
        # than MAX_DIFF_SHARE of the docs is a device bug
        if max(n_diff, n_diff_tags) > MAX_DIFF_SHARE * len(docs):
            problems.append(f"CPU predictions differ on {n_diff} docs (entities), {n_diff_tags} (tags) "
                            f"of {len(docs)}")
    # the scores behind the tags: after a few dozen steps most tags are O, so agreeing tags say
    # little; float32 on both devices (no TF32) agrees far below MAX_SCORE_DIFF
    score_diff = None if cpu_scores is None else max_score_diff(on_device_scores, cpu_scores)
    if score_diff is not None and score_diff > MAX_SCORE_DIFF:
        problems.append(f"CPU scores differ from the {device}'s by {score_diff:.2e} (relative; "
                        f"more than {MAX_SCORE_DIFF:.0e})")
    return {
        "arch": arch, "device": device, "train_wps": train_wps, "infer_wps": infer_wps,
        "torch_tensors": n_tensors, "train_warnings": train_warnings,
        "problems": problems + [f"training warned: {w}" for w in train_warnings if "contiguous" in w],
        "cpu_diff_docs": None if proc.returncode != 0 else [n_diff, n_diff_tags],
        "cpu_score_diff": score_diff,
        "n_entities": sum(len(d) for d in on_device),
    }


def predict_cpu(model_dir: str, words_file: str, scores_file: str) -> None:
    """The subprocess side: load on the CPU, tag the same words, print JSON."""
    import spacy
    import torch
    from spacy.tokens import Doc

    from spacy_crossner import set_domain

    torch.set_num_threads(1)
    spacy.require_cpu()
    nlp = spacy.load(model_dir)
    docs = []
    for words in json.loads(Path(words_file).read_text()):
        doc = Doc(nlp.vocab, words=words)
        set_domain(doc, DOMAIN)
        docs.append(doc)
    docs = list(nlp.pipe(docs, batch_size=256))
    tags = [[t.ent_iob_ + ("-" + t.ent_type_ if t.ent_type_ else "") for t in d] for d in docs]
    import numpy

    numpy.savez(scores_file, **{f"d{i}": a for i, a in enumerate(score_arrays(nlp, docs))})
    print(json.dumps({"ents": predictions(docs), "tags": tags}))


def machine(device: str) -> str:
    """The accelerator (or CPU) and the versions that matter, for the results."""
    import platform

    import spacy
    import thinc
    import torch

    what = f"{platform.machine()}, {os.cpu_count()} cores"
    if device == "cuda":
        import cupy

        what = (f"{torch.cuda.get_device_name(0)}, {what}; torch {torch.__version__}, "
                f"cupy {cupy.__version__}")
    return f"{what}; spacy {spacy.__version__}, thinc {thinc.__version__}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps of 16 sentences")
    parser.add_argument("--docs", type=int, default=128, help="AI train sentences")
    parser.add_argument("--test-docs", type=int, default=431, help="AI test sentences")
    parser.add_argument("--archs", default=",".join(ARCHS), help="architectures (comma-separated)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (the check); cpu = the same flow on the CPU, a smoke test")
    parser.add_argument("--data", type=Path, default=CROSSNER[0],
                        help="CrossNER folder holding ai/{train,dev,test}.txt (default: ../shared/data/crossner)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument("--predict-cpu", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.predict_cpu:
        predict_cpu(*args.predict_cpu)
        return 0
    if not (args.data / DOMAIN / "train.txt").exists():
        parser.error(f"--data: {args.data / DOMAIN / 'train.txt'} does not exist")
    CROSSNER[0] = args.data
    if args.device == "cuda" and not has_gpu():
        print("no GPU")
        return 0
    rows = [check(arch, args, args.device) for arch in args.archs.split(",")]
    print("| arch | device | train wps | infer wps | torch tensors checked | entities | CPU score diff | result |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        result = "ok" if not r["problems"] else "FAIL: " + "; ".join(r["problems"][:5])
        diff = "–" if r["cpu_score_diff"] is None else f"{r['cpu_score_diff']:.1e}"
        print(f"| {r['arch']} | {r['device']} | {r['train_wps']:,.0f} | {r['infer_wps']:,.0f} | "
              f"{r['torch_tensors']} | {r['n_entities']} | {diff} | {result} |")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(args.device), "rows": rows}, indent=2) + "\n")
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
