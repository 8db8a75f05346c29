"""project/scripts/study.py without training: which runs a study plans, the ``spacy train`` and
``spacy_crossner evaluate`` arguments of each kind of run, the peers' generated configs, the runs
handed to the runner's Dask cluster (tiny stand-in commands), and the study's report
(project/scripts/report.py study) written from a few hand-made result files."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from spacy.cli._util import parse_config_overrides
from spacy.tokens import DocBin
from spacy.util import load_config

from util import AI, make_doc

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "project" / "scripts"
sys.path.insert(0, str(SCRIPTS))
import report  # noqa: E402  (project/scripts/report.py: the study's report)
import study  # noqa: E402


def args_for(tmp_path, *argv):
    return study.parse(["plan", "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"),
                        "--corpus", str(tmp_path / "corpus"), "--raw", str(tmp_path / "raw"), *argv])


def plan(args):
    return [(r["method"].name, r["domain"], r["seed"], r["features"]) for r in study.planned(args)]


def overrides_of(targs):
    """The ``--section.key value`` pairs of spacy train arguments (after the config and
    --output), as spaCy parses them."""
    assert targs[1] == "--output"
    return parse_config_overrides(targs[3:])


def test_every_method_names_a_config_baseline_and_stage_that_exist():
    for method in study.METHODS + study.STAGE1:
        if not method.kind.startswith("spacy"):
            for features in method.features:
                assert study.config_path(method, None, features).exists(), (method.name, features)
        if method.baseline_of:
            base = study.BY_NAME[method.baseline_of]
            assert base.listed and set(method.features) <= set(base.features), method.name
        if method.stage1:
            first = study.BY_NAME[method.stage1]
            assert first.kind == "source" and set(method.features) <= set(first.features), method.name
        assert set(method.features) <= set(study.FEATURES), method.name
    assert {m.name for m in study.METHODS if m.row == 9 and "sm" in m.name} == {"spacy_ner_sm_target"}


class SessionEnd(BaseException):
    """The end of a machine's session: the study process itself is stopped."""


def test_a_stopped_dapt_resumes_from_its_last_complete_checkpoint(tmp_path, monkeypatch):
    """study's DAPT saves a checkpoint every DAPT_SAVE_STEPS. Stopped (the process killed while
    saving step 400), then run again, it passes --resume from the last complete checkpoint,
    keeps the stopped part's log, and its meta lists both parts, the stopped one's time counted
    (from its start to its log's last line, CPU taken as wall: flagged as estimated). Stopped
    before any complete checkpoint, it starts afresh."""
    args = args_for(tmp_path, "--methods", "dapt_span", "--features", "minilm")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "ai.txt").write_text("Deep learning is a field .\n", encoding="utf8")
    out = study.dapt_dir(args, "ai", "span")
    log, meta_path = out.parent / f"{out.name}.log", out.parent / f"{out.name}.json"
    commands = []

    def save(step, complete=True):
        folder = out / "checkpoints" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}) if complete else "")
        (folder / "rng_state.pth").write_bytes(b"")

    def stopped_at_400(cmd, env, log):
        commands.append(cmd)
        out.mkdir(parents=True, exist_ok=True)
        log.write_text("stopped part\n", encoding="utf8")
        save(200)
        save(400, complete=False)
        raise SessionEnd

    def finishes(cmd, env, log):
        commands.append(cmd)
        out.mkdir(parents=True, exist_ok=True)
        log.write_text("finished part\n", encoding="utf8")
        resumed = str(out / "checkpoints" / "checkpoint-200") if "--resume" in cmd else None
        (out / "dapt_summary.json").write_text(json.dumps({"steps": 600, "resumed_from": resumed}))
        return subprocess.CompletedProcess(cmd, 0, ""), 30.0, 20.0

    monkeypatch.setattr(study, "timed", stopped_at_400)
    with pytest.raises(SessionEnd):
        study.run_dapt(args, "ai", "span", {})
    assert "--resume" not in commands[-1] and commands[-1][commands[-1].index("--save-steps") + 1] == "200"
    started = json.loads((out.parent / f"{out.name}.parts.json").read_text())[0]["started"]
    os.utime(log, (started + 100, started + 100))  # its log's last line came 100 s after its start
    monkeypatch.setattr(study, "timed", finishes)
    meta = study.run_dapt(args, "ai", "span", {})
    assert "--resume" in commands[-1] and meta["resumed_from"].endswith("checkpoint-200")
    assert json.loads(meta_path.read_text()) == meta
    kept = out.parent / f"{out.name}.stopped-1.log"
    assert kept.read_text() == "stopped part\n" and log.read_text() == "finished part\n"
    assert meta["parts"] == [
        {"resumed_from": None, "stopped": True, "wall_s": 100.0, "log": str(kept)},
        {"resumed_from": str(out / "checkpoints" / "checkpoint-200"), "wall_s": 30.0, "cpu_s": 20.0}]
    assert meta["wall_s"] == 130.0 and meta["cpu_s"] == 120.0 and meta["cost_estimated"] is True
    assert not (out / "checkpoints").exists()  # the final model is what is used
    assert not (out.parent / f"{out.name}.parts.json").exists()
    assert study.run_dapt(args, "ai", "span", {}) == meta and len(commands) == 2  # done: not run again
    # stopped before its first checkpoint's save finished: the folder is cleared, DAPT starts again
    meta_path.unlink()
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    out.mkdir(exist_ok=True)
    (out / "stray").write_text("")
    (out / "checkpoints" / "checkpoint-200").mkdir(parents=True)
    monkeypatch.setattr(study, "timed", finishes)
    meta = study.run_dapt(args, "ai", "span", {})
    assert "--resume" not in commands[-1] and not (out / "stray").exists()
    assert meta["resumed_from"] is None and "parts" not in meta and (meta["wall_s"], meta["cpu_s"]) == (30.0, 20.0)


def test_minilm_rows_are_planned_only_with_minilm_features(tmp_path):
    args = args_for(tmp_path, "--rows", "2,3,6,7,8", "--domains", "ai", "--seeds", "555")
    assert [m for m, *_ in plan(args)] == ["multi_cell_sda", "moee_zero"]
    args = args_for(tmp_path, "--rows", "2", "3", "6", "7", "8", "--features", "minilm", "--domains", "ai", "music",
                    "--seeds", "555", "666")
    runs = plan(args)
    assert len(runs) == 10 * 2 * 2
    assert list(dict.fromkeys(m for m, *_ in runs)) == [
        "trf_target", "trf_joint", "trf_finetune", "multi_cell_sda_trf", "bilstm_joint_trf", "trf_source", "moee_zero_trf",
        "label_aware", "dapt_span", "dapt_token"]
    assert {f for *_, f in runs} == {"minilm"}
    assert "label_aware_source" not in {m for m, *_ in runs}  # a stage 1, not a row


def test_peers_and_feature_names(tmp_path):
    args = args_for(tmp_path, "--rows", "9", "--seeds", "555")
    assert plan(args) == [("spacy_ner_cnn_target", "ai", 555, "spacy_cnn"),
                          ("spacy_ner_cnn_joint", "ai", 555, "spacy_cnn"),
                          ("spacy_ner_sm_target", "ai", 555, "spacy_sm")]
    args = args_for(tmp_path, "--rows", "9", "--seeds", "555", "--features", "minilm")
    assert ("spacy_ner_minilm_target", "ai", 555, "minilm") in plan(args)
    # wordchar+sm is the sm features' other name; rows 1 and 3 only
    args = args_for(tmp_path, "--rows", "1,3,4", "--seeds", "555", "--features", "wordchar+sm")
    assert args.features == ["sm"]
    assert plan(args) == [("bilstm_target", "ai", 555, "sm"), ("bilstm_joint", "ai", 555, "sm"),
                          ("multi_cell_sda", "ai", 555, "sm")]
    with pytest.raises(SystemExit, match="--features"):
        args_for(tmp_path, "--features", "bert")
    with pytest.raises(SystemExit, match="--methods"):
        args_for(tmp_path, "--methods", "label_aware_source")


def test_with_baselines_adds_the_baselines_of_the_chosen_methods(tmp_path):
    args = args_for(tmp_path, "--methods", "label_aware", "moee_zero_trf", "dapt_span", "--features", "minilm",
                    "--seeds", "555")
    assert [m for m, *_ in plan(args)] == ["moee_zero_trf", "label_aware", "dapt_span"]
    args.with_baselines = True
    assert [m for m, *_ in plan(args)] == ["trf_target", "trf_finetune", "trf_source", "moee_zero_trf",
                                           "label_aware", "dapt_span"]


def run_args(tmp_path, name, features, *argv, domain="ai", seed=555):
    (tmp_path / "raw").mkdir(exist_ok=True)
    for corpus in (domain, "conll2003"):
        (tmp_path / "raw" / f"{corpus}.txt").write_text("Some raw text .\n")
    (tmp_path / "dictionary").mkdir(exist_ok=True)
    args = args_for(tmp_path, "--sm-pipeline", "my_sm", "--vectors", str(tmp_path / "vectors"),
                    "--dictionary", str(tmp_path / "dictionary"), *argv)
    method = study.BY_NAME[name]
    out = tmp_path / "work" / "out"
    return args, method, study.train_args(method, args, domain, seed, features, out)


@pytest.mark.parametrize("name,features", [("trf_source", "minilm"), ("pgn_uda", "wordchar")])
def test_stopping_settings_given_on_the_command_line_win_over_the_protocol(tmp_path, name, features):
    _, _, targs = run_args(tmp_path, name, features, "--max-steps", "5000", "--eval-frequency", "50",
                           "--patience", "250")
    overrides = overrides_of(targs)
    assert (overrides["training.max_steps"], overrides["training.eval_frequency"],
            overrides["training.patience"]) == (5000, 50, 250)
    # one given, the others from the protocol
    _, _, targs = run_args(tmp_path, name, features, "--patience", "800")
    overrides = overrides_of(targs)
    assert overrides["training.patience"] == 800
    assert overrides["training.eval_frequency"] == (100 if features == "minilm" else 200)
    assert overrides["training.max_steps"] == {"pgn_uda": 30000, "trf_finetune_tuned": 2000}.get(name, 20000)


def check_overrides_exist(config: Path, overrides: dict):
    """Every override names a setting the config has (spaCy would silently add a new one), but
    vars.source_domain, which the study passes to every config of ours."""
    cfg = load_config(config, interpolate=False)
    for key in overrides:
        if key == "vars.source_domain":
            continue
        node = cfg
        for part in key.split("."):
            assert part in node, f"{config.name}: {key}"
            node = node[part]


@pytest.mark.parametrize("name,features", [(m.name, f) for m in study.METHODS + study.STAGE1
                                           for f in m.features if not m.kind.startswith("spacy")])
def test_train_args_of_our_configs_name_existing_settings(tmp_path, name, features):
    args, method, targs = run_args(tmp_path, name, features)
    if method.teacher:  # self-training / distillation: the method's config + the pseudo-labels
        assert Path(targs[0]) == study.student_config(tmp_path / "work" / "out")
    else:
        assert Path(targs[0]) == study.config_path(method, args, features)
    overrides = overrides_of(targs)
    check_overrides_exist(study.config_path(method, args, features), overrides)
    # the study's protocol: MiniLM runs evaluate every 100 steps with patience 400, the others
    # every 200 with 1,600; PGN UDA may run to 30,000 steps, the tuned fine-tune (its learning rate
    # and the warm-up alone (their learning rates decay to 0 at max_steps) to 2,000, the others to 20,000
    assert overrides["system.seed"] == 555
    assert overrides["training.max_steps"] == {"pgn_uda": 30000, "trf_finetune_tuned": 2000,
                                               "trf_finetune_warmup": 2000}.get(name, 20000)
    assert ("training.patience" in overrides) == method.early_stopping
    assert ("training.eval_frequency" in overrides) == method.early_stopping
    if method.early_stopping:
        expected = (100, 400) if features == "minilm" else (200, 1600)
        assert (overrides["training.eval_frequency"], overrides["training.patience"]) == expected
    if method.kind in ("target", "joint", "finetune", "dapt", "uda"):
        assert overrides["vars.target_domain"] == "ai"
    if method.kind in ("target", "joint", "finetune", "dapt"):
        assert overrides["paths.target_train"].endswith("corpus/ai/train.spacy")
        assert overrides["paths.target_dev"].endswith("corpus/ai/dev.spacy")
    if method.kind in ("joint", "source", "zero", "uda"):
        assert overrides["paths.source_train"].endswith("corpus/conll2003/train.spacy")
    if method.kind in ("source", "zero", "uda"):
        assert overrides["paths.source_dev"].endswith("corpus/conll2003/dev.spacy")


def test_train_args_of_the_new_rows(tmp_path):
    work = tmp_path / "work"
    # row 2: pre-train -> fine-tune from the seed's shared trf_source, the authors' shared head
    _, _, targs = run_args(tmp_path, "trf_finetune", "minilm", seed=666)
    o = overrides_of(targs)
    assert targs[0].endswith("configs/trf_finetune.cfg")
    assert o["paths.pretrained"] == str(work / "trf_source-shared-minilm-s666" / "model-best")
    assert o["vars.init_from"] == "conll2003"
    _, _, targs = run_args(tmp_path, "trf_source", "minilm", "--source-limit", "40", "--source-dev-limit", "20")
    o = overrides_of(targs)
    assert targs[0].endswith("configs/trf_pretrain.cfg")
    assert o["corpora.train.limit"] == 40 and o["corpora.dev.limit"] == 20
    # row 7: stage 2 from label_aware_source's last model (2 epochs, no early stopping), no init_from
    _, _, targs = run_args(tmp_path, "label_aware", "minilm")
    o = overrides_of(targs)
    assert targs[0].endswith("configs/label_aware_target.cfg")
    assert o["paths.pretrained"] == str(work / "label_aware_source-shared-minilm-s555" / "model-last")
    assert "vars.init_from" not in o and o["training.max_epochs"] == 0
    _, _, targs = run_args(tmp_path, "label_aware_source", "minilm")
    assert targs[0].endswith("configs/label_aware_source.cfg") and "training.patience" not in overrides_of(targs)
    # row 8: trf_target on the domain's DAPT encoder, named by its settings
    args, _, targs = run_args(tmp_path, "dapt_span", "minilm", "--dapt-epochs", "3", "--dapt-max-length", "64")
    o = overrides_of(targs)
    assert targs[0].endswith("configs/trf_target.cfg")
    assert o["paths.transformer"] == str(study.dapt_dir(args, "ai", "span"))
    assert Path(o["paths.transformer"]).name == "dapt_span-ai-e3-n0-b8-lr5e-05-L64-s42"
    _, _, token = run_args(tmp_path, "dapt_token", "minilm")
    assert "dapt_token-ai-" in overrides_of(token)["paths.transformer"]
    # issue 19 §3
    _, _, targs = run_args(tmp_path, "multi_cell_sda_trf", "minilm")
    assert targs[0].endswith("configs/multi_cell_sda_trf.cfg") and overrides_of(targs)["vars.target_upsample"] == 10
    # its like-for-like BiLSTM-CRF on the same fixed features, the same joint data
    _, _, targs = run_args(tmp_path, "bilstm_joint_trf", "minilm")
    assert targs[0].endswith("configs/bilstm_joint_trf.cfg") and overrides_of(targs)["vars.target_upsample"] == 10
    _, _, targs = run_args(tmp_path, "moee_zero_trf", "minilm")
    assert targs[0].endswith("configs/moee_zero_trf.cfg") and "paths.target_train" not in overrides_of(targs)
    # the sm features: the *_sm.cfg config and the pipeline's name
    for name in ("bilstm_target", "bilstm_joint", "multi_cell_sda"):
        _, _, targs = run_args(tmp_path, name, "sm")
        assert targs[0].endswith(f"configs/{name}_sm.cfg") and overrides_of(targs)["vars.tok2vec_pipeline"] == "my_sm"
    _, _, targs = run_args(tmp_path, "bilstm_joint", "wordchar+glove")
    assert overrides_of(targs)["components.crossner.model.tok2vec.include_static_vectors"] is True
    args = args_for(tmp_path)
    with pytest.raises(SystemExit, match="--vectors"):
        study.train_args(study.BY_NAME["bilstm_joint"], args, "ai", 555, "wordchar+glove", tmp_path)


def test_train_args_of_the_unsupervised_rows_check_their_inputs(tmp_path):
    args, _, targs = run_args(tmp_path, "multi_cell_uda", "wordchar")
    o = overrides_of(targs)
    assert o["paths.target_raw"] == str(tmp_path / "raw" / "ai.txt")
    assert o["paths.dictionary"] == str(tmp_path / "dictionary")
    # a missing dictionary or raw text stops the run before training, naming the option
    args.dictionary = tmp_path / "no_dictionary"
    with pytest.raises(SystemExit, match="--dictionary: multi_cell_uda needs an entity dictionary folder"):
        study.train_args(study.BY_NAME["multi_cell_uda"], args, "ai", 555, "wordchar", tmp_path)
    with pytest.raises(SystemExit, match=r"--raw: pgn_uda needs .*music.txt"):
        study.train_args(study.BY_NAME["pgn_uda"], args, "music", 555, "wordchar", tmp_path)


def test_train_args_of_the_peers(tmp_path):
    work = tmp_path / "work"
    _, _, targs = run_args(tmp_path, "spacy_ner_minilm_target", "minilm")
    o = overrides_of(targs)
    assert targs[0] == str(work / "spacy_ner_minilm.cfg")
    assert o["paths.train"].endswith("corpus/ai/train.spacy") and o["paths.dev"].endswith("corpus/ai/dev.spacy")
    _, _, targs = run_args(tmp_path, "spacy_ner_sm_target", "spacy_sm", domain="music")
    o = overrides_of(targs)
    assert targs[0] == str(work / "spacy_ner_sm.cfg")
    assert o["paths.ner_source"] == str(work / "sm_ner-my_sm-music")
    assert o["paths.train"].endswith("corpus/music/train.spacy")
    _, _, targs = run_args(tmp_path, "spacy_ner_cnn_joint", "spacy_cnn")
    assert overrides_of(targs)["paths.train"] == str(work / "joint-conll2003-ai-x10")


def test_eval_args(tmp_path):
    args = args_for(tmp_path)
    model, out = tmp_path / "m", tmp_path / "o.json"
    target = study.eval_args(study.BY_NAME["dapt_token"], args, "ai", model, out)
    assert target == [str(model), f"{args.corpus}/ai/test.spacy", "--output", str(out)]
    source = study.eval_args(study.BY_NAME["trf_source"], args, "ai", model, out)
    assert source[-2:] == ["--domain", "conll2003"]
    zero = study.eval_args(study.BY_NAME["moee_zero_trf"], args, "ai", model, out)
    assert zero[-4:] == ["--domain", "conll2003", "--labels", study.SOURCE_TYPES]
    typed = study.eval_args(study.BY_NAME["trf_source"], args, "ai", model, out, study.SOURCE_TYPES)
    assert typed[-2:] == ["--labels", study.SOURCE_TYPES]
    args.gpu_id = 0
    assert study.eval_args(study.BY_NAME["trf_target"], args, "ai", model, out)[-2:] == ["--gpu-id", "0"]


def test_generated_peer_configs(tmp_path):
    args = args_for(tmp_path)
    path = study.write_spacy_config(study.BY_NAME["spacy_ner_minilm_target"], args)
    config = load_config(path, overrides={"training.max_steps": 7}, interpolate=True)
    assert config["nlp"]["pipeline"] == ["transformer", "ner"]
    assert config["components"]["transformer"]["model"]["name"] == {
        "@misc": "spacy_crossner.transformer_name.v1", "name": None}
    assert config["training"]["optimizer"]["learn_rate"]["total_steps"] == 7
    assert config["components"]["ner"]["model"]["tok2vec"]["@architectures"] == "spacy-transformers.TransformerListener.v1"
    path = study.write_spacy_config(study.BY_NAME["spacy_ner_sm_target"], args)
    config = load_config(path, overrides={"paths.ner_source": "somewhere"}, interpolate=True)
    assert config["nlp"]["pipeline"] == ["ner"] and "tok2vec" not in config["components"]
    assert config["components"]["ner"] == {"source": "somewhere"}


def test_peer_config_is_written_whole_and_kept(tmp_path):
    # runs sharing a work directory (benchmarks/gpu_study.sh) read the generated config while
    # another may write it: it is renamed into place whole, and written once
    args = args_for(tmp_path)
    path = study.write_spacy_config(study.BY_NAME["spacy_ner_cnn_target"], args)
    text = path.read_text()
    assert load_config(path)["nlp"]["pipeline"] == ["tok2vec", "ner"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no part file left
    path.write_text(text + "# kept\n")
    assert study.write_spacy_config(study.BY_NAME["spacy_ner_cnn_target"], args) == path
    assert path.read_text().endswith("# kept\n")
    study.write_whole(path, "[nlp]\n")
    assert path.read_text() == "[nlp]\n" and len(list(path.parent.iterdir())) == 1


def test_joint_folder_tolerates_a_link_made_meanwhile(tmp_path, monkeypatch):
    for domain in ("conll2003", "ai"):
        (tmp_path / "corpus" / domain).mkdir(parents=True)
        (tmp_path / "corpus" / domain / "train.spacy").write_bytes(b"")
    args = args_for(tmp_path, "--target-upsample", "2")
    folder = study.make_joint_folder(args, "ai")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["source.spacy", "target0.spacy", "target1.spacy"]
    # another run made the links between this run's check and its symlink call
    monkeypatch.setattr(study.Path, "exists", lambda self: False)
    assert study.make_joint_folder(args, "ai") == folder
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == names
    assert (folder / "target1.spacy").resolve() == (tmp_path / "corpus" / "ai" / "train.spacy").resolve()


def test_sm_ner_base_adds_the_target_labels(tmp_path):
    sm = spacy.blank("en")
    sm.add_pipe("ner").add_label("PERSON")
    sm.initialize()
    sm.to_disk(tmp_path / "tiny_sm")
    (tmp_path / "corpus" / "ai").mkdir(parents=True)
    DocBin(docs=[make_doc(sm, words, ents, domain) for domain, words, ents in AI], store_user_data=True).to_disk(
        tmp_path / "corpus" / "ai" / "train.spacy")
    args = args_for(tmp_path, "--sm-pipeline", str(tmp_path / "tiny_sm"))
    info = study.make_sm_ner_base(args, "ai")
    assert info["labels_before"] == ["PERSON"]
    assert info["labels_added"] == ["algorithm", "metrics", "misc", "organisation", "product", "researcher"]
    base = spacy.load(study.sm_ner_base(args, "ai"))
    assert base.pipe_names == ["ner"] and set(base.get_pipe("ner").labels) == {"PERSON", *info["labels_added"]}
    assert study.make_sm_ner_base(args, "ai") == info  # made once


def test_work_lock_takes_over_from_a_dead_process(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "shared.lock").write_text(str(dead.pid))
    with study.work_lock(tmp_path / "shared", poll=0.01):
        assert (tmp_path / "shared.lock").read_text() == str(__import__("os").getpid())
    assert not (tmp_path / "shared.lock").exists()
    # a lock file left by an earlier session whose pid is now another, live process's: no one holds it
    (tmp_path / "shared.lock").write_text(str(os.getppid()))
    with study.work_lock(tmp_path / "shared", poll=0.01):
        assert (tmp_path / "shared.lock").read_text() == str(os.getpid())


def test_work_lock_waits_for_a_live_holder(tmp_path, capsys):
    """Another process holding the lock: work_lock waits (saying for whom) until it lets go."""
    held, released = tmp_path / "held", tmp_path / "released"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.path.insert(0, {str(Path(study.__file__).parent)!r})
import study
from pathlib import Path
with study.work_lock(Path({str(tmp_path / "shared")!r})):
    Path({str(held)!r}).write_text("")
    time.sleep(1.5)
    Path({str(released)!r}).write_text("")
"""])
    for _ in range(600):
        if held.exists():
            break
        subprocess.run(["sleep", "0.05"])
    with study.work_lock(tmp_path / "shared", poll=0.05):
        assert released.exists()
        assert (tmp_path / "shared.lock").read_text() == str(os.getpid())
    assert holder.wait(timeout=60) == 0
    assert f"waiting for shared (locked by pid {holder.pid})" in capsys.readouterr().out


def test_timed_writes_the_log_while_the_command_runs(tmp_path):
    log = tmp_path / "run.log"
    # the child reads the log while it is still running: the first line is there already
    code = ("import sys, pathlib; print('out 1', flush=True); "
            "text = pathlib.Path(sys.argv[1]).read_text(); print('err', file=sys.stderr, flush=True); "
            "sys.exit(3 if 'out 1' in text else 4)")
    cmd = [sys.executable, "-c", code, str(log)]
    proc, wall, cpu = study.timed(cmd, None, log)
    assert proc.returncode == 3
    assert "out 1" in proc.stdout and "err" in proc.stdout
    assert log.read_text().startswith("$ ") and log.read_text().endswith(proc.stdout)
    assert wall > 0 and cpu >= 0


def fake(results: Path, method, domain, seed, features, f, device="cpu", **extra):
    m = study.BY_NAME[method]
    data = {"row": m.row, "method": method, "baseline_of": m.baseline_of, "domain": domain, "seed": seed,
            "features": features, "test": {"p": f, "r": f, "f": f}, "dev_f": f, "best_step": 200,
            "last_step": 400, "best_not_last": True, "max_steps": 20000, "wall_s": 1.0, "cpu_s": 1.0,
            "device": device, "config": "", "overrides": [], **extra}
    (results / f"{method}-{domain}-{features}-s{seed}.json").write_text(json.dumps(data))


def test_report_pairs_a_several_sources_run_with_its_one_source_method(tmp_path):
    """A --extra-sources run's method (NAME_plus_<sources>) is not listed: the report knows it
    by name and pairs it with NAME."""
    results = tmp_path / "study"
    results.mkdir()
    name = "bilstm_joint_plus_weather_news"
    assert name not in study.BY_NAME
    for domain, base, gain in (("ai", 49.0, 1.0), ("music", 59.0, -0.5)):
        for seed, noise in ((555, 0.0), (666, 0.5)):
            fake(results, "bilstm_joint", domain, seed, "wordchar+glove", base + noise)
            data = json.loads((results / f"bilstm_joint-{domain}-wordchar+glove-s{seed}.json").read_text())
            data.update(method=name, test={"p": 0, "r": 0, "f": base + noise + gain + noise})
            (results / f"{name}-{domain}-wordchar+glove-s{seed}.json").write_text(json.dumps(data))
    assert report.study_report(results_dir=results) == 0
    text = (tmp_path / "study.md").read_text()
    # gains +1.0 / +1.5 on ai, -0.5 / 0.0 on music
    assert f"| 1 | {name} | bilstm_joint | wordchar+glove | ai | 2 | 1.25 ± 0.35 | reproduced in direction | – |" in text
    assert f"| 1 | {name} | bilstm_joint | wordchar+glove | all | 4 | 0.50 ± 0.91 | within noise | – |" in text
    assert study.variant_named(name).baseline_of == "bilstm_joint"
    assert study.variant_named("bilstm_joint") is study.BY_NAME["bilstm_joint"]
    assert study.variant_named("no_such_plus_thing") is None and study.variant_named("bilstm_joint_plus_") is None


def test_report_from_fake_results(tmp_path):
    results = tmp_path / "study"
    results.mkdir()
    for domain, shift in (("ai", 0.0), ("music", 10.0)):
        for seed, noise in ((555, 0.0), (666, 1.0)):
            fake(results, "trf_target", domain, seed, "minilm", 50 + shift + noise)
            fake(results, "dapt_token", domain, seed, "minilm", 53 + shift + noise * 2)  # +3 and +4
            fake(results, "trf_joint", domain, seed, "minilm", 55 + shift)
            fake(results, "multi_cell_sda_trf", domain, seed, "minilm", 55 + shift + noise - 0.5)  # -0.5 / +0.5
            fake(results, "spacy_ner_sm_target", domain, seed, "spacy_sm", 52 + shift, device="gpu0")
    for seed in (555, 666):
        fake(results, "bilstm_source", "ai", seed, "wordchar", 20.0, test_source_types={"p": 40, "r": 40, "f": 40.0})
        fake(results, "trf_finetune", "ai", seed, "minilm", 60.0)
        fake(results, "moee_zero", "ai", seed, "wordchar", 45.0 - seed % 2)  # 45, 44
    fake(results, "trf_finetune", "music", 777, "minilm", 70.0)  # no trf_target of that seed: not paired
    fake(results, "trf_joint", "music", 777, "minilm", 65.0, device="gpu0")  # one run on a GPU
    fake(results, "spacy_ner_cnn_target", "ai", 555, "spacy_cnn", 45.0)  # a second peer, on AI only
    for seed in (555, 666):  # multi_cell_sda_trf's diagnostic baseline on its own features, AI only
        fake(results, "bilstm_joint_trf", "ai", seed, "minilm", 53.0)
    args = study.parse(["report", "--results", str(results)])
    assert report.study_report(results_dir=results) == 0
    text = (tmp_path / "study.md").read_text()
    assert "| 8 | dapt_token | trf_target | minilm | ai | 2 | 3.50 ± 0.71 | reproduced in direction | +3.29 |" in text
    assert "| 8 | dapt_token | trf_target | minilm | all | 4 | 3.50 ± 0.58 | reproduced in direction |" in text
    assert "| 3 | multi_cell_sda_trf | trf_joint | minilm | ai | 2 | 0.00 ± 0.71 | within noise | -0.29 |" in text
    # beside its paper's baseline, the same family on the same features (no verdict, no paper gain);
    # one domain: no pooled line
    assert ("| 3 | multi_cell_sda_trf | bilstm_joint_trf (same features) | minilm | ai | 2 | 2.00 ± 0.71 "
            "| reproduced in direction | – |") in text
    assert "| bilstm_joint_trf (same features) | minilm | all |" not in text
    # joint training against the target alone (CrossNER's comparison; the paper: +8.20 on AI)
    assert "| 2 | trf_joint | trf_target | minilm | ai | 2 | 4.50 ± 0.71 | reproduced in direction | +8.20 |" in text
    # the pooled row's paper gain is over the domains that were paired (AI: +8.51), not every domain run
    assert "| 2 | trf_finetune | trf_target | minilm | all | 2 | 9.50 ± 0.71 | reproduced in direction | +8.51 |" in text
    # zero-shot against the source-only model on the source types (40), not on all types (20)
    assert "| 6 | moee_zero | bilstm_source | wordchar | ai | 2 | 4.50 ± 0.71 | reproduced in direction | – |" in text
    # the papers' numbers, with the encoder
    assert "| trf_target | BERT-base-cased | directly fine-tune, w/o DAPT | 50.37 | 66.59 | 61.44 |" in text
    assert "moee_zero: MTL+MoEE 69.53" in text
    assert "| 2 | trf_target | minilm | ai (555, 666); music (555, 666) | cpu |" in text
    # a method whose runs used two devices says which ran where
    assert ("| 2 | trf_joint | minilm | ai (555, 666); music (555, 666, 777) "
            "| cpu: ai (555, 666), music (555, 666); gpu0: music (777) |") in text
    assert "| 9 | spacy_ner_sm_target | spacy_sm | ai (555, 666); music (555, 666) | gpu0 |" in text
    assert "Below a spaCy peer: trf_target (minilm)." in text  # not the source-only rows
    # one column per peer, over the domains both ran (how many in brackets), then the strongest
    assert ("| row | method | features | spacy_ner_cnn_target (spacy_cnn) | spacy_ner_sm_target (spacy_sm) "
            "| strongest peer (gap) |") in text
    assert "| 2 | trf_target | minilm | +5.50 (1) | -1.50 (2) | spacy_ner_sm_target (spacy_sm) (-1.50) |" in text
    assert "| 4 | bilstm_source | wordchar | -" not in text
    # the source-only model on all types (20) and, in its own line, on the source's types (40)
    assert "| 4 | bilstm_source | wordchar | 20.00 ± 0.00 | – | 20.00 (1 of 2) |" in text
    assert "| 4 | bilstm_source, on the source's types | wordchar | 40.00 ± 0.00 | – | 40.00 (1 of 2) |" in text
    assert "No results yet for row(s) 1, 5, 7, 10, 11." in text
    summary = (tmp_path / "study_summary.md").read_text()
    assert "| 8 | dapt_token | minilm | 4 (2 domains) | 59.00 | trf_target | 3.50 ± 0.58 | reproduced in direction | +2.00 | 63.72 (BERT-base-cased) |" in summary
    assert "| 9 | spacy_ner_sm_target | spacy_sm | 4 (2 domains) | 57.00 | – | – | – | – | – |" in summary
    png = (tmp_path / "study_f1.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    assert args.results == results


def test_report_without_results_names_the_option(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="--results"):
        report.study_report(results_dir=tmp_path / "empty")


def test_best_step_reads_the_f1_column_of_the_best_score():
    log = """E    #       LOSS TRANS...  LOSS CROSSNER  ENTS_F  ENTS_P  ENTS_R  SCORE
---  ------  -------------  -------------  ------  ------  ------  ------
  0       0           0.86         118.80    3.18    1.97    8.33    0.03
  1       2           2.26         199.22    5.26    5.00    5.56    0.05
  2       4           2.62         211.39    2.33    7.14    1.39    0.02
"""
    assert study.best_step(log) == (5.26, 2, 4)
    assert study.best_step("no table") == (None, None, None)
    # the score ties at two decimals: the later, better F1 is model-best
    tie = """E    #       LOSS NER  ENTS_F  ENTS_P  ENTS_R  SCORE
---  ------  --------  ------  ------  ------  ------
301    3800     32.62   49.70   52.43   47.24    0.50
326    4000    135.10   48.27   51.54   45.39    0.48
351    4200     48.99   49.72   52.23   47.44    0.50
376    4400     40.00   49.71   52.23   47.44    0.50
"""
    assert study.best_step(tie) == (49.72, 4200, 4400)


def test_adopt_takes_same_training_runs_of_the_pretrained_inputs_benchmark(tmp_path):
    source = tmp_path / "pretrained_inputs"
    source.mkdir()
    log = """E    #       LOSS TOK2VEC  LOSS CROSSNER  ENTS_F  ENTS_P  ENTS_R  SCORE
---  ------  -------------  -------------  ------  ------  ------  ------
  0     200           0.86         118.80   30.00   30.00   30.00    0.30
  1     400           2.26         199.22   41.50   40.00   43.00    0.42
  2     600           2.62         211.39   40.00   40.00   40.00    0.40
"""
    common = {"seed": 666, "train_seconds": 300.0, "dev_f": 0.415, "machine": "m", "date": "d",
              "test": {"ents_p": 0.5, "ents_r": 0.4, "ents_f": 0.4444}}
    train = ("/x/python -m spacy train /wt/configs/bilstm_joint.cfg --output /w/runs/joint__glove__666 "
             "--system.seed 666 --components.crossner.model.tok2vec.include_static_vectors true")
    records = {
        # written before best_step was recorded: read from the training log in the work directory
        "joint__glove__666": {"model": "joint", "inputs": "glove", "settings": {"max_steps": None}, **common,
                              "train_command": train},
        "target__none__666": {"model": "target", "inputs": "none", "settings": {}, "best_step": 800,
                              "last_step": 2400, "train_cpu_seconds": 290.0, **common,
                              "train_command": train.replace("bilstm_joint", "bilstm_target")},
        "target__both__666": {"model": "target", "inputs": "both", "settings": {}, **common, "train_command": train},
        "target__sm__666": {"model": "target", "inputs": "sm", "settings": {"sm_frozen": True}, **common,
                            "train_command": train},
        "target__glove__666": {"model": "target", "inputs": "glove", "settings": {"patience": 400},
                               "best_step": 200, **common, "train_command": train},
    }
    for name, record in records.items():
        (source / f"{name}.json").write_text(json.dumps(record))
    (tmp_path / "work" / "runs" / "joint__glove__666").mkdir(parents=True)
    (tmp_path / "work" / "runs" / "joint__glove__666" / "train.log").write_text(log)
    results = tmp_path / "study"
    argv = ["adopt", "--results", str(results), "--adopt-from", str(source), "--adopt-workdir", str(tmp_path / "work")]
    assert study.main(argv) == 0
    assert sorted(p.name for p in results.glob("*.json")) == [
        "bilstm_joint-ai-wordchar+glove-s666.json", "bilstm_target-ai-wordchar-s666.json"]
    joint = json.loads((results / "bilstm_joint-ai-wordchar+glove-s666.json").read_text())
    assert (joint["row"], joint["method"], joint["features"], joint["domain"], joint["seed"]) == (
        1, "bilstm_joint", "wordchar+glove", "ai", 666)
    assert joint["test"] == {"p": 50.0, "r": 40.0, "f": 44.44} and joint["dev_f"] == 41.5
    assert (joint["best_step"], joint["last_step"], joint["best_not_last"]) == (400, 600, True)
    assert joint["config"] == "configs/bilstm_joint.cfg" and joint["cpu_s"] is None
    assert joint["overrides"][:2] == ["--output", "/w/runs/joint__glove__666"]
    assert joint["adopted_from"].endswith("joint__glove__666.json")
    target = json.loads((results / "bilstm_target-ai-wordchar-s666.json").read_text())
    assert (target["best_step"], target["cpu_s"], target["config"]) == (800, 290.0, "configs/bilstm_target.cfg")
    # a second adopt keeps what is there
    (results / "bilstm_target-ai-wordchar-s666.json").write_text('{"kept": 1}')
    assert study.main(argv) == 0
    assert json.loads((results / "bilstm_target-ai-wordchar-s666.json").read_text()) == {"kept": 1}


def test_a_failed_training_says_how_it_ended():
    assert study.exit_reason(1) == "exit status 1"
    assert study.exit_reason(-9).startswith("killed by SIGKILL, e.g. by the kernel for lack of memory")
    assert study.exit_reason(-15) == "killed by SIGTERM"


def test_machine_name_names_the_gpu_of_a_gpu_run(monkeypatch):
    assert "cores" in study.machine_name(-1) and "GPU" not in study.machine_name(-1)
    monkeypatch.setattr(study, "cpu_model", lambda: "AMD EPYC")
    assert study.machine_name(-1).startswith("AMD EPYC, ")

    class Done:
        stdout = "NVIDIA H200\n"

    calls = []
    monkeypatch.setattr(study.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or Done())
    assert study.machine_name(0).startswith("NVIDIA H200 (GPU 0), ")
    assert calls[0][0] == "nvidia-smi" and calls[0][-1] == "0"

    def missing(cmd, **kw):
        raise FileNotFoundError(cmd[0])

    monkeypatch.setattr(study.subprocess, "run", missing)
    assert study.machine_name(1).startswith("GPU (name unknown) (GPU 1), ")


def test_a_gpu_run_records_its_device_and_the_gpu_flag_of_its_command(tmp_path, monkeypatch):
    args = args_for(tmp_path, "--gpu-id", "0")
    (run,) = [r for r in study.planned(study.parse(["plan", "--rows", "2", "--methods", "trf_target",
                                                    "--features", "minilm", "--seeds", "555"]))]
    meta = {"targs": ["configs/trf_target.cfg", "--output", "x"], "dev_f": 50.0, "step": 200, "last": 400,
            "wall": 1.0, "cpu": 1.0, "load": [0.0, 0.0, 0.0]}
    monkeypatch.setattr(study, "prepare", lambda run, args, env: {})
    monkeypatch.setattr(study, "train", lambda *a, **k: meta)
    monkeypatch.setattr(study, "evaluate", lambda *a, **k: {"p": 1.0, "r": 1.0, "f": 1.0})
    monkeypatch.setattr(study, "machine_name", lambda gpu_id: f"a GPU {gpu_id}")
    record = study.execute(run, args)
    assert record["device"] == "gpu0" and record["machine"] == "a GPU 0"
    # a model trained before its training date was recorded says so; then the date it was trained
    assert record["trained"] is None
    meta["date"] = "2026-11-20 10:00 UTC"
    assert study.execute(run, args)["trained"] == "2026-11-20 10:00 UTC"
    # the JSON names the stopping settings the run had (MiniLM's protocol: every 100, patience 400)
    assert (record["max_steps"], record["eval_frequency"], record["patience"]) == (20000, 100, 400)
    assert record["command"] == "python -m spacy train configs/trf_target.cfg --output x --gpu-id 0"
    args.gpu_id = -1
    record = study.execute(run, args)
    assert record["device"] == "cpu" and "--gpu-id" not in record["command"]


def test_gpu_runs_name_their_card_in_the_report(tmp_path):
    results = tmp_path / "study"
    results.mkdir()
    h200 = "NVIDIA H200 (GPU 0), x86_64, 16 cores"
    h100 = "NVIDIA H100 80GB HBM3 (GPU 0), x86_64, 16 cores"
    fake(results, "trf_target", "ai", 555, "minilm", 50.0)
    fake(results, "trf_target", "ai", 666, "minilm", 51.0, device="gpu0", machine=h200)
    fake(results, "trf_target", "music", 555, "minilm", 60.0, device="gpu0", machine=h100)
    fake(results, "trf_target", "music", 666, "minilm", 61.0, device="gpu0", machine="GPU (name unknown) (GPU 0), x86_64")
    assert report.study_report(results_dir=results) == 0
    text = (tmp_path / "study.md").read_text()
    assert ("| cpu: ai (555); gpu0: music (666); gpu0 (H100 80GB HBM3): music (555); "
            "gpu0 (H200): ai (666) |") in text
    assert "device(s): cpu, gpu0, gpu0 (H100 80GB HBM3), gpu0 (H200)." in (tmp_path / "study_summary.md").read_text()


def test_a_model_trained_before_is_reused_only_with_the_same_settings(tmp_path, monkeypatch):
    args, method, targs = run_args(tmp_path, "trf_source", "minilm")
    work = tmp_path / "work" / "out"
    work.mkdir(parents=True)
    # trained by an earlier invocation (another checkout: the config path differs, its name not)
    before = ["/elsewhere/configs/trf_pretrain.cfg", *targs[1:]]
    meta = {"targs": before, "dev_f": 91.0, "step": 1600, "last": 2000, "wall": 1.0, "cpu": 1.0, "load": [0, 0, 0]}
    (work / "train_meta.json").write_text(json.dumps(meta))
    assert study.train(method, args, "ai", 555, "minilm", work, {}) == meta
    # the same folder under another stopping rule is another model: a clear stop, nothing trained
    args.patience = 1600
    with pytest.raises(SystemExit) as stop:
        study.train(method, args, "ai", 555, "minilm", work, {})
    assert str(work) in str(stop.value)
    assert "--training.patience 400 then, 1600 now" in str(stop.value)
    assert "config" not in str(stop.value).split("(", 1)[1]
    # trained now: the record says when (what a later evaluation of the shared model reports)
    (work / "train_meta.json").unlink()

    class Trained:
        returncode, stdout, stderr = 0, "0 200 1.0 2.0 40.00 0.40\n0 400 0.5 1.0 45.00 0.45\n", ""

    monkeypatch.setattr(study, "timed", lambda cmd, env, log: (Trained(), 3.0, 2.0))
    monkeypatch.setattr(study, "utc_now", lambda: "2026-11-26 23:00 UTC")
    meta = study.train(method, args, "ai", 555, "minilm", work, {})
    assert (meta["step"], meta["last"], meta["date"]) == (400, 400, "2026-11-26 23:00 UTC")
    assert json.loads((work / "train_meta.json").read_text())["date"] == "2026-11-26 23:00 UTC"


def test_dates_are_written_in_utc_the_way_every_benchmark_report_writes_them():
    import datetime

    before = datetime.datetime.now(datetime.timezone.utc).replace(second=0, microsecond=0)
    written = study.utc_now()  # benchmarks/machine.py's, shared by the benchmark scripts
    after = datetime.datetime.now(datetime.timezone.utc)
    parsed = datetime.datetime.strptime(written, "%Y-%m-%d %H:%M UTC").replace(tzinfo=datetime.timezone.utc)
    assert before <= parsed <= after


def test_the_report_names_the_stopping_rule_each_run_had():
    minilm = {"method": "trf_target", "features": "minilm", "max_steps": 20000, "overrides": [
        "--output", "x", "--training.max_steps", "20000", "--training.eval_frequency", "100",
        "--training.patience", "400"]}
    # written before eval_frequency was recorded and without it in its overrides (adopted): the config's
    adopted = {"method": "bilstm_target", "features": "wordchar", "max_steps": 20000, "patience": 1600,
               "config": "configs/bilstm_target.cfg", "overrides": ["--output", "y"]}
    own_rule = {"method": "label_aware_source", "features": "minilm", "max_steps": 20000, "patience": None,
                "overrides": ["--output", "z", "--training.max_steps", "20000"]}
    assert report.stopping_used(minilm) == "at most 20000 steps, evaluated every 100 with patience 400"
    assert report.stopping_used(adopted) == "at most 20000 steps, evaluated every 200 (the config's) with patience 1600"
    assert report.stopping_used(own_rule) == "at most 20000 steps, the config's own evaluation and stopping rule"
    lines = report.stopping_lines([minilm, dict(minilm, method="trf_joint"), adopted])
    # the larger group first
    assert lines[2:4] == [
        "- at most 20000 steps, evaluated every 100 with patience 400: 2 runs, trf_joint (minilm), trf_target (minilm)",
        "- at most 20000 steps, evaluated every 200 (the config's) with patience 1600: 1 run, bilstm_target (wordchar)"]


# a stand-in for `study.py run --workers 0` of one run: writes the run's result JSON, or fails for
# the method moee_zero, after noting that it started
STAND_IN = """import json, sys, time
argv = sys.argv[1:]
value = lambda name: argv[argv.index(name) + 1]
method, domain, seed, features = value("--methods"), value("--domains"), value("--seeds"), value("--features")
open(value("--workdir") + "/started", "a").write(method + " " + seed + "\\n")
print("training", method, flush=True)
if method == "moee_zero":
    sys.exit("moee_zero: spacy train failed")
time.sleep(0.5)
out = value("--results") + f"/{method}-{domain}-{features}-s{seed}.json"
open(out, "w").write(json.dumps({"method": method, "argv": argv}))
"""


def test_run_hands_each_run_to_a_local_dask_cluster(tmp_path, monkeypatch):
    """`study.py run --workers 2`: one job per planned run without a result (its own command line
    with the shared options), two at a time on a local cluster; a failed run is named and the
    others kept; a second run skips those with a result."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    monkeypatch.setattr(study, "STUDY_SCRIPT", stand_in)
    (tmp_path / "work").mkdir()
    (tmp_path / "results").mkdir()
    argv = ["run", "--methods", "bilstm_target,bilstm_joint,moee_zero", "--domains", "ai", "--seeds", "555", "666",
            "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"), "--corpus",
            str(tmp_path / "corpus"), "--raw", str(tmp_path / "raw"), "--max-steps", "7", "--workers", "2"]
    (tmp_path / "results" / "bilstm_joint-ai-wordchar-s666.json").write_text("{}")  # done before
    assert study.main(argv) == 1
    results = sorted(p.name for p in (tmp_path / "results").glob("*.json"))
    assert results == ["bilstm_joint-ai-wordchar-s555.json", "bilstm_joint-ai-wordchar-s666.json",
                       "bilstm_target-ai-wordchar-s555.json", "bilstm_target-ai-wordchar-s666.json"]
    started = (tmp_path / "work" / "started").read_text().split("\n")
    assert sorted(filter(None, started)) == ["bilstm_joint 555", "bilstm_target 555", "bilstm_target 666",
                                              "moee_zero 555", "moee_zero 666"]
    job_argv = json.loads((tmp_path / "results" / "bilstm_target-ai-wordchar-s666.json").read_text())["argv"]
    assert job_argv[-10:] == ["--methods", "bilstm_target", "--domains", "ai", "--seeds", "666",
                              "--features", "wordchar", "--workers", "0"]
    assert "--max-steps" in job_argv and "--rows" not in job_argv and job_argv.count("--methods") == 1
    log = tmp_path / "work" / "logs" / "moee_zero-ai-wordchar-s555.log"
    assert "moee_zero: spacy train failed" in log.read_text()
    # the rerun has only the failed runs left
    (tmp_path / "work" / "started").unlink()
    assert study.main(argv) == 1
    assert sorted(filter(None, (tmp_path / "work" / "started").read_text().split("\n"))) == [
        "moee_zero 555", "moee_zero 666"]


def test_common_options_drop_the_selection_of_runs():
    argv = ["run", "--rows", "1", "3", "--features=minilm", "--max-steps", "5", "--with-baselines",
            "--workdir", "/w", "--scheduler", "tcp://x:1", "--gpu-id", "0"]
    assert study.common_options(argv) == ["--max-steps", "5", "--workdir", "/w", "--gpu-id", "0"]


def test_issue_47_rows_run_only_when_named(tmp_path):
    """Row 10 (issue 47's parts) is not in the default selection: the study of rows 1-9 stays what
    it was; naming the row or the method plans it, against its baseline."""
    default = {m for m, *_ in plan(args_for(tmp_path, "--features", "minilm", "--domains", "ai", "--seeds", "555"))}
    assert "trf_finetune" in default and "trf_finetune_tuned" not in default
    runs = plan(args_for(tmp_path, "--methods", "trf_finetune_tuned", "--features", "minilm", "--domains", "ai",
                         "music", "--seeds", "555"))
    assert runs == [("trf_finetune_tuned", "ai", 555, "minilm"), ("trf_finetune_tuned", "music", 555, "minilm")]
    # the row: the combined fine-tune and each of its changes on its own, mention replacement, the
    # shape features, and DAPT before pre-train -> fine-tune
    parts = ["trf_finetune_tuned", "trf_finetune_warmup", "trf_finetune_head_lr", "trf_finetune_layer_decay",
             "trf_finetune_mentions", "trf_finetune_shape", "dapt_finetune_span", "dapt_finetune_token"]
    runs = plan(args_for(tmp_path, "--rows", "10", "--features", "minilm", "--domains", "ai", "--seeds", "555"))
    assert sorted(m for m, *_ in runs) == sorted(parts)
    for name in parts:
        assert study.BY_NAME[name].baseline_of == "trf_finetune"
        assert study.BY_NAME[name].stage1.startswith("trf_source") and study.BY_NAME[name].init_from


def test_the_shape_features_have_a_stage_1_of_their_own_shared_by_the_targets(tmp_path):
    """trf_finetune_shape fine-tunes with trf_finetune's config from trf_source_shape (MiniLM +
    shapes on the source): one stage 1 per seed for every target, never trf_finetune's."""
    args = args_for(tmp_path, "--methods", "trf_finetune_shape", "--features", "minilm")
    method = study.BY_NAME["trf_finetune_shape"]
    assert method.config == "trf_finetune" and method.baseline_of == "trf_finetune"
    ai, music = (study.stage1_dir(args, method, 555, "minilm", d) for d in ("ai", "music"))
    assert ai == music != study.stage1_dir(args, study.BY_NAME["trf_finetune"], 555, "minilm", "ai")
    stage1 = study.config_path(study.BY_NAME[method.stage1], args, "minilm")
    assert stage1.name == "trf_pretrain_shape.cfg"
    assert study.study_configs.STUDY_CONFIGS["trf_pretrain_shape"].features == "transformer_shape"
