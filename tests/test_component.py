"""Fixes in the crossner component and its models, each with the behaviour it restores:
settings given at load time, configured dropout rates, optimizer state of grown heads,
entity probabilities with a threshold, and the package's import graph."""
import ast
import copy
import pathlib

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc
from thinc.api import Adam, fix_random_seed

import spacy_crossner
from spacy_crossner import set_domain
from spacy_crossner.models.head import get_crf
from spacy_crossner.models.pytorch_emitters import BiLSTMEmitter
from util import AI, NEWS, TINY_FEATURES, blank_with, make_examples, train, train_more

FEATURES = TINY_FEATURES
BILSTM = {"@architectures": "spacy_crossner.BiLSTMCRF.v1", "hidden_size": 32, "dropout": 0.0, "tok2vec": FEATURES}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    train(nlp, make_examples(nlp, NEWS + AI), n_iter=40)
    path = tmp_path_factory.mktemp("model") / "nlp"
    nlp.to_disk(path)
    return path


def doc_in(nlp, words, domain):
    doc = Doc(nlp.vocab, words=words)
    set_domain(doc, domain)
    return doc


def test_load_time_domain_aliases_and_target_domain_win(saved):
    nlp = spacy.load(saved, config={"components": {"crossner": {"domain_aliases": {"music": "news"}}}})
    pipe = nlp.get_pipe("crossner")
    assert pipe.cfg["domain_aliases"] == {"music": "news"}
    music = nlp(doc_in(nlp, "John Smith lives in London .".split(), "music"))
    assert {e.label_ for e in music.ents} <= set(pipe.label_data["news"]) and music.ents
    news = spacy.load(saved, config={"components": {"crossner": {"target_domain": "news"}}})
    assert news.get_pipe("crossner").target_domain == "news"
    assert news.get_pipe("crossner").default_domain() == "news"
    # the config's settings are kept once, in cfg (saved with it), not beside it on the pipe
    assert news.get_pipe("crossner").cfg["config_settings"]["target_domain"] == "news"
    assert not any("settings" in name for name in vars(news.get_pipe("crossner")))
    # Without overrides the saved settings stay.
    plain = spacy.load(saved)
    assert plain.get_pipe("crossner").target_domain == "ai"
    assert plain.get_pipe("crossner").cfg["domain_aliases"] == {}


def test_load_time_settings_are_validated(saved):
    with pytest.raises(ValueError, match="domain_aliases maps 'music' to 'jazz', which has no labels"):
        spacy.load(saved, config={"components": {"crossner": {"domain_aliases": {"music": "jazz"}}}})
    with pytest.raises(ValueError, match="target_domain = 'jazz' has no labels"):
        spacy.load(saved, config={"components": {"crossner": {"target_domain": "jazz"}}})


def test_threshold_drops_less_probable_entities(saved):
    nlp = spacy.load(saved)
    text = "Google released TensorFlow and John Smith lives in London ."
    doc = nlp(text)
    scores = sorted(float(p) for p in doc.spans["crossner"].attrs["scores"])
    assert len(scores) >= 2
    cut = (scores[0] + scores[-1]) / 2
    strict = spacy.load(saved, config={"components": {"crossner": {"threshold": cut}}})
    kept = strict(text)
    assert len(kept.ents) == sum(p >= cut for p in scores) < len(doc.ents)
    assert all(p >= cut for p in kept.spans["crossner"].attrs["scores"])
    with pytest.raises(ValueError, match="threshold = 1.5"):
        blank_with({"model": BILSTM, "threshold": 1.5})


def test_configured_dropout_rates_are_kept():
    fix_random_seed(0)
    features = dict(FEATURES, dropout=0.5)
    nlp = blank_with({"model": dict(BILSTM, tok2vec=features), "target_domain": "ai"})
    train(nlp, make_examples(nlp, NEWS + AI), n_iter=2, drop=0.1)
    rates = [n.attrs["dropout_rate"] for n in nlp.get_pipe("crossner").model.walk() if "dropout_rate" in n.attrs]
    assert rates and all(rate == 0.5 for rate in rates)


def test_emitter_does_not_drop_its_input_again():
    torch.manual_seed(0)
    emitter = BiLSTMEmitter(hidden_size=4, depth=1, dropout=0.9)
    emitter.setup(6, {"a": ["O", "B-X", "I-X"]}, {})
    emitter.train()
    seen = []
    emitter.lstm.register_forward_pre_hook(lambda module, args: seen.append(args[0].data.clone()))
    X = torch.randn(2, 3, 6)
    emitter(X, torch.tensor([3, 3]), ["a", "a"])
    assert torch.equal(seen[0].sort(dim=0).values, X.reshape(6, 6).sort(dim=0).values)


def test_grown_head_restarts_its_adam_state():
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    lr = 0.01
    optimizer = Adam(lr, L2=0.0, grad_clip=0.0, use_averages=False)
    train_more(nlp, examples, 5, optimizer)
    pipe = nlp.get_pipe("crossner")
    pipe.add_label("date", domain="ai")
    crf = get_crf(pipe.model, "ai")
    crf.apply_constraints()
    before = crf.transitions.detach().clone()
    grown = make_examples(nlp, [("ai", "LSTM was proposed in 1997 .".split(), [(0, 1, "algorithm"), (4, 5, "date")])])
    nlp.update(grown, sgd=optimizer)
    step = (get_crf(pipe.model, "ai").transitions.detach() - before).abs()
    # Adam's first step moves each weight by the learning rate (fresh moments and step count).
    moved = step[(step > 1e-6) & (step < 1.0)]
    assert len(moved) > 0
    assert torch.allclose(moved.max(), torch.tensor(lr), rtol=1e-3)


def test_resize_builds_new_parameters_and_leaves_the_optimizer_alone():
    """A label added after optimizer steps: the grown head and CRF are new parameters (new
    names, through the model's resize_output) that get fresh optimizer state on their first
    update; the state the optimizer holds is neither removed nor edited (it is only read
    here). The grown model saves and loads under the new names."""
    fix_random_seed(0)
    nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.01, L2=0.0, grad_clip=0.0, use_averages=False)
    train_more(nlp, examples, 2, optimizer)
    pipe = nlp.get_pipe("crossner")
    head, emitter = (pipe.model.get_ref(r).shims[0].id for r in ("head", "emitter"))
    tables = ("mom1", "mom2", "nr_update")
    before = {t: copy.deepcopy(dict(getattr(optimizer, t))) for t in tables}
    old_crf, old_head = (head, "crfs.ai.transitions"), (emitter, "heads.heads.ai.weight")
    assert old_crf in before["mom1"] and old_head in before["mom1"]
    pipe.add_label("date", domain="ai")
    assert pipe.cfg["build_config"]["crf_generations"] == {"ai": 1}
    assert pipe.cfg["build_config"]["head_generations"] == {"ai": 1}
    grown = make_examples(nlp, [("ai", "LSTM was proposed in 1997 .".split(), [(0, 1, "algorithm"), (4, 5, "date")])])
    nlp.update(grown, sgd=optimizer)
    n_tags = len(pipe.domain_tags()["ai"])
    for key, shape in (((head, "crfs.ai-g1.transitions"), n_tags * n_tags), ((emitter, "heads.heads.ai-g1.weight"), n_tags * 64)):
        assert key not in before["mom1"]
        assert optimizer.mom1[key].size == shape and optimizer.nr_update[key] == 1
    for table in tables:
        state = getattr(optimizer, table)
        for key, value in before[table].items():
            assert key in state
            if key in (old_crf, old_head):  # parameters that no longer exist: state untouched
                assert numpy.array_equal(state[key], value)
    copy_nlp = blank_with({"model": BILSTM, "target_domain": "ai"})
    copy_nlp.from_bytes(nlp.to_bytes())
    loaded = copy_nlp.get_pipe("crossner")
    assert torch.equal(get_crf(loaded.model, "ai").transitions, get_crf(pipe.model, "ai").transitions)
    doc = doc_in(nlp, "LSTM was proposed in 1997 .".split(), "ai")
    assert [(e.text, e.label_) for e in copy_nlp(doc.copy()).ents] == [(e.text, e.label_) for e in nlp(doc).ents]


def _imports(path: pathlib.Path, package: str):
    tree = ast.parse(path.read_text(encoding="utf8"))
    module = ".".join((package,) + path.relative_to(ROOT).with_suffix("").parts)
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    parent = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parent.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(package):
                # `from pkg import name`: name may be a module of pkg, or a name defined in it
                out.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(package))
    return module, out


ROOT = pathlib.Path(spacy_crossner.__file__).parent


def test_package_has_no_import_cycle_and_pipeline_no_torch():
    graph = {}
    for path in ROOT.rglob("*.py"):
        module, targets = _imports(path, "spacy_crossner")
        graph[module] = {t for t in targets if t != module}
    modules = set(graph)
    # `from .x import name` names a module or a name in one: resolve to modules we have.
    edges = {m: {t if t in modules else t.rsplit(".", 1)[0] for t in ts} & modules for m, ts in graph.items()}
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in edges[node]:
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = "done"

    for module in sorted(modules):
        if module not in state:
            visit(module, [])
    pipeline = ast.parse((ROOT / "pipeline.py").read_text(encoding="utf8"))
    imported = {a.name for n in ast.walk(pipeline) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(pipeline) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(name == "torch" or name.startswith("torch.") for name in imported)


def test_target_rows_start_from_the_source_for_shared_tags(saved):
    """Pre-train then fine-tune the authors' way: the target's output layer starts from the
    source's for the tags both have (here O and the organisation tags)."""
    from spacy_crossner.models.pytorch_heads import DomainHeads
    from spacy_crossner.models.base import get_emitter
    from spacy_crossner.callbacks import make_configure_callback

    nlp = spacy.load(saved)
    pipe = nlp.get_pipe("crossner")
    heads = next(m for m in get_emitter(pipe.model).modules() if isinstance(m, DomainHeads))
    news_tags, ai_tags = pipe.domain_tags()["news"], pipe.domain_tags()["ai"]
    shared = [t for t in ai_tags if t in news_tags]
    assert shared == ["O", "B-organisation", "I-organisation"]
    news, ai = heads.heads["news"], heads.heads["ai"]
    assert not torch.equal(ai.weight[ai_tags.index("B-organisation")], news.weight[news_tags.index("B-organisation")])
    make_configure_callback(target_domain="ai", init_from="news")(nlp)
    for tag in shared:
        assert torch.equal(ai.weight[ai_tags.index(tag)], news.weight[news_tags.index(tag)])
        assert torch.equal(ai.bias[ai_tags.index(tag)], news.bias[news_tags.index(tag)])
    news_crf, ai_crf = get_crf(pipe.model, "news"), get_crf(pipe.model, "ai")
    for a in shared:
        for b in shared:
            assert ai_crf.transitions[ai_tags.index(a), ai_tags.index(b)] == \
                news_crf.transitions[news_tags.index(a), news_tags.index(b)]
    # Tags the source does not have keep their own rows.
    assert not torch.equal(ai.weight[ai_tags.index("B-algorithm")], news.weight[0])
    with pytest.raises(ValueError, match="'music' has no labels"):
        pipe.init_domain_from("music", "ai")
