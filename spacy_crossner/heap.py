"""Give freed heap memory back to the operating system during training.

With a language-model objective (``lm_weight > 0``) every update allocates and frees several
vocabulary-sized gradient buffers (the sampled softmax's dense gradients of the output table)
beside many small tensors of varying size. glibc's malloc serves them from its heap once its
dynamic mmap threshold has grown past their size, and the freed space is neither reused nor
returned: ``configs/multi_cell_uda.cfg`` grew by about 9 MB per update on CPU and was killed
for lack of memory (22 GB) after some 2,600 steps. ``malloc_trim(0)`` every few dozen updates
returns the free pages and keeps the process at its working size, for a few percent of time
(``benchmarks/results/heap.md``). Elsewhere than glibc this is a no-op.

``SPACY_CROSSNER_TRIM_EVERY`` (environment) sets the number of updates between two trims
(default 50; 0 = never).
"""
import ctypes
import ctypes.util
import os
from typing import Callable, Optional

ENV_VAR = "SPACY_CROSSNER_TRIM_EVERY"


def trim_every_from_env(value: Optional[str]) -> int:
    """Updates between two trims from the environment's value (None: the default, 50)."""
    if value is None or not value.strip():
        return 50
    try:
        every = int(value)
    except ValueError:
        every = -1
    if every < 0:
        raise ValueError(
            f"{ENV_VAR}={value!r}: expected the number of updates between two heap trims "
            "(a whole number >= 0; 0 = never trim)"
        )
    return every


# updates between two trims: the growth between them stays a few hundred MB at most
TRIM_EVERY = trim_every_from_env(os.environ.get(ENV_VAR))


def _load_malloc_trim() -> Optional[Callable[[int], int]]:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:  # not glibc (musl, macOS, Windows)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def release_freed_memory() -> bool:
    """Return the heap's free pages to the OS (glibc's ``malloc_trim(0)``).

    RETURNS (bool): whether the C library has ``malloc_trim`` (False: nothing was done).
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
