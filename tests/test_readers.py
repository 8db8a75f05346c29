from collections import Counter

import pytest
import spacy
from spacy.tokens import DocBin

from spacy_crossner import get_domain
from spacy_crossner.readers import create_domain_corpus, create_multi_domain_corpus
from util import AI, NEWS, make_doc


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


@pytest.fixture
def corpus_dir(tmp_path, nlp):
    for name, sentences in (("news", NEWS), ("ai", AI)):
        db = DocBin(store_user_data=True)
        for domain, words, ents in sentences:
            db.add(make_doc(nlp, words, ents, domain))
        db.to_disk(tmp_path / f"{name}.spacy")
    (tmp_path / "raw.txt").write_text("raw text one\n\n  \nraw text two\n", encoding="utf8")
    return tmp_path


def read(nlp, **kwargs):
    return list(create_multi_domain_corpus(**kwargs)(nlp))


def test_upsampling_and_domains(nlp, corpus_dir):
    examples = read(nlp, domains={
        "source": {"path": str(corpus_dir / "news.spacy")},
        "target": {"path": str(corpus_dir / "ai.spacy"), "upsample": 10},
    })
    counts = Counter(get_domain(eg.reference) for eg in examples)
    assert counts == {"news": 3, "ai": 30}
    assert all(get_domain(eg.predicted) == get_domain(eg.reference) for eg in examples)
    # gold tokenization is kept
    assert all([t.text for t in eg.predicted] == [t.text for t in eg.reference] for eg in examples)


def test_fractional_upsampling(nlp, corpus_dir):
    examples = read(nlp, domains={"t": {"path": str(corpus_dir / "ai.spacy"), "upsample": 1.34}})
    assert len(examples) == 3 + 1
    examples = read(nlp, domains={"t": {"path": str(corpus_dir / "ai.spacy"), "upsample": 0}})
    assert examples == []


def test_seeded_shuffling_is_reproducible(nlp, corpus_dir):
    cfg = {"s": {"path": str(corpus_dir / "news.spacy")}, "t": {"path": str(corpus_dir / "ai.spacy"), "upsample": 3}}
    texts = lambda c: [eg.reference.text for eg in c(nlp)]
    a = create_multi_domain_corpus(domains=cfg, seed=1)
    b = create_multi_domain_corpus(domains=cfg, seed=1)
    first_a, first_b = texts(a), texts(b)
    assert first_a == first_b
    assert texts(a) == texts(b)  # second passes agree too
    c = create_multi_domain_corpus(domains=cfg, seed=2)
    assert texts(c) != first_a
    unshuffled = create_multi_domain_corpus(domains=cfg, shuffle=False)
    assert [get_domain(eg.reference) for eg in unshuffled(nlp)] == ["news"] * 3 + ["ai"] * 9


def test_domain_override_and_raw_text(nlp, corpus_dir):
    examples = read(nlp, domains={
        "src": {"path": str(corpus_dir / "news.spacy"), "domain": "conll2003"},
        "raw_ai": {"path": str(corpus_dir / "raw.txt"), "raw": True, "domain": "ai"},
        "raw_news": {"path": str(corpus_dir / "news.spacy"), "raw": True},
    }, shuffle=False)
    assert [get_domain(eg.reference) for eg in examples] == ["conll2003"] * 3 + ["ai"] * 2 + ["news"] * 3
    raw = examples[3:]
    assert [eg.reference.text for eg in raw[:2]] == ["raw text one", "raw text two"]
    assert not any(eg.reference.has_annotation("ENT_IOB") for eg in raw)
    assert all(eg.reference.has_annotation("ENT_IOB") for eg in examples[:3])


def test_entry_name_is_the_domain_of_docs_without_one(nlp, tmp_path):
    db = DocBin(store_user_data=True)
    db.add(make_doc(nlp, ["a", "b"], [(0, 1, "x")]))
    db.to_disk(tmp_path / "x.spacy")
    examples = read(nlp, domains={"bio": {"path": str(tmp_path)}})
    assert [get_domain(eg.reference) for eg in examples] == ["bio"]


def test_max_length_and_limit(nlp, corpus_dir):
    examples = read(nlp, domains={"t": {"path": str(corpus_dir / "ai.spacy")}}, max_length=5)
    assert sorted(len(eg.reference) for eg in examples) == [4]
    examples = read(nlp, domains={"t": {"path": str(corpus_dir / "ai.spacy")}}, limit=2)
    assert len(examples) == 2


def test_domain_corpus(nlp, corpus_dir):
    examples = list(create_domain_corpus(str(corpus_dir / "ai.spacy"))(nlp))
    assert [eg.reference.text for eg in examples] == [" ".join(w) for _, w, _ in AI]
    assert {get_domain(eg.predicted) for eg in examples} == {"ai"}
    renamed = list(create_domain_corpus(str(corpus_dir / "ai.spacy"), domain="tech")(nlp))
    assert {get_domain(eg.predicted) for eg in renamed} == {"tech"}


@pytest.mark.parametrize("domains,message", [
    ({}, "at least one corpus"),
    ({"t": {"path": "/nonexistent/x.spacy"}}, r"t.path = /nonexistent/x.spacy does not exist"),
    ({"t": {"path": None}}, "t.path is not set"),
    ({"t": "file.spacy"}, r"domains.t\] must be a section"),
    ({"t": {"pth": "x"}}, r"unknown settings \['pth'\]"),
    ({"t": {"domain": "x"}}, "needs a `path`"),
])
def test_bad_settings(domains, message):
    with pytest.raises(ValueError, match=message):
        create_multi_domain_corpus(domains=domains)


def test_bad_upsample_and_text_without_raw(nlp, corpus_dir):
    with pytest.raises(ValueError, match="t.upsample must be a number >= 0"):
        create_multi_domain_corpus(domains={"t": {"path": str(corpus_dir / "ai.spacy"), "upsample": -1}})
    with pytest.raises(ValueError, match="is a text file; set raw = true"):
        read(nlp, domains={"t": {"path": str(corpus_dir / "raw.txt")}})


def test_per_corpus_limit_and_files_read_once(nlp, corpus_dir, monkeypatch):
    corpus = create_multi_domain_corpus(domains={
        "s": {"path": str(corpus_dir / "news.spacy"), "limit": 1},
        "t": {"path": str(corpus_dir / "ai.spacy")},
    })
    first = list(corpus(nlp))
    assert Counter(get_domain(eg.reference) for eg in first) == {"news": 1, "ai": 3}
    import spacy_crossner.readers as readers

    def no_reading(*args, **kwargs):
        raise AssertionError("files are read once")

    monkeypatch.setattr(readers, "_read_docbins", no_reading)
    second = list(corpus(nlp))
    assert sorted(eg.reference.text for eg in second) == sorted(eg.reference.text for eg in first)
    # each pass makes new predicted docs, so annotations of one pass never leak into the next
    assert all(a.predicted is not b.predicted for a in first for b in second)
    with pytest.raises(ValueError, match="s.limit must be an integer >= 0"):
        create_multi_domain_corpus(domains={"s": {"path": str(corpus_dir / "news.spacy"), "limit": -2}})
