"""Is ONNX Runtime's int8 encoder faster than torch's on this CPU? (issue 50, a probe)

The encoder of one trained pipeline alone (no spaCy around it) on the word pieces of a test set,
in batches of 64 sentences sorted by length, one thread: torch fp32, torch dynamic int8 (what
``quantize`` does), ONNX Runtime fp32 and ONNX Runtime dynamic int8 (per-channel, QInt8) of the
same encoder exported with ``torch.onnx.export``. Best of two passes each. Needs packages the
project does not depend on::

    pip install onnxruntime onnx
    python benchmarks/int8_onnxruntime_probe.py PIPELINE TEST.spacy

Prints the seconds of each and the mean cosine of the token vectors to torch fp32's.
"""
import argparse
import copy
import tempfile
import time
import warnings
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", type=Path, help="a trained transformer pipeline")
    parser.add_argument("test", type=Path, help="a .spacy test set")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import numpy
    import onnxruntime
    import spacy
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from spacy.tokens import DocBin

    from spacy_crossner.models.pytorch_int8 import quantize_linears

    torch.set_num_threads(1)
    nlp = spacy.load(args.pipeline)
    model = nlp.get_pipe("transformer").model
    encoder, tokenizer = model.transformer.eval(), model.tokenizer
    texts = sorted((d.text for d in DocBin().from_disk(args.test).get_docs(nlp.vocab)), key=len)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    batches = []
    for k in range(0, len(texts), args.batch):
        enc = tokenizer(texts[k:k + args.batch], padding=True, truncation=True, max_length=128, return_tensors="pt")
        batches.append({n: enc[n] for n in names})

    class Last(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path, int8_path = str(Path(tmp) / "enc.onnx"), str(Path(tmp) / "enc_int8.onnx")
        # exported from a copy: exporting the encoder itself changed the torch runs after it
        # (slower, and the int8 run's cosine to it fell from 0.99 to 0.92)
        torch.onnx.export(Last(copy.deepcopy(encoder)), tuple(batches[0][n] for n in names), fp32_path, input_names=names,
                          output_names=["h"], dynamic_axes={n: {0: "b", 1: "t"} for n in names + ["h"]},
                          opset_version=17, dynamo=False)
        quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8, per_channel=True)
        sessions = {name: onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
                    for name, path in (("onnxruntime fp32", fp32_path), ("onnxruntime int8", int8_path))}
    int8 = quantize_linears(copy.deepcopy(encoder))

    def run_torch(module):
        with torch.no_grad():
            return [module(**b).last_hidden_state.numpy() for b in batches]

    def run_ort(session):
        return [session.run(None, {n: b[n].numpy() for n in names})[0] for b in batches]

    variants = {"torch fp32": lambda: run_torch(encoder), "torch int8": lambda: run_torch(int8),
                **{name: (lambda s=s: run_ort(s)) for name, s in sessions.items()}}
    seconds, outputs = {}, {}
    for _ in range(2):
        for name, run in variants.items():
            start = time.perf_counter()
            outputs[name] = run()
            seconds[name] = min(seconds.get(name, float("inf")), time.perf_counter() - start)

    def unit(x):
        return x / numpy.linalg.norm(x, axis=-1, keepdims=True)

    for name in variants:
        # over the real word pieces only (the padding's vectors mean nothing)
        cos = numpy.mean(numpy.concatenate([
            (unit(a) * unit(b)).sum(-1)[batch["attention_mask"].numpy().astype(bool)]
            for a, b, batch in zip(outputs["torch fp32"], outputs[name], batches)]))
        print(f"{name}: {seconds[name]:.2f} s, mean cosine to torch fp32 {cos:.4f}")


if __name__ == "__main__":
    main()
