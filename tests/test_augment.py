"""spacy_crossner.mention_replace.v1: entity mention replacement keeps tokens and labels aligned."""
import pickle

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import Config
from spacy.util import registry

import spacy_crossner.augment  # noqa: F401  registers the augmenter (setup.py's entry point may not be installed)
from spacy_crossner.augment import MentionReplacer, create_mention_replace_augmenter
from spacy_crossner.domains import get_domain, set_domain
from util import AI, NEWS, make_doc


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


@pytest.fixture
def files(tmp_path, nlp):
    db = DocBin(store_user_data=True)
    for domain, words, ents in AI + [("ai", "BERT and GPT-2 beat LSTM networks .".split(),
                                       [(0, 1, "algorithm"), (2, 3, "algorithm"), (4, 6, "algorithm")])]:
        db.add(make_doc(nlp, words, ents, domain))
    db.to_disk(tmp_path / "ai.spacy")
    dicts = tmp_path / "dicts"
    dicts.mkdir()
    (dicts / "person.txt").write_text("Ada Lovelace\nAlan Turing\nGrace Brewer Hopper\n", encoding="utf8")
    (dicts / "organization.txt").write_text("Reuters\nAcme Corp\n", encoding="utf8")
    return tmp_path / "ai.spacy", dicts


def _examples(nlp, sentences):
    out = []
    for domain, words, ents in sentences:
        predicted = Doc(nlp.vocab, words=list(words))
        set_domain(predicted, domain)
        out.append(Example(predicted, make_doc(nlp, words, ents, domain)))
    return out


def _augment(augmenter, nlp, examples):
    return [out for eg in examples for out in augmenter(nlp, eg)]


def _check_aligned(original: Example, augmented: Example):
    ref, new = original.reference, augmented.reference
    # valid BIO: every I- continues an entity of the same label
    previous = "O"
    for token in new:
        if token.ent_iob_ == "I":
            assert previous in (f"B-{token.ent_type_}", f"I-{token.ent_type_}")
        previous = f"{token.ent_iob_}-{token.ent_type_}" if token.ent_type_ else token.ent_iob_
    # same entity labels, in the same order
    assert [e.label_ for e in new.ents] == [e.label_ for e in ref.ents]
    # the tokens between entities, their whitespace and tags are unchanged
    def outside(doc):
        return [(t.text, t.whitespace_, t.ent_iob_) for t in doc if not t.ent_type_]
    assert outside(new) == outside(ref)
    assert [t.text for t in augmented.predicted] == [t.text for t in new]
    assert get_domain(new) == get_domain(ref) and get_domain(augmented.predicted) == get_domain(original.predicted)


def test_swaps_within_label_and_domain(nlp, files):
    train, dicts = files
    augmenter = create_mention_replace_augmenter(
        probability=1.0, mentions={"ai": str(train)},
        dictionaries={"news": {"person": str(dicts / "person.txt"), "organisation": str(dicts / "organization.txt")}},
        seed=1,
    )
    examples = _examples(nlp, AI + NEWS)
    augmented = _augment(augmenter, nlp, examples)
    assert len(augmented) == len(examples)
    pool = augmenter.pool
    for original, new in zip(examples, augmented):
        _check_aligned(original, new)
        domain = get_domain(original.reference)
        for old_ent, new_ent in zip(original.reference.ents, new.reference.ents):
            choices = pool.get((domain, old_ent.label_), [])
            if len(choices) > 1:  # swapped, for another surface of the same domain and label
                assert tuple(t.text for t in new_ent) in choices
                assert new_ent.text != old_ent.text
            else:
                assert new_ent.text == old_ent.text
    # news has no location in its dictionaries: locations stay; its persons come from the dictionary
    news_persons = {e.text for eg in augmented if get_domain(eg.reference) == "news" for e in eg.reference.ents
                    if e.label_ == "person"}
    assert news_persons and news_persons <= {"Ada Lovelace", "Alan Turing", "Grace Brewer Hopper"}
    assert {e.text for eg in augmented for e in eg.reference.ents if e.label_ == "location"} == {"London", "Paris", "France"}


def test_deterministic_under_a_seed_and_probability(nlp, files):
    train, _ = files
    examples = _examples(nlp, AI * 5)

    def run(seed, probability=0.5):
        augmenter = create_mention_replace_augmenter(probability=probability, mentions={"ai": str(train)}, seed=seed)
        return [[t.text for t in eg.reference] for eg in _augment(augmenter, nlp, examples)]

    assert run(3) == run(3)
    assert run(3) != run(4)
    assert run(3, probability=0.0) == [[t.text for t in eg.reference] for eg in examples]
    # the augmenter pickles (no closures) and its copy continues the same sequence
    augmenter = create_mention_replace_augmenter(probability=0.5, mentions={"ai": str(train)}, seed=3)
    copy = pickle.loads(pickle.dumps(augmenter))
    assert isinstance(copy, MentionReplacer)
    assert [[t.text for t in eg.reference] for eg in _augment(copy, nlp, examples)] == run(3)


def test_missing_tags_raw_docs_and_unknown_domains_pass_through(nlp, files):
    train, _ = files
    augmenter = create_mention_replace_augmenter(probability=1.0, mentions={"ai": str(train)}, seed=0)
    words = "LSTM beats SVM here".split()
    reference = Doc(nlp.vocab, words=words, ents=["B-algorithm", "O", None, None])
    set_domain(reference, "ai")
    predicted = Doc(nlp.vocab, words=words)
    set_domain(predicted, "ai")
    (out,) = augmenter(nlp, Example(predicted, reference))
    # the tail keeps its words and tags: missing stays missing, not O
    assert [(t.text, t.ent_iob_) for t in out.reference][-3:] == [("beats", "O"), ("SVM", ""), ("here", "")]
    (ent,) = out.reference.ents
    assert ent.start == 0 and ent.text != "LSTM" and ent.label_ == "algorithm"
    raw = Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words))
    assert list(augmenter(nlp, raw)) == [raw]
    (bio,) = _examples(nlp, [("bio", ["Cells", "divide"], [(0, 1, "organism")])])
    assert list(augmenter(nlp, bio)) == [bio]


def test_bad_settings(tmp_path, files):
    train, _ = files
    for bad in (-0.1, 1.5, "x", True):
        with pytest.raises(ValueError, match="probability must be a number in"):
            create_mention_replace_augmenter(probability=bad, mentions={"ai": str(train)})
    with pytest.raises(ValueError, match="no mention to draw from"):
        create_mention_replace_augmenter(probability=0.3)
    with pytest.raises(ValueError, match=r"mentions.ai = .*missing.spacy.*not found"):
        create_mention_replace_augmenter(mentions={"ai": str(tmp_path / "missing.spacy")})
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"dictionaries.news.person = .*empty.txt.*No entity"):
        create_mention_replace_augmenter(dictionaries={"news": {"person": str(empty)}})


CONFIG = """
[paths]
train = null

[corpora]

[corpora.train]
@readers = "spacy_crossner.MultiDomainCorpus.v1"
seed = 0

[corpora.train.domains]

[corpora.train.domains.target]
path = ${paths.train}
domain = "ai"

[corpora.train.augmenter]
@augmenters = "spacy_crossner.mention_replace.v1"
probability = 1.0
seed = 0

[corpora.train.augmenter.mentions]
ai = ${paths.train}
"""


def test_config_resolves_and_the_reader_augments(nlp, files):
    train, _ = files
    config = Config().from_str(CONFIG, overrides={"paths.train": str(train)})
    corpora = registry.resolve(config)["corpora"]
    examples = list(corpora["train"](nlp))
    assert len(examples) == 4
    texts = sorted(eg.reference.text for eg in examples)
    original = sorted(doc.text for doc in DocBin().from_disk(train).get_docs(nlp.vocab))
    assert texts != original  # every entity with another surface was swapped
    for eg in examples:
        assert get_domain(eg.reference) == "ai" and get_domain(eg.predicted) == "ai"
        assert [t.text for t in eg.predicted] == [t.text for t in eg.reference]


def test_from_corpus_draws_from_the_training_corpus_itself(nlp, files):
    """from_corpus = true: no mention file named; the reader hands the augmenter its own labelled
    docs, whose entities (per domain) become the pool; without that reader, a clear error."""
    train, _ = files
    text = CONFIG.replace("[corpora.train.augmenter.mentions]\nai = ${paths.train}\n", "from_corpus = true\n")
    assert "mentions" not in text
    config = Config().from_str(text, overrides={"paths.train": str(train)})
    reader = registry.resolve(config)["corpora"]["train"]
    examples = list(reader(nlp))
    original = {doc.text: doc for doc in DocBin().from_disk(train).get_docs(nlp.vocab)}
    pool = reader.augmenter.pool
    # the pool is the corpus's own entities, under its domain
    own = {(get_domain(doc), e.label_, tuple(t.text for t in e)) for doc in original.values() for e in doc.ents}
    assert {(d, label, s) for (d, label), surfaces in pool.items() for s in surfaces} == own
    assert sorted(eg.reference.text for eg in examples) != sorted(original)
    swapped = 0
    for eg in examples:
        assert get_domain(eg.reference) == "ai"
        for ent in eg.reference.ents:
            assert ("ai", ent.label_, tuple(t.text for t in ent)) in own
        swapped += eg.reference.text not in original
    assert swapped > 0
    # called outside that reader, it says what to do instead of augmenting nothing
    bare = create_mention_replace_augmenter(probability=1.0, from_corpus=True)
    eg = _examples(nlp, [("ai", "BERT beats LSTM .".split(), [(0, 1, "algorithm")])])[0]
    with pytest.raises(ValueError, match="from_corpus = true .*MultiDomainCorpus"):
        list(bare(nlp, eg))
    with pytest.raises(ValueError, match="from_corpus must be true or false"):
        create_mention_replace_augmenter(from_corpus="yes")
