"""The crossner component with the BiLSTMCRF architecture: training, prediction, serialization."""
import pytest
import spacy
from spacy.tokens import Doc
from thinc.api import Adam, fix_random_seed

from spacy_crossner import set_domain
from spacy_crossner.domains import UnknownDomainError
from util import AI, NEWS, blank_with, gold_ents, make_examples, predicted_ents, train, train_more

SMALL_BILSTM = {
    "@architectures": "spacy_crossner.BiLSTMCRF.v1",
    "hidden_size": 32,
    "depth": 1,
    "dropout": 0.0,
    "tok2vec": {
        "@architectures": "spacy_crossner.WordCharEmbed.v1",
        "word_width": 32,
        "word_rows": 1000,
        "char_width": 8,
        "char_filters": 16,
        "dropout": 0.0,
    },
}


def make_nlp(**model_overrides):
    model = dict(SMALL_BILSTM, **model_overrides)
    return blank_with({"model": model, "target_domain": "ai"})


@pytest.fixture(scope="module")
def trained():
    fix_random_seed(0)
    nlp = make_nlp()
    examples = make_examples(nlp, NEWS + AI)
    train(nlp, examples, n_iter=40)
    return nlp


def test_overfits_two_domains(trained):
    assert predicted_ents(trained, NEWS + AI) == gold_ents(NEWS + AI)
    scores = trained.evaluate(make_examples(trained, NEWS + AI))
    assert scores["ents_f"] == 1.0
    assert set(scores["ents_per_type"]) == {
        "person", "location", "organisation", "algorithm", "researcher", "metrics", "misc", "product"
    }


def test_labels_per_domain(trained):
    pipe = trained.get_pipe("crossner")
    assert pipe.label_data == {
        "news": ["location", "organisation", "person"],
        "ai": ["algorithm", "metrics", "misc", "organisation", "product", "researcher"],
    }
    assert "product" in pipe.labels and "product" not in pipe.label_data["news"]


def test_roundtrips_keep_predictions(trained, tmp_path):
    expected = predicted_ents(trained, NEWS + AI)
    trained.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert predicted_ents(loaded, NEWS + AI) == expected
    assert loaded.get_pipe("crossner").label_data == trained.get_pipe("crossner").label_data
    fresh = make_nlp()
    fresh.from_bytes(trained.to_bytes())
    assert predicted_ents(fresh, NEWS + AI) == expected
    pipe_copy = make_nlp().get_pipe("crossner")
    pipe_copy.from_bytes(trained.get_pipe("crossner").to_bytes())
    assert pipe_copy.target_domain == "ai" and pipe_copy.domains == ("news", "ai")


def test_pipe_equals_call(trained):
    docs = []
    for domain, words, _ in NEWS + AI:
        doc = Doc(trained.vocab, words=words)
        set_domain(doc, domain)
        docs.append(doc)
    one_by_one = [[(e.start, e.end, e.label_) for e in trained(d.copy()).ents] for d in docs]
    piped = [[(e.start, e.end, e.label_) for e in d.ents] for d in trained.pipe([d.copy() for d in docs], batch_size=4)]
    assert piped == one_by_one


def test_mixed_domain_batch_uses_each_docs_domain(trained):
    # The same words are read with each domain's labels.
    words = "Google released TensorFlow .".split()
    as_ai = Doc(trained.vocab, words=words)
    set_domain(as_ai, "ai")
    as_news = Doc(trained.vocab, words=words)
    set_domain(as_news, "news")
    ai_doc, news_doc = trained.pipe([as_ai, as_news])
    assert [e.label_ for e in ai_doc.ents] == ["organisation", "product"]
    assert {e.label_ for e in news_doc.ents} <= {"person", "location", "organisation"}


def test_doc_without_domain_uses_target_domain(trained):
    doc = trained("Google released TensorFlow .")
    assert [e.label_ for e in doc.ents] == ["organisation", "product"]


def test_unknown_domain_is_a_clear_error(trained):
    doc = Doc(trained.vocab, words=["hello"])
    set_domain(doc, "music")
    with pytest.raises(UnknownDomainError, match="Unknown domain 'music'.*news.*ai"):
        trained(doc)


def test_empty_one_token_and_long_docs(trained):
    assert trained("").ents == ()
    one = trained("London")
    assert [(e.start, e.end) for e in one.ents] in ([], [(0, 1)])
    assert all(e.label_ in trained.get_pipe("crossner").label_data["ai"] for e in one.ents)
    assert len(one.spans["crossner"].attrs["scores"]) == len(one.ents)
    long_doc = trained(" ".join(["LSTM networks were proposed by Hochreiter ."] * 500))
    assert len(long_doc) == 3500
    assert all(e.label_ in trained.get_pipe("crossner").label_data["ai"] for e in long_doc.ents)
    docs = list(trained.pipe(["", "London", "", "Google released TensorFlow ."]))
    assert [len(d) for d in docs] == [0, 1, 0, 4]


def test_raw_text_examples_give_no_loss():
    fix_random_seed(0)
    nlp = make_nlp()
    examples = make_examples(nlp, NEWS + AI)
    optimizer = nlp.initialize(lambda: examples)
    raw = make_examples(nlp, [("ai", "plain text without labels".split(), [])])
    raw[0].reference.ents = []  # annotated as all-O: still labelled
    unannotated = make_examples(nlp, [("ai", "plain text".split(), [])])
    from spacy.training import Example
    eg = unannotated[0]
    eg = Example(eg.predicted, Doc(nlp.vocab, words=["plain", "text"]))
    losses = nlp.update([eg], sgd=optimizer)
    assert losses["crossner"] == 0.0
    losses = nlp.update(raw, sgd=optimizer)
    assert losses["crossner"] > 0.0


def test_label_only_in_target_and_new_domain_while_training():
    """Pre-train on news, then fine-tune on ai with labels news never had (sourcing)."""
    fix_random_seed(0)
    source = make_nlp()
    train(source, make_examples(source, NEWS), n_iter=40)
    assert source.get_pipe("crossner").domains == ("news",)
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", source=source)
    pipe = nlp.get_pipe("crossner")
    pipe.target_domain = "ai"
    nlp.resume_training()
    examples = make_examples(nlp, AI)
    train_more(nlp, examples, 40, Adam(0.01))
    assert pipe.domains == ("news", "ai")
    assert predicted_ents(nlp, AI) == gold_ents(AI)
    # The news head survived: it still knows its own labels.
    assert pipe.label_data["news"] == ["location", "organisation", "person"]


def test_add_label_grows_initialized_model(trained):
    nlp = spacy.blank("en")
    nlp.add_pipe("crossner", source=trained)
    pipe = nlp.get_pipe("crossner")
    before = predicted_ents(nlp, NEWS)
    assert pipe.add_label("date", domain="news") == 1
    assert pipe.add_label("date", domain="news") == 0
    assert pipe.label_data["news"][-1] == "date"
    # New label columns are appended and start small: the trained predictions are unchanged.
    after = predicted_ents(nlp, NEWS)
    assert after == before
    nlp2 = spacy.blank("en")
    nlp2.add_pipe("crossner", config={"model": SMALL_BILSTM, "target_domain": "ai"})
    nlp2.from_bytes(nlp.to_bytes())
    assert nlp2.get_pipe("crossner").label_data["news"][-1] == "date"


def test_initialize_with_labels_and_errors():
    nlp = make_nlp()
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    pipe = nlp.get_pipe("crossner")
    pipe.initialize(lambda: examples, nlp=nlp, labels={"news": ["person"], "ai": ["algorithm", "task"]})
    assert pipe.label_data == {"news": ["person"], "ai": ["algorithm", "task"]}
    with pytest.raises(ValueError, match="labels.*must map each domain"):
        pipe.initialize(lambda: examples, nlp=nlp, labels=["person"])
    unlabelled = make_examples(nlp, [("ai", ["x"], [])])
    from spacy.training import Example
    raw_only = [Example(eg.predicted, Doc(nlp.vocab, words=["x"])) for eg in unlabelled]
    with pytest.raises(ValueError, match="no labelled examples"):
        pipe.initialize(lambda: raw_only, nlp=nlp)


def test_linear_head_without_crf():
    fix_random_seed(0)
    nlp = make_nlp(use_crf=False)
    examples = make_examples(nlp, NEWS + AI)
    train(nlp, examples, n_iter=60)
    assert predicted_ents(nlp, NEWS + AI) == gold_ents(NEWS + AI)


def test_nan_loss_is_an_error(trained):
    import numpy
    pipe = trained.get_pipe("crossner")
    examples = make_examples(trained, AI[:1])
    output = pipe.model.predict(pipe.make_input([eg.predicted for eg in examples]))
    output.scores[0] = numpy.nan
    with pytest.raises(ValueError, match="training diverged"):
        pipe.get_loss(examples, output)


def test_domain_aliases_tag_a_domain_with_another_domains_labels():
    fix_random_seed(0)
    nlp = blank_with({"model": SMALL_BILSTM, "target_domain": "ai", "domain_aliases": {"ai": "news"}})
    train(nlp, make_examples(nlp, NEWS), n_iter=40)
    pipe = nlp.get_pipe("crossner")
    assert pipe.domains == ("news",)
    as_ai = [("ai", words, ents) for _, words, ents in NEWS]
    assert predicted_ents(nlp, as_ai) == gold_ents(NEWS)
    assert [e.label_ for e in nlp("John Smith lives in London .").ents] == ["person", "location"]
    # An aliased domain cannot also have labelled data.
    with pytest.raises(ValueError, match="domain_aliases maps to 'news'"):
        nlp.update(make_examples(nlp, AI[:1]))
    bad = blank_with({"model": SMALL_BILSTM, "domain_aliases": {"ai": "music"}})
    with pytest.raises(ValueError, match="maps 'ai' to 'music', which has no labels"):
        bad.initialize(lambda: make_examples(bad, NEWS))


def test_reinitialize_with_fewer_labels_saves_and_loads(tmp_path):
    nlp = make_nlp()
    examples = make_examples(nlp, NEWS + AI)
    nlp.initialize(lambda: examples)
    pipe = nlp.get_pipe("crossner")
    pipe.initialize(lambda: examples, nlp=nlp, labels={"news": ["person"], "ai": ["algorithm"]})
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert loaded.get_pipe("crossner").label_data == {"news": ["person"], "ai": ["algorithm"]}
    assert predicted_ents(loaded, AI) == predicted_ents(nlp, AI)


def test_labels_appearing_mid_training_keep_adam_working():
    """A label first seen after optimizer steps grows the head and CRF; Adam's state follows."""
    fix_random_seed(0)
    nlp = make_nlp()
    news = make_examples(nlp, NEWS)
    nlp.initialize(lambda: news)
    optimizer = Adam(0.01)
    train_more(nlp, news, 3, optimizer)
    train_more(nlp, make_examples(nlp, AI), 3, optimizer)  # new domain and labels
    late = make_examples(nlp, [("news", ["Bob", "met", "Zed", "."], [(0, 1, "person"), (2, 3, "alien")])])
    train_more(nlp, late, 2, optimizer)  # a new label in a domain that already trained
    assert "alien" in nlp.get_pipe("crossner").label_data["news"]


def test_configure_callback_adds_labels_from_a_corpus(tmp_path):
    from spacy.tokens import DocBin
    from spacy_crossner.callbacks import make_configure_callback
    from util import make_doc

    nlp = make_nlp()
    nlp.initialize(lambda: make_examples(nlp, NEWS))
    db = DocBin(store_user_data=True)
    for domain, words, ents in AI:
        db.add(make_doc(nlp, words, ents, domain))
    db.to_disk(tmp_path / "ai.spacy")
    make_configure_callback(target_domain="ai", labels_from=str(tmp_path / "ai.spacy"))(nlp)
    pipe = nlp.get_pipe("crossner")
    assert pipe.target_domain == "ai"
    assert pipe.label_data["ai"] == ["algorithm", "researcher", "metrics", "misc", "organisation", "product"]
    with pytest.raises(ValueError, match="labels_from = .*missing.spacy does not exist"):
        make_configure_callback(labels_from=str(tmp_path / "missing.spacy"))(nlp)
