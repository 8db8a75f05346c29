"""Several labelled sources (issue 47 part 1): any number of source corpora, each with its own label
set and head, for the BiLSTM-CRF joint, the multi-cell LSTM and the transformer tagger; init-config's
numbered sources (--source-count), pre-train on every source -> fine-tune, and best-pipeline with
repeated --source. Three tiny domains with different but overlapping label sets."""
import random
from pathlib import Path

import pytest
import spacy
import torch
from spacy.tokens import DocBin
from thinc.api import Adam, Config, fix_random_seed
from typer.testing import CliRunner

from spacy_crossner.best import BestPipelineError, Budget, best_pipeline
from spacy_crossner.callbacks import make_configure_callback
from spacy_crossner.cli import app
from spacy_crossner.domains import get_domain
from spacy_crossner.init_config import InitConfigError, compose, config_text, init_config
from spacy_crossner.models.base import get_emitter
from spacy_crossner.models.head import get_head
from spacy_crossner.models.pytorch_heads import CRFHead, DomainHeads
from spacy_crossner.models.torch_layer import torch_module
from util import (
    AI, NEWS, TINY_FEATURES, blank_with, gold_ents, make_doc, make_examples, minilm_pipeline, predicted_ents,
    train, train_more,
)

# A third domain: its labels overlap both others' (organisation) and the news labels (person, location).
MUSIC = [
    ("music", "The Beatles played in London .".split(), [(0, 2, "band"), (4, 5, "location")]),
    ("music", "John Lennon wrote Imagine .".split(), [(0, 2, "musicalartist"), (3, 4, "song")]),
    ("music", "Mary Jones joined Acme Records .".split(), [(0, 2, "person"), (3, 5, "organisation")]),
]
ALL = NEWS + MUSIC + AI
LABELS = {
    "news": ["location", "organisation", "person"],
    "music": ["band", "location", "musicalartist", "organisation", "person", "song"],
    "ai": ["algorithm", "metrics", "misc", "organisation", "product", "researcher"],
}
BILSTM = {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "dropout": 0.0,
          "tok2vec": TINY_FEATURES}
MULTI_CELL = {"@architectures": "spacy_crossner.MultiCellLSTM.v1", "hidden_size": 16, "dropout": 0.0,
              "tok2vec": TINY_FEATURES}


def heads_of(model, domain):
    """The output parameters of a domain: its linear head (weight, bias) and CRF, as tensors."""
    out = []
    for layer in (model.get_ref("emitter"), get_head(model)):
        for module in torch_module(layer).modules():
            if isinstance(module, DomainHeads):
                out += [module.head(domain).weight, module.head(domain).bias]
            elif isinstance(module, CRFHead):
                out += list(module.get(domain).parameters())
    return [p.detach().clone() for p in out]


def sorted_labels(pipe):
    """The component's labels per domain, sorted (labels added after initialize keep their order)."""
    return {domain: sorted(labels) for domain, labels in pipe.cfg["labels"].items()}


def labels_by_domain(nlp, sentences, as_domain=None):
    """The labels predicted for each sentence's words, tagged as its own domain (or as_domain)."""
    from spacy.tokens import Doc

    from spacy_crossner import set_domain

    found = {}
    for domain, words, _ in sentences:
        doc = Doc(nlp.vocab, words=list(words))
        set_domain(doc, as_domain or domain)
        found.setdefault(as_domain or domain, set()).update(e.label_ for e in nlp(doc).ents)
    return found


# -- one batch, several sources ------------------------------------------------------------------


def test_a_batch_of_several_sources_scores_each_doc_with_its_own_domains_head():
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    examples = make_examples(nlp, ALL)
    nlp.initialize(lambda: examples)
    pipe = nlp.get_pipe("crossner")
    assert pipe.cfg["labels"] == LABELS
    tags = pipe.domain_tags()
    # a batch of two source domains and the target, mixed
    batch = [examples[0], examples[3], examples[6], examples[4]]
    domains = ["news", "music", "ai", "music"]
    inputs = pipe.make_input([eg.predicted for eg in batch])
    assert inputs.domains == domains
    output, _ = pipe.model.begin_update(inputs._replace(gold=pipe._gold(batch, domains)))
    loss, d_scores = pipe.get_loss(batch, output)
    d_scores = pipe.model.ops.to_numpy(d_scores)
    for i, (eg, domain) in enumerate(zip(batch, domains)):
        n = len(eg.predicted)
        # the gradient reaches exactly the doc's own domain's tags, nothing past them
        assert abs(d_scores[i, :n, :len(tags[domain])]).sum() > 0
        assert abs(d_scores[i, :, len(tags[domain]):]).sum() == 0
    # the batch's loss is its domains' own losses, each on its own head, averaged over the docs
    parts = []
    for domain in ("news", "music", "ai"):
        mine = [eg for eg, d in zip(batch, domains) if d == domain]
        mine_output, _ = pipe.model.begin_update(
            pipe.make_input([eg.predicted for eg in mine])._replace(gold=pipe._gold(mine, [domain] * len(mine))))
        parts.append(pipe.get_loss(mine, mine_output)[0] * len(mine))
    assert loss == pytest.approx(sum(parts) / len(batch), rel=1e-4)


def test_an_update_on_two_sources_trains_their_heads_only():
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    examples = make_examples(nlp, ALL)
    nlp.initialize(lambda: examples)
    model = nlp.get_pipe("crossner").model
    before = {d: heads_of(model, d) for d in LABELS}
    nlp.update([eg for eg in examples if get_domain(eg.reference) in ("news", "music")], sgd=Adam(0.01))
    for domain in LABELS:
        after = heads_of(model, domain)
        changed = any(not torch.equal(a, b) for a, b in zip(before[domain], after))
        assert changed == (domain != "ai"), domain


def test_a_shuffled_pass_of_three_corpora_mixes_them_in_its_batches(tmp_path):
    """The reader of a numbered-sources config: every corpus in the pass, batches mixing domains."""
    from spacy.util import registry

    paths = write_domains(tmp_path)
    # mix "size": each labelled doc once a pass
    config = compose(arch="bilstm", features="wordchar", setting="joint", source_count=2, mix="size")
    reader = config["corpora"]["train"]
    reader["domains"]["source_0"].update(path=paths["news"], domain=None)
    reader["domains"]["source_1"].update(path=paths["music"], domain=None)
    reader["domains"]["target"].update(path=paths["ai"], domain=None)
    reader["seed"] = 0
    corpus = registry.resolve({"r": reader})["r"]
    examples = list(corpus(spacy.blank("en")))
    assert sorted(get_domain(eg.reference) for eg in examples) == sorted(d for d, _, _ in ALL)
    batches = [examples[i:i + 3] for i in range(0, len(examples), 3)]
    assert any(len({get_domain(eg.reference) for eg in b}) >= 2 for b in batches)


# -- each architecture learns every domain's own labels -------------------------------------------


def _trained_bilstm():
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    train(nlp, make_examples(nlp, ALL), n_iter=60)
    return nlp


def _trained_multi_cell():
    nlp = blank_with({"model": MULTI_CELL, "target_domain": "ai"})
    train(nlp, make_examples(nlp, ALL), n_iter=80)
    return nlp


def _trained_transformer():
    nlp = minilm_pipeline({"@architectures": "spacy_crossner.TransformerTagger.v1", "use_crf": False,
                           "dropout": 0.0})
    examples = make_examples(nlp, ALL)
    nlp.initialize(lambda: examples)
    train_more(nlp, examples, 30, Adam(0.0005))
    return nlp


@pytest.mark.parametrize("build", [_trained_bilstm, _trained_multi_cell, _trained_transformer],
                         ids=["bilstm_crf", "multi_cell", "transformer_minilm"])
def test_three_domains_train_together_and_each_predicts_its_own_labels(build):
    fix_random_seed(0)
    random.seed(0)
    nlp = build()
    pipe = nlp.get_pipe("crossner")
    assert pipe.cfg["labels"] == LABELS
    assert predicted_ents(nlp, ALL) == gold_ents(ALL)
    # the same words tagged as another domain get only that domain's labels
    for domain in LABELS:
        for labels in labels_by_domain(nlp, ALL, as_domain=domain).values():
            assert labels <= set(LABELS[domain]), (domain, labels)


def test_multi_cell_has_one_cell_per_entity_type_shared_by_the_domains_that_have_it():
    fix_random_seed(0)
    nlp = blank_with({"model": MULTI_CELL, "target_domain": "ai"})
    examples = make_examples(nlp, ALL)
    nlp.initialize(lambda: examples)
    emitter = get_emitter(nlp.get_pipe("crossner").model)
    types = emitter.types
    assert types[0] == "O" and len(types) == len(set(types))
    assert set(types[1:]) == {label for labels in LABELS.values() for label in labels}
    # the sources' types come first (cells keep their places when the target grows)
    assert set(types[1:1 + len(set(LABELS["music"]) | set(LABELS["news"]))]) == set(LABELS["music"]) | set(LABELS["news"])
    for domain, labels in LABELS.items():
        assert [types[i] for i in emitter.domain_cells[domain]] == ["O"] + sorted(labels, key=types.index)
    shared = set(emitter.domain_cells["news"]) & set(emitter.domain_cells["music"]) & set(emitter.domain_cells["ai"])
    assert {types[i] for i in shared} == {"O", "organisation"}


# -- init-config: numbered sources -------------------------------------------------------------------


def write_domains(root: Path) -> dict:
    """Each domain's sentences as its own .spacy file (train = dev: a few steps of training)."""
    nlp = spacy.blank("en")
    paths = {}
    for domain in LABELS:
        db = DocBin(store_user_data=True)
        for d, words, ents in ALL:
            if d == domain:
                db.add(make_doc(nlp, words, ents, d))
        paths[domain] = str(Path(root) / f"{domain}.spacy")
        db.to_disk(paths[domain])
    return paths


TINY_TRAIN = {"training.max_steps": 2, "training.eval_frequency": 1,
              "components.crossner.model.tok2vec.word_width": 16,
              "components.crossner.model.tok2vec.word_rows": 200}


def test_source_count_numbers_the_sources_and_the_header_says_how_to_train():
    config = compose(arch="bilstm", features="wordchar", setting="joint", source_count=3)
    domains = config["corpora"]["train"]["domains"]
    assert list(domains) == ["source_0", "source_1", "source_2", "target"]
    # the joint setting's default mix sizes each corpus's part: no fixed factor per source
    assert domains["source_2"] == {"path": "${paths.source_train_2}", "domain": "${vars.source_domain_2}"}
    assert "source_train" not in config["paths"] and "source_domain" not in config["vars"]
    text = config_text(arch="bilstm", features="wordchar", setting="joint", output="c.cfg", source_count=3)
    lines = text.splitlines()
    assert lines[1].endswith("--setting joint --source-count 3 --mix sqrt")
    assert ("--paths.source_train_0 S0/train.spacy --paths.source_train_1 S1/train.spacy "
            "--paths.source_train_2 S2/train.spacy --paths.target_train T/train.spacy") in lines[2]
    # without it, the settings are as they were: one source
    plain = compose(arch="bilstm", features="wordchar", setting="joint")
    assert list(plain["corpora"]["train"]["domains"]) == ["source", "target"]


@pytest.mark.parametrize("setting,count,message", [
    ("target", 2, "the target setting has no labelled sources to number"),
    ("finetune", 2, "give the sources to the pretrain stage"),
    ("joint", 0, "--source-count must be a whole number of at least 1, not 0"),
])
def test_source_count_errors_name_the_option_and_what_to_do(setting, count, message):
    with pytest.raises(InitConfigError, match=message):
        compose(arch="trf", features="transformer", setting=setting, source_count=count)
    result = CliRunner().invoke(app, ["init-config", "-", "--arch", "trf", "--features", "transformer",
                                      "--setting", setting, "--source-count", str(count)])
    assert result.exit_code == 1 and message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_spacy_overrides_cannot_add_a_source_section(tmp_path):
    """Why the count is chosen when the config is written (what the help and README say)."""
    from confection import ConfigValidationError

    out = tmp_path / "c.cfg"
    init_config(out, arch="bilstm", features="wordchar", setting="joint")
    with pytest.raises(ConfigValidationError, match="not a section value that can be overridden"):
        spacy.util.load_config(out, overrides={"corpora.train.domains.extra.path": "x.spacy"})


def test_joint_training_on_two_sources_and_a_target(tmp_path):
    from spacy.cli.train import train as spacy_train

    paths = write_domains(tmp_path)
    out = tmp_path / "joint.cfg"
    result = CliRunner().invoke(app, ["init-config", str(out), "--arch", "bilstm", "--setting", "joint",
                                      "--source-count", "2"])
    assert result.exit_code == 0, result.output
    overrides = dict(TINY_TRAIN, **{"paths.source_train_0": paths["news"], "paths.source_train_1": paths["music"],
                                    "paths.target_train": paths["ai"], "paths.target_dev": paths["ai"]})
    spacy_train(out, tmp_path / "model", overrides=overrides, use_gpu=-1)
    pipe = spacy.load(tmp_path / "model" / "model-last").get_pipe("crossner")
    assert pipe.cfg["labels"] == LABELS and pipe.target_domain == "ai"
    # a source path that does not exist: the error names the source's section and the path
    overrides["paths.source_train_1"] = str(tmp_path / "nope.spacy")
    with pytest.raises(ValueError, match=r"\[corpora.train.domains.source_1\].*nope.spacy|nope.spacy.*source_1"):
        spacy_train(out, tmp_path / "model2", overrides=overrides, use_gpu=-1)


def test_pretrain_on_every_source_then_finetune_from_all_of_them(tmp_path):
    from spacy.cli.train import train as spacy_train

    paths = write_domains(tmp_path)
    stage1 = tmp_path / "pretrain.cfg"
    init_config(stage1, arch="bilstm", features="wordchar", setting="pretrain", source_count=2)
    dev = Config().from_disk(stage1, interpolate=False)["corpora"]["dev"]
    assert list(dev["domains"]) == ["source_0", "source_1"]
    overrides = dict(TINY_TRAIN, **{"paths.source_train_0": paths["news"], "paths.source_train_1": paths["music"],
                                    "paths.source_dev_0": paths["news"], "paths.source_dev_1": paths["music"]})
    # with two labelled sources nothing picks the domain of docs that carry none: the error says how
    with pytest.raises(ValueError, match="--vars.target_domain NAME"):
        spacy_train(stage1, tmp_path / "s1", overrides=overrides, use_gpu=-1)
    spacy_train(stage1, tmp_path / "s1", overrides=dict(overrides, **{"vars.target_domain": "news"}), use_gpu=-1)
    pretrained = spacy.load(tmp_path / "s1" / "model-last").get_pipe("crossner")
    assert pretrained.cfg["labels"] == {d: LABELS[d] for d in ("news", "music")}

    stage2 = tmp_path / "finetune.cfg"
    init_config(stage2, arch="bilstm", features="wordchar", setting="finetune")
    spacy_train(stage2, tmp_path / "s2", use_gpu=-1, overrides={
        "paths.pretrained": str(tmp_path / "s1" / "model-last"), "paths.target_train": paths["ai"],
        "paths.target_dev": paths["ai"], "vars.target_domain": "ai", "vars.init_from": ["music", "news"],
        "training.max_steps": 2, "training.eval_frequency": 1})
    pipe = spacy.load(tmp_path / "s2" / "model-last").get_pipe("crossner")
    assert sorted_labels(pipe) == LABELS and pipe.target_domain == "ai"


def test_init_from_several_sources_takes_each_tag_from_the_first_that_has_it():
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": None})
    sources = [eg for eg in make_examples(nlp, ALL) if get_domain(eg.reference) != "ai"]
    train(nlp, sources, n_iter=3)
    pipe = nlp.get_pipe("crossner")
    make_configure_callback(target_domain="ai", labels={"ai": ["organisation", "location", "algorithm"]},
                            init_from=["music", "news"])(nlp)
    tags = pipe.domain_tags()
    heads = next(m for m in torch_module(pipe.model.get_ref("emitter")).modules() if isinstance(m, DomainHeads))
    row = lambda domain, tag: heads.head(domain).weight[tags[domain].index(tag)]  # noqa: E731
    # organisation is in both sources: music's rows (listed first); location likewise
    for tag in ("B-organisation", "I-location", "O"):
        assert torch.equal(row("ai", tag), row("music", tag))
        assert not torch.equal(row("ai", tag), row("news", tag))
    crf = torch_module(get_head(pipe.model))
    ai, music = crf.get("ai"), crf.get("music")
    i, j = tags["ai"].index("B-organisation"), tags["music"].index("B-organisation")
    assert torch.equal(ai.start_transitions[i], music.start_transitions[j])
    # a tag no source has starts fresh
    fresh = row("ai", "B-algorithm")
    assert not any(torch.equal(fresh, row(d, t)) for d in ("music", "news") for t in tags[d])


# -- best-pipeline: --source repeated ------------------------------------------------------------------


def write_corpus_folder(root: Path, domain: str, sentences, copies: int = 3) -> Path:
    """A converted corpus folder (train.spacy, dev.spacy) of one domain."""
    nlp = spacy.blank("en")
    folder = root / domain
    folder.mkdir(parents=True)
    for split in ("train", "dev"):
        db = DocBin(store_user_data=True)
        for _ in range(copies):
            for d, words, ents in sentences:
                db.add(make_doc(nlp, words, ents, d))
        db.to_disk(folder / f"{split}.spacy")
    return folder


TINY = Budget(max_steps=2, eval_frequency=2, patience=0, source_max_steps=2)


def test_best_pipeline_pretrains_on_two_sources_and_finetunes_on_the_target(tmp_path):
    news, music = write_corpus_folder(tmp_path, "news", NEWS), write_corpus_folder(tmp_path, "music", MUSIC)
    ai = write_corpus_folder(tmp_path, "ai", AI)
    result = best_pipeline(sources=[news, music], target=ai, output=tmp_path / "best", budget=TINY,
                           cache=tmp_path / "cache", threads=1, say=lambda line: None)
    assert result.summary["source_domains"] == ["news", "music"]
    nlp = spacy.load(tmp_path / "best")
    pipe = nlp.get_pipe("crossner")
    # stage 1 saw every source; the fine-tune kept their heads and added the target's
    assert sorted_labels(pipe) == LABELS and pipe.target_domain == "ai"
    finetune = Config().from_disk(tmp_path / "best-training" / "configs" / "finetune.cfg", interpolate=False)
    assert finetune["vars"]["init_from"] == ["news", "music"]
    source = Config().from_disk(Path(result.summary["source_model"]).parent / "config.cfg", interpolate=False)
    assert list(source["corpora"]["train"]["domains"]) == ["source_0", "source_1"]
    assert list(source["corpora"]["dev"]["domains"]) == ["source_0", "source_1"]
    assert nlp("Acme Corp hired Mary Jones .") is not None


def test_best_pipeline_fast_recipe_trains_jointly_on_two_sources_and_the_target(tmp_path):
    news, music = write_corpus_folder(tmp_path, "news", NEWS), write_corpus_folder(tmp_path, "music", MUSIC)
    ai = write_corpus_folder(tmp_path, "ai", AI)
    best_pipeline(sources=[news, music], target=ai, output=tmp_path / "fast", recipe="fast", vectors="",
                  budget=TINY, threads=1, say=lambda line: None)
    pipe = spacy.load(tmp_path / "fast").get_pipe("crossner")
    assert pipe.cfg["labels"] == LABELS and pipe.target_domain == "ai"
    config = Config().from_disk(tmp_path / "fast-training" / "configs" / "fast.cfg", interpolate=False)
    assert list(config["corpora"]["train"]["domains"]) == ["source_0", "source_1", "target"]


def test_best_pipeline_source_errors_name_the_option_and_the_path(tmp_path):
    news, ai = write_corpus_folder(tmp_path, "news", NEWS), write_corpus_folder(tmp_path, "ai", AI)
    runner = CliRunner()
    missing = tmp_path / "no_such_corpus"
    result = runner.invoke(app, ["best-pipeline", str(ai), str(tmp_path / "o"), "--source", str(news),
                                 "--source", str(missing)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"--source {missing}: not a folder" in " ".join(result.output.split())
    again = tmp_path / "copy"
    again.mkdir()
    for name in ("train.spacy", "dev.spacy"):
        (again / name).write_bytes((news / name).read_bytes())
    with pytest.raises(BestPipelineError, match=f"--source {news} and --source {again} both hold domain 'news'"):
        best_pipeline(sources=[news, again], target=ai, output=tmp_path / "o", budget=TINY)


# -- the study: CoNLL + the other four domains' train sets as sources ----------------------------------


def test_study_extra_sources_others_are_conll_and_the_other_domains_train_sets(tmp_path):
    import sys

    from spacy.cli._util import parse_config_overrides

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "project" / "scripts"))
    import study

    argv = ["plan", "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"),
            "--corpus", str(tmp_path / "corpus"), "--domains", "ai", "--seeds", "555", "--features", "minilm"]
    args = study.parse(argv + ["--methods", "trf_finetune", "trf_joint", "--extra-sources", "others",
                               "--with-baselines"])
    runs = study.planned(args)
    assert [r["method"].name for r in runs] == ["trf_joint", "trf_joint_plus_others", "trf_finetune",
                                                "trf_finetune_plus_others"]
    assert study.sources_of(args, "ai") == ["conll2003", "politics", "science", "music", "literature"]
    joint, finetune = runs[1]["method"], runs[3]["method"]
    assert joint.baseline_of == "trf_joint" and finetune.stage1 == "trf_source_plus_others"

    out = tmp_path / "work" / "out"
    for method in (joint, study.BY_NAME[finetune.stage1]):
        study.write_source_config(method, args, "minilm", 5)
    targs = study.train_args(joint, args, "ai", 555, "minilm", out)
    overrides = parse_config_overrides(targs[3:])
    trains = [overrides[f"paths.source_train_{i}"] for i in range(5)]
    assert [Path(t).parts[-2:] for t in trains] == [(d, "train.spacy") for d in study.sources_of(args, "ai")]
    assert not any("dev.spacy" in str(v) or "test.spacy" in str(v) for k, v in overrides.items()
                   if k.startswith("paths.source")), "never a source's dev or test set"
    config = Config().from_disk(targs[0], interpolate=False)
    assert list(config["corpora"]["train"]["domains"]) == [f"source_{i}" for i in range(5)] + ["target"]

    stage1 = study.BY_NAME[finetune.stage1]
    targs = study.train_args(stage1, args, "ai", 555, "minilm", out)
    overrides = parse_config_overrides(targs[3:])
    # the source stage sees every source's train set and is selected on CoNLL's dev set only
    assert overrides["paths.source_dev_0"].endswith("conll2003/dev.spacy")
    assert not any(k.startswith("paths.source_dev_") and k != "paths.source_dev_0" for k in overrides)
    config = Config().from_disk(targs[0], interpolate=False)
    assert config["corpora"]["dev"]["path"] == "${paths.source_dev_0}"
    targs = study.train_args(finetune, args, "ai", 555, "minilm", out)
    overrides = parse_config_overrides(targs[3:])
    assert overrides["vars.init_from"] == study.sources_of(args, "ai")
    assert overrides["paths.pretrained"].startswith(str(tmp_path / "work" / "trf_source_plus_others-ai-"))

    # a source corpus that is not there stops the run before training, naming it
    with pytest.raises(SystemExit, match=r"--extra-sources others: no .*corpus/conll2003/train.spacy"):
        study.prepare(runs[1], args, {})
    with pytest.raises(SystemExit, match="trf_target train.* on no labelled source"):
        study.planned(study.parse(argv + ["--methods", "trf_target", "--extra-sources", "others"]))
