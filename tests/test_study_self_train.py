"""project/scripts/study.py row 11 (issue 47 part 4): self-training and distillation in the study.
The selected text of a size is pseudo-labelled once by the teacher's model (a tiny BiLSTM-CRF
trained here stands in for trf_finetune's), shared by the students' seeds; each student trains
on its method's config plus the pseudo-labelled section. Everything but the teacher's training
is the real thing: select-corpus, pseudo-label, spacy train on the student's config, evaluate."""
import json
import shutil
import sys
from pathlib import Path

import pytest
import spacy
from spacy.cli.train import train
from spacy.tokens import DocBin

from util import AI, NEWS, make_doc
from util import TINY_BILSTM_TRAINING as TINY

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "project" / "scripts"))
import study  # noqa: E402

DEV = ("ai", "Hochreiter proposed LSTM networks .".split(), [(0, 1, "researcher"), (2, 3, "algorithm")])
TEST = ("ai", "Google reported accuracy on ImageNet .".split(), [(0, 1, "organisation"), (4, 5, "misc")])
# what the teacher labels: sentences made of the AI train set's words, among political ones
AI_LIKE = [f"LSTM networks were released by Google in {n} ." for n in range(12)]
OTHER = [f"The senate passed bill number {n} after a debate ." for n in range(40)]


def write(path: Path, sentences) -> None:
    nlp = spacy.blank("en")
    db = DocBin(store_user_data=True)
    for domain, words, ents in sentences:
        db.add(make_doc(nlp, words, ents, domain))
    path.parent.mkdir(parents=True, exist_ok=True)
    db.to_disk(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """corpus/{news,ai}, the AI raw text, a general corpus with the AI dev and test sentences in
    it, and a tiny teacher trained on news + AI where the study looks for trf_finetune's model."""
    root = tmp_path_factory.mktemp("study_self_train")
    write(root / "corpus" / "news" / "train.spacy", NEWS)
    write(root / "corpus" / "news" / "dev.spacy", NEWS)
    write(root / "corpus" / "ai" / "train.spacy", AI)
    write(root / "corpus" / "ai" / "dev.spacy", AI + [DEV])
    write(root / "corpus" / "ai" / "test.spacy", [TEST])
    (root / "raw").mkdir()
    (root / "raw" / "ai.txt").write_text("".join(" ".join(w) + "\n" for _, w, _ in AI), encoding="utf8")
    (root / "general").mkdir()
    lines = AI_LIKE + OTHER + [" ".join(DEV[1]), " ".join(TEST[1])]
    (root / "general" / "g.txt").write_text("\n".join(lines) + "\n", encoding="utf8")
    teacher = root / "teacher"
    overrides = {**TINY, "training.max_steps": 60, "training.eval_frequency": 20,
                 "paths.source_train": str(root / "corpus" / "news" / "train.spacy"),
                 "paths.target_train": str(root / "corpus" / "ai" / "train.spacy"),
                 "paths.target_dev": str(root / "corpus" / "ai" / "dev.spacy")}
    train(study.CONFIGS / "bilstm_joint.cfg", teacher, overrides=overrides, use_gpu=-1)
    return root


def argv(root: Path, work: Path, *more):
    return ["--workdir", str(work), "--results", str(work / "results"), "--corpus", str(root / "corpus"),
            "--raw", str(root / "raw"), "--source", "news", "--domains", "ai", "--features", "wordchar",
            "--workers", "0", "--threads", "1", *more]


def place_teacher(root: Path, work: Path, seed: int = 555) -> Path:
    model = work / f"trf_finetune-ai-minilm-s{seed}" / "model-best"
    shutil.copytree(root / "teacher" / "model-best", model)
    (model.parent / "train_meta.json").write_text("{}")  # what says its training is done
    return model


def test_plan_names_the_row_11_runs_and_what_they_need_first(tmp_path, capsys):
    args = study.parse(["plan", "--rows", "11", "--domains", "ai", "--seeds", "555", "--features", "wordchar+glove",
                        "minilm", "--raw-sizes", "100000", "--raw-source", "select:/data/raw", "--teacher-seed", "555",
                        "--workdir", str(tmp_path / "w"), "--results", str(tmp_path / "r")])
    ids = [study.run_id(r) for r in study.planned(args)]
    assert ids == ["trf_selftrain-ai-minilm-s555-sel_raw_lexical_100000",
                   "trf_selftrain_o-ai-minilm-s555-sel_raw_lexical_100000",
                   "bilstm_distill-ai-wordchar+glove-s555-sel_raw_lexical_100000",
                   "bilstm_distill_o-ai-wordchar+glove-s555-sel_raw_lexical_100000",
                   "bilstm_distill_all-ai-wordchar+glove-s555-sel_raw_lexical_100000"]
    assert study.cmd_plan(args) == 0
    printed = capsys.readouterr().out
    # the fine-tune student reads only the sentences with an annotation: labelled apart
    assert "pseudo-trf_finetune-ai-minilm-s555-sel_raw_lexical_100000-missing-p0.8-annotated" in printed
    # the students of one teacher, text and mode share the pseudo-labels; the modes do not
    assert printed.count("pseudo-trf_finetune-ai-minilm-s555-sel_raw_lexical_100000-missing-p0.8)") == 1
    assert "pseudo-trf_finetune-ai-minilm-s555-sel_raw_lexical_100000-confident-o-p0.8)" in printed
    assert "pseudo-trf_finetune-ai-minilm-s555-sel_raw_lexical_100000-confident-o-p0.8-annotated" in printed
    assert "pseudo-trf_finetune-ai-minilm-s555-sel_raw_lexical_100000-confident-o-t0)" in printed
    assert "stage 1 trf_source-shared-minilm-s555" in printed
    # row 11 is run only when named
    default = study.parse(["plan", "--domains", "ai", "--workdir", str(tmp_path / "w")])
    assert not any(r["method"].row == 11 for r in study.planned(default))


def test_distillation_runs_label_once_and_train_on_gold_plus_pseudo_labels(setup, tmp_path):
    root, work = setup, tmp_path / "work"
    place_teacher(root, work)
    run = argv(root, work, "--methods", "bilstm_distill", "--seeds", "555", "666", "--max-steps", "6",
               "--eval-frequency", "3", "--patience", "6", "--raw-sizes", "60",
               "--raw-source", f"select:{root / 'general'}", "--teacher-seed", "555",
               "--pseudo-min-precision", "0.5")
    assert study.main(["run", *run]) == 0
    results = sorted((work / "results").glob("*.json"))
    assert [p.name for p in results] == [f"bilstm_distill-ai-wordchar-s{s}-sel_general_lexical_60.json"
                                         for s in (555, 666)]
    records = [json.loads(p.read_text()) for p in results]
    pseudo = records[0]["pseudo"]
    assert records[1]["pseudo"] == pseudo  # labelled once, shared by the seeds
    assert pseudo["teacher"]["method"] == "trf_finetune" and pseudo["teacher"]["seed"] == 555
    assert pseudo["min_precision"] == 0.5 and pseudo["mode"] == "missing"
    assert pseudo["dev"]["precision"] >= 0.5 and 0.0 <= pseudo["threshold"] <= 1.0
    assert pseudo["kept"] > 0 and pseudo["o_tokens"] == 0
    # the labelled text is the selected text only: not the target's own text, nor its dev/test
    docs = list(DocBin().from_disk(pseudo["path"]).get_docs(spacy.blank("en").vocab))
    texts = {d.text for d in docs}
    assert texts and texts <= set(AI_LIKE + OTHER)
    assert pseudo["docs"] == len(docs) and not pseudo["dropped_unannotated"]
    # a distillation student keeps its recipe's mix (bilstm_joint: target x vars.target_upsample)
    assert records[0]["student"] == {"config": records[0]["student"]["config"], "pseudo_sentences": len(docs)}
    # each student trained on its own config: the method's, with the pseudo-labelled section
    for record in records:
        config = Path(record["command"].split()[4])
        assert config.name == f"bilstm_distill-ai-wordchar-s{record['seed']}-sel_general_lexical_60.student.cfg"
        cfg = spacy.util.load_config(config, interpolate=False)
        section = cfg["corpora"]["train"]["domains"]["pseudo"]
        assert section["path"] == pseudo["path"] and section["domain"] == "ai"
        assert cfg["components"]["crossner"]["missing_as"] == "missing"
        assert record["test"]["f"] >= 0 and record["best_step"] is not None
        trained = work / f"bilstm_distill-ai-wordchar-s{record['seed']}-sel_general_lexical_60" / "model-best"
        assert spacy.load(trained).get_pipe("crossner").cfg["missing_as"] == "missing"


def test_a_run_without_its_teacher_or_without_selected_text_stops_clearly(setup, tmp_path):
    root, work = setup, tmp_path / "work"
    run = argv(root, work, "--methods", "bilstm_distill_o", "--seeds", "555", "--max-steps", "4",
               "--raw-sizes", "60", "--raw-source", f"select:{root / 'general'}")
    with pytest.raises(SystemExit, match=r"its teacher .*trf_finetune-ai-minilm-s555.* is not trained; run "
                                         r"`study.py run --methods trf_finetune --domains ai --seeds 555`"):
        study.main(["run", *run])
    # a model-best without its training record: still training (spaCy writes model-best as it goes)
    model = place_teacher(root, work)
    (model.parent / "train_meta.json").unlink()
    with pytest.raises(SystemExit, match=r"is not trained; .* \(waited 1 s\)"):
        study.main(["run", *run, "--teacher-wait", "1"])
    args = study.parse(["run", *argv(root, work, "--methods", "bilstm_distill", "--seeds", "555")])
    planned = study.planned(args)
    with pytest.raises(SystemExit, match="bilstm_distill: give --raw-sizes"):
        study.make_pseudo_labels(args, planned[0], study.environment(args))


def test_a_self_training_student_config_keeps_its_sourced_component(setup, tmp_path):
    """trf_selftrain's student: trf_finetune's config, whose component is sourced from stage 1,
    gets missing_as through its configure_crossner callback, and its gold target sentences are
    upsampled to about as many as the pseudo-labelled ones that have an annotation."""
    root, work = setup, tmp_path / "work"
    args = study.parse(["run", *argv(root, work, "--methods", "trf_selftrain", "--seeds", "555", "--features",
                                     "minilm", "--raw-sizes", "60", "--raw-source", f"select:{root / 'general'}")])
    run = study.planned(args)[0]
    pseudo = tmp_path / "pseudo.spacy"
    write(pseudo, AI[:1])
    # 40 labelled, 25 of them with an annotation (kept); the corpus's AI train set: 3 sentences
    labelled = {"path": str(pseudo), "docs": 40, "unlabelled_docs": 15, "dropped_unannotated": True}
    student = study.write_student_config(args, run, labelled)
    assert student["pseudo_sentences"] == 25 and student["target_sentences"] == len(AI)
    assert student["target_upsample"] == round(25 / len(AI)) == 8
    path = Path(student["config"])
    cfg = spacy.util.load_config(path, interpolate=False)
    assert cfg["corpora"]["train"]["domains"]["target"]["upsample"] == 8
    assert cfg["initialize"]["after_init"]["missing_as"] == "missing"
    assert cfg["corpora"]["train"]["domains"]["pseudo"] == {"path": str(pseudo.resolve()), "domain": "ai",
                                                            "upsample": 1.0}
    assert cfg["paths"]["pretrained"].endswith("trf_source-shared-minilm-s555/model-best")
    targs = study.train_args(run["method"], args, "ai", 555, "minilm", study.work_dir(run, args), 60)
    assert targs[0] == str(path)


def test_the_whole_decoding_variant_keeps_every_entity_and_marks_o(setup, tmp_path):
    """bilstm_distill_all: threshold 0 and confident-o, no threshold chosen on dev."""
    root, work = setup, tmp_path / "work"
    place_teacher(root, work)
    run = argv(root, work, "--methods", "bilstm_distill_all", "--seeds", "555", "--max-steps", "4",
               "--eval-frequency", "2", "--patience", "4", "--raw-sizes", "60",
               "--raw-source", f"select:{root / 'general'}")
    assert study.main(["run", *run]) == 0
    record = json.loads((work / "results" / "bilstm_distill_all-ai-wordchar-s555-sel_general_lexical_60.json").read_text())
    pseudo = record["pseudo"]
    assert pseudo["threshold"] == 0.0 and pseudo["dev"] is None and pseudo["min_precision"] is None
    assert pseudo["rejected"] == 0 and pseudo["mode"] == "confident-o"
    assert pseudo["o_tokens"] + pseudo["entity_tokens"] == sum(len(d) for d in DocBin().from_disk(
        pseudo["path"]).get_docs(spacy.blank("en").vocab)) and pseudo["missing_tokens"] == 0
    assert Path(pseudo["path"]).parent.name.endswith("-confident-o-t0")


def test_the_report_lists_the_pseudo_labels_and_pairs_the_students(tmp_path):
    import report

    def result(method, seed, f, pseudo=None, domain="ai"):
        record = {"row": study.BY_NAME[method].row, "method": method, "domain": domain, "seed": seed,
                  "features": "wordchar+glove", "test": {"p": f, "r": f, "f": f}}
        if pseudo:
            record["raw_text"] = {"source": "select:raw", "scorer": "lexical", "size": 100000,
                                  "selected_tokens": 100017, "tokens": 114718, "sha256": "ab" * 32}
            record["pseudo"] = pseudo
        return record

    chosen = {"path": "/w/pseudo-a/pseudo.spacy", "mode": "missing", "threshold": 0.9847, "min_precision": 0.8,
              "dev": {"precision": 0.8, "kept": 775, "predicted": 1598}, "kept": 1493, "rejected": 4679,
              "docs": 3080, "unlabelled_docs": 2198, "teacher": {"method": "trf_finetune", "seed": 555, "test_f": 59.93}}
    fixed = {**chosen, "path": "/w/pseudo-b/pseudo.spacy", "mode": "confident-o", "threshold": 0.0,
             "min_precision": None, "dev": None, "rejected": 0, "unlabelled_docs": 0, "kept": 6172}
    results = [result("bilstm_joint", 555, 49.28), result("bilstm_joint", 666, 48.16),
               result("bilstm_joint", 555, 59.84, domain="music")]
    sized = [result("bilstm_distill", 555, 48.50, chosen), result("bilstm_distill", 666, 48.58, chosen),
             result("bilstm_distill_all", 555, 50.28, fixed),
             result("bilstm_distill", 555, 60.84, {**chosen, "path": "/w/pseudo-m/pseudo.spacy"}, domain="music")]
    md = tmp_path / "raw.md"
    report.raw_size_report(sized, results, md, tmp_path / "raw.png")
    text = md.read_text()
    # students paired with bilstm_joint of the same seed; they read the selected text only
    assert ("| 11 | bilstm_distill | wordchar+glove | ai | select:raw | lexical | 100,000 | 100,017 (–) | 555, 666 "
            "| 48.54 ± 0.06 | bilstm_joint | -0.18 ± 0.85 | within noise |") in text
    assert "| 50.28 (1 seed) | bilstm_joint | 1.00 (1 seed) | too few seeds |" in text
    # over the domains: the mean of the domains' means, the gain over all three pairs
    assert ("| 11 | bilstm_distill | wordchar+glove | ai, music | select:raw | lexical | 100,000 | 3 | 54.69 | "
            "bilstm_joint | 0.21 ± 0.91, 3 | within noise |") in text
    assert "| 11 | bilstm_distill_all | wordchar+glove | ai, music" not in text  # one domain only
    assert ("| ai | 100,000 | trf_finetune (s555: 59.93) | missing | 0.985 | 0.800 (775 of 1,598; target 0.8) | "
            "1,493 / 4,679 | 882 of 3,080 | bilstm_distill |") in text
    assert ("| ai | 100,000 | trf_finetune (s555: 59.93) | confident-o | 0.000 | – (fixed) | 6,172 / 0 | "
            "3,080 of 3,080 | bilstm_distill_all |") in text
