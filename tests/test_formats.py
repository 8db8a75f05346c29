"""Tests of spacy_crossner.formats: reading column files, schemes, conlleval chunks, repairs."""
from pathlib import Path

import pytest

from spacy_crossner.formats import (
    EntitySpan,
    FormatError,
    conlleval_chunks,
    detect_scheme,
    read_column_file,
    spans_to_iob2,
    spans_to_tags,
    split_tag,
    tags_to_spans,
)


def write(tmp_path: Path, text: str, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


def read_spans(path: Path, **kwargs):
    column_file = read_column_file(path, **kwargs)
    spans = [tags_to_spans(s.tags, column_file.scheme)[0] for s in column_file.sentences]
    return column_file, spans


# --- schemes ------------------------------------------------------------------------------


SCHEME_EXAMPLES = {
    # scheme: tags of "John Smith visited New York City and Paris"
    "IOB2": "B-PER I-PER O B-LOC I-LOC I-LOC O B-LOC",
    "IOB1": "I-PER I-PER O I-LOC I-LOC I-LOC O I-LOC",
    "BIOES": "B-PER E-PER O B-LOC I-LOC E-LOC O S-LOC",
    "BILOU": "B-PER L-PER O B-LOC I-LOC L-LOC O U-LOC",
    "BMES": "B-PER E-PER O B-LOC M-LOC E-LOC O S-LOC",
}
WORDS = "John Smith visited New York City and Paris".split()
EXPECTED = [EntitySpan(0, 2, "PER"), EntitySpan(3, 6, "LOC"), EntitySpan(7, 8, "LOC")]


@pytest.mark.parametrize("scheme", sorted(SCHEME_EXAMPLES))
@pytest.mark.parametrize("given", [True, False])
def test_each_scheme_read_and_detected(tmp_path, scheme, given):
    tags = SCHEME_EXAMPLES[scheme].split()
    path = write(tmp_path, lines(*(f"{w}\t{t}" for w, t in zip(WORDS, tags))))
    column_file, spans = read_spans(path, scheme=scheme if given else "auto")
    assert column_file.scheme == scheme
    assert column_file.sentences[0].words == WORDS
    assert spans == [EXPECTED]
    assert tags_to_spans(tags, scheme)[1] == {}


def test_scheme_names_case_insensitive(tmp_path):
    path = write(tmp_path, lines("a\tb-x"), "x.txt")
    with pytest.raises(FormatError):
        read_column_file(path)
    path = write(tmp_path, lines("a\tB-x"))
    assert read_column_file(path, scheme="bioes").scheme == "BIOES"
    assert read_column_file(path, scheme="iobes").scheme == "BIOES"
    with pytest.raises(ValueError, match="Unknown tag scheme 'bogus'"):
        read_column_file(path, scheme="bogus")


def test_iob1_with_b_between_same_type():
    tags = "I-LOC I-LOC B-LOC O I-PER".split()
    assert detect_scheme([tags]) == "IOB1"
    spans, repairs = tags_to_spans(tags, "IOB1")
    assert spans == [(0, 2, "LOC"), (2, 3, "LOC"), (4, 5, "PER")]
    assert repairs == {}


def test_detection_rules():
    assert detect_scheme([["O", "O"]]) == "IOB2"
    assert detect_scheme([[]]) == "IOB2"
    # an I- opening a chunk but a B- after O: IOB2 with a stray I-
    assert detect_scheme([["B-X", "O", "I-X"]]) == "IOB2"
    assert detect_scheme([["I-X", "O"], ["I-X", "B-X"]]) == "IOB1"
    assert detect_scheme([["S-X"]]) == "BIOES"
    assert detect_scheme([["E-X"]]) == "BIOES"
    assert detect_scheme([["U-X"]]) == "BILOU"
    assert detect_scheme([["B-X", "M-X", "E-X"]]) == "BMES"
    with pytest.raises(ValueError, match="mix BILOU and BIOES"):
        detect_scheme([["U-X", "S-Y"]])


def test_bmes_file_without_m_is_bioes(tmp_path):
    """MC's conll03 *.bmes files have no M- tags: they read as BIOES."""
    path = write(tmp_path, lines("-DOCSTART- O", "", "EU S-ORG", "rejects O"), "train.bmes")
    column_file, spans = read_spans(path)
    assert column_file.scheme == "BIOES"
    assert column_file.sep == "space"
    assert spans == [[(0, 1, "ORG")]]


def test_labels_case_sensitive_and_verbatim(tmp_path):
    path = write(
        tmp_path,
        lines("BBC\tB-organisation", "London\tB-Location", "x\tB-Character_Name", "y\tB-a-b"),
    )
    _, spans = read_spans(path)
    assert [s.label for s in spans[0]] == ["organisation", "Location", "Character_Name", "a-b"]
    assert split_tag("B-a-b") == ("B", "a-b")


# --- layout -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "docstart",
    [
        "-DOCSTART-", "-DOCSTART- O", "-DOCSTART- -X- O O", "-DOCSTART-\tO",
        "-DOCSTART-\t-X-\t-X-\tO", "-DOCSTART- -X- -X- O",
    ],
)
def test_docstart_layouts_dropped(tmp_path, docstart):
    four = docstart.count("-X-") == 2 or "\t-X-" in docstart
    sep = "\t" if "\t" in docstart else " "
    row = (lambda w, t: sep.join([w, "NNP", "I-NP", t])) if four else (lambda w, t: f"{w}{sep}{t}")
    text = lines(
        docstart, "", row("EU", "B-ORG"), row("rejects", "O"), "",
        row("Peter", "B-PER"), "", docstart, "", row("Paris", "B-LOC"),
    )
    column_file, spans = read_spans(write(tmp_path, text))
    assert column_file.n_docstart == 2
    assert column_file.n_columns == (4 if four else 2)
    assert [s.words for s in column_file.sentences] == [["EU", "rejects"], ["Peter"], ["Paris"]]
    assert [s.doc_index for s in column_file.sentences] == [0, 0, 1]
    assert column_file.n_documents == 2
    assert spans == [[(0, 1, "ORG")], [(0, 1, "PER")], [(0, 1, "LOC")]]


def test_space_separated_docstart_in_tab_file(tmp_path):
    text = lines("-DOCSTART- -X- -X- O", "", "EU\tB-ORG", "", "-DOCSTART- O", "Paris\tB-LOC")
    column_file = read_column_file(write(tmp_path, text))
    assert column_file.sep == "tab" and column_file.n_docstart == 2
    assert [s.words for s in column_file.sentences] == [["EU"], ["Paris"]]
    assert [s.doc_index for s in column_file.sentences] == [0, 1]


def test_two_empty_lines_separate_documents(tmp_path):
    text = lines("a\tO", "", "b\tO", "", "", "c\tO", "", "  ", "", "d\tO")
    column_file = read_column_file(write(tmp_path, text))
    assert [s.doc_index for s in column_file.sentences] == [0, 0, 1, 2]


def test_crlf(tmp_path):
    text = "EU\tB-ORG\r\nrejects\tO\r\n\r\nPeter\tB-PER\r\nBlackburn\tI-PER\r\n\r\n"
    column_file, spans = read_spans(write(tmp_path, text))
    assert [s.words for s in column_file.sentences] == [["EU", "rejects"], ["Peter", "Blackburn"]]
    assert column_file.sentences[1].tags == ["B-PER", "I-PER"]
    assert spans == [[(0, 1, "ORG")], [(0, 2, "PER")]]


def test_missing_final_empty_line_keeps_last_sentence(tmp_path):
    text = "a\tO\n\nLincoln\tB-organisation\n2\tO"
    column_file, spans = read_spans(write(tmp_path, text))
    assert len(column_file.sentences) == 2
    assert column_file.sentences[-1].words == ["Lincoln", "2"]
    assert spans[-1] == [(0, 1, "organisation")]


def test_whitespace_only_line_is_empty(tmp_path):
    text = lines("a O", " ", "b O", "\t", "c O")
    column_file = read_column_file(write(tmp_path, text))
    assert [s.words for s in column_file.sentences] == [["a"], ["b"], ["c"]]
    assert column_file.sentences[2].lines == [5]


def test_space_separated_runs_and_tab_detection(tmp_path):
    column_file = read_column_file(write(tmp_path, lines("a   O", "b  B-X")))
    assert column_file.sep == "space"
    assert column_file.sentences[0].tags == ["O", "B-X"]
    # tab files keep other characters inside the token
    column_file = read_column_file(write(tmp_path, lines("a\u00a0b\tO")), sep="tab")
    assert column_file.sentences[0].words == ["a\u00a0b"]


def test_empty_file(tmp_path):
    column_file = read_column_file(write(tmp_path, "\n\n"))
    assert column_file.sentences == [] and column_file.n_columns == 0
    assert column_file.scheme == "IOB2"


def test_utf8_bom_and_non_ascii(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffZürich\tB-LOC\n".encode("utf-8"))
    assert read_column_file(path).sentences[0].words == ["Zürich"]


# --- conlleval chunks and repairs ---------------------------------------------------------


@pytest.mark.parametrize(
    "scheme,tags,spans,repairs",
    [
        # I- after O opens a new entity
        ("IOB2", "O I-X I-X", [(1, 3, "X")], {"inside_without_begin": 1}),
        ("IOB2", "I-X", [(0, 1, "X")], {"inside_without_begin": 1}),
        # an I- that opens an entity is legal IOB1
        ("IOB1", "O I-X I-X", [(1, 3, "X")], {}),
        # type change inside an entity cuts it in two
        ("IOB2", "B-X I-Y", [(0, 1, "X"), (1, 2, "Y")], {"type_change": 1}),
        ("IOB2", "B-X I-X I-Y O", [(0, 2, "X"), (2, 3, "Y")], {"type_change": 1}),
        # E- without B-
        ("BIOES", "O E-X", [(1, 2, "X")], {"end_without_begin": 1}),
        ("BILOU", "L-X", [(0, 1, "X")], {"end_without_begin": 1}),
        # I- after a closed entity
        ("BIOES", "S-X I-X E-X", [(0, 1, "X"), (1, 3, "X")], {"inside_without_begin": 1}),
        ("BMES", "O M-X E-X", [(1, 3, "X")], {"inside_without_begin": 1}),
        # unclosed entities in closing schemes
        ("BIOES", "B-X I-X O", [(0, 2, "X")], {"unclosed": 1}),
        ("BIOES", "B-X", [(0, 1, "X")], {"unclosed": 1}),
        ("BIOES", "B-X B-X E-X", [(0, 1, "X"), (1, 3, "X")], {"unclosed": 1}),
        ("BIOES", "B-X I-Y E-Y", [(0, 1, "X"), (1, 3, "Y")], {"unclosed": 1, "type_change": 1}),
        # B- followed by B- is fine in IOB2
        ("IOB2", "B-X B-X", [(0, 1, "X"), (1, 2, "X")], {}),
        # conlleval: E- after B- of another type opens a new chunk
        ("BIOES", "B-X E-Y", [(0, 1, "X"), (1, 2, "Y")], {"unclosed": 1, "type_change": 1}),
    ],
)
def test_repairs_read_the_conlleval_way(scheme, tags, spans, repairs):
    got_spans, got_repairs = tags_to_spans(tags.split(), scheme)
    assert got_spans == spans
    assert dict(got_repairs) == repairs
    assert conlleval_chunks(tags.split()) == spans


def test_repairs_counted_from_a_file(tmp_path):
    text = lines("a\tO", "b\tI-X", "", "c\tB-X", "d\tI-Y", "", "e\tI-Z")
    column_file = read_column_file(write(tmp_path, text))
    assert column_file.scheme == "IOB2"
    total = {}
    for sent in column_file.sentences:
        for kind, n in tags_to_spans(sent.tags, column_file.scheme)[1].items():
            total[kind] = total.get(kind, 0) + n
    assert total == {"inside_without_begin": 2, "type_change": 1}


def test_chunks_stream_without_sentence_breaks():
    # crossner-compat scoring: an I- at a sentence start extends the previous entity
    assert conlleval_chunks(["B-X", "I-X"] + ["I-X", "O"]) == [(0, 3, "X")]


@pytest.mark.parametrize("scheme", ["IOB2", "BIOES", "BILOU"])
def test_spans_to_tags_round_trip(scheme):
    spans = [EntitySpan(0, 2, "PER"), EntitySpan(2, 3, "PER"), EntitySpan(4, 7, "LOC")]
    tags = spans_to_tags(spans, 8, scheme)
    assert conlleval_chunks(tags) == spans
    assert tags_to_spans(tags, scheme) == (spans, {})
    if scheme == "IOB2":
        assert tags == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "I-LOC", "I-LOC", "O"]
        assert spans_to_iob2(spans, 8) == tags
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_tags([(0, 2, "X"), (1, 3, "Y")], 4, scheme)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,line,message",
    [
        (lines("a\tO", "b\tc\tO"), 2, "expected 2 tab-separated columns"),
        (lines("a\tNNP\tO", "", "b\tO"), 3, "expected 3 tab-separated columns"),
        (lines("a\tO", "\tO"), 2, "empty token"),
        (lines("a O", " O"), 2, "empty token"),
        (lines("a\tO", "b\tPER"), 2, "'PER' is not a tag"),
        (lines("a\tO", "b\tB-"), 2, "'B-' is not a tag"),
        (lines("a\tB-X", "b\tX-Y"), 2, "prefix 'X'"),
        (lines("a"), 1, "found 1 column"),
        (lines("a\tB-X", "b\tE-X", "", "c\tL-X"), None, "mix BILOU and BIOES"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text, "bad.txt")
    with pytest.raises(FormatError) as info:
        read_column_file(path)
    text_ = str(info.value)
    assert str(path) in text_
    if line is not None:
        assert f"line {line}:" in text_
        assert info.value.line == line
    assert message in text_
    assert isinstance(info.value, ValueError)


def test_tag_not_of_given_scheme(tmp_path):
    path = write(tmp_path, lines("a\tB-X", "b\tE-X"), "bad.txt")
    with pytest.raises(FormatError, match=r"bad\.txt, line 2: tag 'E-X' is not a IOB2 tag"):
        read_column_file(path, scheme="IOB2")


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("a\tO\n\nZ\xfcrich\tB-LOC\n".encode("latin-1"))
    with pytest.raises(FormatError, match=r"latin1\.txt, line 3: not valid UTF-8"):
        read_column_file(path)


def test_space_file_read_as_tab_gives_clear_error(tmp_path):
    path = write(tmp_path, lines("a\tO", "b O"), "mixed.txt")
    expected = "line 2: expected 2 tab-separated columns like the first token line, found 1"
    with pytest.raises(FormatError, match=expected):
        read_column_file(path)
