"""Composed configs (issue 46 item 1): ``init-config`` layers the package's pieces, and every
config the study and the project train fills to the same training as the file its numbers were
measured with."""
import hashlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import spacy
from spacy.cli.init_config import fill_config as spacy_fill_config
from thinc.api import Config
from typer.testing import CliRunner

from spacy_crossner.__main__ import app
from spacy_crossner.init_config import (
    ARCHS, CONFIGS_DIR, DEFAULT_MIX, FEATURES, SETTINGS, UNSUPPORTED, InitConfigError, compose, config_text, fill,
    init_config,
)

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "project" / "scripts"))
import study_configs  # noqa: E402  (project/scripts/study_configs.py: the study's configs)

# The commit whose configs/*.cfg the study's numbers were trained with (the last commit that
# kept them as hand-written files), and the fingerprint of each filled there (see fingerprint()).
REFERENCE_COMMIT = "e9d9b25"
REFERENCE = {
    "bilstm_target": "86724a52376346eb",
    "bilstm_target_sm": "197c22922b8a8914",
    "bilstm_joint": "f8dd6e9a5fecb477",
    "bilstm_joint_sm": "a36847682fadfcfd",
    "bilstm_joint_trf": "070a61032fd6dbf7",
    "bilstm_pretrain": "d8cffb989dc7f9ab",
    "bilstm_finetune": "4ef596b8b0b11fc8",
    "trf_target": "a60b45c9e7f85135",
    "trf_joint": "75b07131f789c508",
    "trf_pretrain": "2531477f22b8be37",
    "trf_finetune": "db9a893ab46135ef",
    "multi_cell_sda": "7ea71244a0afb187",
    "multi_cell_sda_sm": "ed4663ad4d531be6",
    "multi_cell_sda_trf": "28ab275dc41e66d3",
    "multi_cell_uda": "cae0b02ba742564a",
    "pgn_sda": "5821909141bb14c0",
    "pgn_sda_sm": "dd1b68eea1aa7705",
    "pgn_sda_paper": "c592bc736b875fa0",
    "pgn_uda": "40c35dd59f74afed",
    "moee_zero": "d7cca4477807879a",
    "moee_zero_sm": "28dd1d8991a44779",
    "moee_zero_trf": "14045f72fe6706ba",
    "label_aware_source": "94559061ec073576",
    "label_aware_target": "58881cf80451add7",
}


def flat(config, prefix=()):
    """{dotted key: value} of a config (comments and key order are gone by construction)."""
    for key, value in config.items():
        if isinstance(value, dict) and value:
            yield from flat(value, prefix + (key,))
        else:
            yield ".".join(prefix + (key,)), value


def filled_pair(config):
    """The filled config with its variables, and the same interpolated (what training reads)."""
    filled = fill(config)
    return dict(flat(filled)), dict(flat(Config(filled).interpolate()))


def fingerprint(config) -> str:
    filled = fill(config)
    raw = json.dumps(filled, sort_keys=True)
    interpolated = json.dumps(Config(filled).interpolate(), sort_keys=True)
    return hashlib.sha256((raw + "\n" + interpolated).encode()).hexdigest()[:16]


def reference_text(name: str, commit: str = REFERENCE_COMMIT):
    """configs/NAME.cfg as the study trained it, from git history; None without a git checkout."""
    try:
        done = subprocess.run(["git", "show", f"{commit}:configs/{name}.cfg"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def generated(name: str) -> Config:
    choice = study_configs.STUDY_CONFIGS[name]
    return compose(arch=choice.arch, features=choice.features, setting=choice.setting,
                   overrides=choice.overrides, mix=choice.mix, fine_tune=choice.fine_tune)


@pytest.mark.parametrize("name", sorted(study_configs.AFTER_STUDY))
def test_configs_after_the_study_are_their_base_with_another_optimizer_or_features(name):
    """An entry added after the study (issue 47) trains what its base trains, with only the
    optimizer, the training corpus's augmenter or the token features changed: the same settings
    outside [training.optimizer] / [corpora.train.augmenter] / the crossner model's tok2vec, and
    that part not the base's."""
    new, base = fill(generated(name)), fill(generated(study_configs.AFTER_STUDY[name]))
    if study_configs.STUDY_CONFIGS[name].features != study_configs.STUDY_CONFIGS[study_configs.AFTER_STUDY[name]].features:
        tok2vec = new["components"]["crossner"]["model"].pop("tok2vec")
        base_tok2vec = base["components"]["crossner"]["model"].pop("tok2vec")
        assert new.to_str(interpolate=False) == base.to_str(interpolate=False)
        # the base's features wrapped: the listener as it was, the shape beside it
        assert tok2vec["@architectures"] == "spacy_crossner.WithShape.v1"
        assert tok2vec["tok2vec"] == base_tok2vec
        return
    if study_configs.STUDY_CONFIGS[name].fine_tune is None:
        augmenter = new["corpora"]["train"].pop("augmenter")
        assert base["corpora"]["train"].pop("augmenter") is None
        assert new.to_str(interpolate=False) == base.to_str(interpolate=False)
        assert augmenter["@augmenters"] == "spacy_crossner.mention_replace.v1"
        assert augmenter["from_corpus"] is True and augmenter["seed"] == "${system.seed}"
        return
    new_opt, base_opt = new["training"].pop("optimizer"), base["training"].pop("optimizer")
    assert new_opt != base_opt
    assert new.to_str(interpolate=False) == base.to_str(interpolate=False)
    # and the variant's optimizer is the one of its FineTune
    tune = study_configs.STUDY_CONFIGS[name].fine_tune
    if (tune.head_lr_multiplier, tune.layer_decay) == (1.0, 1.0):  # one rate for all: Adam itself
        assert new_opt["@optimizers"] == base_opt["@optimizers"] == "Adam.v1"
    else:
        assert new_opt["@optimizers"] == "spacy_crossner.GroupedAdam.v1"
        assert (new_opt["head_lr_multiplier"], new_opt["layer_decay"]) == (tune.head_lr_multiplier, tune.layer_decay)
    if tune.schedule == "constant":
        assert new_opt["learn_rate"] == base_opt["learn_rate"]
    else:
        assert new_opt["learn_rate"]["warmup_steps"] == tune.warmup_steps


def test_the_mapping_covers_every_config_the_study_and_project_train():
    import study  # project/scripts/study.py

    assert set(study_configs.STUDY_CONFIGS) == set(REFERENCE) | set(study_configs.AFTER_STUDY)
    assert not set(REFERENCE) & set(study_configs.AFTER_STUDY)
    project = (ROOT / "project" / "project.yml").read_text()
    named = set(re.findall(r"configs/\$\{vars\.(\w+)\}", project))
    defaults = dict(re.findall(r'^  (config_\w+): "?(\w+)"?', project, re.M))
    used = {defaults[key] for key in named}
    used |= set(re.findall(r"\.\./configs/([a-z0-9_]+)\.cfg", project))
    assert {"bilstm_target", "trf_joint", "label_aware_source"} <= used
    for method in study.METHODS + study.STAGE1:
        if not method.kind.startswith("spacy"):
            used.add(method.config)
            if "sm" in method.features:
                used.add(f"{method.config}_sm")
    assert used - set(study_configs.STUDY_CONFIGS) == set()


# Changes since the study, made on purpose, as (the study's line, today's): the transformer
# pooling is spacy_crossner.reduce_first.v1, thinc's reduce_first.v1 but for a token without word
# pieces (zeros where thinc's fails the batch; tests/test_pooling.py), so the same training on
# the study's data.
SINCE_STUDY = [('@layers = "reduce_first.v1"', '@layers = "spacy_crossner.reduce_first.v1"')]


def as_today(text: str) -> str:
    for then, now in SINCE_STUDY:
        text = text.replace(then, now)
    return text


def as_the_study(config: Config) -> Config:
    text = config.to_str(interpolate=False)
    for then, now in SINCE_STUDY:
        text = text.replace(now, then)
    return Config().from_str(text, interpolate=False)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_study_config_fills_to_the_same_training_as_the_file_the_study_used(name):
    new = generated(name)
    old_text = reference_text(name)
    if old_text is not None:
        old_text = as_today(old_text)
        # the full comparison: every setting, with its variables and interpolated
        old = Config().from_str(old_text, interpolate=False)
        (old_raw, old_interp), (new_raw, new_interp) = filled_pair(old), filled_pair(new)
        differ = sorted(k for k in set(old_raw) | set(new_raw) if old_raw.get(k, "<absent>") != new_raw.get(k, "<absent>"))
        assert differ == [], {k: (old_raw.get(k, "<absent>"), new_raw.get(k, "<absent>")) for k in differ}
        assert old_interp == new_interp
        if fingerprint(as_the_study(old)) != REFERENCE[name]:
            # a registered function gained a default argument: both sides fill it, so the
            # comparison above holds, but the fingerprints for checkouts without git are stale
            warnings.warn(f"REFERENCE[{name!r}] is stale: it is now {fingerprint(old)!r}")
        return
    # without git history (an sdist, a shallow clone): the fingerprint of the same comparison
    assert fingerprint(as_the_study(new)) == REFERENCE[name], (
        f"{name} no longer fills to the config the study trained; compare with "
        f"`git show {REFERENCE_COMMIT}:configs/{name}.cfg`")


def test_written_study_configs_are_what_init_config_writes(tmp_path):
    paths = study_configs.write_configs(tmp_path, ["pgn_sda_paper", "trf_finetune"])
    text = paths[0].read_text()
    assert text.startswith("# ") and "spacy train configs/pgn_sda_paper.cfg" in text
    config = Config().from_str(text, interpolate=False)
    assert config["training"]["optimizer"]["@optimizers"] == "SGD.v1"
    assert "beta1" not in config["training"]["optimizer"], "a block naming another function replaces the one under it"
    assert Config().from_str(paths[1].read_text(), interpolate=False)["components"]["crossner"]["source"] == "${paths.pretrained}"
    before = paths[0].stat().st_mtime_ns
    study_configs.write_configs(tmp_path, ["pgn_sda_paper"])
    assert paths[0].stat().st_mtime_ns == before, "an unchanged config is not rewritten"
    assert study_configs.main([str(tmp_path), "nope"]) == 1


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_choice_composes_the_architecture_and_setting_asked_for(arch, setting):
    if (arch, setting) in UNSUPPORTED:
        with pytest.raises(InitConfigError, match=f"no objective for the {setting} setting"):
            compose(arch=arch, features="wordchar", setting=setting)
        return
    for features in FEATURES:
        config = compose(arch=arch, features=features, setting=setting)
        crossner = config["components"]["crossner"]
        if setting == "finetune":
            assert set(config["components"]) == set(config["nlp"]["pipeline"])
            assert all(c == {"source": "${paths.pretrained}"} for c in config["components"].values())
            continue
        assert crossner["model"]["@architectures"] in ARCHS[arch].help
        assert crossner["model"]["tok2vec"]["@architectures"]
        assert config["nlp"]["pipeline"][-1] == "crossner"
        assert set(config["nlp"]["pipeline"]) == set(config["components"])
        assert config["training"]["optimizer"]["@optimizers"]
        assert "path" in config["corpora"]["dev"]


def test_static_vectors_fragment_switches_vectors_on():
    tok2vec = compose(arch="bilstm", features="wordchar_vectors", setting="joint")["components"]["crossner"]["model"]["tok2vec"]
    assert tok2vec["include_static_vectors"] is True and tok2vec["@architectures"] == "spacy_crossner.WordCharEmbed.v1"


def test_written_config_is_complete_spacy_fills_nothing_more(tmp_path):
    out = tmp_path / "joint.cfg"
    init_config(out, arch="multi_cell", features="wordchar", setting="joint")
    refilled = tmp_path / "refilled.cfg"
    spacy_fill_config(refilled, out, silent=True)
    ours = dict(flat(Config().from_disk(out, interpolate=False)))
    theirs = dict(flat(Config().from_disk(refilled, interpolate=False)))
    assert ours == theirs


def test_written_config_builds_a_pipeline_with_validation(tmp_path):
    out = tmp_path / "target.cfg"
    init_config(out, arch="bilstm", features="wordchar", setting="target")
    config = spacy.util.load_config(out, overrides={"paths.target_dev": "dev.spacy",
                                                    "paths.target_train": "train.spacy"})
    nlp = spacy.util.load_model_from_config(config, auto_fill=False, validate=True)
    assert nlp.pipe_names == ["crossner"]
    assert nlp.get_pipe("crossner").model.name


def test_overrides_are_laid_over_the_pieces():
    config = compose(arch="bilstm", features="wordchar", setting="joint",
                     overrides={"training.max_steps": 7, "components.crossner.model.hidden_size": 64})
    assert config["training"]["max_steps"] == 7
    assert config["components"]["crossner"]["model"]["hidden_size"] == 64
    with pytest.raises(InitConfigError, match="dotted setting"):
        compose(arch="bilstm", features="wordchar", setting="joint", overrides={"max_steps": 7})


def test_header_says_how_it_was_made_and_how_to_train_it():
    text = config_text(arch="pgn", features="wordchar", setting="uda", output="out.cfg",
                       overrides={"training.max_steps": 5})
    lines = text.splitlines()
    assert lines[1] == ("# Made by: python -m spacy_crossner init-config out.cfg --arch pgn --features wordchar "
                        "--setting uda --training.max_steps 5")
    assert lines[2].startswith("# Train:   python -m spacy train out.cfg --paths.source_train")
    assert "--paths.target_raw" in lines[2]


runner = CliRunner()


def test_cli_writes_the_config(tmp_path):
    out = tmp_path / "c.cfg"
    result = runner.invoke(app, ["init-config", str(out), "--arch", "trf", "--features", "transformer",
                                 "--setting", "pretrain", "--training.max_steps", "11"])
    assert result.exit_code == 0, result.output
    config = Config().from_disk(out, interpolate=False)
    assert config["training"]["max_steps"] == 11
    assert config["components"]["crossner"]["target_domain"] is None
    assert config["nlp"]["pipeline"] == ["transformer", "crossner"]


@pytest.mark.parametrize("args,message", [
    (["--arch", "lstm", "--setting", "joint"], "Unknown architecture (--arch) 'lstm'; choose one of: bilstm, trf"),
    (["--arch", "bilstm", "--setting", "joint", "--features", "glove"], "choose one of: wordchar, wordchar_vectors"),
    (["--arch", "bilstm", "--setting", "sda"], "Unknown setting (--setting) 'sda'; choose one of: target, joint"),
    (["--arch", "bilstm", "--setting", "uda"], "use --arch multi_cell or pgn"),
])
def test_cli_names_the_bad_choice_and_the_valid_ones(tmp_path, args, message):
    result = runner.invoke(app, ["init-config", str(tmp_path / "c.cfg"), *args])
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output and not (tmp_path / "c.cfg").exists()


def test_cli_keeps_an_existing_file_without_force(tmp_path):
    out = tmp_path / "c.cfg"
    out.write_text("mine")
    result = runner.invoke(app, ["init-config", str(out), "--arch", "bilstm", "--setting", "joint"])
    assert result.exit_code == 1 and "--force" in result.output and out.read_text() == "mine"
    result = runner.invoke(app, ["init-config", str(out), "--arch", "bilstm", "--setting", "joint", "--force"])
    assert result.exit_code == 0 and out.read_text().startswith("# ")


def test_every_option_has_help():
    result = runner.invoke(app, ["init-config", "--help"])
    text = " ".join(result.output.split())
    for option in ("--arch", "--features", "--setting", "--force"):
        assert option in text
    for name in (*ARCHS, *FEATURES, *SETTINGS):
        assert f"{name}:" in text


def test_pieces_ship_with_the_package():
    globs = re.search(r'package_data=\{"spacy_crossner": \[([^\]]*)\]', (ROOT / "setup.py").read_text()).group(1)
    patterns = re.findall(r'"([^"]+)"', globs)
    pieces = [p.relative_to(CONFIGS_DIR.parent) for p in CONFIGS_DIR.rglob("*.cfg")]
    assert pieces and all(any(p.match(pattern) and len(p.parts) == len(Path(pattern).parts) for pattern in patterns)
                          for p in pieces)
    # and they stay short: a setting lives in one piece
    assert sum(len(p.read_text().splitlines()) for p in CONFIGS_DIR.rglob("*.cfg")) < 700


def test_the_headers_command_writes_the_same_config(tmp_path):
    """The "Made by" line is a command that rewrites the file, overrides (a whole optimizer
    block included) and all."""
    import shlex

    first = study_configs.write_config("pgn_sda_paper", tmp_path)
    made = first.read_text().splitlines()[1].split("# Made by: ", 1)[1]
    args = shlex.split(made)[3:]  # after python -m spacy_crossner
    again = tmp_path / "again.cfg"
    args[1] = str(again)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    body = lambda path: [l for l in path.read_text().splitlines() if not l.startswith("#")]  # noqa: E731
    assert body(again) == body(first)


def test_a_fingerprint_sees_one_changed_setting():
    """The no-git fallback compares fingerprints: one setting changed anywhere changes it."""
    config = generated("bilstm_joint")
    assert fingerprint(config) == fingerprint(generated("bilstm_joint"))
    changed = compose(arch="bilstm", features="wordchar", setting="joint",
                      overrides={"training.batcher.size": 17})
    assert fingerprint(changed) != fingerprint(config)


@pytest.mark.parametrize("arch,setting,domains", [
    ("bilstm", "zero", {"news"}),        # not a study config: zero-shot BiLSTM-CRF
    ("pgn", "target", {"ai"}),           # not a study config: PGN on the target alone
    ("moee", "joint", {"news", "ai"}),   # not a study config: MoEE with target labels
])
def test_a_choice_outside_the_study_trains_on_any_corpus(tmp_path, arch, setting, domains):
    """Domains named news and ai (not CrossNER's), set the way the header says."""
    from spacy.cli.train import train

    from util import write_corpus

    paths = write_corpus(tmp_path)
    out = tmp_path / "c.cfg"
    init_config(out, arch=arch, features="wordchar", setting=setting)
    needed = Config().from_disk(out, interpolate=False)["paths"]
    overrides = {f"paths.{k}": v for k, v in paths.items() if k in needed}
    overrides.update({"training.max_steps": 2, "training.max_epochs": 0, "training.eval_frequency": 1,
                      "components.crossner.model.hidden_size": 16,
                      "components.crossner.model.tok2vec.word_width": 16,
                      "components.crossner.model.tok2vec.word_rows": 200})
    if setting == "zero":
        overrides.update({"vars.source_domain": "news", "vars.target_domains": ["ai"]})
    train(out, tmp_path / "model", overrides=overrides, use_gpu=-1)
    nlp = spacy.load(tmp_path / "model" / "model-last")
    assert set(nlp.get_pipe("crossner").domains) == domains
    if setting == "zero":
        assert nlp.get_pipe("crossner").cfg["domain_aliases"] == {"ai": "news"}


def test_joint_mixes_by_size_by_default_and_keeps_v1_on_request():
    sized = compose(arch="bilstm", features="wordchar", setting="joint")
    train = sized["corpora"]["train"]
    assert train["@readers"] == "spacy_crossner.MultiDomainCorpus.v2" and train["mix"] == DEFAULT_MIX == "sqrt"
    assert all("upsample" not in section for section in train["domains"].values())
    assert "target_upsample" not in sized["vars"]
    fixed = compose(arch="bilstm", features="wordchar", setting="joint", mix="upsample")["corpora"]["train"]
    assert fixed["@readers"] == "spacy_crossner.MultiDomainCorpus.v1"
    assert fixed["domains"]["target"]["upsample"] == "${vars.target_upsample}"
    # several sources: every labelled corpus is mixed, none keeps a fixed factor
    several = compose(arch="bilstm", features="wordchar", setting="joint", source_count=2, mix="equal")
    assert several["corpora"]["train"]["mix"] == "equal"
    assert all("upsample" not in s for s in several["corpora"]["train"]["domains"].values())
    # the header says which mix the config has
    lines = config_text(arch="bilstm", features="wordchar", setting="joint", output="c.cfg").splitlines()
    assert lines[1].endswith("--setting joint --mix sqrt") and lines[4].startswith("# Mix: sqrt: ")


def test_a_sized_mix_reads_a_large_target_at_its_share(tmp_path):
    # 40 source docs, 90 target docs: sqrt gives the target sqrt(90) / (sqrt(40) + sqrt(90)) = 60 % of a pass
    from spacy.tokens import Doc, DocBin
    from spacy.vocab import Vocab

    vocab = Vocab()
    paths = {}
    for name, count in (("source", 40), ("target", 90)):
        docs = []
        for i in range(count):
            doc = Doc(vocab, words=[name, str(i)], ents=["B-X", "O"])
            doc._.domain = name
            docs.append(doc)
        paths[name] = tmp_path / f"{name}.spacy"
        DocBin(docs=docs, store_user_data=True).to_disk(paths[name])
    out = tmp_path / "joint.cfg"
    init_config(out, arch="bilstm", features="wordchar", setting="joint")
    config = spacy.util.load_config(out, overrides={"paths.source_train": str(paths["source"]),
                                                    "paths.target_train": str(paths["target"]),
                                                    "paths.target_dev": str(paths["target"])}, interpolate=True)
    corpus = spacy.util.registry.resolve(config["corpora"])["train"]
    nlp = spacy.blank("en")
    domains = [eg.reference._.domain for eg in corpus(nlp)]
    assert len(domains) == 130
    assert domains.count("target") == round(130 * 90 ** 0.5 / (40 ** 0.5 + 90 ** 0.5))


@pytest.mark.parametrize("kwargs,message", [
    (dict(setting="target", mix="sqrt"), "the target setting has no labelled target beside its sources"),
    (dict(setting="joint", mix="sqrtt"), "Unknown mix (--mix) 'sqrtt'; choose one of: sqrt, size, equal, upsample"),
    (dict(setting="joint", overrides={"vars.target_upsample": 5}), "--vars.target_upsample is the fixed factor"),
])
def test_mix_errors_name_the_option(kwargs, message):
    with pytest.raises(InitConfigError, match=re.escape(message)):
        compose(arch="bilstm", features="wordchar", **kwargs)


def test_mix_on_the_command_line(tmp_path):
    out = tmp_path / "c.cfg"
    result = CliRunner().invoke(app, ["init-config", str(out), "--arch", "bilstm", "--setting", "joint",
                                      "--mix", "upsample", "--vars.target_upsample", "4"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "--mix upsample" in text.splitlines()[1] and "target_upsample = 4" in text
    assert 'MultiDomainCorpus.v1' in text
