import os
import sys
from pathlib import Path

# The tests' tensors are tiny: one thread avoids OpenMP spin-waiting on a busy 2-core machine,
# which made each tiny LSTM step ~100x slower. The variables reach what the tests start (spacy
# train, the CLI, scripts) and, set before torch and numpy load, their BLAS pools; the suite runs
# one pytest-xdist worker per core (README), so more threads would only contend. A value the
# caller set is kept.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import torch  # noqa: E402

# Let tests import tests/util.py as `util` wherever pytest is started.
sys.path.insert(0, str(Path(__file__).parent))

torch.set_num_threads(1)


def _write_study_configs():
    """configs/*.cfg are generated (issue 46): write the study's configs, which tests, the README
    and the project name, from the package's pieces before the tests are collected."""
    import importlib.util

    root = Path(__file__).parents[1]
    spec = importlib.util.spec_from_file_location(
        "study_configs", root / "project" / "scripts" / "study_configs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_configs(root / "configs")


_write_study_configs()
