"""Converts every CrossNER file of ../shared/data/crossner and checks the counts of
specs/crossner_benchmark.md (sections 2 and 3) and that spaCy's entities give back the file's
conlleval chunks exactly."""
from pathlib import Path

import pytest
import srsly.msgpack
from spacy.tokens import DocBin
from spacy.vocab import Vocab

from spacy_crossner.convert import convert
from spacy_crossner.domains import get_domain
from spacy_crossner.formats import conlleval_chunks, read_column_file, spans_to_iob2

DATA_DIR = Path(__file__).parents[2] / "shared" / "data" / "crossner"
SPLITS = ("train", "dev", "test")

# Section 2: sentences / tokens / entities per split.
COUNTS = {
    "conll2003": {
        "train": (14041, 203621, 23429), "dev": (3250, 51362, 5938), "test": (3453, 46435, 5628),
    },
    "politics": {"train": (200, 8384, 1304), "dev": (541, 24624, 3482), "test": (651, 27585, 4209)},
    "science": {"train": (200, 7100, 1075), "dev": (450, 16139, 2538), "test": (543, 19487, 3089)},
    "music": {"train": (100, 3909, 648), "dev": (380, 15591, 2679), "test": (465, 19605, 3336)},
    "literature": {
        "train": (100, 3782, 541), "dev": (400, 14503, 2130), "test": (416, 16157, 2266),
    },
    "ai": {"train": (100, 3782, 532), "dev": (350, 10919, 1549), "test": (431, 12991, 1809)},
}
# Section 1: documents separated by 2 empty lines in CrossNER's conll2003.
CONLL_DOCUMENTS = {"train": 946, "dev": 216, "test": 231}
# Section 3: entities per label, train/dev/test.
LABELS = {
    "politics": {
        "politicalparty": (195, 1053, 953), "location": (297, 211, 599),
        "organisation": (152, 431, 513), "politician": (359, 411, 485),
        "election": (123, 528, 434), "country": (62, 183, 418), "person": (14, 286, 354),
        "misc": (80, 193, 258), "event": (22, 186, 195),
    },
    "science": {
        "misc": (169, 360, 520), "scientist": (127, 328, 471),
        "astronomicalobject": (121, 373, 337), "organisation": (118, 278, 273),
        "person": (97, 153, 230), "academicjournal": (28, 149, 180), "location": (65, 142, 170),
        "chemicalcompound": (72, 193, 160), "protein": (69, 101, 156), "award": (56, 140, 146),
        "university": (56, 138, 130), "chemicalelement": (16, 23, 85), "enzyme": (22, 48, 80),
        "discipline": (22, 41, 73), "event": (20, 36, 31), "country": (9, 28, 27),
        "theory": (8, 7, 20),
    },
    "music": {
        "musicalartist": (104, 472, 515), "musicgenre": (88, 360, 487), "band": (125, 402, 462),
        "location": (30, 187, 343), "album": (91, 282, 332), "award": (69, 230, 260),
        "song": (27, 177, 227), "organisation": (36, 136, 208), "misc": (22, 124, 171),
        "country": (27, 130, 160), "person": (15, 65, 80), "event": (12, 72, 69),
        "musicalinstrument": (2, 42, 22),
    },
    "literature": {
        "writer": (133, 544, 567), "book": (91, 336, 418), "misc": (58, 212, 239),
        "literarygenre": (36, 152, 194), "person": (48, 194, 175), "award": (34, 124, 141),
        "poem": (47, 79, 120), "organisation": (18, 115, 110), "country": (25, 127, 101),
        "location": (25, 111, 99), "magazine": (16, 71, 57), "event": (10, 65, 45),
    },
    "ai": {
        "task": (60, 147, 219), "field": (39, 178, 207), "product": (58, 173, 198),
        "metrics": (27, 147, 191), "misc": (43, 180, 181), "algorithm": (80, 178, 177),
        "researcher": (54, 142, 160), "organisation": (48, 94, 145), "conference": (24, 89, 93),
        "person": (6, 41, 67), "programlang": (25, 35, 60), "country": (29, 44, 44),
        "location": (7, 42, 39), "university": (32, 59, 28),
    },
    "conll2003": {
        "location": (7129, 1837, 1662), "organisation": (6297, 1341, 1656),
        "person": (6600, 1842, 1617), "misc": (3403, 918, 693),
    },
}


def require_data() -> None:
    """Fail (never skip) when the data folder is missing."""
    if not DATA_DIR.is_dir():
        pytest.fail(
            f"The CrossNER data is missing: expected {DATA_DIR} (the repo is cloned beside "
            "shared/; see shared/data/README.md)",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Every domain directory converted once: {domain: (ConvertSummary, output dir)}."""
    if not DATA_DIR.is_dir():
        return {}
    out_root = tmp_path_factory.mktemp("crossner")
    result = {}
    for domain in COUNTS:
        out = out_root / domain
        result[domain] = (convert(DATA_DIR / domain, out), out)
    return result


@pytest.mark.parametrize("domain", sorted(COUNTS))
def test_counts_match_spec(converted, domain):
    require_data()
    summary, out = converted[domain]
    assert sorted(f.input_path.name for f in summary.files) == ["dev.txt", "test.txt", "train.txt"]
    for i, split in enumerate(SPLITS):
        item = summary[split]
        assert (item.sentences, item.tokens, item.n_entities) == COUNTS[domain][split], split
        assert item.docs == item.sentences
        assert item.scheme == "IOB2" and item.sep == "tab"
        assert item.domain == domain
        assert item.repairs == {}, f"{domain}/{split}: unexpected repairs {dict(item.repairs)}"
        expected = {label: counts[i] for label, counts in LABELS[domain].items()}
        assert dict(item.entities) == expected, split
        assert (out / f"{split}.spacy").exists()


@pytest.fixture
def fast_user_data(monkeypatch):
    """srsly looks up entry points each time it unpacks a doc's user data (about 1 ms per doc,
    20k docs here); no installed package registers msgpack extensions, so skip the lookup."""
    for registry in (srsly.msgpack.msgpack_encoders, srsly.msgpack.msgpack_decoders):
        if registry.get_entry_points():
            break
    else:
        for registry in (srsly.msgpack.msgpack_encoders, srsly.msgpack.msgpack_decoders):
            monkeypatch.setattr(registry, "entry_points", False)


@pytest.mark.parametrize("domain", sorted(COUNTS))
def test_docs_reproduce_conlleval_chunks(converted, fast_user_data, domain):
    require_data()
    _, out = converted[domain]
    vocab = Vocab()
    for split in SPLITS:
        column_file = read_column_file(DATA_DIR / domain / f"{split}.txt")
        docs = list(DocBin().from_disk(out / f"{split}.spacy").get_docs(vocab))
        assert len(docs) == len(column_file.sentences)
        for doc, sent in zip(docs, column_file.sentences):
            assert [t.text for t in doc] == sent.words
            assert get_domain(doc) == domain
            assert doc.has_annotation("ENT_IOB")
            tags = spans_to_iob2([(e.start, e.end, e.label_) for e in doc.ents], len(doc))
            assert conlleval_chunks(tags) == conlleval_chunks(sent.tags), (
                f"{domain}/{split}.txt line {sent.lines[0]}"
            )


def test_conll2003_documents():
    require_data()
    for split, n_docs in CONLL_DOCUMENTS.items():
        column_file = read_column_file(DATA_DIR / "conll2003" / f"{split}.txt")
        assert column_file.n_documents == n_docs, split
        assert column_file.n_docstart == 0
