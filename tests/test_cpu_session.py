"""benchmarks/cpu_session.sh: the study's long CPU runs as a queue that survives lost work folders."""
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cpu_session.sh"
sys.path.insert(0, str(ROOT / "project" / "scripts"))
import study  # noqa: E402


def queue_lines(path: Path):
    return [line.split("#")[0].split() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def write_stub(folder: Path, run: str, plan: str = '    print("todo  run")') -> None:
    """python3 stood in for by a script: ``study.py plan ...`` runs ``plan``, ``study.py run ...``
    runs ``run`` (both Python, one level indented, with ``argv`` the script's arguments)."""
    (folder / "python3").write_text(f"#!{sys.executable}\nimport json, os, sys, time, uuid\nargv = sys.argv[1:]\n"
                                    f"if argv[1] == 'plan':\n{plan}\nelse:\n{run}\n")
    (folder / "python3").chmod(0o755)


def test_the_committed_queue_plans_the_runs_it_names(tmp_path):
    """Each line of benchmarks/cpu_queue.txt becomes one study.py command (DRY_RUN) that parses with
    study.py's own options and plans exactly that run, the placeholders replaced by paths."""
    env = dict(os.environ, DRY_RUN="1", STATE=str(tmp_path / "state"), GENERAL="/g/raw", DICTIONARY="/d/conll")
    out = subprocess.run(["bash", str(SCRIPT), "run"], env=env, capture_output=True, text=True, check=True).stdout
    commands = [shlex.split(line) for line in out.splitlines()]
    lines = queue_lines(ROOT / "benchmarks" / "cpu_queue.txt")
    assert len(commands) == len(lines) > 0
    for words, line in zip(commands, lines):
        assert words[:3] == ["python3", "project/scripts/study.py", "run"]
        assert "$" not in " ".join(words)
        args = study.parse(words[2:])
        assert args.workers == 0 and args.threads == 1
        assert args.results == ROOT / "project" / "study" / "results"
        assert str(args.workdir) == str(tmp_path / "state" / "work")
        (run,) = study.planned(args)
        assert study.run_id(run).startswith(line[0]) and (run["domain"], run["seed"]) == (line[1], int(line[2]))
        if "--raw-source" in words:
            assert args.raw_source == "select:/g/raw"
        if "--dictionary" in words:
            assert str(args.dictionary) == "/d/conll"
        if "--vectors" in words:
            assert str(args.vectors) == str(tmp_path / "state" / "vectors" / "glove50")


def test_run_skips_what_the_study_has_and_runs_the_rest_in_the_frozen_copy(tmp_path):
    """The real path (xargs, two at once), python3 stood in for by a stub that writes its argv and
    working folder: a line whose result exists (plan says done) is skipped; the others run once
    each in FROZEN, every option of their line passed on, comments and blank lines ignored."""
    state, frozen, stub, record = (tmp_path / name for name in ("state", "frozen", "bin", "argv"))
    for folder in (state / "corpus", state / "raw", frozen, stub, record):
        folder.mkdir(parents=True)
    queue = tmp_path / "queue.txt"
    queue.write_text("# a comment\n\ntrf_finetune ai 555 --features minilm  # done already\n"
                     "trf_finetune music 555 --features minilm\n"
                     "multi_cell_uda ai 666 --features wordchar --raw-sizes 100000 "
                     "--raw-source select:$GENERAL --dictionary $DICTIONARY\n")
    write_stub(stub, plan="""\
    done = argv[argv.index("--domains") + 1] == "ai" and argv[argv.index("--seeds") + 1] == "555"
    print(("done  " if done else "todo  ") + "run")""", run=f"""\
    open({str(record)!r} + "/" + uuid.uuid4().hex, "w").write(json.dumps([os.getcwd(), argv]))""")
    env = dict(os.environ, STATE=str(state), FROZEN=str(frozen), GENERAL="/g", DICTIONARY="/d",
               PATH=f"{stub}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(SCRIPT), "run", str(queue), "2"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("project/study/results has it, skipped") == 1
    ran = sorted((json.loads(path.read_text()) for path in record.iterdir()), key=lambda r: r[1])
    assert [cwd for cwd, _ in ran] == [str(frozen)] * 2
    argvs = [argv for _, argv in ran]
    assert argvs[0][argvs[0].index("--methods"):] == [
        "--methods", "multi_cell_uda", "--domains", "ai", "--seeds", "666", "--features", "wordchar",
        "--raw-sizes", "100000", "--raw-source", "select:/g", "--dictionary", "/d"]
    assert argvs[1][argvs[1].index("--methods"):] == [
        "--methods", "trf_finetune", "--domains", "music", "--seeds", "555", "--features", "minilm"]
    assert all(argv[:3] == ["project/scripts/study.py", "run", "--workers"] for argv in argvs)
    assert all(argv[argv.index("--results") + 1] == str(ROOT / "project" / "study" / "results") for argv in argvs)
    # each run's log is named by its line (options in a hash: the same run with other options apart)
    logs = sorted(path.name for path in (state / "logs").iterdir())
    assert len(logs) == 2 and logs[1] == "trf_finetune-music-s555-" + logs[1].split("-")[-1]


def test_two_runners_on_one_state_each_run_their_own_queue(tmp_path):
    """One runner per core on the same STATE: a second runner started while the first is busy does
    not rewrite the first's queue (a long one, more than xargs reads at once), each runs all of
    its own lines and nothing of the other's, and neither leaves its copy of the queue behind."""
    state, frozen, stub, record, gate = (tmp_path / name for name in ("state", "frozen", "bin", "argv", "gate"))
    for folder in (state / "corpus", state / "raw", frozen, stub, record):
        folder.mkdir(parents=True)
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("".join(f"trf_finetune_warmup ai {seed} --features minilm --max-steps 2000\n"
                             for seed in range(1000, 1100)))  # ~6.5 KB
    second.write_text("trf_finetune music 7 --features minilm\n")
    write_stub(stub, run=f"""\
    seed = argv[argv.index("--seeds") + 1]
    if seed == "1000":  # the first runner's first run waits until the second runner is done
        deadline = time.time() + 60
        while not os.path.exists({str(gate)!r}) and time.time() < deadline:
            time.sleep(0.05)
    open(os.path.join({str(record)!r}, argv[argv.index("--methods") + 1] + "-" + seed), "w").write("")""")
    env = dict(os.environ, STATE=str(state), FROZEN=str(frozen), GENERAL="/g", DICTIONARY="/d",
               PATH=f"{stub}:{os.environ['PATH']}")
    one = subprocess.Popen(["bash", str(SCRIPT), "run", str(first), "1"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    logs = state / "logs"
    for _ in range(600):  # until the first runner's first run has started
        if logs.is_dir() and any(logs.iterdir()):
            break
        subprocess.run(["sleep", "0.05"])
    two = subprocess.run(["bash", str(SCRIPT), "run", str(second), "1"], env=env, capture_output=True, text=True)
    gate.write_text("")
    out, _ = one.communicate(timeout=600)  # 200 stub starts: slow on a loaded machine
    assert one.returncode == 0 and two.returncode == 0, out + two.stdout + two.stderr
    assert sorted(path.name for path in record.iterdir()) == sorted(
        ["trf_finetune-7"] + [f"trf_finetune_warmup-{seed}" for seed in range(1000, 1100)])
    assert out.count(" started at ") == 100 and two.stdout.count(" started at ") == 1
    assert not list(state.glob("queue*"))

def test_until_starts_no_run_after_its_time_and_stops_none(tmp_path):
    """UNTIL: a line whose turn comes at or after that time is not started (said, the next `run`
    starts it), a run that began before it goes on to its end, a line done already is still
    reported as done; a bare HH:MM already past means tomorrow's, and a value that is not a time
    is refused by name."""
    state, frozen, stub, record = (tmp_path / name for name in ("state", "frozen", "bin", "argv"))
    for folder in (state / "corpus", state / "raw", frozen, stub, record):
        folder.mkdir(parents=True)
    queue = tmp_path / "queue.txt"
    queue.write_text("trf_finetune ai 555 --features minilm\ntrf_finetune music 555 --features minilm\n"
                     "trf_finetune politics 555 --features minilm\n")
    until = int(time.time()) + 10
    # the first run lasts past UNTIL; politics has its result already
    write_stub(stub, plan="""\
    print(("done  " if argv[argv.index("--domains") + 1] == "politics" else "todo  ") + "run")""", run=f"""\
    domain = argv[argv.index("--domains") + 1]
    while domain == "ai" and time.time() < {until} + 1:
        time.sleep(0.1)
    open(os.path.join({str(record)!r}, domain), "w").write("")""")
    env = dict(os.environ, STATE=str(state), FROZEN=str(frozen), GENERAL="/g", DICTIONARY="/d",
               PATH=f"{stub}:{os.environ['PATH']}", UNTIL=f"@{until}")
    proc = subprocess.run(["bash", str(SCRIPT), "run", str(queue), "1"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(path.name for path in record.iterdir()) == ["ai"]
    assert "trf_finetune ai 555 exit 0" in proc.stdout
    assert f"trf_finetune music 555 --features minilm: not started, past UNTIL=@{until}" in proc.stdout
    assert "trf_finetune politics 555 --features minilm: project/study/results has it, skipped" in proc.stdout
    # a bare HH:MM a minute ago is tomorrow's: nothing is held back
    earlier = time.strftime("%H:%M", time.gmtime(time.time() - 60))
    proc = subprocess.run(["bash", str(SCRIPT), "run", str(queue), "1"], env=dict(env, UNTIL=earlier),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "not started" not in proc.stdout, proc.stdout + proc.stderr
    assert sorted(path.name for path in record.iterdir()) == ["ai", "music"]
    bad = subprocess.run(["bash", str(SCRIPT), "run", str(queue), "1"], env=dict(env, UNTIL="half past two"),
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "UNTIL=half past two is not a time" in bad.stdout
    assert not list(state.glob("queue*"))


def test_a_runner_keeps_its_code_when_the_script_is_edited_under_it(tmp_path):
    """bash reads a script as it goes: a runner whose cpu_session.sh is edited (or pulled) during
    a long run must still end as the copy it started with says, not run whatever the new file
    holds at the old offset."""
    repo, state, frozen, stub, gate = (tmp_path / name for name in ("repo", "state", "frozen", "bin", "gate"))
    for folder in (repo / "benchmarks", repo / "project" / "study" / "results", state / "corpus", state / "raw",
                   frozen, stub):
        folder.mkdir(parents=True)
    script = repo / "benchmarks" / "cpu_session.sh"
    script.write_text(SCRIPT.read_text())
    (repo / "project" / "study" / "results" / "earlier.json").write_text("{}")
    queue = tmp_path / "queue.txt"
    queue.write_text("trf_finetune ai 555 --features minilm\n")
    write_stub(stub, run=f"""\
    deadline = time.time() + 60
    while not os.path.exists({str(gate)!r}) and time.time() < deadline:
        time.sleep(0.05)""")
    env = dict(os.environ, STATE=str(state), FROZEN=str(frozen), GENERAL="/g", DICTIONARY="/d",
               PATH=f"{stub}:{os.environ['PATH']}")
    runner = subprocess.Popen(["bash", str(script), "run", str(queue), "1"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    logs = state / "logs"
    for _ in range(1200):  # until the run has started
        if logs.is_dir() and any(logs.iterdir()):
            break
        time.sleep(0.05)
    # an edit that moves every later byte: the old offsets now fall inside other lines
    lines = SCRIPT.read_text().splitlines(keepends=True)
    script.write_text("".join(lines[:1]) + "# an edit made while the runner works\n" * 40 + "".join(lines[1:]))
    gate.write_text("")
    out, err = runner.communicate(timeout=600)
    assert runner.returncode == 0 and err == "", out + err
    assert out.count(" runs in the queue") == out.count(" started at ") == out.count("queue done") == 1, out
    assert "trf_finetune ai 555 exit 0" in out and "1 results in project/study/results" in out


def test_two_runners_started_together_share_one_frozen_worktree(tmp_path):
    """Both runners of a fresh session started at the same moment (no FROZEN): the first makes
    STATE/frozen, a worktree of HEAD, the other waits for it instead of failing on git's lock, and
    each runs its line there."""
    repo, state, stub, record = (tmp_path / name for name in ("repo", "state", "bin", "argv"))
    for folder in (repo / "benchmarks", state / "corpus", state / "raw", stub, record):
        folder.mkdir(parents=True)
    (repo / "benchmarks" / "cpu_session.sh").write_text(SCRIPT.read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run(git + command, check=True)
    write_stub(stub, run=f"""\
    name = argv[argv.index("--domains") + 1]
    open(os.path.join({str(record)!r}, name), "w").write(json.dumps(os.getcwd()))""")
    env = dict(os.environ, STATE=str(state), GENERAL="/g", DICTIONARY="/d", PATH=f"{stub}:{os.environ['PATH']}")
    env.pop("FROZEN", None)
    runners = []
    for domain in ("ai", "music"):
        queue = tmp_path / f"{domain}.txt"
        queue.write_text(f"trf_finetune {domain} 555 --features minilm\n")
        runners.append(subprocess.Popen(["bash", str(repo / "benchmarks" / "cpu_session.sh"), "run", str(queue), "1"],
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [runner.communicate(timeout=600)[0] for runner in runners]
    assert [runner.returncode for runner in runners] == [0, 0], outs
    assert {path.name: json.loads(path.read_text()) for path in record.iterdir()} == {
        "ai": str(state / "frozen"), "music": str(state / "frozen")}
    worktrees = subprocess.run(git + ["worktree", "list", "--porcelain"], capture_output=True, text=True,
                               check=True).stdout
    assert worktrees.count("worktree ") == 2 and f"worktree {state / 'frozen'}" in worktrees
    # a later commit: a runner still runs the frozen copy's code, and says so
    (repo / "README").write_text("later\n")
    for command in (["add", "-A"], ["commit", "-q", "-m", "later"]):
        subprocess.run(git + command, check=True)
    later = subprocess.run(["bash", str(repo / "benchmarks" / "cpu_session.sh"), "run", str(tmp_path / "ai.txt"), "1"],
                           env=env, capture_output=True, text=True, timeout=600)
    frozen_head = subprocess.run(["git", "-C", str(state / "frozen"), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    assert later.returncode == 0 and f"holds the code of {frozen_head}, not HEAD's" in later.stdout
    assert "holds the code of" not in "".join(outs)


def test_prepare_converts_each_domain_once_and_says_what_is_missing(tmp_path):
    data = tmp_path / "data"
    for domain, splits in (("news", ("train", "dev", "test")), ("ai", ("train", "test"))):
        (data / domain).mkdir(parents=True)
        for split in splits:
            (data / domain / f"{split}.txt").write_text("Hinton B-person\n")
    (data / "README").mkdir()  # a folder without train.txt is not a corpus
    env = dict(os.environ, DRY_RUN="1", STATE=str(tmp_path / "state"), DATA=str(data))
    out = subprocess.run(["bash", str(SCRIPT), "prepare"], env=env, capture_output=True, text=True, check=True).stdout
    commands = [line for line in out.splitlines() if line.startswith("python3")]
    assert sum("spacy_crossner convert " in line for line in commands) == 2
    raw = {line.split("--domain ")[1]: line for line in commands if "spacy_crossner raw-text " in line}
    assert set(raw) == {"news", "ai"}
    assert f"{data}/news/dev.txt" in raw["news"] and "dev.txt" not in raw["ai"]  # train+dev, what there is
    (vectors,) = [line for line in commands if "spacy_crossner vectors " in line]
    assert vectors.count("--prune-to") == 2
    # what exists already is kept
    (tmp_path / "state" / "corpus" / "ai").mkdir(parents=True)
    (tmp_path / "state" / "corpus" / "ai" / "test.spacy").write_text("")
    again = subprocess.run(["bash", str(SCRIPT), "prepare"], env=env, capture_output=True, text=True, check=True)
    assert sum("spacy_crossner convert " in line for line in again.stdout.splitlines()) == 1
    for bad in ({"DATA": ""}, {"DATA": str(tmp_path / "nowhere")}, {"DATA": str(tmp_path / "state")}):
        proc = subprocess.run(["bash", str(SCRIPT), "prepare"], env=dict(env, **bad), capture_output=True, text=True)
        assert proc.returncode == 2 and "DATA" in proc.stdout
    missing = subprocess.run(["bash", str(SCRIPT), "run"], env=dict(os.environ, STATE=str(tmp_path / "empty")),
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "run 'prepare' first" in missing.stdout
