"""project/scripts/study.py --raw-sizes (issue 47 part 3): the UDA and DAPT rows on selected
in-domain text of a stated size. Which runs a study plans and what they are named, the selected
text built once per domain and size by the real ``select-corpus`` from a tiny general corpus (the
training itself stood in for), the report's raw-text size section from hand-made results, and
benchmarks/gpu_session.sh's study.py commands checked against study.py's own options."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from spacy.tokens import DocBin

from util import make_doc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "project" / "scripts"))
import report  # noqa: E402
import study  # noqa: E402

AI_TRAIN = [("Neural networks learn representations with gradient descent .", [(0, 2, "algorithm")]),
            ("Support vector machines classify images of digits .", [(0, 3, "algorithm")]),
            ("Deep learning models translate text between languages .", [(0, 2, "field")])]
AI_DEV = [("Reinforcement learning agents play games with neural networks .", [(0, 2, "field")])]
AI_TEST = [("Convolutional networks recognise objects in photographs today .", [(0, 2, "algorithm")])]


def write_docs(path: Path, sentences) -> None:
    nlp = spacy.blank("en")
    db = DocBin(store_user_data=True)
    for text, ents in sentences:
        db.add(make_doc(nlp, text.split(), ents, "ai"))
    path.parent.mkdir(parents=True, exist_ok=True)
    db.to_disk(path)


def general_corpus(folder: Path) -> None:
    """A few hundred lines: machine-learning sentences among political ones, as JSONL and text;
    the AI dev and test sentences are among them (to be excluded)."""
    folder.mkdir()
    ml = [f"Neural networks with {n} layers learn representations by gradient descent on data ." for n in range(60)]
    politics = [f"The senate passed bill number {n} after a long debate in the chamber ." for n in range(240)]
    records = [{"id": i, "text": t} for i, t in enumerate(ml[:30] + politics[:120])]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf8")
    lines = ml[30:] + politics[120:] + [AI_DEV[0][0], AI_TEST[0][0]]
    (folder / "b.txt").write_text("\n".join(lines) + "\n", encoding="utf8")
    (folder / "README.md").write_text("not a corpus file\n")


def study_argv(tmp_path, *more):
    return ["--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"),
            "--corpus", str(tmp_path / "corpus"), "--raw", str(tmp_path / "raw"),
            "--dictionary", str(tmp_path / "dictionary"), *more]


def test_plan_names_the_runs_on_selected_text_apart(tmp_path, capsys):
    argv = study_argv(tmp_path, "--rows", "4", "5", "8", "--features", "wordchar", "minilm", "--domains", "ai",
                      "--seeds", "555", "--raw-sizes", "20000,100000", "--raw-source", "select:/data/raw")
    args = study.parse(["plan", *argv])
    ids = [study.run_id(r) for r in study.planned(args)]
    # the methods that read no raw text are planned as without the option: the same results
    assert ids[:2] == ["pgn_sda-ai-wordchar-s555", "bilstm_source-ai-wordchar-s555"]
    assert ids[2:] == [f"{m}-ai-{f}-s555-sel_raw_lexical_{n}" for m, f in
                       (("pgn_uda", "wordchar"), ("multi_cell_uda", "wordchar"), ("dapt_span", "minilm"),
                        ("dapt_token", "minilm")) for n in (20000, 100000)]
    # a run's JSON of today is not the result of a run on selected text
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "pgn_uda-ai-wordchar-s555.json").write_text("{}")
    assert study.main(["plan", *argv]) == 0
    printed = capsys.readouterr().out
    assert "todo  pgn_uda-ai-wordchar-s555-sel_raw_lexical_20000  (first: selected text " \
           "raw-ai-sel_raw_lexical_20000)" in printed
    assert "DAPT dapt_token-ai-e2-n0-b8-lr5e-05-L128-s42-sel_raw_lexical_100000" in printed
    # another scorer or source is another run
    other = study.parse(["plan", *argv[:-4], "--raw-sizes", "20000", "--raw-source", "select:/x/wiki.jsonl",
                         "--raw-scorer", "minilm"])
    assert study.run_id(study.planned(other)[-1]) == "dapt_token-ai-minilm-s555-sel_wiki_minilm_20000"
    # without the options: today's plan, unchanged
    today = study.parse(["plan", *argv[:-4]])
    assert [study.run_id(r) for r in study.planned(today)] == [
        "pgn_sda-ai-wordchar-s555", "bilstm_source-ai-wordchar-s555", "pgn_uda-ai-wordchar-s555",
        "multi_cell_uda-ai-wordchar-s555", "dapt_span-ai-minilm-s555", "dapt_token-ai-minilm-s555"]
    with pytest.raises(SystemExit, match="--raw-sizes needs --raw-source select:PATH"):
        study.parse(["plan", "--raw-sizes", "100"])
    with pytest.raises(SystemExit, match="--raw-source is only read with --raw-sizes"):
        study.parse(["plan", "--raw-source", "select:/data"])
    with pytest.raises(SystemExit, match="--raw-sizes: word-token counts above 0"):
        study.parse(["plan", "--raw-sizes", "0", "--raw-source", "select:/data"])


def test_other_dapt_settings_name_their_runs_apart(tmp_path):
    """--dapt-epochs 15 (or any --dapt-* off its default) is another DAPT: its runs, a stage 1 on
    its encoder and their results are named apart from the study's DAPT; other methods are not."""
    argv = study_argv(tmp_path, "--methods", "dapt_span", "dapt_finetune_span", "trf_target", "--features",
                      "minilm", "--domains", "ai", "--seeds", "555", "--raw-sizes", "100000",
                      "--raw-source", "select:/data/raw")
    default = study.parse(["plan", *argv])
    longer = study.parse(["plan", *argv, "--dapt-epochs", "15", "--dapt-lr", "1e-4"])
    assert sorted(study.run_id(r) for r in study.planned(default)) == [
        "dapt_finetune_span-ai-minilm-s555-sel_raw_lexical_100000", "dapt_span-ai-minilm-s555-sel_raw_lexical_100000",
        "trf_target-ai-minilm-s555"]
    assert sorted(study.run_id(r) for r in study.planned(longer)) == [
        "dapt_finetune_span-ai-minilm-s555-sel_raw_lexical_100000-dapt_e15-lr0.0001",
        "dapt_span-ai-minilm-s555-sel_raw_lexical_100000-dapt_e15-lr0.0001", "trf_target-ai-minilm-s555"]
    run = next(r for r in study.planned(longer) if r["method"].name == "dapt_finetune_span")
    stage1 = study.stage1_dir(longer, run["method"], 555, "minilm", "ai", 100000)
    assert stage1.name == "trf_source_dapt_span-ai-minilm-s555-sel_raw_lexical_100000-dapt_e15-lr0.0001"
    assert study.dapt_dir(longer, "ai", "span", 100000).name.startswith("dapt_span-ai-e15-n0-b8-lr0.0001-")
    assert study.dapt_variant(study.DAPT_DEFAULTS) == ""
    assert study.dapt_variant({**study.DAPT_DEFAULTS, "max_steps": 3000}) == "dapt_n3000"


def test_train_args_read_the_selected_text(tmp_path):
    (tmp_path / "dictionary").mkdir()
    args = study.parse(["run", *study_argv(tmp_path, "--raw-sizes", "500", "--raw-source", "select:/g/raw")])
    uda = study.train_args(study.BY_NAME["multi_cell_uda"], args, "ai", 555, "wordchar", tmp_path / "o", 500)
    assert uda[uda.index("--paths.target_raw") + 1] == str(tmp_path / "work" / "raw-ai-sel_raw_lexical_500" / "raw.txt")
    dapt = study.train_args(study.BY_NAME["dapt_span"], args, "ai", 555, "minilm", tmp_path / "o", 500)
    assert dapt[dapt.index("--paths.transformer") + 1].endswith("dapt_span-ai-e2-n0-b8-lr5e-05-L128-s42-sel_raw_lexical_500")
    # without a size: the --raw text, as today
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "ai.txt").write_text("x\n")
    uda = study.train_args(study.BY_NAME["multi_cell_uda"], args, "ai", 555, "wordchar", tmp_path / "o")
    assert uda[uda.index("--paths.target_raw") + 1] == str(tmp_path / "raw" / "ai.txt")


def test_run_selects_once_per_domain_and_size_and_names_the_text(tmp_path, monkeypatch):
    write_docs(tmp_path / "corpus" / "ai" / "train.spacy", AI_TRAIN)
    write_docs(tmp_path / "corpus" / "ai" / "dev.spacy", AI_DEV)
    write_docs(tmp_path / "corpus" / "ai" / "test.spacy", AI_TEST)
    (tmp_path / "raw").mkdir()
    own = "".join(text + "\n" for text, _ in AI_TRAIN + AI_DEV)
    (tmp_path / "raw" / "ai.txt").write_text(own, encoding="utf8")
    (tmp_path / "raw" / "conll2003.txt").write_text("EU rejects German call .\n", encoding="utf8")
    (tmp_path / "dictionary").mkdir()
    general_corpus(tmp_path / "general")
    real_timed, commands = study.timed, []

    class Trained:  # spaCy's training table: best at step 200 of 400
        returncode, stdout, stderr = 0, "0 200 1.0 2.0 40.00 0.40\n0 400 0.5 1.0 30.00 0.30\n", ""

    def timed(cmd, env, log):
        commands.append(cmd)
        if "select-corpus" in cmd:
            return real_timed(cmd, env, log)
        Path(cmd[cmd.index("--output") + 1]).mkdir(parents=True, exist_ok=True)
        return Trained(), 1.0, 1.0  # spacy train: not run

    monkeypatch.setattr(study, "timed", timed)
    monkeypatch.setattr(study, "evaluate", lambda *a, **k: {"p": 50.0, "r": 50.0, "f": 50.0})
    argv = ["run", *study_argv(tmp_path, "--methods", "pgn_uda", "multi_cell_uda", "--domains", "ai", "--seeds",
                               "555", "666", "--max-steps", "4", "--workers", "0", "--raw-sizes", "40", "120",
                               "--raw-source", f"select:{tmp_path / 'general'}")]
    assert study.main(argv) == 0
    selections = [c for c in commands if "select-corpus" in c]
    assert len(selections) == 2  # once per size, shared by both methods and both seeds
    trainings = [c for c in commands if "train" in c and "select-corpus" not in c]
    assert len(trainings) == 8
    results = sorted((tmp_path / "results").glob("*.json"))
    assert [p.name for p in results] == sorted(f"{m}-ai-wordchar-s{s}-sel_general_lexical_{n}.json"
                                               for m in ("pgn_uda", "multi_cell_uda") for s in (555, 666)
                                               for n in (40, 120))
    records = [json.loads(p.read_text()) for p in results]
    for size in (40, 120):
        raw = [r["raw_text"] for r in records if r["raw_text"]["size"] == size]
        assert len(raw) == 4 and len({r["sha256"] for r in raw}) == 1
        meta = raw[0]
        assert meta["scorer"] == "lexical" and meta["source"] == f"select:{tmp_path / 'general'}"
        text = Path(meta["path"]).read_text(encoding="utf8")
        assert text.startswith(own)  # the target's own train+dev text is kept
        assert meta["tokens"] == meta["own_tokens"] + meta["selected_tokens"]
        selected = text[len(own):].splitlines()
        assert len(selected) == meta["selected_lines"] > 0
        # the ranking prefers the machine-learning sentences; the dev and test sentences are excluded
        assert all("Neural networks" in line for line in selected)
        assert AI_DEV[0][0] not in text[len(own):] and AI_TEST[0][0] not in text
        for r in records:
            if r["raw_text"]["size"] == size:
                assert r["overrides"][r["overrides"].index("--paths.target_raw") + 1] == meta["path"]
    small, large = (next(r["raw_text"] for r in records if r["raw_text"]["size"] == n) for n in (40, 120))
    assert 0 < small["selected_tokens"] < large["selected_tokens"]
    # the folder was read as one corpus (both files, the JSONL's text field), once
    general = tmp_path / "work" / "general-general.txt"
    assert sum(1 for _ in general.open()) == 302
    # a second run: every run has its result, nothing is selected or trained again
    commands.clear()
    assert study.main(argv) == 0
    assert commands == []


def fake(results: Path, method, domain, seed, features, f, size=None, scorer="lexical", dapt=None):
    m = study.BY_NAME[method]
    data = {"row": m.row, "method": method, "baseline_of": m.baseline_of, "domain": domain, "seed": seed,
            "features": features, "test": {"p": f, "r": f, "f": f}, "dev_f": f, "best_step": 200,
            "last_step": 400, "best_not_last": True, "max_steps": 20000, "wall_s": 1.0, "cpu_s": 1.0,
            "device": "cpu", "config": "", "overrides": []}
    name = f"{method}-{domain}-{features}-s{seed}"
    if size:
        data["raw_text"] = {"source": "select:../shared/data/raw", "scorer": scorer, "size": size,
                            "selected_tokens": size + 7, "tokens": size + 1007, "sha256": f"{size:x}".ljust(64, "0")}
        name += f"-sel_raw_{scorer}_{size}"
    if dapt:
        data["dapt"] = dapt
        name += "-" + study.dapt_variant(dapt)
    (results / f"{name}.json").write_text(json.dumps(data))


def test_report_plots_f1_against_the_size_of_the_selected_text(tmp_path):
    results = tmp_path / "study"
    results.mkdir()
    for seed, noise in ((555, 0.0), (666, 1.0)):
        fake(results, "bilstm_source", "ai", seed, "wordchar", 40.0 + noise)
        fake(results, "pgn_uda", "ai", seed, "wordchar", 41.0)  # on the target's own text
        fake(results, "trf_target", "ai", seed, "minilm", 55.0 + noise)
        for size, gain in ((20000, 1.0), (100000, 3.0)):
            fake(results, "pgn_uda", "ai", seed, "wordchar", 40.0 + noise + gain, size)
            fake(results, "dapt_span", "ai", seed, "minilm", 55.0 + gain * (1 + noise), size)
    assert report.study_report(results_dir=results) == 0
    text = (tmp_path / "study_raw_size.md").read_text()
    assert ("| 4 | pgn_uda | wordchar | ai | own text only | – | 0 | – | 2 | 41.00 ± 0.00 | bilstm_source "
            "| 0.50 ± 0.71 | within noise |") in text
    assert ("| 4 | pgn_uda | wordchar | ai | select:../shared/data/raw | lexical | 100,000 | 100,007 (101,007) "
            "| 555, 666 | 43.50 ± 0.71 | bilstm_source | 3.00 ± 0.00 | reproduced in direction |") in text
    dapt_line = ("| 8 | dapt_span | minilm | ai | select:../shared/data/raw | lexical | 20,000 | 20,007 (21,007) "
                 "| 555, 666 | 56.50 ± 0.71 | trf_target | 1.00 ± 0.00 | reproduced in direction | 0 + 0 |")
    assert dapt_line in text
    assert "ai select:../shared/data/raw lexical 20,000: 4e2000000000" in text  # the text's SHA-256
    png = (tmp_path / "study_raw_size.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    # the main report compares the runs on the target's own text only, and points to the section
    study_md = (tmp_path / "study.md").read_text()
    assert "from 6 runs" in study_md
    assert "8 run(s) on selected in-domain text" in study_md and "[study_raw_size.md]" in study_md
    assert "dapt_span" not in (tmp_path / "study_summary.md").read_text()
    # a run with other DAPT settings is its own line, beside the study's, and not the "own text" line
    long_dapt = {**study.DAPT_DEFAULTS, "epochs": 15.0}
    fake(results, "dapt_span", "ai", 555, "minilm", 60.0, 20000, dapt=long_dapt)
    fake(results, "dapt_span", "ai", 777, "minilm", 61.0, dapt=long_dapt)  # on the target's own text
    assert report.study_report(results_dir=results) == 0
    text = (tmp_path / "study_raw_size.md").read_text()
    assert ("| 8 | dapt_span (dapt_e15) | minilm | ai | select:../shared/data/raw | lexical | 20,000 | 20,007 "
            "(21,007) | 555 | 60.00 (1 seed) | trf_target | 5.00 (1 seed) | too few seeds |") in text
    assert dapt_line in text  # the study's DAPT: unchanged
    assert "Not in these tables: 1 run(s) with other DAPT settings" in (tmp_path / "study.md").read_text()
    assert "dapt_span-ai-s777 (dapt_e15)" in (tmp_path / "study.md").read_text()
    for path in results.glob("*dapt_e15*.json"):
        path.unlink()
    # none left: the section says so, the plot is gone, study.md has no pointer
    for path in results.glob("*-sel_*.json"):
        path.unlink()
    assert report.study_report(results_dir=results) == 0
    assert "None yet: no result JSON with `raw_text`" in (tmp_path / "study_raw_size.md").read_text()
    assert not (tmp_path / "study_raw_size.png").exists()
    assert "selected in-domain text" not in (tmp_path / "study.md").read_text()


def test_report_costs_count_what_a_run_needed_before_it():
    """CPU minutes: the training, then the selection, DAPT, pseudo-labels and a stage 1 trained on
    a DAPT encoder (made for this target); a shared stage 1 (no DAPT) is not the run's cost."""
    dapt_finetune = {"cpu_s": 600.0, "raw_text": {"cpu_s": 60.0}, "dapt": {"cpu_s": 540.0},
                     "stage1": {"cpu_s": 2400.0}}
    assert report.run_cost(dapt_finetune) == (10.0, 50.0)
    selftrain = {"cpu_s": 1200.0, "raw_text": {"cpu_s": 30.0}, "pseudo": {"cpu_s": 90.0},
                 "stage1": {"cpu_s": 2400.0}}
    assert report.run_cost(selftrain) == (20.0, 2.0)
    assert report.run_cost({"raw_text": {}}) == (None, 0.0)
    assert report.format_cost([dapt_finetune, {**dapt_finetune, "cpu_s": 1200.0}]) == "15 + 50"
    assert report.format_cost([{"raw_text": {}}]) == "–"


def test_gpu_session_commands_are_study_commands(tmp_path):
    """benchmarks/gpu_session.sh's study.py lines (DRY_RUN) parse with study.py's own options and
    plan the runs the script says, in its order: issue 47's teachers, then its screens."""
    env = dict(os.environ, DRY_RUN="1", CORPUS="/c", RAW="/r", GENERAL="/g/raw", TMPDIR=str(tmp_path))
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "train"], env=env,
                         capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if "project/scripts/study.py" in line]
    # 4 teachers + 11 five-domain trf_finetune + 15 five-domain trf_finetune_shape + 4 DAPT of 15
    # epochs + 4 DAPT of 15 epochs then pre-train -> fine-tune + 2 tuned + 8 self-training + 8 DAPT
    # + 2 several sources + 20 single fine-tune changes + 4 DAPT then pre-train -> fine-tune
    assert len(lines) == 82
    planned = []
    for line in lines:
        words = shlex.split(line)
        assert words[:3] == ["python3", "project/scripts/study.py", "run"]
        args = study.parse(words[2:])
        assert args.gpu_id == 0 and args.workers == 0 and args.features == ["minilm"]
        (run,) = study.planned(args)
        planned.append((Path(args.results).name, study.run_id(run)))
        if run["method"].teacher:
            assert args.teacher_wait > 0  # started beside its teacher, it waits for it
    assert planned[:4] == [("rerun", f"trf_finetune-{d}-minilm-s{s}") for s in (555, 666) for d in ("ai", "music")]
    assert ("study", "trf_finetune_tuned-music-minilm-s666") in planned
    assert ("study", "trf_selftrain-ai-minilm-s666-sel_raw_lexical_100000") in planned
    assert ("study", "dapt_token-music-minilm-s666-sel_raw_lexical_100000") in planned
    assert ("study", "trf_selftrain_o-music-minilm-s666-sel_raw_lexical_100000") in planned
    # the long DAPT first: its own results, never taken for the study's two-epoch DAPT of step 5
    assert planned[4:15] == [("study", f"trf_finetune-{d}-minilm-s{s}") for s in (555, 666)
                             for d in ("literature", "politics", "science")] + [
        ("study", f"trf_finetune-{d}-minilm-s777") for d in ("ai", "music", "literature", "politics", "science")]
    # then the combination of part 5's keepers on five domains x three seeds
    assert planned[15:30] == [("study", f"trf_finetune_shape-{d}-minilm-s{s}") for s in (555, 666, 777)
                              for d in ("ai", "music", "literature", "politics", "science")]
    assert planned[30:34] == [("study", f"dapt_span-{d}-minilm-s{s}-sel_raw_lexical_100000-dapt_e15")
                            for s in (555, 666) for d in ("ai", "music")]
    # row 10 on the 15-epoch encoders right after them, named apart from the 2-epoch row 10 of the end
    assert planned[34:38] == [("study", f"dapt_finetune_span-{d}-minilm-s{s}-sel_raw_lexical_100000-dapt_e15")
                              for s in (555, 666) for d in ("ai", "music")]
    assert planned[57] == ("study", "trf_finetune_plus_others-music-minilm-s555")
    assert planned[-4:] == [("study", f"dapt_finetune_span-{d}-minilm-s{s}-sel_raw_lexical_100000")
                            for s in (555, 666) for d in ("ai", "music")]
    assert {run for _, run in planned[58:78]} == {f"trf_finetune_{part}-{d}-minilm-s{s}" for d in ("ai", "music")
                                                for s in (555, 666)
                                                for part in ("warmup", "head_lr", "layer_decay", "mentions", "shape")}
    int8 = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "int8"], env=env,
                          capture_output=True, text=True, check=True).stdout
    assert int8.startswith("python3 benchmarks/speed.py --int8 --study-workdir ")
    assert subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], env=env,
                          capture_output=True, text=True).returncode == 2


def test_gpu_session_passes_every_option_of_a_line_to_study(tmp_path):
    """The real `train` path (xargs, 12 at once), study.py stood in for by a python3 that writes its
    argv: each command is the dry run's, options after the seed included, none dropped or added."""
    env = dict(os.environ, CORPUS=str(tmp_path), RAW=str(tmp_path), GENERAL=str(tmp_path),
               TMPDIR=str(tmp_path / "tmp"), OUT=str(tmp_path / "out"))
    dry = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "train"], env=dict(env, DRY_RUN="1"),
                         capture_output=True, text=True, check=True).stdout
    expected = sorted(shlex.split(line)[1:] for line in dry.splitlines() if "project/scripts/study.py" in line)
    stub = tmp_path / "bin"
    stub.mkdir()
    record = tmp_path / "argv"
    record.mkdir()
    plans = tmp_path / "plans"
    plans.mkdir()
    # study.py plan (the check for a result the repository has) says "done" for trf_finetune_tuned
    (stub / "python3").write_text(f"""#!{sys.executable}
import json, sys, uuid
folder = {str(plans)!r} if sys.argv[2] == "plan" else {str(record)!r}
open(folder + "/" + uuid.uuid4().hex, "w").write(json.dumps(sys.argv[1:]))
if sys.argv[2] == "plan":
    method = sys.argv[sys.argv.index("--methods") + 1]
    print(("done  " if method == "trf_finetune_tuned" else "todo  ") + method)
""")
    (stub / "python3").chmod(0o755)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "train", "60"],
                          env=dict(env, PATH=f"{stub}:{env['PATH']}"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = sorted(json.loads(path.read_text()) for path in record.iterdir())
    tuned = [argv for argv in expected if argv[argv.index("--methods") + 1] == "trf_finetune_tuned"]
    assert len(tuned) == 2 and got == [argv for argv in expected if argv not in tuned]
    assert any("--dapt-epochs" in argv for argv in got) and len(got) == 80
    assert proc.stdout.count("project/study/results has it, skipped") == 2
    # every study line (not the teachers' reruns) asked first, against the repository's results
    asked = [json.loads(path.read_text()) for path in plans.iterdir()]
    assert len(asked) == 78
    assert all(argv[argv.index("--results") + 1] == "project/study/results" for argv in asked)
    assert sorted(argv[argv.index("--methods"):] for argv in asked) == sorted(
        argv[argv.index("--methods"):] for argv in expected if "/rerun" not in " ".join(argv))


def test_each_job_of_the_runner_plans_its_own_run(tmp_path, monkeypatch):
    """`study.py run --workers N --raw-sizes ...`: every job's command line (what the runner's
    workers run) plans exactly the run it stands for, sized or not."""
    import runner

    jobs = []
    monkeypatch.setattr(runner, "run_jobs", lambda given, **kw: jobs.extend(given) or [])
    argv = ["run", *study_argv(tmp_path, "--rows", "4", "--domains", "ai", "--seeds", "555", "666",
                               "--raw-sizes", "20000", "100000", "--raw-source", "select:/g/raw", "--workers", "2")]
    args = study.parse(argv)
    args.results.mkdir(parents=True)
    assert study.run_on_cluster(args) == 0
    assert sorted(job.name for job in jobs) == sorted(study.run_id(r) for r in study.planned(args))
    for job in jobs:
        (run,) = study.planned(study.parse(job.argv[2:]))
        assert study.run_id(run) == job.name


def test_dapt_finetune_stage_1_starts_from_the_targets_dapt_encoder(tmp_path, monkeypatch):
    """dapt_finetune_span: DAPT on the target's raw text (the selected text of a size) first, then
    a stage 1 on CoNLL-2003 whose transformer is that encoder (one per target, size and seed: the
    seeds share the DAPT encoder, not the stage 1), then the fine-tune from that stage 1."""
    for domain in ("ai", "music"):
        write_docs(tmp_path / "corpus" / domain / "train.spacy", AI_TRAIN)
        write_docs(tmp_path / "corpus" / domain / "dev.spacy", AI_DEV)
        write_docs(tmp_path / "corpus" / domain / "test.spacy", AI_TEST)
    (tmp_path / "raw").mkdir()
    for domain in ("ai", "music"):
        (tmp_path / "raw" / f"{domain}.txt").write_text("".join(t + "\n" for t, _ in AI_TRAIN), encoding="utf8")
    (tmp_path / "dictionary").mkdir()
    general_corpus(tmp_path / "general")
    real_timed, commands = study.timed, []

    class Done:
        returncode, stdout, stderr = 0, "0 200 1.0 2.0 40.00 0.40\n0 400 0.5 1.0 30.00 0.30\n", ""

    def timed(cmd, env, log):
        commands.append(cmd)
        if "select-corpus" in cmd:
            return real_timed(cmd, env, log)
        if "dapt" in cmd:
            out = Path(cmd[cmd.index("dapt") + 2])
            out.mkdir(parents=True)
            (out / "dapt_summary.json").write_text(json.dumps({
                "steps": 3, "epochs": 2, "loss_before": 10.5, "loss_after": 6.4, "loss_unigram": 6.8,
                "loss_context_free": 6.3}))
        else:
            Path(cmd[cmd.index("--output") + 1]).mkdir(parents=True, exist_ok=True)
        return Done(), 1.0, 1.0

    monkeypatch.setattr(study, "timed", timed)
    monkeypatch.setattr(study, "evaluate", lambda *a, **k: {"p": 50.0, "r": 50.0, "f": 50.0})
    argv = ["run", *study_argv(tmp_path, "--methods", "dapt_finetune_span", "--domains", "ai", "music",
                               "--features", "minilm", "--seeds", "555", "666", "--max-steps", "4", "--workers",
                               "0", "--raw-sizes", "120", "--raw-source", f"select:{tmp_path / 'general'}")]
    args = study.parse(argv)
    run = study.planned(args)[0]
    assert study.run_id(run) == "dapt_finetune_span-ai-minilm-s555-sel_general_lexical_120"
    assert [what.split()[0] for what, _ in study.needs(run, args)] == ["selected", "DAPT", "stage"]
    assert study.main(argv) == 0
    kinds = [("dapt" if "dapt" in c else "stage1" if "--paths.pretrained" not in c else "stage2")
             for c in commands if "select-corpus" not in c]
    assert kinds.count("dapt") == 2 and kinds.count("stage1") == 4 and kinds.count("stage2") == 4
    work = tmp_path / "work"
    dapt = {d: work / f"dapt_span-{d}-e2-n0-b8-lr5e-05-L128-s42-sel_general_lexical_120" for d in ("ai", "music")}
    # the DAPT record keeps the losses against which to read it
    meta = json.loads(dapt["ai"].with_suffix(".json").read_text())
    assert (meta["loss_after"], meta["loss_unigram"], meta["loss_context_free"]) == (6.4, 6.8, 6.3)
    stage1 = [c for c in commands if "--paths.source_train" in c]
    for domain in ("ai", "music"):
        for seed in (555, 666):
            first = work / f"trf_source_dapt_span-{domain}-minilm-s{seed}-sel_general_lexical_120"
            (cmd,) = [c for c in stage1 if c[c.index("--output") + 1] == str(first)]
            assert cmd[cmd.index("--paths.transformer") + 1] == str(dapt[domain])
            assert Path(cmd[cmd.index("spacy") + 2]).name == "trf_pretrain.cfg"
            # each stage comes after the DAPT it reads
            assert commands.index(cmd) > min(i for i, c in enumerate(commands) if "dapt" in c and str(dapt[domain]) in c)
            record = json.loads((tmp_path / "results" / f"dapt_finetune_span-{domain}-minilm-s{seed}-"
                                 "sel_general_lexical_120.json").read_text())
            assert record["stage1"]["model"] == str(first / "model-best")
            assert record["overrides"][record["overrides"].index("--paths.pretrained") + 1] == str(first / "model-best")
            assert record["dapt"]["model"] == str(dapt[domain])
    assert study.BY_NAME["dapt_finetune_span"].baseline_of == "trf_finetune"
