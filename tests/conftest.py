import sys
from pathlib import Path

import torch

# Let tests import tests/util.py as `util` wherever pytest is started.
sys.path.insert(0, str(Path(__file__).parent))

# The tests' tensors are tiny: one thread avoids OpenMP spin-waiting on a busy 2-core machine,
# which made each tiny LSTM step ~100x slower.
torch.set_num_threads(1)
