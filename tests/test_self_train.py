"""Self-training and distillation (issue 47 part 4): pseudo-labels from a tiny BiLSTM-CRF
teacher trained here, their thresholds and modes, the DocBin read back as a labelled corpus, how
the component's loss sees unannotated tokens, and ``self-train`` end to end on tiny budgets."""
import json
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.cli.train import train
from spacy.tokens import Doc, DocBin, Span, SpanGroup
from spacy.training import Example
from typer.testing import CliRunner
from util import TINY_BILSTM_TRAINING as TINY
from util import write_corpus

from spacy_crossner.cli import app
from spacy_crossner.domains import get_domain, set_domain
from spacy_crossner.readers import create_multi_domain_corpus
from spacy_crossner.self_train import (
    PseudoLabelError,
    choose_threshold,
    load_teacher,
    pseudo_label,
    pseudo_labelled,
    self_train,
    threshold_for_precision,
)

CONFIGS = Path(__file__).parents[1] / "configs"
# the AI training sentences (the teacher knows them) and new ones mixing their words
TEXT = [
    "LSTM networks were proposed by Hochreiter .",
    "Google released TensorFlow .",
    "We report accuracy on ImageNet .",
    "Hochreiter released LSTM networks .",
    "the weather was nice and quiet today .",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("self_train")
    paths = write_corpus(root)
    overrides = {**TINY, "training.max_steps": 40, "training.eval_frequency": 10,
                 **{f"paths.{k}": v for k, v in paths.items()}}
    train(CONFIGS / "bilstm_joint.cfg", root / "teacher", overrides=overrides, use_gpu=-1)
    text = root / "selected.txt"
    text.write_text("\n".join(TEXT) + "\n\n", encoding="utf8")
    return {"root": root, "teacher": root / "teacher" / "model-best", "text": text, **paths}


def teacher_scores(model, sentences=TEXT):
    """(start, end, label, probability) of every entity the teacher decodes, per sentence."""
    nlp, name = load_teacher(model)
    out = []
    for words in sentences:
        doc = Doc(nlp.vocab, words=words.split())
        set_domain(doc, "ai")
        group = nlp(doc).spans[nlp.get_pipe(name).cfg["spans_key"]]
        out.append([(s.start, s.end, s.label_, float(p)) for s, p in zip(group, group.attrs["scores"])])
    return out


def read(path):
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


# -- pseudo-labels of one doc (a rule-based stand-in for the teacher) --------------------------


def labelled_by_stand_in(words, scored, key="crossner"):
    """A doc as a teacher at threshold 0 leaves it: decoded entities with probabilities."""
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=words)
    set_domain(doc, "ai")
    spans = [Span(doc, s, e, label=l) for s, e, l, _ in scored]
    doc.ents = spans
    group = SpanGroup(doc, name=key, spans=spans)
    group.attrs["scores"] = numpy.asarray([p for *_, p in scored], dtype="float32")
    doc.spans[key] = group
    return doc


WORDS = "Alan Turing met Grace Hopper in London today".split()
SCORED = [(0, 2, "person", 0.95), (3, 5, "person", 0.40), (6, 7, "location", 0.70)]


def test_entities_below_the_threshold_are_left_out_and_the_rest_missing():
    out = pseudo_labelled(labelled_by_stand_in(WORDS, SCORED), "crossner", 0.7, "missing")
    assert [(e.start, e.end, e.label_) for e in out.ents] == [(0, 2, "person"), (6, 7, "location")]
    assert [t.ent_iob_ for t in out] == ["B", "I", "", "", "", "", "B", ""]
    assert get_domain(out) == "ai" and [t.text for t in out] == WORDS
    assert not out.spans  # the teacher's span group is not carried over


def test_confident_o_marks_o_outside_every_decoded_entity_only():
    out = pseudo_labelled(labelled_by_stand_in(WORDS, SCORED), "crossner", 0.7, "confident-o")
    # met, in, today: outside all decoded entities -> O; Grace Hopper (0.40 < 0.7) stays missing
    assert [t.ent_iob_ for t in out] == ["B", "I", "O", "", "", "O", "B", "O"]


def test_threshold_zero_keeps_all_and_one_keeps_only_certain_entities():
    doc = labelled_by_stand_in(WORDS, SCORED[:2] + [(6, 7, "location", 1.0)])
    assert len(pseudo_labelled(doc, "crossner", 0.0).ents) == 3
    assert [e.text for e in pseudo_labelled(doc, "crossner", 1.0).ents] == ["London"]


def test_a_doc_without_scores_or_an_unknown_mode_is_refused():
    doc = labelled_by_stand_in(WORDS, SCORED)
    doc.spans["crossner"].attrs.pop("scores")
    with pytest.raises(PseudoLabelError, match=r'attrs\["scores"\]'):
        pseudo_labelled(doc, "crossner", 0.5)
    with pytest.raises(PseudoLabelError, match="missing, confident-o"):
        pseudo_labelled(labelled_by_stand_in(WORDS, SCORED), "crossner", 0.5, "all-o")


# -- the threshold chosen on dev --------------------------------------------------------------


def test_the_smallest_threshold_that_reaches_the_precision_is_chosen():
    scored = [(0.9, True), (0.8, True), (0.7, False), (0.6, True), (0.5, False), (0.4, False)]
    # precision at 0.9: 1, 0.8: 1, 0.7: 2/3, 0.6: 3/4, 0.5: 3/5, 0.4: 1/2
    assert threshold_for_precision(scored, 0.75) == (0.6, 0.75, 4)
    assert threshold_for_precision(scored, 1.0) == (0.8, 1.0, 2)
    assert threshold_for_precision(scored, 0.0) == (0.4, 0.5, 6)


def test_tied_probabilities_are_kept_or_left_out_together():
    # 0.8 keeps both tied entities (precision 2/3), never only the correct one (2/2)
    assert threshold_for_precision([(0.9, True), (0.8, True), (0.8, False)], 0.7) == (0.9, 1.0, 1)


def test_an_unreachable_precision_names_the_best_one():
    with pytest.raises(PseudoLabelError, match=r"best precision is 0.500 \(threshold 0.800\)"):
        threshold_for_precision([(0.9, False), (0.8, True), (0.7, False)], 0.9)
    with pytest.raises(PseudoLabelError, match="no entity"):
        threshold_for_precision([], 0.9)


# -- the command on a trained teacher ---------------------------------------------------------


def test_pseudo_labels_respect_the_threshold(data, tmp_path):
    scores = teacher_scores(data["teacher"])
    probs = sorted(p for sent in scores for *_, p in sent)
    assert len(probs) >= 4, scores
    threshold = probs[len(probs) // 2]  # keeps about half
    summary = pseudo_label(model=data["teacher"], text=data["text"], output=tmp_path / "p.spacy",
                           domain="ai", threshold=threshold)
    docs = read(tmp_path / "p.spacy")
    assert [d.text for d in docs] == TEXT  # every sentence, in order; the blank line is no doc
    expected = [[(s, e, l) for s, e, l, p in sent if p >= threshold] for sent in scores]
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in docs] == expected
    assert 0 < summary.kept < len(probs) and summary.kept + summary.rejected == len(probs)
    for doc in docs:  # mode missing: no token outside a kept entity is O
        assert get_domain(doc) == "ai"
        assert {t.ent_iob_ for t in doc if not t.ent_type_} <= {""}
    assert summary.missing_tokens == sum(1 for d in docs for t in d if t.ent_iob_ == "")
    # a sentence without a kept entity is written too (unannotated: raw text to the component)
    assert summary.unlabelled_docs == sum(not d.has_annotation("ENT_IOB") for d in docs) >= 1


def test_confident_o_output_and_reading_it_back_as_a_labelled_corpus(data, tmp_path):
    scores = teacher_scores(data["teacher"])
    pseudo_label(model=data["teacher"], text=data["text"], output=tmp_path / "p.spacy",
                 domain="ai", threshold=0.0, mode="confident-o")
    corpus = create_multi_domain_corpus(domains={"pseudo": {"path": str(tmp_path / "p.spacy")}}, shuffle=False)
    examples = list(corpus(spacy.blank("en")))
    assert [eg.reference.text for eg in examples] == TEXT
    for eg, sent in zip(examples, scores):
        assert get_domain(eg.reference) == "ai" and get_domain(eg.predicted) == "ai"
        inside = {i for s, e, *_ in sent for i in range(s, e)}
        assert [t.ent_iob_ == "O" for t in eg.reference] == [i not in inside for i in range(len(eg.reference))]


def test_missing_tokens_read_back_as_missing(data, tmp_path):
    pseudo_label(model=data["teacher"], text=data["text"], output=tmp_path / "p.spacy",
                 domain="ai", threshold=0.0)
    corpus = create_multi_domain_corpus(domains={"pseudo": {"path": str(tmp_path / "p.spacy")}}, shuffle=False)
    eg = next(iter(corpus(spacy.blank("en"))))
    assert [t.ent_iob_ for t in eg.reference][2:4] == ["", ""]  # "were proposed"
    assert eg.get_aligned_ner()[2:4] == [None, None]  # spaCy's own view: missing, not O


def test_the_component_loss_reads_missing_tokens_as_o(data, tmp_path):
    """Documents today's behaviour: the CRF loss takes a missing token of an annotated doc as O
    (so modes missing and confident-o train the same on such docs); a doc without any
    annotation gives no loss at all."""
    nlp, name = load_teacher(data["teacher"])
    pipe = nlp.get_pipe(name)
    words = "Google released networks by Hochreiter .".split()

    def example(iob):
        ref = Doc(nlp.vocab, words=words, ents=iob)
        set_domain(ref, "ai")
        pred = Doc(nlp.vocab, words=words)
        set_domain(pred, "ai")
        return Example(pred, ref)

    missing = example(["B-organisation", "", "", "", "B-researcher", ""])
    explicit = example(["B-organisation", "O", "O", "O", "B-researcher", "O"])
    other = example(["B-organisation", "O", "O", "O", "O", "O"])
    output = pipe.model.predict(pipe.make_input([missing.predicted]))
    loss_missing = pipe.get_loss([missing], output)[0]
    assert loss_missing == pytest.approx(pipe.get_loss([explicit], output)[0])
    assert loss_missing != pytest.approx(pipe.get_loss([other], output)[0])
    losses = nlp.update([example([""] * len(words))], losses={})
    assert losses[name] == 0.0


def test_threshold_from_dev_reaches_the_precision(data, tmp_path):
    nlp, name = load_teacher(data["teacher"])
    choice = choose_threshold(nlp, name, data["target_dev"], "ai", min_precision=0.9)
    dev_probs = [p for sent in teacher_scores(data["teacher"], TEXT[:3]) for *_, p in sent]
    assert choice.gold == 6 and choice.predicted == len(dev_probs) == 6
    # the teacher learnt dev (= its target train set): every entity is right, so the smallest
    # threshold keeps them all
    assert choice.precision == 1.0 and choice.kept == 6 and choice.recall == 1.0
    assert choice.threshold == pytest.approx(min(dev_probs))
    summary = pseudo_label(model=data["teacher"], text=data["text"], output=tmp_path / "p.spacy",
                           dev=data["target_dev"], min_precision=0.9)
    assert summary.threshold == pytest.approx(choice.threshold) and summary.dev is not None
    assert summary.domain == "ai"  # the teacher's target domain


def test_clear_errors(data, tmp_path):
    blank = spacy.blank("en")
    blank.add_pipe("sentencizer")
    blank.to_disk(tmp_path / "blank")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf8")
    common = {"text": data["text"], "output": tmp_path / "p.spacy"}
    with pytest.raises(PseudoLabelError, match=r"no crossner component \(its pipes: \['sentencizer'\]\)"):
        pseudo_label(model=tmp_path / "blank", threshold=0.5, **common)
    with pytest.raises(PseudoLabelError, match="--threshold = 1.5: .* between 0 and 1"):
        pseudo_label(model=data["teacher"], threshold=1.5, **common)
    with pytest.raises(PseudoLabelError, match=f"Text {empty} holds no sentence"):
        pseudo_label(model=data["teacher"], text=empty, output=tmp_path / "p.spacy", threshold=0.5)
    with pytest.raises(PseudoLabelError, match=r"Unknown domain 'music': .* labels for \['ai', 'news'\]"):
        pseudo_label(model=data["teacher"], threshold=0.5, domain="music", **common)
    with pytest.raises(PseudoLabelError, match="either --threshold or --threshold-from-dev"):
        pseudo_label(model=data["teacher"], **common)
    with pytest.raises(PseudoLabelError, match="no entity reached the threshold 1.000"):
        pseudo_label(model=data["teacher"], threshold=1.0, **common)
    assert not (tmp_path / "p.spacy").exists()


def test_the_command_prints_a_summary_and_fails_cleanly(data, tmp_path):
    runner = CliRunner()
    out = tmp_path / "p.spacy"
    result = runner.invoke(app, ["pseudo-label", str(data["teacher"]), str(data["text"]), str(out),
                                 "--threshold", "0.5", "--mode", "confident-o"])
    assert result.exit_code == 0, result.output
    assert "5 docs (ai, mode confident-o)" in result.output and out.exists()
    # the summary as JSON, for scripts (the study's row 11 reads it)
    summary = tmp_path / "sub" / "summary.json"
    result = runner.invoke(app, ["pseudo-label", str(data["teacher"]), str(data["text"]), str(out),
                                 "--threshold-from-dev", data["target_dev"], "--min-precision", "0.5",
                                 "--summary", str(summary)])
    assert result.exit_code == 0, result.output
    record = json.loads(summary.read_text())
    assert record["docs"] == 5 and record["mode"] == "missing" and record["domain"] == "ai"
    assert record["kept"] + record["rejected"] >= record["kept"] > 0
    assert record["dev"]["precision"] >= 0.5 and record["threshold"] == record["dev"]["threshold"]
    assert 0 <= record["dev"]["recall"] <= 1
    assert record["entity_tokens"] + record["o_tokens"] + record["missing_tokens"] == sum(
        len(line.split()) for line in TEXT)
    # --drop-unannotated: the sentences without any annotation are counted, not written; the
    # threshold: above the best entity of some sentence, not of all
    best = sorted(max((p for *_, p in ents), default=0.0) for ents in teacher_scores(data["teacher"]))
    assert best[0] < best[-1]
    threshold = (best[0] + best[-1]) / 2
    result = runner.invoke(app, ["pseudo-label", str(data["teacher"]), str(data["text"]), str(out),
                                 "--threshold", str(threshold), "--drop-unannotated", "--summary", str(summary)])
    assert result.exit_code == 0, result.output
    record = json.loads(summary.read_text())
    written = read(out)
    assert record["dropped_unannotated"] and record["unlabelled_docs"] > 0
    assert len(written) == record["docs"] - record["unlabelled_docs"] > 0
    assert all(doc.has_annotation("ENT_IOB") for doc in written) and "(left out)" in result.output
    result = runner.invoke(app, ["pseudo-label", str(data["teacher"]), str(data["text"]), str(out),
                                 "--threshold", "0.5", "--summary", str(tmp_path / "summary.txt")])
    assert result.exit_code == 1 and "--summary" in result.output and ".json" in result.output
    result = runner.invoke(app, ["pseudo-label", str(data["teacher"]), str(data["text"]), str(out),
                                 "--threshold", "-1"])
    assert result.exit_code == 1 and "between 0 and 1" in result.output
    assert "Traceback" not in result.output


# -- end to end ------------------------------------------------------------------------------


def test_self_training_rounds_give_loadable_students(data, tmp_path):
    overrides = {**TINY, "training.max_steps": 30, "training.eval_frequency": 10,
                 **{f"paths.{k}": data[k] for k in ("source_train", "target_train", "target_dev")}}
    summary = self_train(teacher=data["teacher"], config=CONFIGS / "bilstm_joint.cfg",
                         text=data["text"], output_dir=tmp_path / "st", threshold=0.5,
                         mode="missing", rounds=2, overrides=overrides)
    assert [r.round for r in summary.rounds] == [1, 2]
    assert summary.rounds[1].teacher == summary.rounds[0].student  # the student teaches round 2
    for r in summary.rounds:
        cfg = spacy.util.load_config(tmp_path / "st" / f"round{r.round}" / "config.cfg")
        pseudo = cfg["corpora"]["train"]["domains"]["pseudo"]
        assert pseudo["domain"] == "ai" and Path(pseudo["path"]).exists()
        assert cfg["training"]["max_steps"] == 30  # the overrides reached spacy train
        assert 0.0 <= r.dev_f1 <= 1.0
    student = spacy.load(summary.student)
    pipe = student.get_pipe("crossner")
    assert set(pipe.domains) == {"news", "ai"} and pipe.target_domain == "ai"


def test_the_self_train_command_passes_overrides_and_prints_f1(data, tmp_path):
    args = ["self-train", str(data["teacher"]), str(CONFIGS / "bilstm_joint.cfg"), str(data["text"]),
            str(tmp_path / "st"), "--threshold", "0.5", "--mode", "confident-o"]
    for key, value in {**TINY, "training.max_steps": 3, "training.eval_frequency": 3}.items():
        args += [f"--{key}", str(value)]
    for key in ("source_train", "target_train", "target_dev"):
        args += [f"--paths.{key}", data[key]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "round 1: dev F1 " in result.output
    assert f"student: {tmp_path / 'st' / 'round1' / 'training' / 'model-best'}" in result.output
    result = CliRunner().invoke(app, args[:5] + ["--threshold", "0.5", "--rounds", "0"])
    assert result.exit_code == 1 and "--rounds must be at least 1" in result.output


def test_self_training_the_minilm_tagger_with_a_transformer_teacher(data, tmp_path):
    """Round 1: the BiLSTM teacher labels for a MiniLM student (configs/trf_joint.cfg); round 2:
    that student, a transformer + crossner pipeline, labels the text itself. Two steps each, so
    confident-o at threshold 0 (an untrained student may decode no entity at all)."""
    overrides = {"training.max_steps": 2, "training.eval_frequency": 1, "vars.target_upsample": 1,
                 **{f"paths.{k}": data[k] for k in ("source_train", "target_train", "target_dev")}}
    summary = self_train(teacher=data["teacher"], config=CONFIGS / "trf_joint.cfg",
                         text=data["text"], output_dir=tmp_path / "st", threshold=0.0,
                         mode="confident-o", rounds=2, overrides=overrides)
    student = spacy.load(summary.student)
    assert student.pipe_names == ["transformer", "crossner"]
    assert summary.rounds[1].pseudo.docs == len(TEXT) and summary.rounds[1].pseudo.domain == "ai"
    docs = read(tmp_path / "st" / "round2" / "pseudo.spacy")
    assert all(d.has_annotation("ENT_IOB") for d in docs)


def test_a_config_self_train_cannot_use_is_refused_before_labelling(data, tmp_path):
    common = {"teacher": data["teacher"], "text": data["text"], "output_dir": tmp_path / "st", "threshold": 0.5}
    with pytest.raises(PseudoLabelError, match="Config .*nope.cfg does not exist"):
        self_train(config=tmp_path / "nope.cfg", **common)
    with pytest.raises(PseudoLabelError, match="not a section value that can be overridden"):
        self_train(config=CONFIGS / "bilstm_joint.cfg", overrides={"nonexistent.x": 1}, **common)
    plain = spacy.util.load_config(CONFIGS / "bilstm_joint.cfg", interpolate=False)
    plain["corpora"]["train"] = {"@readers": "spacy.Corpus.v1", "path": data["target_train"]}
    plain.to_disk(tmp_path / "plain.cfg")
    with pytest.raises(PseudoLabelError, match=r"\[corpora.train\] must be spacy_crossner.MultiDomainCorpus.v1 or .v2"):
        self_train(config=tmp_path / "plain.cfg", **common)
    taken = spacy.util.load_config(CONFIGS / "bilstm_joint.cfg", interpolate=False)
    taken["corpora"]["train"]["domains"]["pseudo"] = {"path": data["target_train"]}
    taken.to_disk(tmp_path / "taken.cfg")
    with pytest.raises(PseudoLabelError, match=r"already has \[corpora.train.domains.pseudo\]"):
        self_train(config=tmp_path / "taken.cfg", **common)
    assert not (tmp_path / "st").exists()  # nothing was labelled


def test_a_v2_config_gets_the_pseudo_section_without_a_factor(data, tmp_path):
    """MultiDomainCorpus.v2 mixes corpora by size: the pseudo-labelled section gets no `upsample`
    (v2 refuses one on a labelled corpus), and a --pseudo-upsample it would not use is refused
    before any labelling."""
    from spacy_crossner.self_train import with_pseudo_corpus

    paths = {f"paths.{k}": data[k] for k in ("source_train", "target_train", "target_dev")}
    v2 = spacy.util.load_config(CONFIGS / "bilstm_joint.cfg", overrides=paths, interpolate=False)
    v2["corpora"]["train"]["@readers"] = "spacy_crossner.MultiDomainCorpus.v2"
    for section in v2["corpora"]["train"]["domains"].values():
        section.pop("upsample", None)
    v2.to_disk(tmp_path / "v2.cfg")
    with pytest.raises(PseudoLabelError, match=r"--pseudo-upsample 2.0: the config's MultiDomainCorpus.v2 mixes"):
        self_train(teacher=data["teacher"], config=tmp_path / "v2.cfg", text=data["text"],
                   output_dir=tmp_path / "st", threshold=0.5, pseudo_upsample=2.0)
    assert not (tmp_path / "st").exists()
    cfg = with_pseudo_corpus(v2, data["target_train"], "ai", 1.0)
    assert cfg["corpora"]["train"]["domains"]["pseudo"] == {
        "path": str(Path(data["target_train"]).resolve()), "domain": "ai"}
    # the gold target section now names its domain too (one domain on purpose, issue 48's check)
    assert cfg["corpora"]["train"]["domains"]["target"]["domain"] == "ai"


def test_a_teacher_saved_with_a_threshold_labels_at_threshold_zero(data, tmp_path):
    strict = spacy.load(data["teacher"], config={"components": {"crossner": {"threshold": 0.999999}}})
    strict.to_disk(tmp_path / "strict")
    assert spacy.load(tmp_path / "strict").get_pipe("crossner").cfg["threshold"] == pytest.approx(0.999999)
    nlp, name = load_teacher(tmp_path / "strict")
    assert nlp.get_pipe(name).cfg["threshold"] == 0.0
    assert teacher_scores(tmp_path / "strict") == teacher_scores(data["teacher"])
