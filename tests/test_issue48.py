"""Issue 48: nothing lost, every message clear. One regression test per case of the issue
(numbered as there), then the inputs of the sweep that needed a fix."""
import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_crossner.cli import app

REPO = Path(__file__).parents[1]


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


# -- vectors ------------------------------------------------------------------------------------


def test_1_vectors_cr_only_line_endings(tmp_path):
    source = tmp_path / "cr.txt"
    source.write_bytes(b"the 0.1 0.2 0.3\rcat 0.4 0.5 0.6\r\rsat 0.7 0.8 0.9\r")
    result = cli("vectors", source, tmp_path / "v", "--no-progress", "--case", "cased")
    assert result.exit_code == 0, result.output
    assert "Read 3 rows of width 3" in result.output
    import spacy

    nlp = spacy.load(tmp_path / "v")
    assert nlp.vocab.vectors.n_keys == 3
    assert list(nlp.vocab["sat"].vector) == pytest.approx([0.7, 0.8, 0.9])


def test_1_vectors_cr_only_bad_line_is_numbered(tmp_path):
    source = tmp_path / "cr.txt"
    source.write_bytes(b"a 1 2\r\rb 3\r")
    result = cli("vectors", source, tmp_path / "v", "--no-progress")
    assert result.exit_code == 1
    assert f"{source}, line 3: 1 values, expected 2" in result.output


@pytest.mark.parametrize("damage", ["truncated", "not_gzip_after_magic"])
def test_9_vectors_damaged_gzip_is_a_clear_error(tmp_path, damage):
    good = gzip.compress(b"the 0.1 0.2 0.3\ncat 0.4 0.5 0.6\n" * 200)
    data = good[: len(good) // 2] if damage == "truncated" else b"\x1f\x8b" + b"garbage" * 10
    source = tmp_path / "g.txt.gz"
    source.write_bytes(data)
    result = cli("vectors", source, tmp_path / "v", "--no-progress")
    assert result.exit_code == 1
    assert "Aborted" not in result.output
    assert f"Error: {source}, line " in result.output
    assert "gzip stream is damaged or truncated" in result.output


def test_10_vectors_output_parents_are_created(tmp_path):
    source = tmp_path / "g.txt"
    source.write_text("the 0.1 0.2 0.3\n", encoding="utf8")
    out = tmp_path / "no" / "such" / "out"
    result = cli("vectors", source, out, "--no-progress", "--case", "cased")
    assert result.exit_code == 0, result.output
    assert (out / "meta.json").exists()
    (tmp_path / "afile").write_text("x", encoding="utf8")
    result = cli("vectors", source, tmp_path / "afile", "--no-progress", "--case", "cased")
    assert result.exit_code == 1
    assert f"Output {tmp_path / 'afile'} is a file" in result.output


# -- raw-text, convert, evaluate, dapt input, report ---------------------------------------------


def test_5_raw_text_refuses_a_file_mixing_tag_lines_and_text(tmp_path):
    source = tmp_path / "x.txt"
    source.write_text("Alice\tB-person\nworks\tO\n\nplain sentence\n", encoding="utf8")
    out = tmp_path / "r.txt"
    result = cli("raw-text", source, "-o", out, "-d", "ai")
    assert result.exit_code == 1
    assert f"{source}, line 1 is a token/tag line" in result.output
    assert "line 4 is not ('plain sentence')" in result.output
    assert not out.exists()
    # told how to read it, the user gets every field as a word
    result = cli("raw-text", source, "-o", out, "-d", "ai", "--input-format", "text")
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf8").splitlines() == ["Alice B-person", "works O", "plain sentence"]


def test_5_plain_text_with_a_tag_like_word_is_still_text(tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("Vitamin B-12 helps\nsee B-52\nplain sentence\n", encoding="utf8")
    result = cli("raw-text", source, "-o", tmp_path / "r.txt", "-d", "ai")
    assert result.exit_code == 0, result.output


def test_11_evaluate_on_a_column_file_suggests_our_convert(tmp_path):
    from spacy_crossner.evaluate import EvaluationError, _load_docs
    from spacy.vocab import Vocab

    data = tmp_path / "c.txt"
    data.write_text("Alice\tB-person\nworks\tO\n", encoding="utf8")
    with pytest.raises(EvaluationError) as err:
        _load_docs(data, Vocab())
    assert f"python -m spacy_crossner convert {data} OUTPUT_DIR --domain DOMAIN" in str(err.value)
    assert "spacy convert file.json" not in str(err.value)


def test_13_no_break_space_token_in_a_tab_file(tmp_path):
    source = tmp_path / "nb.txt"
    source.write_bytes(b"\xc2\xa0\tO\nAlice\tB-person\n\n")
    result = cli("convert", source, tmp_path / "o", "-d", "ai")
    assert result.exit_code == 0, result.output
    tagged = tmp_path / "nb2.txt"
    tagged.write_bytes(b"\xc2\xa0\tB-person\nAlice\tB-person\n\n")
    for sep in ("auto", "tab"):
        result = cli("convert", tagged, tmp_path / f"o_{sep}", "-d", "ai", "--sep", sep)
        assert result.exit_code == 1
        assert f"{tagged}, line 1: the entity 'person' begins on the token '\\xa0'" in result.output


def test_14_dapt_input_names_the_line_of_the_bad_byte(tmp_path):
    from spacy_crossner.dapt.corpus import DaptInputError, iter_lines

    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\rsecond\nbad \xff here\n")
    with pytest.raises(DaptInputError, match=r"bad.txt, line 3: not UTF-8 text .*byte 0xff at byte 4"):
        list(iter_lines(path))


@pytest.mark.parametrize("scores,message", [
    ({"ents_p": 1.5, "ents_r": 50, "ents_f": 2}, "ents_f = 2 is not the harmonic mean"),
    ({"ents_p": 150, "ents_r": 50, "ents_f": 75}, "ents_p = 150 is not a score"),
    ({"ents_p": -0.1, "ents_r": 0.5, "ents_f": 0.5}, "ents_p = -0.1 is not a score"),
    ({"ents_p": 0.5, "ents_r": 0.5, "ents_f": 0.5, "ents_per_type": {"x": {"p": 0.5, "r": 250, "f": 0.5}}},
     "ents_per_type.x.r = 250 is not a score"),
])
def test_15_report_checks_the_range_of_scores(tmp_path, scores, message):
    from spacy_crossner.report import ReportError, load_runs

    path = tmp_path / "m.json"
    path.write_text(json.dumps(scores), encoding="utf8")
    with pytest.raises(ReportError, match=message):
        load_runs([path])


def test_15_report_still_reads_fractions_and_percentages(tmp_path):
    from spacy_crossner.report import load_runs

    (tmp_path / "f.json").write_text(json.dumps({"ents_p": 0.5, "ents_r": 0.25, "ents_f": 1 / 3}))
    (tmp_path / "p.json").write_text(json.dumps({"ents_p": 50, "ents_r": 25, "ents_f": 33.33}))
    runs = load_runs([tmp_path / "f.json", tmp_path / "p.json"])
    assert [round(r.overall[2], 2) for r in runs] == [33.33, 33.33]


# -- annotate -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """A tiny trained pipeline, and a copy whose files differ (another model to annotate with)."""
    import shutil

    from test_scale_out import trained_model

    root = tmp_path_factory.mktemp("models")
    trained_model("bilstm_crf", root / "m1", n_iter=3)
    shutil.copytree(root / "m1", root / "m2")
    meta = json.loads((root / "m2" / "meta.json").read_text(encoding="utf8"))
    meta["version"] = "0.0.2"
    (root / "m2" / "meta.json").write_text(json.dumps(meta), encoding="utf8")
    return root / "m1", root / "m2"


def test_2_3_8_annotate_reruns_are_safe(tmp_path, two_models, request):
    import logging

    import spacy
    from distributed import LocalCluster

    from spacy_crossner.annotate import AnnotateError, annotate, read_output

    m1, m2 = two_models
    vocab = spacy.blank("en").vocab
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = ["Alice works in Paris .", "Bob sleeps .", "Carol runs .", "Dan reads ."]
    (corpus / "x.txt").write_bytes(("\ufeff" + "\n".join(lines) + "\n").encode("utf8"))
    (corpus / "y.jsonl").write_bytes(("\ufeff" + json.dumps({"text": "Eve is here ."}) + "\n").encode("utf8"))
    out = tmp_path / "out"
    # one local cluster for the eight runs, reached by its address as a user's scheduler would be
    # (each run with scheduler="local" would start and stop a cluster of its own: 4 s or so)
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, silence_logs=logging.ERROR)
    request.addfinalizer(cluster.close)
    settings = dict(inputs=corpus, output_dir=out, scheduler=cluster.scheduler_address, shard_size=2,
                    progress=False)
    first = annotate(model=m1, **settings)
    assert (first.done, first.skipped, first.redone) == (3, 0, 0)
    docs = read_output(out, vocab)
    # case 3: the BOM is not part of the first token (.txt), and .jsonl reads too
    assert [d.text for d in docs] == lines + ["Eve is here ."]
    assert docs[0][0].text == "Alice"
    shard0, shard1 = out / "x.txt.00000.spacy", out / "x.txt.00001.spacy"

    # case 2a: a truncated shard is annotated again, not counted as done
    shard0.write_bytes(shard0.read_bytes()[:20])
    with pytest.raises(AnnotateError, match=r"x.txt.00000.spacy: shard incomplete"):
        read_output(out, vocab)  # case 8: the reader names the file
    again = annotate(model=m1, **settings)
    assert (again.done, again.skipped, again.redone) == (1, 2, 1)
    assert [d.text for d in read_output(out, vocab)] == lines + ["Eve is here ."]

    # case 2b: an edited record (same count) makes its shard stale
    edited = lines[:2] + ["Caroline runs .", lines[3]]
    (corpus / "x.txt").write_text("\n".join(edited) + "\n", encoding="utf8")
    again = annotate(model=m1, **settings)
    assert (again.done, again.skipped, again.redone) == (1, 2, 1)
    assert [d.text for d in read_output(out, vocab)][:4] == edited

    # case 2c: another model is refused, unless told to mix or to redo everything
    shard1.unlink()
    with pytest.raises(AnnotateError, match="annotated with another model"):
        annotate(model=m2, **settings)
    assert not shard1.exists()
    mixed = annotate(model=m2, mix_models=True, **settings)
    assert (mixed.done, mixed.skipped, mixed.mixed) == (1, 2, 2)
    redone = annotate(model=m2, redo_all=True, **settings)
    assert (redone.done, redone.skipped, redone.redone) == (3, 0, 3)
    assert annotate(model=m2, **settings).skipped == 3

    # case 8: a corrupted shard (without its record, as an older version wrote) names the file
    (out / "x.txt.00001.done.json").unlink()
    shard1.write_bytes(b"garbage")
    with pytest.raises(AnnotateError, match=r"x.txt.00001.spacy: not a readable .spacy DocBin"):
        read_output(out, vocab)


# -- training: the setup spacy train initialises ------------------------------------------------


def _docbin(path, sentences, domain=None):
    import spacy
    from spacy.tokens import DocBin

    from util import make_doc

    nlp = spacy.blank("en")
    db = DocBin(store_user_data=True)
    for own, words, ents in sentences:
        db.add(make_doc(nlp, words, ents, domain or own))
    db.to_disk(path)
    return str(path)


def _init(name, **overrides):
    """What `spacy train CONFIG --paths... ` does before its first step."""
    from spacy.training.initialize import init_nlp
    from spacy.util import load_config

    config = load_config(REPO / "configs" / name, overrides=overrides, interpolate=False)
    return init_nlp(config, use_gpu=-1)


def test_4_training_corpus_without_entities(tmp_path):
    from util import AI, NEWS

    no_ents = [(d, w, []) for d, w, _ in AI]
    train_path = _docbin(tmp_path / "train.spacy", no_ents)
    dev = _docbin(tmp_path / "dev.spacy", AI)
    with pytest.raises(ValueError, match=r"found no entity in the training corpus: every token of domain 'ai'"):
        _init("bilstm_target.cfg", **{"paths.target_train": train_path, "paths.target_dev": dev,
                                      "vars.target_domain": "ai"})
    # one empty domain beside a labelled one: trained, with a warning naming it
    source = _docbin(tmp_path / "news.spacy", [(d, w, []) for d, w, _ in NEWS])
    target = _docbin(tmp_path / "ai.spacy", AI)
    with pytest.warns(UserWarning, match=r"domain 'news' has no entity in the training corpus"):
        nlp = _init("bilstm_joint.cfg", **{"paths.source_train": source, "paths.target_train": target,
                                           "paths.target_dev": dev, "vars.target_domain": "ai"})
    assert nlp.get_pipe("crossner").label_data["news"] == []


def test_6_dev_corpus_without_entities(tmp_path):
    from util import AI

    train_path = _docbin(tmp_path / "train.spacy", AI)
    dev = _docbin(tmp_path / "dev.spacy", [(d, w, []) for d, w, _ in AI])
    with pytest.raises(ValueError, match=r"\[corpora.dev\] \(spacy_crossner.DomainCorpus.v1, path = .*dev.spacy\): "
                       r"none of its 3 docs has a gold entity"):
        _init("bilstm_target.cfg", **{"paths.target_train": train_path, "paths.target_dev": dev,
                                      "vars.target_domain": "ai"})


def test_7_joint_corpora_converted_with_the_same_domain(tmp_path):
    from util import AI, NEWS

    source = _docbin(tmp_path / "news.spacy", NEWS, domain="ai")  # converted with --domain ai
    target = _docbin(tmp_path / "ai.spacy", AI)
    settings = {"paths.source_train": source, "paths.target_train": target,
                "paths.target_dev": target}
    with pytest.raises(ValueError, match=r"domains.source\] and \[corpora.\*.domains.target\] both hold docs of "
                       r"domain 'ai'"):
        _init("bilstm_joint.cfg", **settings)
    # said on purpose (both sections name the domain): one domain, labels merged
    nlp = _init("bilstm_joint.cfg", **settings, **{"vars.source_domain": "ai", "vars.target_domain": "ai"})
    assert set(nlp.get_pipe("crossner").label_data) == {"ai"}


def test_12_missing_dev_path_names_reader_and_section(tmp_path):
    from util import AI

    train_path = _docbin(tmp_path / "train.spacy", AI)
    missing = tmp_path / "nope" / "dev.spacy"
    with pytest.raises(ValueError) as err:
        _init("bilstm_target.cfg", **{"paths.target_train": train_path, "paths.target_dev": str(missing),
                                      "vars.target_domain": "ai"})
    message = str(err.value)
    assert f"spacy_crossner.DomainCorpus.v1: path = {missing} does not exist" in message
    assert "[corpora.dev]" in message and "--paths.target_dev" in message


# -- dapt --resume ------------------------------------------------------------------------------


def test_16_resume_help_says_what_it_promises():
    result = CliRunner().invoke(app, ["dapt", "--help"], terminal_width=400)
    text = " ".join(result.output.split())
    assert "Promised: the weights, optimizer and learning-rate schedule, step count" in text
    assert "Not promised: the same result as an uninterrupted run" in text


def test_16_resume_refuses_other_corpus_or_options(tmp_path):
    from spacy_crossner.dapt.corpus import DaptInputError
    from spacy_crossner.dapt.train import RUN_SETTINGS_FILE, _check_resume_settings

    settings = {"corpus_sha256": "abc", "masking": "span", "seed": 42}
    _check_resume_settings(tmp_path, False, settings)  # the first run records its settings
    assert json.loads((tmp_path / RUN_SETTINGS_FILE).read_text()) == settings
    _check_resume_settings(tmp_path, True, dict(settings))  # same: resumes
    with pytest.raises(DaptInputError, match=r"masking: 'span' -> 'token'; seed: 42 -> 7"):
        _check_resume_settings(tmp_path, True, dict(settings, masking="token", seed=7))


# -- the sweep: inputs that needed a fix --------------------------------------------------------


def test_sweep_vectors_bad_lang_and_occupied_output(tmp_path):
    source = tmp_path / "g.txt"
    source.write_text("a 1 2\n", encoding="utf8")
    result = cli("vectors", source, tmp_path / "v", "--lang", "zz_bogus", "--no-progress")
    assert result.exit_code == 1 and "lang = 'zz_bogus': not a spaCy language code" in result.output
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    (pipeline / "config.cfg").write_text("[nlp]\n", encoding="utf8")
    (pipeline / "meta.json").write_text(json.dumps({"pipeline": ["crossner"]}), encoding="utf8")
    result = cli("vectors", source, pipeline, "--no-progress", "--case", "cased")
    assert result.exit_code == 1 and f"Output {pipeline} is not empty" in result.output
    assert (pipeline / "config.cfg").read_text(encoding="utf8") == "[nlp]\n"
    # an earlier output of the command is replaced
    assert cli("vectors", source, tmp_path / "v", "--no-progress", "--case", "cased").exit_code == 0
    assert cli("vectors", source, tmp_path / "v", "--no-progress", "--case", "cased").exit_code == 0


def test_sweep_raw_text_output_checks(tmp_path):
    source = tmp_path / "cols.txt"
    source.write_text("Alice\tB-person\nworks\tO\n\n", encoding="utf8")
    before = source.read_text(encoding="utf8")
    result = cli("raw-text", source, "-o", source, "-d", "ai")
    assert result.exit_code == 1 and f"Output {source} is also an input" in result.output
    assert source.read_text(encoding="utf8") == before
    result = cli("raw-text", source, "-o", tmp_path, "-d", "ai")
    assert result.exit_code == 1 and f"Output {tmp_path} is a folder" in result.output
    result = cli("raw-text", source, "-o", tmp_path / "r.txt", "-d", "ai", "--format", "spacy")
    assert result.exit_code == 1 and "name it .spacy" in result.output


def test_sweep_convert_refuses_a_docbin(tmp_path):
    from spacy.tokens import DocBin

    path = tmp_path / "x.spacy"
    DocBin().to_disk(path)
    result = cli("convert", path, tmp_path / "o", "-d", "ai")
    assert result.exit_code == 1 and "is a .spacy DocBin, already converted" in result.output


@pytest.mark.parametrize("scores,message", [
    ({"ents_p": 0.5, "ents_r": 0.5, "ents_f": 0.5, "ents_per_type": {"x": 3}}, r"ents_per_type\['x'\] must be an object"),
    ({"ents_p": True, "ents_r": 0.5, "ents_f": 0.5}, "scores must be numbers"),
])
def test_sweep_report_malformed_scores(tmp_path, scores, message):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(scores), encoding="utf8")
    result = cli("report", path, "-o", tmp_path / "r")
    assert result.exit_code == 1
    assert re.search(message, " ".join(result.output.split()))


def test_sweep_evaluate_output_folder_is_refused_before_scoring(tmp_path):
    from spacy_crossner.evaluate import EvaluationError, evaluate

    with pytest.raises(EvaluationError, match=f"--output {tmp_path} is a folder"):
        evaluate(model=tmp_path / "no_model", data=tmp_path / "no_data", output=tmp_path)


def test_sweep_select_corpus_output_checks(tmp_path):
    corpus = tmp_path / "domain.txt"
    corpus.write_text("Some text about Paris .\n", encoding="utf8")
    entities = tmp_path / "ents.txt"
    entities.write_text("Paris\n", encoding="utf8")
    result = cli("select-corpus", corpus, corpus, "-e", entities)
    assert result.exit_code == 1 and f"The output directory {corpus} is a file" in result.output
    result = cli("select-corpus", corpus, tmp_path, "-e", entities)
    assert result.exit_code == 1 and "is the corpus itself" in result.output
    assert corpus.read_text(encoding="utf8") == "Some text about Paris .\n"


def test_sweep_dev_corpus_is_read_at_initialization(tmp_path):
    from util import AI, NEWS

    train_path = _docbin(tmp_path / "train.spacy", AI)
    columns = tmp_path / "dev.txt"
    columns.write_text("Alice\tB-person\n\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"\[corpora.dev\] \(the dev corpus\): spacy_crossner.DomainCorpus.v1: "
                       r"path = .*dev.txt is a text file; convert it first: python -m spacy_crossner convert"):
        _init("bilstm_target.cfg", **{"paths.target_train": train_path, "paths.target_dev": str(columns),
                                      "vars.target_domain": "ai"})
    news_dev = _docbin(tmp_path / "news.spacy", NEWS)
    with pytest.warns(UserWarning, match=r"docs of domain 'ai' have gold types the model has no label for in "
                      r"that domain \(location, person\)"):
        _init("bilstm_target.cfg", **{"paths.target_train": train_path, "paths.target_dev": news_dev,
                                      "vars.target_domain": "ai"})


def test_sweep_annotate_empty_input_is_an_error(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf8")
    result = cli("annotate", "model", empty, tmp_path / "out")
    assert result.exit_code == 1
    assert f"Input {empty} holds no docs ({empty} is empty): nothing to annotate" in result.output
    assert not (tmp_path / "out").exists()
