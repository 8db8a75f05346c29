"""Annotating a corpus in shards on a Dask cluster: many processes, many machines.

``python -m spacy_crossner annotate MODEL INPUT OUTPUT_DIR --scheduler ADDRESS|local``

The client cuts the inputs (``.spacy`` DocBins, ``.txt`` with one doc per line, ``.jsonl`` with a
``"text"`` field and an optional ``"domain"``) into shards of ``shard_size`` docs, each within one
input file, and sends each shard's docs to the cluster. A worker loads the pipeline once (a path
or an installed package name, see :func:`load_pipeline`), runs ``nlp.pipe`` over the shard and
returns a DocBin with user data, so every doc keeps ``doc._.domain`` and the entity probabilities
in ``doc.spans["crossner"].attrs["scores"]``. The client writes ``OUTPUT_DIR/<shard>.spacy``
under a temporary name and renames it when complete, so a rerun skips the finished shards. A
shard that fails is reported by name, with its input file and doc range; the other shards are
still written. ``OUTPUT_DIR/shards.json`` records the plan, and a rerun with another plan (other
inputs or ``shard_size``) is refused rather than mixing two shardings.

Only the workers need the pipeline; input and output stay on the client, so the cluster needs no
shared file system. Dask is imported only here (``pip install "spacy_crossner[distributed]"``).
"""
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
    with path.open(encoding="utf8") as f:
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
        with path.open(encoding="utf8") as f:
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


def _count(path: Path) -> int:
    if path.suffix == ".spacy":
        return len(_read_docbin(path))
    if path.suffix == ".jsonl":
        return sum(1 for _ in _jsonl_records(path))
    return sum(1 for _ in _txt_records(path))


def plan_shards(files: List[Path], shard_size: int, root: Optional[Path] = None) -> List[Shard]:
    """Shards of at most ``shard_size`` docs, each within one file, named after the file."""
    if shard_size < 1:
        raise AnnotateError(f"--shard-size must be at least 1, got {shard_size}")
    shards = []
    for path in files:
        rel = path.relative_to(root) if root is not None else Path(path.name)
        stem = "__".join(rel.parts).replace(" ", "_")
        n = _count(path)
        for i, start in enumerate(range(0, n, shard_size)):
            shards.append(Shard(f"{stem}.{i:05d}", str(path), start, min(start + shard_size, n)))
    return shards


class _Reader:
    """The docs of one shard; keeps the last file's records, as shards come in file order."""

    def __init__(self) -> None:
        self.path: Optional[str] = None
        self.records: List[Any] = []

    def payload(self, shard: Shard, domain: Optional[str]) -> Tuple[str, Any]:
        if shard.path != self.path:
            path = Path(shard.path)
            if path.suffix == ".spacy":
                self.records = _read_docbin(path)
            elif path.suffix == ".jsonl":
                self.records = list(_jsonl_records(path))
            else:
                self.records = list(_txt_records(path))
            self.path = shard.path
        part = self.records[shard.start:shard.stop]
        if Path(shard.path).suffix == ".spacy":
            if domain is not None:
                for doc in part:
                    if get_domain(doc) is None:
                        set_domain(doc, domain)
            return "docbin", DocBin(docs=part, store_user_data=True).to_bytes()
        return "texts", [(text, own or domain) for text, own in part]


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


def worker_ready(model: str, gpu_id: int = -1) -> str:
    """Load the pipeline on a worker before the shards arrive; returns its pipe names."""
    return ",".join(load_pipeline(model, gpu_id).pipe_names)


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
    if inputs.is_dir() and output_dir.resolve().is_relative_to(inputs.resolve()):
        raise AnnotateError(
            f"Output {output_dir} is inside the input folder {inputs}: its shards would be read as "
            "input by the next run; choose an output folder outside it"
        )
    files = input_files(inputs)
    shards = plan_shards(files, shard_size, root=inputs if inputs.is_dir() else None)
    output_dir.mkdir(parents=True, exist_ok=True)
    plan = {"inputs": str(inputs.resolve()), "shard_size": shard_size, "shards": [asdict(s) for s in shards]}
    _check_manifest(output_dir, plan)
    todo = [s for s in shards if not (output_dir / f"{s.name}.spacy").exists()]
    summary = AnnotateSummary(str(output_dir), len(shards), 0, len(shards) - len(todo))
    if not todo:
        return summary
    model = _resolve_model(model)

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
            _load_on_workers(client, model, gpu_id)
            start = time.perf_counter()
            _run(client, as_completed, tqdm, todo, output_dir, model, domain, batch_size, gpu_id,
                 workers, summary, progress)
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


def _load_on_workers(client, model: str, gpu_id: int) -> None:
    """Load the pipeline on every worker, so a model no worker can load fails once, clearly."""
    addresses = list(client.nthreads())
    if not addresses:
        raise AnnotateError("The Dask cluster has no workers")
    futures = {a: client.submit(worker_ready, model, gpu_id, workers=[a], allow_other_workers=False,
                                pure=False, key=f"load-pipeline-{a}") for a in addresses}
    for address, future in futures.items():
        try:
            future.result()
        except Exception as err:
            raise AnnotateError(
                f"Worker {address} cannot load the pipeline {model} ({_error_line(err)}): give a "
                "path every worker can read, or install the packaged pipeline on the workers"
            ) from None


def _run(client, as_completed, tqdm, todo: List[Shard], output_dir: Path, model: str,
         domain: Optional[str], batch_size: int, gpu_id: int, workers: int,
         summary: AnnotateSummary, progress: Optional[bool]) -> None:
    """Submit the shards with a bounded number in flight (the client reads each shard's input
    only when it is submitted) and write each result as it arrives."""
    reader = _Reader()
    pending = iter(todo)
    in_flight = 2 * sum(client.nthreads().values())
    owners: Dict[str, Shard] = {}

    def submit_next(queue) -> bool:
        shard = next(pending, None)
        if shard is None:
            return False
        kind, data = reader.payload(shard, domain)
        future = client.submit(annotate_shard, model, kind, data, batch_size, gpu_id,
                               key=f"annotate-{shard.name}-{time.time_ns()}", pure=False)
        owners[future.key] = shard
        queue.add(future)
        return True

    queue = as_completed()
    for _ in range(in_flight):
        if not submit_next(queue):
            break
    bar = tqdm(total=len(todo), unit="shard", disable=None if progress is None else not progress)
    for future in queue:
        shard = owners.pop(future.key)
        try:
            data, n_docs, n_words = future.result()
        except Exception as err:
            summary.failed.append(
                f"shard {shard.name} ({shard.path}, docs {shard.start}-{shard.stop - 1}): "
                f"{_error_line(err)}"
            )
        else:
            final = output_dir / f"{shard.name}.spacy"
            tmp = output_dir / f".{shard.name}.spacy.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, final)
            summary.done += 1
            summary.docs += n_docs
            summary.words += n_words
        future.release()
        bar.update(1)
        bar.set_postfix(words=summary.words, failed=len(summary.failed))
        submit_next(queue)
    bar.close()


def read_output(output_dir: Union[str, Path], vocab: Vocab) -> List[Doc]:
    """The annotated docs of an output folder, in input order (the order of ``shards.json``)."""
    output_dir = Path(output_dir)
    manifest = json.loads((output_dir / MANIFEST).read_text(encoding="utf8"))
    docs: List[Doc] = []
    for shard in manifest["shards"]:
        docbin = DocBin().from_disk(output_dir / f"{shard['name']}.spacy")
        with msgpack_hooks_collected_once():
            docs.extend(docbin.get_docs(vocab))
    return docs
