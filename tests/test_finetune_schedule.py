"""A better fine-tune (issue 47 part 5): warm-up + linear decay that ends with training, and Adam
with a larger rate for the head and decaying rates down the encoder's layers.

The registered names are found by decorator registration (``import spacy_crossner``): the shared
test environment's package metadata predates their entry points in setup.py.
"""
import shlex

import numpy
import pytest
import spacy
import torch
from spacy.cli.train import train
from spacy.tokens import DocBin
from spacy.util import load_config_from_str, registry
from thinc.api import Adam, Linear, PyTorchWrapper_v2, chain, fix_random_seed
from torch import nn
from typer.testing import CliRunner

import spacy_crossner  # noqa: F401  (registers the optimizer and the schedule)
from spacy_crossner.__main__ import app
from spacy_crossner.init_config import FineTune, compose, config_text, fill
from spacy_crossner.optimizers import GroupedOptimizer
from util import AI, NEWS, make_doc, make_examples, minilm_pipeline

runner = CliRunner()
EPS_TERM = 1e-8 / (1 - 0.999) ** 0.5  # Adam's eps after bias correction on the first step


def rates(schedule, n):
    return [next(schedule) for _ in range(n)]


# --- the schedule ---------------------------------------------------------------------------

def test_warmup_linear_rises_to_the_rate_then_falls_to_zero_at_total_steps():
    make = registry.schedules.get("spacy_crossner.warmup_linear.v1")
    r = rates(make(initial_rate=0.001, warmup_steps=10, total_steps=110), 120)
    assert r[0] == 0.0
    assert r[5] == pytest.approx(0.0005)
    assert r[10] == pytest.approx(0.001)
    assert r[60] == pytest.approx(0.0005)
    assert r[110] == 0.0 and r[119] == 0.0
    # no warm-up: the decay alone
    assert rates(make(initial_rate=0.001, warmup_steps=0, total_steps=4), 5) == pytest.approx(
        [0.001, 0.00075, 0.0005, 0.00025, 0.0])


@pytest.mark.parametrize("settings,message", [
    ({"total_steps": 0}, "training.max_steps = 0 ends training by max_epochs"),
    ({"total_steps": 10}, r"total_steps \(10, usually \$\{training.max_steps\}\) must be larger than warmup_steps \(10\)"),
    ({"warmup_steps": -1}, "warmup_steps must be a whole number >= 0"),
    ({"initial_rate": 0.0}, "initial_rate must be > 0"),
])
def test_warmup_linear_refuses_settings_that_cannot_schedule(settings, message):
    make = registry.schedules.get("spacy_crossner.warmup_linear.v1")
    args = {"initial_rate": 0.001, "warmup_steps": 10, "total_steps": 100, **settings}
    with pytest.raises(ValueError, match=message):
        make(**args)


def resolved_training(text, **overrides):
    config = load_config_from_str(text, overrides=overrides, interpolate=True)
    return registry.resolve(config["training"])


def test_the_decay_ends_at_training_max_steps_also_when_it_is_overridden():
    text = config_text(arch="trf", features="transformer", setting="finetune",
                       fine_tune=FineTune(schedule="warmup_linear", warmup_steps=5))
    assert "total_steps = ${training.max_steps}" in text
    for max_steps in (20, 40):
        optimizer = resolved_training(text, **{"training.max_steps": max_steps})["optimizer"]
        seen = [optimizer.learn_rate]
        for _ in range(max_steps + 2):
            optimizer.step_schedules()  # what spaCy's training loop calls after each step
            seen.append(optimizer.learn_rate)
        assert seen[0] == 0.0 and seen[5] == pytest.approx(5e-05)  # the piece's learn_rate
        assert seen[max_steps - 1] > 0 and seen[max_steps] == 0.0
    with pytest.raises(ValueError, match="training.max_steps = 0"):
        resolved_training(text, **{"training.max_steps": 0, "training.max_epochs": 3})


# --- the grouped optimizer on a toy encoder + head ---------------------------------------------

class ToyEncoder(nn.Module):
    """Parameters named as a Hugging Face BERT's: embeddings.*, encoder.layer.N.*"""

    def __init__(self, width=4, n_layers=3):
        super().__init__()
        self.embeddings = nn.Linear(width, width)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([nn.Linear(width, width) for _ in range(n_layers)])

    def forward(self, X):  # X: (n, width)
        X = self.embeddings(X)
        for layer in self.encoder.layer:
            X = torch.tanh(layer(X))
        return X


def toy(seed=0):
    """A thinc model: the toy encoder (a torch shim) then a thinc Linear head; and the torch
    module, to read the encoder's parameters."""
    fix_random_seed(seed)  # torch's and thinc's initialisation
    module = ToyEncoder()
    model = chain(PyTorchWrapper_v2(module), Linear(nO=2, nI=4))
    model.initialize()
    return model, module


def snapshot(model, module):
    head = model.layers[1]
    params = {name: p.detach().numpy().copy() for name, p in module.named_parameters()}
    grads = {name: (p.grad.numpy().copy() if p.grad is not None else None) for name, p in module.named_parameters()}
    for name in head.param_names:
        params[name] = head.get_param(name).copy()
        grads[name] = head.get_grad(name).copy() if head.has_grad(name) else None
    return params, grads


def one_step(model, module, optimizer, seed=1):
    rng = numpy.random.default_rng(seed)
    X = rng.normal(size=(5, 4)).astype("float32")
    dY = rng.normal(size=(5, 2)).astype("float32")
    _, backprop = model.begin_update(X)
    backprop(dY)
    before, grads = snapshot(model, module)
    model.finish_update(optimizer)
    after, _ = snapshot(model, module)
    return before, grads, after


def resolve_optimizer(block):
    return registry.resolve({"optimizer": block})["optimizer"]


def test_default_settings_update_bit_identically_to_adam():
    settings = {"learn_rate": 0.001, "L2": 0.01, "grad_clip": 1.0, "use_averages": False}
    plain = resolve_optimizer({"@optimizers": "Adam.v1", **settings})
    grouped = resolve_optimizer({"@optimizers": "spacy_crossner.GroupedAdam.v1", **settings})
    assert isinstance(grouped, GroupedOptimizer)
    (m1, t1), (m2, t2) = toy(), toy()
    for step in range(3):
        _, _, a = one_step(m1, t1, plain, seed=step)
        _, _, b = one_step(m2, t2, grouped, seed=step)
        assert a.keys() == b.keys()
        for name in a:
            assert numpy.array_equal(a[name], b[name]), name


def test_head_and_layers_step_at_their_own_rates():
    lr, mult, decay = 0.001, 10.0, 0.5
    optimizer = resolve_optimizer({
        "@optimizers": "spacy_crossner.GroupedAdam.v1", "learn_rate": lr, "L2": 0.0, "grad_clip": 0.0,
        "head_lr_multiplier": mult, "layer_decay": decay, "num_layers": 3,
    })
    model, module = toy()
    before, grads, after = one_step(model, module, optimizer)
    expected_rate = {
        "embeddings.weight": lr * decay ** 3, "embeddings.bias": lr * decay ** 3,
        "encoder.layer.0.weight": lr * decay ** 2, "encoder.layer.0.bias": lr * decay ** 2,
        "encoder.layer.1.weight": lr * decay, "encoder.layer.1.bias": lr * decay,
        "encoder.layer.2.weight": lr, "encoder.layer.2.bias": lr,
        "W": lr * mult, "b": lr * mult,
    }
    assert set(expected_rate) == set(after)
    for name, rate in expected_rate.items():
        g = grads[name]
        assert g is not None and numpy.abs(g).min() > 0, name
        # Adam's first step, by hand: m = (1-b1) g, v = (1-b2) g^2, bias-corrected
        by_hand = -rate * g / (numpy.abs(g) + EPS_TERM)
        numpy.testing.assert_allclose(after[name] - before[name], by_hand, rtol=1e-4, atol=1e-10, err_msg=name)
    # and against thinc's Adam at that rate, for the head
    W, dW = before["W"].copy(), grads["W"].copy()
    adam = Adam(lr * mult, L2=0.0, grad_clip=0.0, use_averages=False)
    W_adam, _ = adam((0, "W"), W, dW)
    numpy.testing.assert_allclose(after["W"], W_adam, rtol=1e-6, atol=1e-9)


def test_the_rate_is_a_step_size_not_a_gradient_scale():
    """Adam normalises the gradient's scale away: the same step with gradients ten times larger
    moves the weights the same; the rate multiplier moves them ten times further."""
    def delta(scale, mult):
        optimizer = resolve_optimizer({"@optimizers": "spacy_crossner.GroupedAdam.v1", "learn_rate": 0.001,
                                       "L2": 0.0, "grad_clip": 0.0, "head_lr_multiplier": mult})
        w = numpy.ones((3,), dtype="float32")
        g = numpy.asarray([0.1, -0.2, 0.3], dtype="float32") * scale
        new, _ = optimizer((0, "W"), w.copy(), g)
        return new - w
    numpy.testing.assert_allclose(delta(10.0, 1.0), delta(1.0, 1.0), rtol=1e-4)
    numpy.testing.assert_allclose(delta(1.0, 10.0), 10 * delta(1.0, 1.0), rtol=1e-4)


@pytest.mark.parametrize("settings,message", [
    ({"layer_decay": 0.0, "num_layers": 6}, r"layer_decay must be in \(0, 1\] \(got 0.0\)"),
    ({"layer_decay": -0.5, "num_layers": 6}, r"layer_decay must be in \(0, 1\]"),
    ({"layer_decay": 1.5, "num_layers": 6}, r"layer_decay must be in \(0, 1\] \(got 1.5\)"),
    ({"head_lr_multiplier": 0.0}, r"head_lr_multiplier must be > 0 \(got 0.0\)"),
    ({"head_lr_multiplier": -2.0}, "head_lr_multiplier must be > 0"),
    ({"layer_decay": 0.9}, "layer_decay = 0.9 needs num_layers"),
    ({"num_layers": 0}, "num_layers must be a whole number >= 1"),
    ({"layer_pattern": "layer("}, "layer_pattern 'layer\\(' is not a regular expression"),
    ({"layer_pattern": r"layer\.\d+"}, "layer_pattern .* needs a group"),
])
def test_settings_out_of_range_are_errors_naming_the_setting(settings, message):
    with pytest.raises(ValueError, match=r"\[training.optimizer\] " + message):
        resolve_optimizer({"@optimizers": "spacy_crossner.GroupedAdam.v1", **settings})


def test_a_layer_count_that_does_not_match_the_encoder_is_an_error():
    base = {"@optimizers": "spacy_crossner.GroupedAdam.v1", "layer_decay": 0.8}
    model, module = toy()
    with pytest.raises(ValueError, match=r"layer 2 .* num_layers = 2: set num_layers .* 3 or more"):
        one_step(model, module, resolve_optimizer({**base, "num_layers": 2}))
    model, module = toy()
    optimizer = resolve_optimizer({**base, "num_layers": 5})
    one_step(model, module, optimizer)
    with pytest.raises(ValueError, match=r"num_layers = 5, but the encoder's top layer is 2 .*set num_layers = 3"):
        one_step(model, module, optimizer, seed=2)


def test_group_rates_without_an_encoder_are_an_error():
    optimizer = resolve_optimizer({"@optimizers": "spacy_crossner.GroupedAdam.v1", "head_lr_multiplier": 10.0})
    head = Linear(nO=2, nI=3)
    head.initialize()
    for step in range(2):
        _, backprop = head.begin_update(numpy.ones((2, 3), dtype="float32"))
        backprop(numpy.ones((2, 2), dtype="float32"))
        if step == 0:
            head.finish_update(optimizer)
        else:
            with pytest.raises(ValueError, match="no parameter updated in the first step is an encoder's"):
                head.finish_update(optimizer)


def test_minilm_parameters_fall_in_the_groups_they_belong_to():
    """On the bundled MiniLM and the crossner CRF head, in spaCy's training-loop order."""
    fix_random_seed(0)
    nlp = minilm_pipeline({"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": True,
                           "dropout": 0.0})
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    optimizer = resolve_optimizer({"@optimizers": "spacy_crossner.GroupedAdam.v1", "learn_rate": 1e-4,
                                   "head_lr_multiplier": 10.0, "layer_decay": 0.8, "num_layers": 6})
    for _ in range(2):
        nlp.update(examples, sgd=False)
        for _, proc in nlp.pipeline:
            proc.finish_update(optimizer)
    names = {}
    for (_, name), scale in optimizer.lr_scales.items():
        names[name] = scale
    assert names["embeddings.word_embeddings.weight"] == pytest.approx(0.8 ** 6)
    assert names["encoder.layer.0.attention.self.query.weight"] == pytest.approx(0.8 ** 5)
    assert names["encoder.layer.5.output.dense.weight"] == 1.0
    head = {name: scale for name, scale in names.items() if not name.startswith(("embeddings.", "encoder."))}
    assert any(name.startswith("crfs.") for name in head) and any(name.startswith("heads.") for name in head)
    assert set(head.values()) == {10.0}


# --- init-config and a real fine-tune ------------------------------------------------------------

def test_default_fine_tune_options_change_no_config():
    for arch, features, setting in (("trf", "transformer", "finetune"), ("bilstm", "wordchar", "joint")):
        assert config_text(arch=arch, features=features, setting=setting, fine_tune=FineTune()) == \
            config_text(arch=arch, features=features, setting=setting)


def test_grouped_adam_keeps_the_adam_settings_of_the_config():
    plain = fill(compose(arch="trf", features="transformer", setting="finetune"))["training"]["optimizer"]
    tuned = fill(compose(arch="trf", features="transformer", setting="finetune",
                         fine_tune=FineTune(head_lr_multiplier=5.0, layer_decay=0.9)))["training"]["optimizer"]
    assert tuned["@optimizers"] == "spacy_crossner.GroupedAdam.v1"
    assert (tuned["head_lr_multiplier"], tuned["layer_decay"], tuned["num_layers"]) == (5.0, 0.9, 6)  # MiniLM's
    assert {k: v for k, v in tuned.items() if k in plain and not k.startswith("@")} == \
        {k: v for k, v in plain.items() if not k.startswith("@")}
    # an overridden learn_rate is where the warm-up goes to
    overridden = compose(arch="trf", features="transformer", setting="finetune",
                         overrides={"training.optimizer.learn_rate": 3e-5},
                         fine_tune=FineTune(schedule="warmup_linear", warmup_steps=10))
    assert overridden["training"]["optimizer"]["learn_rate"]["initial_rate"] == 3e-5


@pytest.mark.parametrize("args,message", [
    (["--schedule", "warmup_linear"], "--warmup-steps N goes with --schedule warmup_linear"),
    (["--warmup-steps", "10"], "--warmup-steps N goes with --schedule warmup_linear"),
    (["--schedule", "cosine", "--warmup-steps", "1"], "Unknown schedule (--schedule) 'cosine'; choose one of: constant, warmup_linear"),
    (["--schedule", "warmup_linear", "--warmup-steps", "10", "--training.max_steps", "0"],
     "must be larger than --warmup-steps (10) (max_steps = 0 trains by max_epochs: give --training.max_steps N)"),
    (["--schedule", "warmup_linear", "--warmup-steps", "500", "--training.max_steps", "400"],
     "decays to 0 at training.max_steps (400), which must be larger than --warmup-steps (500)."),
    (["--head-lr-multiplier", "0"], "--head-lr-multiplier must be > 0 (got 0.0)"),
    (["--layer-decay", "1.5"], "--layer-decay must be in (0, 1] (got 1.5)"),
    (["--layer-decay", "0"], "--layer-decay must be in (0, 1] (got 0.0)"),
    (["--num-layers", "12"], "give --layer-decay too"),
    (["--features", "wordchar", "--head-lr-multiplier", "10"], "--features wordchar fine-tunes none"),
    (["--layer-decay", "0.9", "--paths.transformer", "some/hub-name"], "pass --num-layers N"),
])
def test_cli_names_the_bad_fine_tune_option(tmp_path, args, message):
    out = tmp_path / "c.cfg"
    base = ["init-config", str(out), "--arch", "trf", "--setting", "finetune"]
    if "--features" not in args:
        base += ["--features", "transformer"]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 1, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output and not out.exists()


def test_cli_help_documents_the_fine_tune_options():
    result = runner.invoke(app, ["init-config", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    text = " ".join(result.output.split())
    for option in ("--schedule", "--warmup-steps", "--head-lr-multiplier", "--layer-decay", "--num-layers"):
        assert option in text
    assert "warmup_linear:" in text and "constant:" in text


def test_the_headers_command_writes_the_same_tuned_config(tmp_path):
    first = tmp_path / "first.cfg"
    result = runner.invoke(app, ["init-config", str(first), "--arch", "trf", "--features", "transformer",
                                 "--setting", "finetune", "--schedule", "warmup_linear", "--warmup-steps", "50",
                                 "--head-lr-multiplier", "10", "--layer-decay", "0.9", "--num-layers", "6",
                                 "--training.max_steps", "500"])
    assert result.exit_code == 0, result.output
    made = first.read_text().splitlines()[1].split("# Made by: ", 1)[1]
    args = shlex.split(made)[3:]
    again = tmp_path / "again.cfg"
    args[1] = str(again)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    body = lambda path: [l for l in path.read_text().splitlines() if not l.startswith("#")]  # noqa: E731
    assert body(again) == body(first)


def test_minilm_fine_tune_with_every_setting_on_trains_saves_and_loads(tmp_path):
    """Pre-train on the source, then fine-tune on the target (its labels added: the heads are
    resized) with warm-up + decay, a 10x head rate and layer decay; a few steps, then load."""
    nlp = spacy.blank("en")
    paths = {}
    for name, sentences in (("source", NEWS), ("target", AI)):
        db = DocBin(store_user_data=True)
        for domain, words, ents in sentences:
            db.add(make_doc(nlp, words, ents, domain))
        db.to_disk(tmp_path / f"{name}.spacy")
        paths[f"paths.{name}_train"] = paths[f"paths.{name}_dev"] = str(tmp_path / f"{name}.spacy")
    short = {"training.max_steps": 3, "training.eval_frequency": 1}
    pretrain = tmp_path / "pretrain.cfg"
    pretrain.write_text(config_text(arch="trf", features="transformer", setting="pretrain", overrides=short))
    train(pretrain, tmp_path / "stage1", overrides={**paths}, use_gpu=-1)
    finetune = tmp_path / "finetune.cfg"
    tune = FineTune(schedule="warmup_linear", warmup_steps=1, head_lr_multiplier=10.0, layer_decay=0.8)
    finetune.write_text(config_text(arch="trf", features="transformer", setting="finetune", overrides=short,
                                    fine_tune=tune))
    train(finetune, tmp_path / "stage2", use_gpu=-1, overrides={
        **paths, "paths.pretrained": str(tmp_path / "stage1" / "model-last"), "vars.target_domain": "ai"})
    loaded = spacy.load(tmp_path / "stage2" / "model-last")
    optimizer = loaded.config["training"]["optimizer"]
    assert optimizer["@optimizers"] == "spacy_crossner.GroupedAdam.v1"
    assert optimizer["learn_rate"]["@schedules"] == "spacy_crossner.warmup_linear.v1"
    pipe = loaded.get_pipe("crossner")
    assert pipe.target_domain == "ai" and "product" in pipe.label_data["ai"]
    doc = loaded("Google released TensorFlow .")
    assert {e.label_ for e in doc.ents} <= set(pipe.label_data["ai"])
    loaded.to_disk(tmp_path / "again")
    again = spacy.load(tmp_path / "again")
    assert [(e.text, e.label_) for e in again("Google released TensorFlow .").ents] == \
        [(e.text, e.label_) for e in doc.ents]
