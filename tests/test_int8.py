"""The int8 CPU path of transformer pipelines (issue 50): spacy_crossner.Int8TransformerModel.v1
and ``python -m spacy_crossner quantize``, on a tiny pipeline built on the bundled MiniLM.

Tolerances: int8 rounds every weight of the encoder's linear layers to 1 of 255 levels, so the
quantized pipeline is compared with its fp32 original loosely (the same entities on the training
sentences, entity probabilities within 0.05, token vectors with a cosine of at least 0.9 on
average); after that, every save and load is compared exactly.
"""
import json
import os
import pickle
import subprocess
import sys
import warnings

import numpy
import pytest
import spacy
from spacy.tokens import Doc
from thinc.api import Adam, fix_random_seed
from typer.testing import CliRunner

import spacy_crossner.models.pytorch_int8 as pytorch_int8
from spacy_crossner import set_domain
from spacy_crossner.cli import app
from spacy_crossner.models.pytorch_int8 import count_int8_linears
from spacy_crossner.quantize import INT8_ARCH, QuantizeError, quantize
from util import AI, NEWS, make_examples, predicted_ents, train_more

SENTENCES = NEWS + AI
OVERRIDE = {"components.transformer.model.@architectures": INT8_ARCH}


def make_nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("transformer", config={"model": {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": {"@misc": "spacy_crossner.transformer_name.v1", "name": None},
        "tokenizer_config": {"use_fast": True},
        "get_spans": {"@span_getters": "spacy-transformers.strided_spans.v1", "window": 128, "stride": 96},
    }})
    nlp.add_pipe("crossner", config={"target_domain": "ai", "model": {
        "@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": False, "dropout": 0.0,
        "tok2vec": {"@architectures": "spacy-transformers.TransformerListener.v1", "grad_factor": 1.0,
                    "pooling": {"@layers": "reduce_first.v1"}, "upstream": "*"},
    }})
    return nlp


@pytest.fixture(scope="module")
def fp32_dir(tmp_path_factory):
    """A MiniLM + TransformerTagger pipeline trained on the six sentences, saved."""
    fix_random_seed(0)
    nlp = make_nlp()
    examples = make_examples(nlp, SENTENCES)
    nlp.initialize(lambda: examples)
    train_more(nlp, examples, 30, Adam(0.0005))
    path = tmp_path_factory.mktemp("int8") / "fp32"
    nlp.to_disk(path)
    return path


@pytest.fixture(scope="module")
def int8_dir(fp32_dir):
    out = fp32_dir.parent / "int8"
    quantize(model=fp32_dir, output=out)
    return out


def docs_of(nlp):
    docs = []
    for domain, words, _ in SENTENCES:
        doc = Doc(nlp.vocab, words=list(words))
        set_domain(doc, domain)
        docs.append(doc)
    return docs


def outputs(nlp):
    """Per sentence: entities, their probabilities and the transformer's token vectors."""
    docs = list(nlp.pipe(docs_of(nlp)))
    decoded = nlp.get_pipe("crossner").predict(docs_of(nlp))
    return {
        "ents": [[(e.start, e.end, e.label_) for e in d.ents] for d in docs],
        "probs": [list(d.probs) for d in decoded],
        "vectors": [wordpiece_vectors(d) for d in docs],
    }


def wordpiece_vectors(doc):
    """The last hidden states of the doc's word pieces, without the batch's padding."""
    trf = doc._.trf_data
    hidden = trf.tensors[0]
    return numpy.concatenate([hidden[i, :n] for i, n in enumerate(trf.wordpieces.lengths)])


def n_int8(nlp):
    return count_int8_linears(nlp.get_pipe("transformer").model.transformer)


def assert_identical(a, b):
    assert a["ents"] == b["ents"]
    assert a["probs"] == b["probs"]
    assert all(numpy.array_equal(x, y) for x, y in zip(a["vectors"], b["vectors"]))


def tiny_encoder_config():
    from transformers import BertConfig

    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)


def test_encoder_hooks_load_fp32_and_int8_states():
    """The encoder of Int8TransformerModel.v1 on its own: fp32 weights are quantized after the
    load, int8 weights load into an encoder quantized first, and the two give the same output."""
    import torch

    from spacy_crossner.models.pytorch_int8 import Int8ModelLoader, is_quantized

    torch.manual_seed(0)
    fp32 = Int8ModelLoader().from_config(tiny_encoder_config())
    state = {k: v.clone() for k, v in fp32.state_dict().items()}
    assert not is_quantized(fp32)
    ids = torch.tensor([[1, 5, 7, 2, 0], [1, 9, 2, 0, 0]])
    mask = (ids > 0).long()
    with torch.no_grad():
        reference = fp32(input_ids=ids, attention_mask=mask).last_hidden_state

    first = Int8ModelLoader().from_config(tiny_encoder_config())
    first.load_state_dict(state)
    assert count_int8_linears(first) == 2 * 6 + 1  # q, k, v, attention out, intermediate, out; pooler
    with torch.no_grad():
        quantized = first(input_ids=ids, attention_mask=mask).last_hidden_state
    assert not torch.equal(quantized, reference)
    assert torch.nn.functional.cosine_similarity(quantized, reference, dim=-1).mean() > 0.9

    second = Int8ModelLoader().from_config(tiny_encoder_config())
    second.load_state_dict(first.state_dict())
    with torch.no_grad():
        assert torch.equal(second(input_ids=ids, attention_mask=mask).last_hidden_state, quantized)


def test_encoder_hooks_follow_spacy_transformers_strict_retry():
    """HFShim.from_bytes retries a failed strict load with strict=False (weights of another
    transformers version): the retry loads the fp32 weights again, whatever the failed try did,
    and quantizes them."""
    import torch

    from spacy_crossner.models.pytorch_int8 import Int8ModelLoader

    torch.manual_seed(0)
    source = Int8ModelLoader().from_config(tiny_encoder_config())
    state = dict(source.state_dict())
    expected = Int8ModelLoader().from_config(tiny_encoder_config())
    expected.load_state_dict(state)
    state["an.old.buffer"] = torch.zeros(1)
    encoder = Int8ModelLoader().from_config(tiny_encoder_config())
    with pytest.raises(RuntimeError, match="Unexpected key"):
        encoder.load_state_dict(state)
    encoder.load_state_dict(state, strict=False)
    assert count_int8_linears(encoder) == 13
    ids = torch.tensor([[1, 5, 7, 2]])
    with torch.no_grad():
        assert torch.equal(encoder(input_ids=ids).last_hidden_state, expected(input_ids=ids).last_hidden_state)


def test_quantized_copy_is_close_to_fp32_and_round_trips_exactly(fp32_dir, int8_dir, tmp_path):
    fp32 = spacy.load(fp32_dir)
    assert n_int8(fp32) == 0
    before = outputs(fp32)
    assert before["ents"] == [[(s, e, l) for s, e, l in ents] for _, _, ents in SENTENCES]

    int8 = spacy.load(int8_dir)
    # MiniLM: 6 layers x (q, k, v, attention output, intermediate, output) + the pooler
    assert n_int8(int8) == 37
    assert int8.config["components"]["transformer"]["model"]["@architectures"] == INT8_ARCH
    after = outputs(int8)
    assert after["ents"] == before["ents"]
    for p, q in zip(before["probs"], after["probs"]):
        assert numpy.allclose(p, q, atol=0.05), (p, q)
    cosines = [
        (x * y).sum(-1) / (numpy.linalg.norm(x, axis=-1) * numpy.linalg.norm(y, axis=-1))
        for x, y in zip(before["vectors"], after["vectors"])
    ]
    assert numpy.concatenate(cosines).mean() >= 0.9
    assert not all(numpy.array_equal(x, y) for x, y in zip(before["vectors"], after["vectors"]))

    # exact from here on: int8 weights saved and loaded as they are
    int8.to_disk(tmp_path / "again")
    assert_identical(outputs(spacy.load(tmp_path / "again")), after)
    fresh = spacy.load(int8_dir)
    fresh.from_bytes(int8.to_bytes())
    assert_identical(outputs(fresh), after)
    assert_identical(outputs(pickle.loads(pickle.dumps(int8))), after)
    # the setting alone, on the fp32 pipeline, at load time: the same int8 model
    overridden = spacy.load(fp32_dir, config=OVERRIDE)
    assert n_int8(overridden) == 37
    assert_identical(outputs(overridden), after)
    # nlp.pipe with any batch size equals nlp() one doc at a time
    texts = ["Google released TensorFlow .", "", "LSTM", "Paris is in France ."]
    called = [[(e.text, e.label_) for e in int8(t).ents] for t in texts]
    for size in (1, 3):
        assert [[(e.text, e.label_) for e in d.ents] for d in int8.pipe(texts, batch_size=size)] == called


def test_per_tensor_setting(fp32_dir):
    out = fp32_dir.parent / "per_tensor"
    result = quantize(model=fp32_dir, output=out, per_channel=False)
    assert result["components"] == {"transformer": 37} and result["per_channel"] is False
    nlp = spacy.load(out)
    assert nlp.config["components"]["transformer"]["model"]["per_channel"] is False
    assert n_int8(nlp) == 37


def test_quantized_pipeline_refuses_training(int8_dir):
    nlp = spacy.load(int8_dir)
    with pytest.raises(RuntimeError, match="int8-quantized .* for inference only"):
        nlp.update(make_examples(nlp, NEWS), sgd=Adam(0.001))


def test_training_with_the_setting_stays_fp32_until_saved(tmp_path):
    """initialize loads fp32 pretrained weights: a config with the setting trains in fp32."""
    fix_random_seed(0)
    nlp = make_nlp()
    config = nlp.config.copy()
    config["components"]["transformer"]["model"]["@architectures"] = INT8_ARCH
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    examples = make_examples(nlp, SENTENCES)
    nlp.initialize(lambda: examples)
    assert n_int8(nlp) == 0
    train_more(nlp, examples, 1, Adam(0.0005))
    nlp.to_disk(tmp_path / "model")
    assert n_int8(spacy.load(tmp_path / "model")) == 37


def test_gpu_ops_keep_fp32_with_a_warning_and_refuse_int8_weights(fp32_dir, int8_dir, monkeypatch):
    """Where spaCy runs on a GPU, int8 dynamic layers cannot run (no GPU here: the device check
    is replaced)."""
    monkeypatch.setattr(pytorch_int8, "_on_cpu", lambda: False)
    with pytest.warns(UserWarning, match="stays fp32"):
        nlp = spacy.load(fp32_dir, config=OVERRIDE)
    assert n_int8(nlp) == 0
    with pytest.raises(ValueError, match="int8-quantized .* runs on CPU only"):
        spacy.load(int8_dir)
    monkeypatch.setattr("thinc.api.get_torch_default_device", lambda: type("D", (), {"type": "cuda"})())
    with pytest.raises(QuantizeError, match="CPU only"):
        quantize(model=fp32_dir, output=fp32_dir.parent / "gpu")
    assert not (fp32_dir.parent / "gpu").exists()


def test_quantize_errors_are_clear(fp32_dir, int8_dir, tmp_path):
    runner = CliRunner()
    # not a pipeline: a missing directory, a directory without config.cfg
    res = runner.invoke(app, ["quantize", str(tmp_path / "nope"), str(tmp_path / "out")])
    assert res.exit_code == 1 and "is not a spaCy pipeline directory: it does not exist" in res.output
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["quantize", str(tmp_path / "empty"), str(tmp_path / "out")])
    assert res.exit_code == 1 and "has no config.cfg" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    # the output exists: nothing is written there
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(tmp_path / "taken")])
    assert res.exit_code == 1 and "already exists" in res.output
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
    # no transformer
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "no_trf")
    with pytest.raises(QuantizeError, match=r"no transformer to quantize: none of its components \(sentencizer\)"):
        quantize(model=tmp_path / "no_trf", output=tmp_path / "out")
    # already quantized
    with pytest.raises(QuantizeError, match="already quantized"):
        quantize(model=int8_dir, output=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # the CLI on a good pipeline
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "transformer: 37 linear layers int8" in res.output and (tmp_path / "out" / "config.cfg").exists()


def test_smoothing_keeps_the_function_and_helps_an_outlier_channel():
    """SmoothQuant on one linear layer whose input has one channel 100x the others: divided input
    times scaled weight is the same function in fp32; quantized, it is closer to fp32 than plain
    int8; its multipliers round-trip through the state dict into a fresh layer."""
    import torch
    from torch import nn

    from spacy_crossner.models.pytorch_int8 import (
        _LoadHooks, count_smoothed, quantize_linears, record_input_ranges, smooth_and_quantize,
    )

    torch.manual_seed(0)
    x = torch.randn(64, 32)
    x[:, 3] *= 100.0

    def layer():
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(32, 16))

    reference = layer()(x).detach()
    with record_input_ranges(fp := layer()) as ranges:
        fp(x)
    assert set(ranges) == {"0"} and torch.equal(ranges["0"], x.abs().amax(0))
    plain = quantize_linears(layer())
    smoothed = layer()
    assert smooth_and_quantize(smoothed, ranges, alpha=0.8) == 1 and count_smoothed(smoothed) == 1
    err_plain = (plain(x) - reference).abs().mean()
    err_smooth = (smoothed(x) - reference).abs().mean()
    assert err_smooth < 0.5 * err_plain, (err_smooth, err_plain)
    # in fp32 (the multipliers without quantization) the function is unchanged
    inv = smoothed[0].smooth_inv
    scaled = layer()
    with torch.no_grad():
        scaled[0].weight.mul_(1.0 / inv)
    assert torch.allclose(scaled(x * inv), reference, rtol=1e-4, atol=1e-3)
    # the state dict carries the multipliers; the load hooks give a fresh layer the buffer first
    fresh = layer()
    hooks = _LoadHooks()
    fresh._register_load_state_dict_pre_hook(
        lambda state, prefix, *args: hooks.before_load(fresh, state, prefix, *args))
    fresh.load_state_dict(smoothed.state_dict())
    assert count_smoothed(fresh) == 1 and torch.equal(fresh(x), smoothed(x))
    with pytest.raises(ValueError, match=r"alpha .* must be in \(0, 1\]"):
        smooth_and_quantize(layer(), ranges, alpha=0.0)


def test_activation_range_full_or_reduced(fp32_dir, int8_dir, monkeypatch):
    """int8 inputs keep 8 bits (reduce_range=False) on AVX512-VNNI CPUs, 7 (torch's default)
    elsewhere; the config's full_range overrides the CPU check; the weights are the same."""
    import torch
    from torch import nn
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    from spacy_crossner.models.pytorch_int8 import (
        FullRangeDynamicLinear, count_full_range, quantize_linears, set_activation_range,
    )

    torch.manual_seed(0)
    x = torch.randn(16, 32) * 3
    layer = quantize_linears(nn.Sequential(nn.Linear(32, 8)), full_range=True)
    assert type(layer[0]) is FullRangeDynamicLinear and count_full_range(layer) == 1
    packed = layer[0]._packed_params._packed_params
    full = layer(x)
    assert torch.equal(full, torch.ops.quantized.linear_dynamic(x, packed, reduce_range=False))
    set_activation_range(layer, False)
    assert type(layer[0]) is DynamicLinear and count_full_range(layer) == 0
    reduced = layer(x)
    assert torch.equal(reduced, torch.ops.quantized.linear_dynamic(x, packed, reduce_range=True))
    assert not torch.equal(full, reduced)
    assert torch.equal(pickle.loads(pickle.dumps(set_activation_range(layer, True)))(x), full)
    # None: by the CPU
    monkeypatch.setattr(pytorch_int8, "cpu_has_avx512_vnni", lambda: False)
    assert count_full_range(quantize_linears(nn.Sequential(nn.Linear(4, 4)))) == 0
    monkeypatch.setattr(pytorch_int8, "cpu_has_avx512_vnni", lambda: True)
    assert count_full_range(quantize_linears(nn.Sequential(nn.Linear(4, 4)))) == 1
    # the pipeline setting, on a saved int8 copy and on the fp32 pipeline loaded as int8
    monkeypatch.setattr(pytorch_int8, "cpu_has_avx512_vnni", lambda: False)
    key = "components.transformer.model.full_range"
    assert count_full_range(spacy.load(int8_dir).get_pipe("transformer").model.transformer) == 0
    for path, extra in ((int8_dir, {}), (fp32_dir, OVERRIDE)):
        nlp = spacy.load(path, config={**extra, key: True})
        assert n_int8(nlp) == 37 and count_full_range(nlp.get_pipe("transformer").model.transformer) == 37
    assert count_full_range(spacy.load(int8_dir, config={key: False}).get_pipe("transformer").model.transformer) == 0
    # spaCy's config check names the setting
    with pytest.raises(Exception, match=r"transformer.model -> full_range.*'yes' is not"):
        spacy.load(int8_dir, config={key: "yes"})


def test_quantize_with_calibration_smooths_and_round_trips(fp32_dir, int8_dir, tmp_path):
    """--calibration: every linear layer smoothed on the calibration text; the copy gives the same
    entities as the fp32 original on the training sentences, and is exact after a save and load,
    through pickle and with nlp.pipe in batches."""
    from spacy.tokens import DocBin

    from spacy_crossner.models.pytorch_int8 import count_smoothed

    fp32 = spacy.load(fp32_dir)
    calibration = tmp_path / "calibration.spacy"
    DocBin(docs=docs_of(fp32)).to_disk(calibration)
    runner = CliRunner()
    out = tmp_path / "smoothed"
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(out), "--calibration", str(calibration),
                              "--smoothing", "0.8"])
    assert res.exit_code == 0, res.output
    assert f"transformer: 37 linear layers int8, 37 smoothed on {len(SENTENCES)} sentences" in res.output
    nlp = spacy.load(out)
    assert n_int8(nlp) == 37 and count_smoothed(nlp.get_pipe("transformer").model.transformer) == 37
    assert nlp.meta["int8"] == {"per_channel": True, "smoothing": 0.8, "calibration": str(calibration),
                                "calibration_sentences": len(SENTENCES), "components": {"transformer": 37}}
    before, after = outputs(fp32), outputs(nlp)
    assert after["ents"] == before["ents"]
    for p, q in zip(before["probs"], after["probs"]):
        assert numpy.allclose(p, q, atol=0.05), (p, q)
    # not the plain int8 copy: the smoothing changed the encoder
    assert not all(numpy.array_equal(x, y) for x, y in zip(outputs(spacy.load(int8_dir))["vectors"],
                                                            after["vectors"]))
    nlp.to_disk(tmp_path / "again")
    assert_identical(outputs(spacy.load(tmp_path / "again")), after)
    assert_identical(outputs(pickle.loads(pickle.dumps(nlp))), after)
    fresh = spacy.load(out)
    fresh.from_bytes(nlp.to_bytes())
    assert_identical(outputs(fresh), after)
    texts = ["Google released TensorFlow .", "", "Paris is in France ."]
    called = [[(e.text, e.label_) for e in nlp(t).ents] for t in texts]
    assert [[(e.text, e.label_) for e in d.ents] for d in nlp.pipe(texts, batch_size=2)] == called
    # a text file of tokenised sentences works too; --calibration-size takes the first ones
    text = tmp_path / "calibration.txt"
    text.write_text("\n".join(" ".join(words) for _, words, _ in SENTENCES) + "\n", encoding="utf8")
    result = quantize(model=fp32_dir, output=tmp_path / "from_text", calibration=text, calibration_size=2)
    assert result["smoothed"] == {"transformer": 37} and result["calibration_sentences"] == 2


def test_quantize_calibration_errors_name_the_setting(fp32_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "out"
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(out), "--calibration", str(tmp_path / "none.spacy")])
    assert res.exit_code == 1 and f"calibration: {tmp_path / 'none.spacy'} does not exist" in res.output
    (tmp_path / "ok.txt").write_text("Paris is in France .\n", encoding="utf8")
    for bad in ("0", "1.5", "-0.2"):
        res = runner.invoke(app, ["quantize", str(fp32_dir), str(out), "--calibration",
                                  str(tmp_path / "ok.txt"), "--smoothing", bad])
        assert res.exit_code == 1 and f"smoothing must be a number in (0, 1], got {float(bad)!r}" in res.output
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(out), "--calibration",
                              str(tmp_path / "ok.txt"), "--calibration-size", "0"])
    assert res.exit_code == 1 and "calibration_size must be a whole number >= 1, got 0" in res.output
    columns = tmp_path / "columns.txt"
    columns.write_text("Paris B-LOC\nis O\n", encoding="utf8")
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(out), "--calibration", str(columns)])
    assert res.exit_code == 1 and f"calibration: Text {columns} is a token/tag column file" in res.output
    (tmp_path / "blank.txt").write_text("\n\n", encoding="utf8")
    res = runner.invoke(app, ["quantize", str(fp32_dir), str(out), "--calibration", str(tmp_path / "blank.txt")])
    assert res.exit_code == 1 and "holds no sentence" in res.output
    assert not out.exists()


@pytest.fixture(scope="module")
def int8_package(int8_dir, tmp_path_factory):
    """``spacy package`` of the quantized copy (the package's source folder, not built)."""
    out = tmp_path_factory.mktemp("package")
    res = subprocess.run(
        [sys.executable, "-m", "spacy", "package", str(int8_dir), str(out), "--name", "int8_tiny",
         "--version", "0.0.1", "--build", "none"],
        capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    return out / "en_int8_tiny-0.0.1"


def test_spacy_package_of_the_quantized_copy(int8_dir, int8_package):
    package = int8_package
    requirements = spacy.util.load_meta(package / "meta.json")["requirements"]
    # the package requires spacy_crossner, where the int8 architecture is registered
    assert any(r.startswith("spacy_crossner") for r in requirements), requirements
    data = package / "en_int8_tiny" / "en_int8_tiny-0.0.1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        packaged = spacy.load(data)
    assert n_int8(packaged) == 37
    assert_identical(outputs(packaged), outputs(spacy.load(int8_dir)))


LOAD_BY_NAME = """
import json, sys, warnings
warnings.simplefilter("ignore")
import spacy
import en_int8_tiny
nlp = spacy.load("en_int8_tiny")
from spacy_crossner.models.pytorch_int8 import count_int8_linears
docs = list(nlp.pipe(json.loads(sys.argv[1])))
print(json.dumps({
    "file": en_int8_tiny.__file__,
    "name": nlp.meta["name"],
    "int8": count_int8_linears(nlp.get_pipe("transformer").model.transformer),
    "ents": [[(e.start, e.end, e.label_) for e in d.ents] for d in docs],
    "scores": [[float(p) for p in d.spans["crossner"].attrs["scores"]] for d in docs],
}))
"""


def test_the_built_package_installs_and_loads_by_name(int8_dir, int8_package, tmp_path):
    """What a deployment does with the package: pip builds and installs it (offline, in a
    folder of its own: the test environment is not changed), and a fresh process loads it by
    name, the int8 architecture found through spacy_crossner's entry points."""
    site = tmp_path / "site"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(site), str(int8_package)],
        capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert list(site.glob("en_int8_tiny-0.0.1*-info"))
    texts = [" ".join(words) for _, words, _ in SENTENCES] + ["", "Google released TensorFlow in Paris ."]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    res = subprocess.run([sys.executable, "-c", LOAD_BY_NAME, json.dumps(texts)], capture_output=True,
                         text=True, timeout=600, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert loaded["file"].startswith(str(site)) and loaded["name"] == "int8_tiny"
    assert loaded["int8"] == 37
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        docs = list(spacy.load(int8_dir).pipe(texts))
    # the same int8 weights: the same entities and probabilities, exactly
    assert loaded["ents"] == [[[e.start, e.end, e.label_] for e in d.ents] for d in docs]
    assert loaded["scores"] == [[float(p) for p in d.spans["crossner"].attrs["scores"]] for d in docs]
    assert any(loaded["ents"])
