"""Annotating a corpus in shards on a Dask cluster: many processes, many machines.

``python -m spacy_crossner annotate MODEL INPUT OUTPUT_DIR --scheduler ADDRESS|local``

The client cuts the inputs (``.spacy`` DocBins, ``.txt`` with one doc per line, ``.jsonl`` with a
``"text"`` field and an optional ``"domain"``) into shards of ``shard_size`` docs, each within one
input file, and sends each shard's docs to the cluster. A worker loads the pipeline once (a path
or an installed package name, see :func:`load_pipeline`), runs ``nlp.pipe`` over the shard and
returns a DocBin with user data, so every doc keeps ``doc._.domain`` and the entity probabilities
in ``doc.spans["crossner"].attrs["scores"]``. The client writes ``OUTPUT_DIR/<shard>.spacy``
under a temporary name and renames it when complete, then writes ``<shard>.done.json``: the
fingerprint of the shard's input (its texts or docs and the ``--domain`` given), the model's
fingerprint (every file of the pipeline directory) and the output's size and SHA-256. A rerun
skips a shard only when all of these still match, so a truncated or deleted output, or an input
record edited since, is annotated again; shards annotated by another model are refused (use
``redo_all`` to annotate them again, or ``mix_models`` to keep them). A shard that fails is
reported by name, with its input file and doc range; the other shards are still written.
``OUTPUT_DIR/shards.json`` records the plan, and a rerun with another plan (other inputs or
``shard_size``) is refused rather than mixing two shardings.

Only the workers need the pipeline; input and output stay on the client, so the cluster needs no
shared file system. Dask is imported only here (``pip install "spacy_crossner[distributed]"``).
"""
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

from .docbin import msgpack_hooks_collected_once
from .domains import get_domain, set_domain

SUFFIXES = (".spacy", ".txt", ".jsonl")
MANIFEST = "shards.json"
DONE_SUFFIX = ".done.json"
# Shard records: a text and its domain (None: the component's target_domain).
TextRecord = Tuple[str, Optional[str]]


class AnnotateError(ValueError):
    """A user error (missing input, bad option, unreadable file) or failed shards."""


@dataclass
class Shard:
    """Docs ``start``..``stop`` (0-based, stop excluded) of one input file."""

    name: str
    path: str
    start: int
    stop: int


@dataclass
class AnnotateSummary:
    output_dir: str
    shards: int
    done: int
    skipped: int
    failed: List[str] = field(default_factory=list)
    redone: int = 0  # shards whose earlier output was stale, incomplete or unverifiable
    mixed: int = 0  # shards of another model kept (mix_models)
    docs: int = 0
    words: int = 0
    seconds: float = 0.0

    @property
    def words_per_second(self) -> float:
        return self.words / self.seconds if self.seconds else 0.0


# -- inputs -----------------------------------------------------------------------------------


def input_files(path: Union[str, Path]) -> List[Path]:
    """The ``.spacy``, ``.txt`` and ``.jsonl`` files of a file or folder, sorted."""
    path = Path(path)
    if not path.exists():
        raise AnnotateError(f"Input {path} does not exist")
    if path.is_file():
        if path.suffix not in SUFFIXES:
            raise AnnotateError(
                f"Input {path}: unknown suffix '{path.suffix}' (expected {', '.join(SUFFIXES)})"
            )
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        raise AnnotateError(f"Input folder {path} holds no {', '.join(SUFFIXES)} file")
    return files


def _jsonl_records(path: Path) -> Iterator[TextRecord]:
    try:
        yield from _jsonl_lines(path)
    except UnicodeDecodeError as err:
        raise AnnotateError(f"{path}: not UTF-8 text ({err}); save it as UTF-8") from None


def _jsonl_lines(path: Path) -> Iterator[TextRecord]:
    # utf-8-sig: a BOM (Windows editors write one) is not part of the first record
    with path.open(encoding="utf-8-sig") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as err:
                raise AnnotateError(f"{path} line {i}: not JSON ({err})") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
                raise AnnotateError(f'{path} line {i}: no "text" string field')
            domain = entry.get("domain")
            if domain is not None and not isinstance(domain, str):
                raise AnnotateError(f'{path} line {i}: "domain" is not a string')
            yield entry["text"], domain


def _txt_records(path: Path) -> Iterator[TextRecord]:
    try:
        with path.open(encoding="utf-8-sig") as f:
            for line in f:
                yield line.rstrip("\n"), None
    except UnicodeDecodeError as err:
        raise AnnotateError(f"{path}: not UTF-8 text ({err})") from None


def _read_docbin(path: Path) -> List[Doc]:
    try:
        docbin = DocBin().from_disk(path)
        with msgpack_hooks_collected_once():
            return list(docbin.get_docs(Vocab()))
    except Exception as err:  # DocBin raises several types for a file that is not a DocBin
        raise AnnotateError(f"{path}: not a readable .spacy DocBin ({err})") from None


def _records(path: Path) -> List[Any]:
    if path.suffix == ".spacy":
        return _read_docbin(path)
    if path.suffix == ".jsonl":
        return list(_jsonl_records(path))
    return list(_txt_records(path))


def records_fingerprint(records: List[Any], domain: Optional[str]) -> str:
    """SHA-256 of a shard's input: its (text, domain) records or its docs (text, tokens,
    annotation and domain),
    and the ``--domain`` given for docs without one (it changes what the model does)."""
    digest = hashlib.sha256(json.dumps(["domain", domain]).encode("utf8"))
    for record in records:
        if isinstance(record, Doc):
            # Doc.to_bytes lists strings in set order, which varies between processes
            content = [record.to_json(), get_domain(record)]
            digest.update(json.dumps(content, sort_keys=True, ensure_ascii=False).encode("utf8"))
        else:
            digest.update(json.dumps(list(record), ensure_ascii=False).encode("utf8"))
        digest.update(b"\0")
    return digest.hexdigest()


def plan_shards(
    files: List[Path], shard_size: int, root: Optional[Path] = None, domain: Optional[str] = None,
    fingerprints: Optional[Dict[str, str]] = None,
) -> List[Shard]:
    """Shards of at most ``shard_size`` docs, each within one file, named after the file.

    fingerprints (Optional[Dict[str, str]]): if given, filled with each shard's input
        fingerprint (see :func:`records_fingerprint`), by shard name.
    """
    if shard_size < 1:
        raise AnnotateError(f"--shard-size must be at least 1, got {shard_size}")
    shards = []
    for path in files:
        rel = path.relative_to(root) if root is not None else Path(path.name)
        stem = "__".join(rel.parts).replace(" ", "_")
        records = _records(path)
        n = len(records)
        for i, start in enumerate(range(0, n, shard_size)):
            shard = Shard(f"{stem}.{i:05d}", str(path), start, min(start + shard_size, n))
            shards.append(shard)
            if fingerprints is not None:
                fingerprints[shard.name] = records_fingerprint(records[shard.start:shard.stop], domain)
    return shards


def model_fingerprint(model: str) -> Optional[str]:
    """SHA-256 of every file of a pipeline directory (or of an installed pipeline package's
    folder): its meta, config and weights. None when the client cannot find the pipeline (a
    package installed on the workers only): the workers' fingerprint is used then."""
    path = Path(model)
    if not path.is_dir():
        try:
            path = package_dir(model)
        except AnnotateError:
            return None
        # spacy.load reads the folder with the config (name-version/), as nlp.path on a worker
        configs = sorted(path.glob("*/config.cfg"))
        path = configs[0].parent if configs else path
    return dir_fingerprint(path)


def package_dir(name: str) -> Path:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name.replace("-", "_"))
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise AnnotateError(f"{name}: no pipeline folder or installed package of that name")
    return Path(list(spec.submodule_search_locations)[0])


def dir_fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(file.relative_to(path).as_posix()).encode("utf8") + b"\0")
        digest.update(_file_sha256(file).encode("ascii"))
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Reader:
    """The docs of one shard; keeps the last file's records, as shards come in file order."""

    def __init__(self) -> None:
        self.path: Optional[str] = None
        self.records: List[Any] = []

    def payload(self, shard: Shard, domain: Optional[str]) -> Tuple[str, Any, str]:
        """(kind, data, input fingerprint) of a shard, read now: the fingerprint is that of what
        is sent, even if the file changed since planning."""
        if shard.path != self.path:
            self.records = _records(Path(shard.path))
            self.path = shard.path
        part = self.records[shard.start:shard.stop]
        fingerprint = records_fingerprint(part, domain)
        if Path(shard.path).suffix == ".spacy":
            if domain is not None:
                for doc in part:
                    if get_domain(doc) is None:
                        set_domain(doc, domain)
            return "docbin", DocBin(docs=part, store_user_data=True).to_bytes(), fingerprint
        return "texts", [(text, own or domain) for text, own in part], fingerprint


# -- workers ----------------------------------------------------------------------------------

_PIPELINES: Dict[Tuple[str, int], Any] = {}
_LOCK = threading.Lock()


def load_pipeline(model: str, gpu_id: int = -1):
    """The pipeline ``model`` (a path or an installed package name), loaded once per process."""
    with _LOCK:
        key = (model, gpu_id)
        if key not in _PIPELINES:
            import spacy

            if gpu_id >= 0:
                spacy.require_gpu(gpu_id)
            _PIPELINES[key] = spacy.load(model)
        return _PIPELINES[key]


def worker_ready(model: str, gpu_id: int = -1) -> Tuple[str, Optional[str]]:
    """Load the pipeline on a worker before the shards arrive; returns its pipe names and the
    fingerprint of the folder it was loaded from (None if not from a folder)."""
    nlp = load_pipeline(model, gpu_id)
    path = getattr(nlp, "path", None)
    return ",".join(nlp.pipe_names), dir_fingerprint(Path(path)) if path else None


def annotate_shard(model: str, kind: str, data: Any, batch_size: int, gpu_id: int = -1) -> Tuple[bytes, int, int]:
    """Run the pipeline over one shard's docs.

    kind (str): "docbin" (``data`` is DocBin bytes) or "texts" (``data`` is (text, domain) pairs).
    Returns the annotated docs as DocBin bytes (with user data), the doc and the word count.
    """
    nlp = load_pipeline(model, gpu_id)
    if gpu_id >= 0:
        # thinc's current ops and the current CUDA device are per thread: a worker running
        # shards in several threads must select the GPU in each (not only where it loaded)
        import spacy

        spacy.require_gpu(gpu_id)
    if kind == "docbin":
        with msgpack_hooks_collected_once():
            docs = list(DocBin().from_bytes(data).get_docs(nlp.vocab))
    else:
        docs = []
        for text, domain in data:
            doc = nlp.make_doc(text)
            set_domain(doc, domain)
            docs.append(doc)
    out = list(nlp.pipe(docs, batch_size=batch_size))
    return DocBin(docs=out, store_user_data=True).to_bytes(), len(out), sum(len(d) for d in out)


# -- the client -------------------------------------------------------------------------------


def _resolve_model(model: Union[str, Path]) -> str:
    # A local path is sent as an absolute path: workers may run in another folder.
    path = Path(model)
    return str(path.resolve()) if path.exists() else str(model)


def _check_manifest(output_dir: Path, plan: Dict[str, Any]) -> None:
    manifest = output_dir / MANIFEST
    if manifest.exists():
        old = json.loads(manifest.read_text(encoding="utf8"))
        if old.get("shards") != plan["shards"]:
            raise AnnotateError(
                f"{output_dir} holds the shards of another plan ({manifest}: other inputs or "
                "--shard-size); use a new output folder or the same inputs and --shard-size"
            )
        return
    stray = sorted(p.name for p in output_dir.glob("*.spacy"))
    if stray:
        raise AnnotateError(f"{output_dir} already holds .spacy files ({stray[0]}, ...) and no {MANIFEST}")
    tmp = manifest.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(plan, indent=2), encoding="utf8")
    os.replace(tmp, manifest)


def _done_path(output_dir: Path, name: str) -> Path:
    return output_dir / f"{name}{DONE_SUFFIX}"


def shard_state(output_dir: Path, name: str, fingerprint: str) -> Tuple[str, Optional[str]]:
    """Whether a shard's output can be kept: ("done", model fingerprint) when its output is
    complete (size and SHA-256 as recorded) and was made from this input; ("missing", None),
    ("incomplete", None) or ("stale", None) otherwise."""
    final = output_dir / f"{name}.spacy"
    if not final.exists():
        return "missing", None
    try:
        record = json.loads(_done_path(output_dir, name).read_text(encoding="utf8"))
        size, sha, made_from, model = record["bytes"], record["sha256"], record["input"], record["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return "incomplete", None  # no record: interrupted, or written by an older version
    if final.stat().st_size != size or _file_sha256(final) != sha:
        return "incomplete", None
    if made_from != fingerprint:
        return "stale", None
    return "done", model


def _write_shard(output_dir: Path, name: str, data: bytes, record: Dict[str, Any]) -> None:
    """The shard's DocBin, then its record: a shard is done only once both are in place."""
    done = _done_path(output_dir, name)
    if done.exists():
        done.unlink()
    final = output_dir / f"{name}.spacy"
    tmp = output_dir / f".{name}.spacy.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, final)
    record = dict(record, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    tmp_done = output_dir / f".{name}.done.tmp"
    tmp_done.write_text(json.dumps(record), encoding="utf8")
    os.replace(tmp_done, done)


def _select_todo(shards: List[Shard], fingerprints: Dict[str, str], output_dir: Path,
                 model: str, model_fp: str, redo_all: bool, mix_models: bool,
                 summary: "AnnotateSummary") -> List[Shard]:
    """The shards to annotate; refuses to mix models unless told to."""
    todo: List[Shard] = []
    others: List[str] = []
    for shard in shards:
        state, made_by = shard_state(output_dir, shard.name, fingerprints[shard.name])
        if state == "done" and made_by != model_fp and not redo_all:
            if not mix_models:
                others.append(shard.name)
                continue
            summary.mixed += 1
        if state == "done" and not redo_all:
            summary.skipped += 1
            continue
        if state in ("incomplete", "stale") or (state == "done" and redo_all):
            summary.redone += 1
        todo.append(shard)
    if others:
        raise AnnotateError(
            f"{output_dir} holds {len(others)} shard(s) ({others[0]}, ...) annotated with another "
            f"model than {model} (its files changed, or another pipeline was given): pass "
            "--redo-all to annotate every shard again with this model, --mix-models to keep them "
            "and annotate only the rest with this one, or use a new output folder"
        )
    return todo


def _error_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()


def annotate(
    *,
    model: Union[str, Path],
    inputs: Union[str, Path],
    output_dir: Union[str, Path],
    scheduler: str = "local",
    workers: Optional[int] = None,
    shard_size: int = 1000,
    batch_size: int = 64,
    domain: Optional[str] = None,
    gpu_id: int = -1,
    progress: Optional[bool] = None,
    redo_all: bool = False,
    mix_models: bool = False,
) -> AnnotateSummary:
    """Annotate a corpus in shards on a Dask cluster, one output DocBin per shard.

    model (Union[str, Path]): a pipeline directory or an installed pipeline package's name,
        loadable by ``spacy.load`` on every worker.
    inputs (Union[str, Path]): a ``.spacy``, ``.txt`` (one doc per line) or ``.jsonl`` (``"text"``
        and optional ``"domain"``) file, or a folder searched for them.
    output_dir (Union[str, Path]): where ``<shard>.spacy`` files and ``shards.json`` are written.
    scheduler (str): a Dask scheduler address (``tcp://host:8786``), or "local" to start a
        cluster of ``workers`` processes on this machine (loopback only).
    workers (Optional[int]): worker processes of the local cluster (default 2); only with "local".
    shard_size (int): docs per shard (the unit of work, of output files and of reruns).
    batch_size (int): ``nlp.pipe`` batch size on the workers.
    domain (Optional[str]): ``doc._.domain`` of docs without one (text lines, JSONL records
        without "domain", DocBin docs without a domain); None: the component's target_domain.
    gpu_id (int): GPU a worker uses (-1: CPU).
    progress (Optional[bool]): show a progress bar (None: when writing to a terminal).
    redo_all (bool): annotate every shard again, finished ones included.
    mix_models (bool): keep finished shards annotated by another model (or another version of
        the pipeline's files) and annotate only the others; by default that is an error.
    A finished shard is skipped only if its output is complete and its input unchanged (see
    :func:`shard_state`); others are annotated again and counted in ``summary.redone``.
    Raises AnnotateError for user errors and, after the other shards were written, for failed
    shards (naming each one, its input file and doc range, and the error).
    """
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise AnnotateError(
            'annotate needs Dask distributed: pip install "spacy_crossner[distributed]"'
        ) from None
    from tqdm import tqdm

    inputs = Path(inputs)
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise AnnotateError(f"Output {output_dir} is a file, not a folder")
    if scheduler != "local" and workers is not None:
        raise AnnotateError("--workers sets the size of a local cluster: use it with --scheduler local only")
    workers = 2 if workers is None else workers
    if workers < 1:
        raise AnnotateError(f"--workers must be at least 1, got {workers}")
    if batch_size < 1:
        raise AnnotateError(f"--batch-size must be at least 1, got {batch_size}")
    if redo_all and mix_models:
        raise AnnotateError("--redo-all annotates every shard again, --mix-models keeps old ones: give one")
    if inputs.is_dir() and output_dir.resolve().is_relative_to(inputs.resolve()):
        raise AnnotateError(
            f"Output {output_dir} is inside the input folder {inputs}: its shards would be read as "
            "input by the next run; choose an output folder outside it"
        )
    files = input_files(inputs)
    fingerprints: Dict[str, str] = {}
    shards = plan_shards(files, shard_size, root=inputs if inputs.is_dir() else None,
                         domain=domain, fingerprints=fingerprints)
    if not shards:
        raise AnnotateError(
            f"Input {inputs} holds no docs ({', '.join(str(f) for f in files[:3])} "
            f"{'are' if len(files) > 1 else 'is'} empty): nothing to annotate"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    plan = {"inputs": str(inputs.resolve()), "shard_size": shard_size, "shards": [asdict(s) for s in shards]}
    _check_manifest(output_dir, plan)
    summary = AnnotateSummary(str(output_dir), len(shards), 0, 0)
    model = _resolve_model(model)
    model_fp = model_fingerprint(model)
    if model_fp is not None:
        todo = _select_todo(shards, fingerprints, output_dir, model, model_fp, redo_all,
                            mix_models, summary)
        if not todo:
            return summary

    cluster = None
    try:
        if scheduler == "local":
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=None,
                                   silence_logs=logging.ERROR)
            client = Client(cluster)
        else:
            try:
                client = Client(scheduler, timeout="30s")
            except OSError as err:
                raise AnnotateError(f"Cannot reach the Dask scheduler at {scheduler}: {err}") from None
        with client:
            worker_fp = _load_on_workers(client, model, gpu_id)
            if model_fp is None:  # a package installed on the workers only
                model_fp = worker_fp or f"name:{model}"
                todo = _select_todo(shards, fingerprints, output_dir, model, model_fp, redo_all,
                                    mix_models, summary)
            start = time.perf_counter()
            _run(client, as_completed, tqdm, todo, output_dir, model, model_fp, domain,
                 batch_size, gpu_id, workers, summary, progress)
            summary.seconds = time.perf_counter() - start
    finally:
        if cluster is not None:
            cluster.close()
    if summary.failed:
        raise AnnotateError(
            f"{len(summary.failed)} of {len(todo)} shards failed (the other {summary.done} are in "
            f"{output_dir}; rerun the same command to retry the failed ones):\n"
            + "\n".join(summary.failed)
        )
    return summary


def _load_on_workers(client, model: str, gpu_id: int) -> Optional[str]:
    """Load the pipeline on every worker, so a model no worker can load fails once, clearly.
    Returns the fingerprint of the pipeline folder the workers loaded (see
    :func:`model_fingerprint`); workers that load different files are an error."""
    addresses = list(client.nthreads())
    if not addresses:
        raise AnnotateError("The Dask cluster has no workers")
    futures = {a: client.submit(worker_ready, model, gpu_id, workers=[a], allow_other_workers=False,
                                pure=False, key=f"load-pipeline-{a}") for a in addresses}
    found: Dict[Optional[str], str] = {}
    for address, future in futures.items():
        try:
            _, fingerprint = future.result()
        except Exception as err:
            raise AnnotateError(
                f"Worker {address} cannot load the pipeline {model} ({_error_line(err)}): give a "
                "path every worker can read, or install the packaged pipeline on the workers"
            ) from None
        found.setdefault(fingerprint, address)
    if len(found) > 1:
        raise AnnotateError(
            f"The workers load different files as {model} (e.g. {', '.join(found.values())}): "
            "install the same pipeline version on every worker"
        )
    return next(iter(found))


def _run(client, as_completed, tqdm, todo: List[Shard], output_dir: Path, model: str,
         model_fp: str, domain: Optional[str], batch_size: int, gpu_id: int, workers: int,
         summary: AnnotateSummary, progress: Optional[bool]) -> None:
    """Submit the shards with a bounded number in flight (the client reads each shard's input
    only when it is submitted) and write each result as it arrives."""
    reader = _Reader()
    pending = iter(todo)
    in_flight = 2 * sum(client.nthreads().values())
    owners: Dict[str, Tuple[Shard, str]] = {}

    def submit_next(queue) -> bool:
        shard = next(pending, None)
        if shard is None:
            return False
        kind, data, fingerprint = reader.payload(shard, domain)
        future = client.submit(annotate_shard, model, kind, data, batch_size, gpu_id,
                               key=f"annotate-{shard.name}-{time.time_ns()}", pure=False)
        owners[future.key] = (shard, fingerprint)
        queue.add(future)
        return True

    queue = as_completed()
    for _ in range(in_flight):
        if not submit_next(queue):
            break
    bar = tqdm(total=len(todo), unit="shard", disable=None if progress is None else not progress)
    for future in queue:
        shard, fingerprint = owners.pop(future.key)
        try:
            data, n_docs, n_words = future.result()
        except Exception as err:
            summary.failed.append(
                f"shard {shard.name} ({shard.path}, docs {shard.start}-{shard.stop - 1}): "
                f"{_error_line(err)}"
            )
        else:
            _write_shard(output_dir, shard.name, data,
                         {"input": fingerprint, "model": model_fp, "model_name": model, "docs": n_docs})
            summary.done += 1
            summary.docs += n_docs
            summary.words += n_words
        future.release()
        bar.update(1)
        bar.set_postfix(words=summary.words, failed=len(summary.failed))
        submit_next(queue)
    bar.close()


def read_output(output_dir: Union[str, Path], vocab: Vocab) -> List[Doc]:
    """The annotated docs of an output folder, in input order (the order of ``shards.json``).
    A missing, incomplete or unreadable shard is an error naming its file."""
    output_dir = Path(output_dir)
    manifest_path = output_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf8"))
        names = [shard["name"] for shard in manifest["shards"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise AnnotateError(
            f"{manifest_path}: not the plan of an annotate run ({_error_line(err)})"
        ) from None
    docs: List[Doc] = []
    for name in names:
        path = output_dir / f"{name}.spacy"
        redo = "rerun the annotate command to annotate it (again)"
        if not path.exists():
            raise AnnotateError(f"{path}: shard missing (not annotated yet, or it failed): {redo}")
        try:
            record = json.loads(_done_path(output_dir, name).read_text(encoding="utf8"))
        except (OSError, ValueError):
            record = None  # written by an older version: read it as it is
        if record is not None and record.get("bytes") != path.stat().st_size:
            raise AnnotateError(
                f"{path}: shard incomplete ({path.stat().st_size:,} bytes, "
                f"{record.get('bytes')} written): {redo}"
            )
        try:
            docbin = DocBin().from_disk(path)
            with msgpack_hooks_collected_once():
                docs.extend(docbin.get_docs(vocab))
        except Exception as err:  # spaCy's E1014, msgpack and zlib errors do not name the file
            raise AnnotateError(
                f"{path}: not a readable .spacy DocBin ({_error_line(err)}): {redo}"
            ) from None
    return docs
