"""Issue 48, last part: the sweep of the commands added since (select-corpus's ranking,
pseudo-label, self-train, quantize, spacy_crossner.mention_replace.v1). One test per input the
sweep found wrong: each failed before its fix (a traceback, a silently dropped setting or file,
or a message that points the wrong way)."""
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from test_best_pipeline import corpora  # noqa: F401  (converted source and target, a module fixture)
from test_self_train import data  # noqa: F401  (the tiny trained teacher, a module fixture)

from spacy_crossner.augment import create_mention_replace_augmenter
from spacy_crossner.cli import app
from spacy_crossner.dapt.corpus import DaptInputError
from spacy_crossner.dapt.rank import EmbeddingScorer, read_reference
from spacy_crossner.quantize import QuantizeError, quantize
from spacy_crossner.self_train import (
    PseudoLabelError,
    load_student_config,
    load_teacher,
    pseudo_label,
    read_sentences,
    self_train,
    with_pseudo_corpus,
)

REPO = Path(__file__).parents[1]
CORPUS = "\n".join([
    "Deep learning uses neural networks trained with backpropagation on large datasets .",
    "The weather in the city was warm and sunny for the whole week .",
    "Convolutional neural networks achieve high accuracy on ImageNet classification .",
]) + "\n"
TARGET = "LSTM\tB-algorithm\nnetworks\tO\nlearn\tO\n.\tO\n\nGoogle\tB-organisation\nreleased\tO\nTensorFlow\tB-product\n"


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


@pytest.fixture
def files(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(CORPUS, encoding="utf8")
    target = tmp_path / "t.txt"
    target.write_text(TARGET, encoding="utf8")
    return corpus, target


def rank(corpus, out, target, *extra):
    return cli("select-corpus", corpus, out, "--scorer", "lexical", "--target", target, "--no-progress", *extra)


# -- select-corpus, ranking ---------------------------------------------------------------------


@pytest.mark.parametrize("weight", ["nan", "inf"])
def test_entity_weight_must_be_finite(tmp_path, files, weight):
    # before: rc 0, every score nan, an arbitrary selection written
    result = rank(*files[:1], tmp_path / "o", files[1], "--top-n", 2, "--entity-weight", weight)
    assert result.exit_code == 1
    assert f"--entity-weight must be a finite number, got {weight}" in result.output
    assert not (tmp_path / "o" / "selected.txt").exists()


def test_min_tokens_above_max_tokens_names_both(tmp_path, files):
    # before: "5 shorter than min_tokens", after reading the whole corpus
    result = rank(files[0], tmp_path / "o", files[1], "--top-n", 2, "--min-tokens", 50, "--max-tokens", 10)
    assert result.exit_code == 1
    assert "--min-tokens 50 is above --max-tokens 10" in result.output


def test_domain_without_spacy_format_is_refused(tmp_path, files):
    # before: rc 0, --domain silently dropped (selected.txt holds no domain)
    result = rank(files[0], tmp_path / "o", files[1], "--top-n", 2, "--domain", "ai")
    assert result.exit_code == 1
    assert "--domain 'ai' is only written with --format spacy" in result.output


def test_ranking_options_without_scorer_are_refused(tmp_path, files):
    # before: rc 0, the levels built and --top-n, --target, --format silently dropped
    entities = tmp_path / "person.txt"
    entities.write_text("Ada Lovelace\n", encoding="utf8")
    result = cli("select-corpus", files[0], tmp_path / "o", "-e", entities, "--top-n", 3,
                 "--target", files[1], "--format", "spacy", "--no-progress")
    assert result.exit_code == 1
    assert "--target, --top-n, --format only apply when ranking: add --scorer" in result.output
    assert not (tmp_path / "o").exists()
    # the levels alone still work
    assert cli("select-corpus", files[0], tmp_path / "o", "-e", entities, "--no-progress").exit_code == 0


def test_output_directory_below_a_file(tmp_path, files):
    # before: a NotADirectoryError traceback
    result = rank(files[0], files[0] / "sub", files[1], "--top-n", 2)
    assert result.exit_code == 1
    assert f"Cannot create the output directory {files[0] / 'sub'} (Not a directory)" in result.output


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_jsonl_target_is_refused(tmp_path, files, suffix):
    # before: each JSON line read as one whitespace-split "sentence" ('{"text":', ...), rc 0
    target = tmp_path / f"t{suffix}"
    target.write_text('{"text": "neural networks learn"}\n', encoding="utf8")
    result = rank(files[0], tmp_path / "o", target, "--top-n", 2)
    assert result.exit_code == 1
    assert f"{target}: JSON is not read as reference text" in result.output
    with pytest.raises(DaptInputError, match="JSON is not read"):
        read_reference([target])


def test_missing_encoder_directory(tmp_path):
    # before: "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"
    with pytest.raises(DaptInputError, match=r"--model .*nomodel: no such encoder directory"):
        EmbeddingScorer(str(tmp_path / "nomodel"))


# -- pseudo-label / self-train (checks that run before the teacher is loaded) --------------------


def _docbin(path):
    import spacy
    from spacy.tokens import DocBin

    db = DocBin(store_user_data=True)
    db.add(spacy.blank("en")("Google released TensorFlow ."))
    db.to_disk(path)
    return path


def test_pseudo_label_output_is_the_input(tmp_path):
    # before: rc 0, the input .spacy replaced by its pseudo-labels
    text = _docbin(tmp_path / "in.spacy")
    before = text.read_bytes()
    result = cli("pseudo-label", tmp_path / "no-model", text, text, "--threshold", 0.5)
    assert result.exit_code == 1
    assert f"Output {text} is also the text to label" in result.output
    assert text.read_bytes() == before


def test_pseudo_label_output_is_a_folder_or_below_a_file(tmp_path):
    # before: "[Errno 21] Is a directory" / "[Errno 17] File exists", after labelling everything
    text = tmp_path / "s.txt"
    text.write_text("Google released TensorFlow .\n", encoding="utf8")
    folder = tmp_path / "out.spacy"
    folder.mkdir()
    with pytest.raises(PseudoLabelError, match=r"out.spacy is a folder: give the path of the .spacy file"):
        pseudo_label(model=tmp_path / "no-model", text=text, output=folder, threshold=0.5)
    with pytest.raises(PseudoLabelError, match=r"s.txt is a file, not a folder"):
        pseudo_label(model=tmp_path / "no-model", text=text, output=text / "p.spacy", threshold=0.5)


def test_pseudo_label_text_with_bom_crlf_and_bad_bytes(tmp_path):
    # before: the first token was '\ufeffGoogle'; a bad byte was reported by file offset only
    text = tmp_path / "s.txt"
    text.write_bytes(b"\xef\xbb\xbfGoogle released TensorFlow .\r\nLSTM networks .\r\n")
    assert read_sentences(text) == [["Google", "released", "TensorFlow", "."], ["LSTM", "networks", "."]]
    text.write_bytes(b"fine line .\ncaf\xe9 .\n")
    with pytest.raises(PseudoLabelError, match=r"s.txt, line 2: not valid UTF-8 \(byte 0xe9\)"):
        read_sentences(text)


def test_pseudo_label_refuses_a_column_file(tmp_path):
    # before: rc 0, tags labelled as words ("Google B-organisation")
    text = tmp_path / "col.txt"
    text.write_text("Google\tB-organisation\nreleased\tO\n\nLSTM\tB-algorithm\n", encoding="utf8")
    result = cli("pseudo-label", tmp_path / "no-model", text, tmp_path / "p.spacy", "--threshold", 0.5)
    assert result.exit_code == 1
    assert f"Text {text} is a token/tag column file, not raw text" in result.output


def test_pseudo_label_gpu_error_is_a_message(monkeypatch, tmp_path):
    # before: a ValueError traceback from thinc's require_gpu (no CuPy, or no such GPU)
    import spacy

    def no_gpu(gpu_id=0):
        raise ValueError("Cannot use GPU, CuPy is not installed")

    monkeypatch.setattr(spacy, "require_gpu", no_gpu)
    with pytest.raises(PseudoLabelError, match=r"--gpu-id 0: Cannot use GPU, CuPy is not installed; use --gpu-id -1"):
        load_teacher(tmp_path / "no-model", gpu_id=0)


def test_self_train_upsample_nan(tmp_path):
    # before: nan passed the "> 0" check and reached training
    with pytest.raises(PseudoLabelError, match="--pseudo-upsample must be a positive number, got nan"):
        self_train(teacher="x", config=REPO / "configs" / "bilstm_joint.cfg", text="x",
                   output_dir=tmp_path / "o", threshold=0.5, pseudo_upsample=math.nan)


def test_self_train_override_without_value(tmp_path):
    # before: TypeError traceback ("expected str ... not bool") for `--paths.source_train` alone
    from spacy.cli._util import parse_config_overrides

    overrides = parse_config_overrides(["--paths.source_train"])
    cfg = load_student_config(REPO / "configs" / "bilstm_joint.cfg", overrides)
    with pytest.raises(PseudoLabelError, match=r"\[corpora.train.domains.source\] path = True is not a path"):
        with_pseudo_corpus(cfg, tmp_path / "p.spacy", "ai", 1.0)


# -- quantize -------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"[[[ not a config", b'[nlp]\nlang = "caf\xe9"\n'])
def test_quantize_unreadable_config(tmp_path, content):
    # before: confection's ConfigValidationError / UnicodeDecodeError traceback
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.cfg").write_bytes(content)
    with pytest.raises(QuantizeError, match=r"m/config.cfg cannot be read as a spaCy config"):
        quantize(model=model, output=tmp_path / "q")
    result = cli("quantize", model, tmp_path / "q")
    assert result.exit_code == 1
    assert "cannot be read as a spaCy config" in result.output
    assert not (tmp_path / "q").exists()


# -- spacy_crossner.mention_replace.v1 ------------------------------------------------------------


def test_mentions_without_entities_are_refused(tmp_path):
    # before: with dictionaries beside it, a plain-text `mentions` file added nothing, silently
    plain = tmp_path / "plain.txt"
    plain.write_text("just some words here\n", encoding="utf8")
    person = tmp_path / "person.txt"
    person.write_text("Ada Lovelace\nAlan Turing\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"mentions.ai = .*plain.txt: no entity annotation in it"):
        create_mention_replace_augmenter(mentions={"ai": str(plain)}, dictionaries={"ai": str(person)})


def test_empty_dictionary_folder_is_named(tmp_path):
    # before: "No entity found in " followed by nothing
    (tmp_path / "dicts").mkdir()
    with pytest.raises(ValueError, match=r"dictionaries.ai = .*dicts: the folder holds no entity list file"):
        create_mention_replace_augmenter(dictionaries={"ai": str(tmp_path / "dicts")})


def _augmented_corpus(tmp_path, dictionaries):
    import spacy
    from spacy.tokens import DocBin
    from spacy.util import registry
    from thinc.api import Config

    from util import make_doc

    nlp = spacy.blank("en")
    db = DocBin(store_user_data=True)
    db.add(make_doc(nlp, "Google built TensorFlow .".split(), [(0, 1, "organisation"), (2, 3, "product")], "ai"))
    db.add(make_doc(nlp, "Acme hired Ada .".split(), [(0, 1, "organisation"), (2, 3, "person")], "ai"))
    db.to_disk(tmp_path / "ai.spacy")
    config = Config({"corpora": {"train": {
        "@readers": "spacy_crossner.MultiDomainCorpus.v1",
        "domains": {"target": {"path": str(tmp_path / "ai.spacy")}},
        "augmenter": {"@augmenters": "spacy_crossner.mention_replace.v1", "probability": 1.0,
                      "dictionaries": dictionaries}}}})
    reader = registry.resolve(config)["corpora"]["train"]
    return nlp, reader


def test_mention_pool_for_no_domain_or_label_of_the_corpus_warns(tmp_path):
    # before: a dictionaries key that is no domain of the corpus, and a label spelled unlike the
    # corpus's (organization / organisation), silently swapped nothing
    orgs = tmp_path / "organization.txt"
    orgs.write_text("Reuters\nAcme Corp\n", encoding="utf8")
    people = tmp_path / "person.txt"
    people.write_text("Alan Turing\nGrace Hopper\n", encoding="utf8")
    nlp, reader = _augmented_corpus(tmp_path, {"ai": {"organization": str(orgs), "person": str(people)},
                                               "news": str(orgs)})
    with pytest.warns(UserWarning) as record:
        first = list(reader(nlp))
    messages = [str(w.message) for w in record if "mention_replace" in str(w.message)]
    assert len(messages) == 2, messages
    assert any("dictionaries.news: 'news' is not a domain of the labelled training corpus (its domains: 'ai')"
               in m for m in messages), messages
    assert any("the label(s) 'organization' are no label of domain 'ai' in the training corpus "
               "(its labels: organisation, person, product)" in m for m in messages), messages
    assert len(first) == 2
    import warnings

    with warnings.catch_warnings():  # once, not per pass or example
        warnings.simplefilter("error")
        assert len(list(reader(nlp))) == 2


def test_everything_excluded_says_so(tmp_path, files):
    # before: "0 outside the rank level, 0 shorter than min_tokens, 0 longer than max_tokens
    # (loosen them)": the --exclude text had taken every sentence
    result = rank(files[0], tmp_path / "o", files[1], "--top-n", 2, "--exclude", files[0])
    assert result.exit_code == 1
    assert "of 3 sentences, 0 were repeats, 3 duplicates of the --exclude text" in result.output


def test_pseudo_label_keeps_the_domain_of_spacy_text(tmp_path, data):  # noqa: F811
    # before: rc 0, docs of domain 'news' pseudo-labelled and written as the target 'ai'
    import spacy
    from spacy.tokens import DocBin

    from spacy_crossner.domains import get_domain, set_domain

    text = tmp_path / "news.spacy"
    db = DocBin(store_user_data=True)
    doc = spacy.blank("en")("Google released TensorFlow .")
    set_domain(doc, "news")
    db.add(doc)
    db.to_disk(text)
    with pytest.raises(PseudoLabelError, match=r"its docs carry the domain\(s\) \['news'\], but would be pseudo-labelled as 'ai'"):
        pseudo_label(model=data["teacher"], text=text, output=tmp_path / "p.spacy", threshold=0.0)
    assert not (tmp_path / "p.spacy").exists()
    pseudo_label(model=data["teacher"], text=text, output=tmp_path / "p.spacy", threshold=0.0, domain="news")
    out = list(DocBin().from_disk(tmp_path / "p.spacy").get_docs(spacy.blank("en").vocab))
    assert [get_domain(d) for d in out] == ["news"]


def test_minilm_gpu_that_torch_does_not_see(tmp_path, files):
    # before: torch's "AssertionError: Torch not compiled with CUDA enabled" traceback
    with pytest.raises(DaptInputError, match=r"--gpu-id 100000: torch sees \d+ GPU\(s\); give one of them, or --gpu-id -1"):
        EmbeddingScorer(gpu_id=100_000)
    result = cli("select-corpus", files[0], tmp_path / "o", "--scorer", "minilm", "--target", files[1],
                 "--top-n", 2, "--gpu-id", 100_000, "--no-progress")
    assert result.exit_code == 1
    assert "--gpu-id 100000: torch sees" in result.output


def test_batch_size_below_one_is_refused_for_the_lexical_scorer_too(tmp_path, files):
    # before: rc 0 with --scorer lexical (the minilm scorer refused it)
    result = rank(files[0], tmp_path / "o", files[1], "--top-n", 2, "--batch-size", 0)
    assert result.exit_code == 1
    assert "--batch-size must be at least 1, got 0" in result.output


@pytest.mark.parametrize("command", ["select-corpus", "dapt"])
def test_over_long_line_names_the_option(tmp_path, command):
    # before: "(or raise the line-length limit)", naming no option
    corpus = tmp_path / "long.txt"
    corpus.write_text("short line .\n" + "word " * 30 + "\n", encoding="utf8")
    entities = tmp_path / "algorithm.txt"
    entities.write_text("word\n", encoding="utf8")
    extra = ["--entities", entities] if command == "select-corpus" else ["--max-steps", 1]
    result = cli(command, corpus, tmp_path / "o", "--max-line-chars", 50, *extra)
    assert result.exit_code == 1
    assert "line 2 is longer than 50 characters" in result.output
    assert "raise the limit with --max-line-chars" in result.output


# -- init-config ----------------------------------------------------------------------------------


def test_init_config_output_checks(tmp_path):
    # before: "[Errno 21] Is a directory" (with --force) and "[Errno 17] File exists"
    result = cli("init-config", tmp_path, "-a", "bilstm", "-s", "joint", "--force")
    assert result.exit_code == 1
    assert f"{tmp_path} is a folder: give the path of the .cfg file to write" in result.output
    blocker = tmp_path / "c.txt"
    blocker.write_text("x\n", encoding="utf8")
    result = cli("init-config", blocker / "x.cfg", "-a", "bilstm", "-s", "joint")
    assert result.exit_code == 1
    assert f"{blocker} is a file, not a folder" in result.output
    assert blocker.read_text(encoding="utf8") == "x\n"


def test_init_config_override_without_value(tmp_path):
    # before: rc 0 and `max_steps = true` written
    result = cli("init-config", tmp_path / "a.cfg", "-a", "bilstm", "-s", "joint", "--training.max_steps")
    assert result.exit_code == 1
    assert "The override --training.max_steps has no value" in result.output
    assert not (tmp_path / "a.cfg").exists()


def test_init_config_unknown_section(tmp_path):
    # before: rc 0 and a [nosuch] section that spacy train never reads
    result = cli("init-config", tmp_path / "a.cfg", "-a", "bilstm", "-s", "joint", "--nosuch.key", 3)
    assert result.exit_code == 1
    assert "No section [nosuch] in a spaCy config" in result.output
    assert cli("init-config", tmp_path / "b.cfg", "-a", "bilstm", "-s", "joint",
               "--training.max_steps", 7).exit_code == 0
    assert "max_steps = 7" in (tmp_path / "b.cfg").read_text(encoding="utf8")


@pytest.mark.parametrize("override, message", [
    (["--training.max_steps", "abc"], "training.max_steps: Input should be a valid integer"),
    (["--training.max_stepz", 5], "The override --training.max_stepz names no setting of [training]: it has no "
                                  "key 'max_stepz' (its keys: accumulate_gradient, "),
    (["--training.optimizer.learn_ratez", 3], "names no setting of [training.optimizer]: it has no key 'learn_ratez'"),
    (["--components.crossner.model.hidden_widthz", 3], "it has no key 'hidden_widthz' (its keys: @architectures, "),
])
def test_init_config_override_checked_against_the_filled_config(tmp_path, override, message):
    # before: rc 0, written into the config, found only later by `spacy train` (or never)
    result = cli("init-config", tmp_path / "a.cfg", "-a", "bilstm", "-s", "joint", *override)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "a.cfg").exists()
    # open sections take new entries
    assert cli("init-config", tmp_path / "b.cfg", "-a", "bilstm", "-s", "joint", "--paths.extra", "x",
               "--training.score_weights.ents_f", 1.0).exit_code == 0


# -- best-pipeline --------------------------------------------------------------------------------


def test_best_pipeline_refuses_before_training(monkeypatch, tmp_path):
    # before: --threads -1 was accepted and a training started; a missing --transformer folder
    # and an unusable --gpu-id were tracebacks from inside the training
    from spacy_crossner.best import BestPipelineError, best_pipeline

    common = dict(target=tmp_path / "t", output=tmp_path / "o", sources=[tmp_path / "s"])
    with pytest.raises(BestPipelineError, match=r"--threads must be 0 or more, not -1"):
        best_pipeline(**common, threads=-1)
    with pytest.raises(BestPipelineError, match=r"--transformer .*notrf: no such model folder"):
        best_pipeline(**common, transformer=str(tmp_path / "notrf"))
    import thinc.api

    def no_gpu(gpu_id=0):
        raise ValueError("Cannot use GPU, CuPy is not installed")

    monkeypatch.setattr(thinc.api, "require_gpu", no_gpu)
    with pytest.raises(BestPipelineError, match=r"--gpu-id 0: Cannot use GPU, CuPy is not installed; use --gpu-id -1"):
        best_pipeline(**common, gpu_id=0)


@pytest.fixture
def no_training(monkeypatch):
    import spacy_crossner.best

    def training(*args, **kwargs):
        raise AssertionError("a training started")

    monkeypatch.setattr(spacy_crossner.best, "run_training", training)


def test_best_pipeline_workdir_or_cache_that_is_a_file(tmp_path, corpora, no_training):  # noqa: F811
    # before: [Errno 17] File exists / [Errno 20] Not a directory, with no option named
    _tmp, source, target = corpora
    blocker = tmp_path / "f.txt"
    blocker.write_text("x\n", encoding="utf8")
    common = dict(sources=[source], target=target, output=tmp_path / "o")
    for option, value, message in [
        ("workdir", blocker, f"--workdir {blocker} is a file, not a folder"),
        ("workdir", blocker / "w", f"--workdir {blocker / 'w'}: {blocker} is a file, not a folder"),
        ("cache", blocker, f"--cache {blocker} is a file, not a folder"),
        ("cache", blocker / "c", f"--cache {blocker / 'c'}: {blocker} is a file, not a folder"),
    ]:
        result = cli("best-pipeline", target, tmp_path / "o", "--source", source, f"--{option}", value)
        assert result.exit_code == 1
        assert message in result.output
    assert blocker.read_text(encoding="utf8") == "x\n"


def test_best_pipeline_unreadable_test_is_refused_before_training(tmp_path, corpora, no_training):  # noqa: F811
    # before: the column file was refused by the scoring, after both trainings
    from spacy_crossner.best import BestPipelineError, best_pipeline

    _tmp, source, target = corpora
    column = tmp_path / "test.txt"
    column.write_text("Alice\tB-person\nworks\tO\n", encoding="utf8")
    with pytest.raises(BestPipelineError, match=r"--test .*test\.txt: Cannot read .*test\.txt as a \.spacy DocBin"):
        best_pipeline(sources=[source], target=target, output=tmp_path / "o", test=column)
    assert not (tmp_path / "o-training").exists()


def test_best_pipeline_target_without_entities(tmp_path, corpora, no_training):  # noqa: F811
    # before: the clear message appeared inside the child `spacy train`'s traceback
    from spacy_crossner.convert import convert

    _tmp, source, _target = corpora
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "dev"):
        (raw / f"{split}.txt").write_text("Robots\tO\nmove\tO\n.\tO\n", encoding="utf8")
    empty = tmp_path / "empty"
    convert(raw, empty, domain="robotics")
    result = cli("best-pipeline", empty, tmp_path / "o", "--source", source, "--recipe", "fast")
    assert result.exit_code == 1
    assert f"TARGET {empty}: {empty / 'train.spacy'} holds no entity (every token is tagged O)" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_best_pipeline_source_upsample_means_copies(tmp_path):
    # before: the help said "share" though the reader takes copies per pass (1.5 = once plus a
    # random half), and inf was accepted
    from spacy_crossner.best import BestPipelineError, Budget

    help_text = " ".join(cli("best-pipeline", "--help").output.split())
    assert "Copies of each source corpus's docs per pass" in help_text
    Budget(source_upsample=1.5).check()
    for value in (math.inf, math.nan, 0.0):
        with pytest.raises(BestPipelineError, match=r"--source-upsample \(copies of the docs per pass\) must be a finite number above 0"):
            Budget(source_upsample=value).check()
