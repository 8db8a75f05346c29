import sys
from pathlib import Path

import torch

# Let tests import tests/util.py as `util` wherever pytest is started.
sys.path.insert(0, str(Path(__file__).parent))

# The tests' tensors are tiny: one thread avoids OpenMP spin-waiting on a busy 2-core machine,
# which made each tiny LSTM step ~100x slower.
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
