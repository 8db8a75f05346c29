"""Converter behaviour on corpora in shapes CrossNER does not have (issue 12): line endings,
control characters, separators, label maps, skipped and empty files, raw text."""
import json
from pathlib import Path

import pytest
from spacy.tokens import DocBin
from spacy.vocab import Vocab
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.convert import ConversionError, convert, write_raw_text
from spacy_crossner.formats import FormatError, read_column_file, split_lines
from spacy_crossner.labels import LabelMapError, load_label_map


def read_docs(path: Path):
    return list(DocBin().from_disk(path).get_docs(Vocab()))


def ents(docs):
    return [[(e.text, e.label_) for e in d.ents] for d in docs]


def write_bytes(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_split_lines_universal_newlines():
    assert split_lines("a\nb\r\nc\rd\r") == ["a", "b", "c", "d"]
    assert split_lines("a\r\r\nb\n") == ["a", "b"]  # \r runs before \n belong to the ending
    assert split_lines("a\r\rb") == ["a", "", "b"]  # a blank line in an old Mac file


def test_cr_only_file_converts_fully(tmp_path):
    text = "John B-PER\rSmith I-PER\rvisited O\rParis B-LOC\r\rBerlin B-LOC\r"
    path = write_bytes(tmp_path, "mac.txt", text.encode("utf-8"))
    summary = convert(path, tmp_path / "out", domain="news")
    docs = read_docs(tmp_path / "out" / "mac.spacy")
    assert summary["mac"].sentences == 2 and summary["mac"].tokens == 5
    assert ents(docs) == [[("John Smith", "PER"), ("Paris", "LOC")], [("Berlin", "LOC")]]


def test_cr_only_raw_text(tmp_path):
    plain = write_bytes(tmp_path, "plain.txt", b"one two\rthree four five\r")
    cols = write_bytes(tmp_path, "cols.txt", b"a O\rb B-X\r\rc O\r")
    summary = write_raw_text([plain, cols], tmp_path / "raw.txt", domain="x")
    assert summary.sentences == 4 and summary.tokens == 8
    assert (tmp_path / "raw.txt").read_text().splitlines() == [
        "one two", "three four five", "a b", "c"]


@pytest.mark.parametrize("ending", [b"\r\r\n", b"\x0b\n", b"\t\n", b"  \n", b"\x0c\r\n"])
def test_control_characters_and_empty_columns_around_tags(tmp_path, ending):
    data = b"John\tB-PER" + ending + b"Smith\tI-PER\n"
    path = write_bytes(tmp_path, "ctl.txt", data)
    column_file = read_column_file(path)
    assert column_file.sentences[0].tags == ["B-PER", "I-PER"]
    assert column_file.n_columns == 2


def test_trailing_tab_tolerated_like_trailing_spaces(tmp_path):
    path = write_bytes(tmp_path, "tt.tsv", b"a\tB-X\t\nb\tI-X  \nc\tO\t\t\n")
    column_file = read_column_file(path)
    assert column_file.sentences[0].tags == ["B-X", "I-X", "O"]


def test_control_character_inside_label_names_file_and_line(tmp_path):
    path = write_bytes(tmp_path, "bad.txt", b"a\tO\nb\tB-PE\x07R\n")
    with pytest.raises(FormatError) as info:
        read_column_file(path)
    assert f"{path}, line 2" in str(info.value) and "control character" in str(info.value)


def test_one_tab_line_in_space_file_names_that_line(tmp_path):
    path = write_bytes(tmp_path, "mixed.txt", b"a O\nb B-X\n\nc O\nd\tO\n")
    with pytest.raises(FormatError) as info:
        read_column_file(path)
    message = str(info.value)
    assert f"{path}, line 5:" in message
    assert "tab-separated" in message and "line 1" in message and "space-separated" in message
    # given explicitly, space means runs of spaces and tabs
    assert read_column_file(path, sep="space").n_tokens == 4


def test_space_line_in_tab_file_says_what_it_found(tmp_path):
    path = write_bytes(tmp_path, "mixed.tsv", b"a\tO\nb O\n")
    with pytest.raises(FormatError, match=r"line 2: .*found 1 \(the line has spaces but no tab\)"):
        read_column_file(path)


def test_scheme_error_wording_given_or_detected(tmp_path):
    path = write_bytes(tmp_path, "s.txt", b"a B-X\nb E-X\n\nc S-X\nd I-X\n")
    with pytest.raises(FormatError) as given:
        read_column_file(path, scheme="IOB2")
    assert "line 2" in str(given.value)
    assert "scheme given (IOB2)" in str(given.value)
    assert "detected" not in str(given.value)
    # any M- makes the file BMES, where I- is not a tag
    path = write_bytes(tmp_path, "m.txt", b"a B-X\nb M-X\nc E-X\n\nd I-X\n")
    with pytest.raises(FormatError) as detected:
        read_column_file(path)
    assert "line 5" in str(detected.value)
    assert "detected as BMES" in str(detected.value)
    assert "if the detected one is wrong" in str(detected.value)


@pytest.mark.parametrize("marker", [b"-docstart- -X- O O", b"-DocStart-\tO", b"-DOCSTART-"])
def test_docstart_any_case_is_a_document_break(tmp_path, marker):
    path = write_bytes(tmp_path, "d.txt", marker + b"\n\na O\n\n" + marker + b"\n\nb O\n")
    column_file = read_column_file(path)
    assert [s.words for s in column_file.sentences] == [["a"], ["b"]]
    assert column_file.n_docstart == 2 and column_file.n_documents == 2


def test_directory_lists_skipped_files_and_keeps_whole_names(tmp_path):
    directory = tmp_path / "tech"
    directory.mkdir()
    (directory / "tech.train.txt").write_text("a B-X\n")
    (directory / "tech.test.reannotated").write_text("a B-X\n")
    (directory / "notes.md").write_text("# notes\n")
    (directory / ".hidden.txt").write_text("a O\n")
    (directory / "sub").mkdir()
    summary = convert(directory, tmp_path / "out")
    skipped = {p.name: why for p, why in summary.skipped}
    assert set(skipped) == {"tech.test.reannotated", "notes.md", ".hidden.txt", "sub"}
    assert "unrecognised suffix '.reannotated'" in skipped["tech.test.reannotated"]
    result = CliRunner().invoke(app, ["convert", str(directory), str(tmp_path / "out2")])
    assert result.exit_code == 0, result.output
    assert "tech.test.reannotated" in result.stdout and "notes.md" in result.stdout
    assert "Skipped 4 entries" in result.stderr
    # named directly, it is converted and keeps its whole name
    convert(directory / "tech.test.reannotated", tmp_path / "out3")
    assert [p.name for p in (tmp_path / "out3").iterdir()] == ["tech.test.reannotated.spacy"]


@pytest.mark.parametrize("content", [b"", b"\n\n  \n\t\n", b"\r\r"])
def test_empty_input_warns_or_fails_under_strict(tmp_path, content):
    path = write_bytes(tmp_path, "empty.txt", content)
    summary = convert(path, tmp_path / "out", domain="x")
    assert summary.warnings and str(path) in summary.warnings[0]
    assert read_docs(tmp_path / "out" / "empty.spacy") == []
    result = CliRunner().invoke(app, ["convert", str(path), str(tmp_path / "o2"), "-d", "x"])
    assert result.exit_code == 0 and "Warning:" in result.stderr and str(path) in result.stderr
    with pytest.raises(ConversionError, match="no token lines.*--strict"):
        convert(path, tmp_path / "out", domain="x", strict=True)
    result = CliRunner().invoke(app, ["convert", str(path), str(tmp_path / "o3"), "--strict"])
    assert result.exit_code == 1 and str(path) in result.stderr
    assert "Traceback" not in result.output
    result = CliRunner().invoke(
        app, ["raw-text", str(path), "-o", str(tmp_path / "r.txt"), "-d", "x", "--strict"])
    assert result.exit_code == 1 and str(path) in result.stderr
    summary = write_raw_text([path], tmp_path / "r.txt", domain="x")
    assert summary.warnings and str(path) in summary.warnings[0]


def test_raw_text_count_agrees_with_output(tmp_path):
    path = write_bytes(tmp_path, "ny.tsv", b"New York\tB-LOC\nis\tO\nbig\tO\n")
    out = tmp_path / "raw.txt"
    summary = write_raw_text([path], out, domain="x")
    written = out.read_text().split()
    assert written == ["New", "York", "is", "big"]
    assert summary.tokens == len(written) == 4 and summary.split_tokens == 1
    summary = write_raw_text([path], tmp_path / "raw.spacy", domain="x", fmt="spacy")
    docs = read_docs(tmp_path / "raw.spacy")
    assert summary.tokens == sum(len(d) for d in docs) == 3
    assert docs[0][0].text == "New York"


def test_label_map_in_convert(tmp_path):
    path = write_bytes(tmp_path, "c.txt", b"John B-PER\nin O\nRome B-LOC\n")
    inline = '{"PER": "person", "LOC": "location", "GPE": "location"}'
    summary = convert(path, tmp_path / "out", domain="x", label_map=inline)
    assert ents(read_docs(tmp_path / "out" / "c.spacy")) == [[("John", "person"), ("Rome", "location")]]
    assert summary["c"].entities == {"person": 1, "location": 1}
    assert any("GPE" in w for w in summary.warnings)  # an entry that matched nothing is reported
    map_file = tmp_path / "map.json"
    map_file.write_text(json.dumps({"PER": "per"}))
    result = CliRunner().invoke(
        app, ["convert", str(path), str(tmp_path / "o2"), "--label-map", str(map_file)])
    assert result.exit_code == 0, result.output
    assert ents(read_docs(tmp_path / "o2" / "c.spacy")) == [[("John", "per"), ("Rome", "LOC")]]


@pytest.mark.parametrize(
    "value,message",
    [
        ('{"PER": ', "--label-map: the inline JSON is not valid JSON"),
        ('{"PER": 1}', "maps 'PER' to 1"),
        ('{"PER": ""}', "maps 'PER' to ''"),
        ("missing.json", "neither an existing JSON file nor an inline JSON object"),
        ("FILE", "must be a JSON object"),
        ('["PER"]', "the inline JSON must be a JSON object"),
    ],
)
def test_bad_label_map_names_the_option(tmp_path, value, message):
    if value == "FILE":
        value = str(tmp_path / "list.json")
        Path(value).write_text('["PER"]')
    with pytest.raises(LabelMapError, match=message) as info:
        load_label_map(value)
    assert "--label-map" in str(info.value)
    path = write_bytes(tmp_path, "c.txt", b"John B-PER\n")
    result = CliRunner().invoke(app, ["convert", str(path), str(tmp_path / "o"), "--label-map", value])
    assert result.exit_code == 1 and "--label-map" in result.stderr
    assert "Traceback" not in result.output


def test_trailing_tab_in_a_space_separated_file(tmp_path):
    path = write_bytes(tmp_path, "sp.txt", b"a B-X\t\nb I-X\t \nc O\n")
    column_file = read_column_file(path)
    assert column_file.sep == "space" and column_file.sentences[0].tags == ["B-X", "I-X", "O"]


def test_raw_text_lists_skipped_files_of_a_directory(tmp_path):
    directory = tmp_path / "texts"
    directory.mkdir()
    (directory / "a.txt").write_text("one sentence here\n")
    (directory / "b.reannotated").write_text("x O\n")
    summary = write_raw_text([directory], tmp_path / "raw.txt", domain="x")
    assert [(p.name, why) for p, why in summary.skipped] == [
        ("b.reannotated", "unrecognised suffix '.reannotated'")]
    result = CliRunner().invoke(app, ["raw-text", str(directory), "-o", str(tmp_path / "r.txt"), "-d", "x"])
    assert result.exit_code == 0 and "b.reannotated" in result.stderr
