"""select-corpus with a scorer: ranking a general corpus by similarity to the target (issue 47, 2)."""
import json

import pytest
from spacy.tokens import DocBin
from spacy.vocab import Vocab
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.dapt.corpus import DaptInputError, iter_corpus_texts, select_corpus
from spacy_crossner.dapt.rank import EmbeddingScorer, Exclusion, LexicalScorer, TopSelector, read_reference

TARGET = """\
Neural	B-algorithm
networks	I-algorithm
learn	O
representations	O
with	O
gradient	B-algorithm
descent	I-algorithm
.	O

Deep	B-field
learning	I-field
improves	O
speech	B-task
recognition	I-task
and	O
machine	B-task
translation	I-task
.	O

Support	B-algorithm
vector	I-algorithm
machines	I-algorithm
are	O
trained	O
on	O
labelled	O
data	O
.	O
"""

IN_DOMAIN = "Recurrent neural networks are trained with gradient descent for state-of-the-art speech recognition."
OFF_DOMAIN = "The football team won the cup after a long match in the rain."
OFF_2 = "My grandmother bakes bread every Sunday morning in her old kitchen."
DEV_SENTENCE = "Convolutional networks classify images of handwritten digits very well."


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(TARGET, encoding="utf8")
    return path


@pytest.fixture
def dev(tmp_path):
    # a column file, tokenised differently from the raw corpus (no space before the final period)
    path = tmp_path / "dev.txt"
    words = DEV_SENTENCE[:-1].split() + ["."]
    path.write_text("".join(f"{w}\tO\n" for w in words), encoding="utf8")
    return path


def _lines(path):
    return path.read_text(encoding="utf8").splitlines()


@pytest.mark.parametrize("name", ["lexical", "minilm"])
def test_scorer_ranks_in_domain_first(name, target):
    texts = read_reference([target]).texts
    scorer = LexicalScorer(background=10) if name == "lexical" else EmbeddingScorer(batch_size=2, gpu_id=-1)
    scorer.fit(texts, [OFF_DOMAIN, OFF_2, IN_DOMAIN])
    off, inside, off2 = scorer.score([OFF_DOMAIN, IN_DOMAIN, OFF_2])
    assert inside > off and inside > off2


def test_ranked_selection_end_to_end(target, dev, tmp_path):
    corpus = tmp_path / "raw.txt"
    # a paragraph (split into sentences), a repeat, the dev sentence, off-domain text
    corpus.write_text(
        f"{OFF_DOMAIN} {IN_DOMAIN}\n{OFF_2}\n{DEV_SENTENCE}\n{IN_DOMAIN}\nShort one.\n", encoding="utf8"
    )
    summary = select_corpus(corpus=corpus, output_dir=tmp_path / "o", target=[target], scorer="lexical",
                            top_n=1, exclude=[dev])
    assert summary.sentences_read == 6
    assert summary.duplicates_removed == 1
    assert summary.excluded == 1
    ranked = summary.ranking
    assert ranked.too_short == 1 and ranked.candidates == 3
    selected = _lines(tmp_path / "o" / "selected.txt")
    # tokenised by spaCy's English tokenizer, one sentence per line: what raw-text sections read
    assert selected == [IN_DOMAIN[:-1] + " ."]
    assert ranked.selected == 1 and ranked.tokens == len(selected[0].split())
    assert ranked.score_min < ranked.score_max == ranked.selected_max
    scores = _lines(tmp_path / "o" / "selected.scores.tsv")
    assert scores[0].split("\t")[1] == selected[0]
    # a raw-text section of a config reads it as it is
    import spacy

    from spacy_crossner.readers import create_multi_domain_corpus

    reader = create_multi_domain_corpus({"raw": {"path": str(tmp_path / "o" / "selected.txt"), "raw": True, "domain": "ai"}})
    (example,) = list(reader(spacy.blank("en")))
    assert [t.text for t in example.reference] == selected[0].split() and not example.reference.ents


def test_exclusion_is_normalised_and_catches_overlaps():
    exclusion = Exclusion([["The", "U.S.", "army", ",", "founded", "in", "1775", ",", "fought", "wars", "."]], ngram=6)
    assert exclusion.matches("the U.S. Army, founded in 1775, fought wars.")
    assert exclusion.matches("the us army founded in 1775 fought wars")
    # different sentence boundaries: the reference sentence is inside a longer corpus sentence
    assert exclusion.matches("Long ago the US army, founded in 1775, fought wars and more")
    assert not exclusion.matches("The army fought wars.")
    exact = Exclusion([["A", "b", "c"]], ngram=0)
    assert exact.matches("a, b c!") and not exact.matches("a b c d")


def test_jsonl_text_field_and_spacy_output(target, tmp_path):
    corpus = tmp_path / "raw.jsonl"
    records = [{"title": "t1", "body": f"{OFF_DOMAIN} {IN_DOMAIN}"}, {"title": "t2", "body": OFF_2},
               {"title": "t3", "body": None}]
    corpus.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf8")
    summary = select_corpus(corpus=corpus, output_dir=tmp_path / "o", target=[target], scorer="lexical",
                            top_share=0.5, text_field="body", output_format="spacy", domain="ai")
    assert summary.sentences_read == 3 and summary.ranking.candidates == 3
    docs = list(DocBin().from_disk(tmp_path / "o" / "selected.spacy").get_docs(Vocab()))
    assert len(docs) == 2  # ceil(0.5 * 3)
    assert docs[0].text.startswith("Recurrent neural networks")
    assert all(doc._.domain == "ai" for doc in docs) and not any(doc.ents for doc in docs)
    with pytest.raises(DaptInputError, match=r"raw.jsonl: line 1 has no field 'text'.*'title', 'body'"):
        select_corpus(corpus=corpus, output_dir=tmp_path / "o", target=[target], scorer="lexical", top_n=1)


def test_streamed_once_with_bounded_memory(target, tmp_path):
    reads = []

    def stream():
        for i in range(300):
            reads.append(i)
            if i == 137:
                yield IN_DOMAIN
            else:
                yield f"Sentence number {i} is about the weather in town {i % 7}."

    lines = stream()
    summary = select_corpus(corpus=lines, output_dir=tmp_path / "o", target=[target], scorer="lexical",
                            top_n=2, background=50, batch_size=16)
    assert reads == list(range(300))  # every line read once, in order; the generator is spent
    assert next(lines, None) is None
    assert summary.ranking.candidates == 300
    assert _lines(tmp_path / "o" / "selected.txt")[0] == IN_DOMAIN[:-1] + " ."

    selector = TopSelector(top_n=3)
    for i in range(1000):
        selector.add(float(i % 97), f"s{i}", 4)
    assert selector.peak_held == 3
    assert [score for score, _, _ in selector.result()] == [96.0, 96.0, 96.0]
    assert [text for _, text, _ in selector.result()] == ["s96", "s193", "s290"]  # ties: earliest first

    by_tokens = TopSelector(top_tokens=10)
    for i in range(100):
        by_tokens.add(float(i), f"s{i}", 4)
    assert [t for _, t, _ in by_tokens.result()] == ["s99", "s98", "s97"]  # 12 tokens >= 10
    assert by_tokens.peak_held <= 4


def test_entity_dense_level_and_weight(target, tmp_path):
    corpus = tmp_path / "raw.txt"
    plain = "Researchers study how networks learn representations of labelled data today."
    dense = "Speech recognition and machine translation use deep learning a lot these days."
    corpus.write_text(f"{plain}\n{dense}\n{OFF_DOMAIN}\n", encoding="utf8")
    # the target's own annotated entities (Deep learning, speech recognition, ...) are the gazetteer
    summary = select_corpus(corpus=corpus, output_dir=tmp_path / "o", target=[target], scorer="lexical",
                            top_n=5, rank_level="entity", min_entities=2, ignore_case=True)
    assert _lines(tmp_path / "o" / "selected.txt") == [dense[:-1] + " ."]
    assert summary.ranking.not_in_level == 2
    weighted = select_corpus(corpus=corpus, output_dir=tmp_path / "w", target=[target], scorer="lexical",
                             top_n=1, entity_weight=10.0, ignore_case=True)
    assert weighted.ranking.selected_max > 10  # three mentions x 10 on top of the cosine
    assert _lines(tmp_path / "w" / "selected.txt") == [dense[:-1] + " ."]


def test_clear_errors(target, tmp_path):
    corpus = tmp_path / "raw.txt"
    corpus.write_text(IN_DOMAIN + "\n", encoding="utf8")
    out = tmp_path / "o"
    for bad in (0, -3):
        with pytest.raises(DaptInputError, match="--top-n must be a whole number > 0"):
            select_corpus(corpus=corpus, output_dir=out, target=[target], scorer="lexical", top_n=bad)
    with pytest.raises(DaptInputError, match="exactly one"):
        select_corpus(corpus=corpus, output_dir=out, target=[target], scorer="lexical", top_n=1, top_share=0.5)
    with pytest.raises(DaptInputError, match=r"--top-share must be in \(0, 1\]"):
        select_corpus(corpus=corpus, output_dir=out, target=[target], scorer="lexical", top_share=1.5)
    with pytest.raises(DaptInputError, match="--target"):
        select_corpus(corpus=corpus, output_dir=out, scorer="lexical", top_n=1)
    with pytest.raises(DaptInputError, match="Unknown scorer"):
        select_corpus(corpus=corpus, output_dir=out, target=[target], scorer="bm25", top_n=1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf8")
    with pytest.raises(DaptInputError, match="empty"):
        select_corpus(corpus=empty, output_dir=out, target=[target], scorer="lexical", top_n=1)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "fine"}\n{"text": \n', encoding="utf8")
    with pytest.raises(DaptInputError, match=r"broken.jsonl: line 2 is not JSON"):
        select_corpus(corpus=broken, output_dir=out, target=[target], scorer="lexical", top_n=1)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"fine line\nCaf\xe9\n")
    with pytest.raises(DaptInputError, match=r"latin.txt, line 2: not UTF-8 text"):
        select_corpus(corpus=latin, output_dir=out, target=[target], scorer="lexical", top_n=1)
    bad_target = tmp_path / "bad_target.txt"
    bad_target.write_bytes(b"Neural\tB-algorithm\nnets\t\xff\n")
    with pytest.raises(DaptInputError, match="bad_target.txt"):
        select_corpus(corpus=corpus, output_dir=out, target=[bad_target], scorer="lexical", top_n=1)
    with pytest.raises(DaptInputError, match="not found"):
        select_corpus(corpus=corpus, output_dir=out, target=[target], scorer="lexical", top_n=1,
                      exclude=[tmp_path / "nope.txt"])
    plain = tmp_path / "plain.txt"
    plain.write_text("just text here\n", encoding="utf8")
    with pytest.raises(DaptInputError, match="need entities"):
        select_corpus(corpus=corpus, output_dir=out, target=[plain], scorer="lexical", top_n=1, rank_level="entity")
    with pytest.raises(DaptInputError, match="--entities"):
        select_corpus(corpus=corpus, output_dir=out)
    with pytest.raises(DaptInputError, match="line 1 is a JSON list"):
        list(iter_corpus_texts(["[1, 2]"], input_format="jsonl"))


def test_levels_drop_excluded_text(dev, tmp_path):
    entities = tmp_path / "e.txt"
    entities.write_text("networks\n", encoding="utf8")
    corpus = tmp_path / "raw.txt"
    corpus.write_text(f"{DEV_SENTENCE}\n{IN_DOMAIN}\n", encoding="utf8")
    summary = select_corpus(corpus=corpus, entities=[entities], output_dir=tmp_path / "o", exclude=[dev])
    assert summary.excluded == 1
    assert _lines(tmp_path / "o" / "domain.txt") == [IN_DOMAIN]


def test_cli_ranking(target, dev, tmp_path):
    corpus = tmp_path / "raw.txt"
    corpus.write_text(f"{OFF_DOMAIN}\n{IN_DOMAIN}\n{DEV_SENTENCE}\n", encoding="utf8")
    out = tmp_path / "cli"
    runner = CliRunner()
    result = runner.invoke(app, ["select-corpus", str(corpus), str(out), "--scorer", "lexical", "-T", str(target),
                                 "-x", str(dev), "--top-n", "1", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "1 dropped as duplicates" in result.output and "Kept 1 sentences" in result.output
    assert "Recurrent neural networks" in result.output
    assert (out / "selected.txt").exists()
    result = runner.invoke(app, ["select-corpus", str(corpus), str(out), "--scorer", "lexical", "-T", str(target),
                                 "--top-n", "0"])
    assert result.exit_code == 1
    assert "--top-n must be" in result.output and "Traceback" not in result.output
