"""The training readers' errors name the config section and the file (issue 12)."""
import pytest
import spacy
from spacy.tokens import Doc, DocBin

from spacy_crossner.readers import create_domain_corpus, create_multi_domain_corpus
from util import NEWS, make_doc


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


@pytest.fixture
def news(tmp_path, nlp):
    db = DocBin(store_user_data=True)
    for domain, words, ents in NEWS:
        db.add(make_doc(nlp, words, ents, domain))
    db.to_disk(tmp_path / "news.spacy")
    return tmp_path / "news.spacy"


def read(nlp, **sections):
    return list(create_multi_domain_corpus(domains=sections)(nlp))


def error(nlp, **sections) -> str:
    with pytest.raises(ValueError) as info:
        read(nlp, **sections)
    return str(info.value)


def test_empty_labelled_section_names_section_and_path(nlp, news, tmp_path):
    empty = tmp_path / "empty.spacy"
    DocBin().to_disk(empty)
    message = error(nlp, source={"path": str(news)}, target={"path": str(empty), "domain": "bio"})
    assert "[corpora.*.domains.target]" in message and str(empty) in message
    assert "empty" in message


def test_labelled_section_without_entity_annotation(nlp, news, tmp_path):
    db = DocBin(store_user_data=True)
    db.add(Doc(nlp.vocab, words=["no", "labels"]))
    db.to_disk(tmp_path / "unlabelled.spacy")
    message = error(nlp, source={"path": str(news)}, target={"path": str(tmp_path / "unlabelled.spacy")})
    assert "[corpora.*.domains.target]" in message and "unlabelled.spacy" in message
    assert "no" in message and "entity annotation" in message and "raw = true" in message
    # as raw text the same docs are fine
    assert len(read(nlp, source={"path": str(news)},
                    target={"path": str(tmp_path / "unlabelled.spacy"), "raw": True})) == 4


def test_max_length_dropping_everything_says_so(nlp, news):
    with pytest.raises(ValueError, match=r"news\.spacy: all 3 docs are longer than max_length = 2"):
        list(create_domain_corpus(str(news), max_length=2)(nlp))


@pytest.mark.parametrize("content", [b"", b"\n \n\t\n"])
def test_empty_raw_corpus_says_the_file_is_empty(nlp, news, tmp_path, content):
    raw = tmp_path / "raw.txt"
    raw.write_bytes(content)
    message = error(nlp, source={"path": str(news)}, target_raw={"path": str(raw), "raw": True})
    assert "[corpora.*.domains.target_raw]" in message and str(raw) in message
    assert "empty" in message and "add a" not in message


def test_latin1_raw_corpus_names_file_and_line(nlp, news, tmp_path):
    raw = tmp_path / "latin1.txt"
    raw.write_bytes("first line\nZ\xfcrich is a city\n".encode("latin-1"))
    message = error(nlp, source={"path": str(news)}, target_raw={"path": str(raw), "raw": True})
    assert "[corpora.*.domains.target_raw]" in message
    assert f"{raw}, line 2: not valid UTF-8" in message


def test_column_file_as_raw_corpus_says_to_convert(nlp, news, tmp_path):
    raw = tmp_path / "train.txt"
    raw.write_text("Popular\tO\nmusic\tB-genre\n\nJazz\tB-genre\n", encoding="utf-8")
    message = error(nlp, source={"path": str(news)}, target_raw={"path": str(raw), "raw": True})
    assert str(raw) in message and "token/tag column file" in message
    assert "python -m spacy_crossner raw-text" in message


def test_corrupt_docbin_names_the_file(nlp, news, tmp_path):
    bad = tmp_path / "corrupt.spacy"
    bad.write_bytes(b"\x00\x01 definitely not a docbin")
    message = error(nlp, source={"path": str(news)}, target={"path": str(bad)})
    assert "[corpora.*.domains.target]" in message and f"cannot read {bad}" in message
    with pytest.raises(ValueError, match=r"DomainCorpus.v1 path = .*corrupt\.spacy"):
        list(create_domain_corpus(str(bad))(nlp))


def test_cr_only_raw_corpus(nlp, news, tmp_path):
    raw = tmp_path / "mac.txt"
    raw.write_bytes(b"one two\rthree four\r")
    examples = read(nlp, target_raw={"path": str(raw), "raw": True, "domain": "bio"})
    assert sorted(len(eg.reference) for eg in examples) == [2, 2]
