"""Import a module of spacy_crossner/models as it was at another commit (for A/B benchmarks)."""
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "spacy_crossner" / "models"


def import_old(commit: str, stem: str, stack: ExitStack, renames: Optional[Dict[str, str]] = None):
    """spacy_crossner/models/<stem>.py at ``commit``, imported under a temporary name inside
    spacy_crossner.models (so that its relative imports resolve); ``renames`` replaces text in
    its source first (e.g. a relative import of another old module). The file lives as long as
    ``stack``."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:spacy_crossner/models/{stem}.py"],
        check=True, capture_output=True, text=True,
    ).stdout
    for old, new in (renames or {}).items():
        source = source.replace(old, new)
    f = stack.enter_context(tempfile.NamedTemporaryFile("w", suffix=".py", dir=MODELS, prefix=f"_ab_old_{stem}_"))
    f.write(source)
    f.flush()
    name = f"spacy_crossner.models.{Path(f.name).stem}"
    spec = importlib.util.spec_from_file_location(name, f.name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def interleaved_medians(run: Callable[[str], object], rounds: int) -> Dict[str, float]:
    """Median seconds of ``run("new")`` and ``run("old")`` over ``rounds``, taking turns (which
    goes first alternates every round)."""
    times: Dict[str, List[float]] = {"new": [], "old": []}
    for r in range(rounds):
        for key in (("new", "old") if r % 2 == 0 else ("old", "new")):
            start = time.perf_counter()
            run(key)
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in times.items()}
