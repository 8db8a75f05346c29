"""``spacy_crossner.torch_threads.v1``: the torch thread count a saved or packaged pipeline sets.

```ini
[nlp.before_creation]
@callbacks = "spacy_crossner.torch_threads.v1"
n_threads = 1
```

torch runs its CPU operations with one OpenMP thread per core by default. On a small or shared
CPU, the threads of a BiLSTM's many small steps spin against each other, and one thread can be
several times faster (``benchmarks/results/threads.md``). The callback runs when the pipeline is
created (``spacy.load``, ``spacy train``), so the setting travels with the pipeline's config.
It sets the thread count for the whole process, as ``torch.set_num_threads`` does.
"""
from typing import Callable, Optional, Type, TypeVar

from spacy.util import registry

T = TypeVar("T")


@registry.callbacks("spacy_crossner.torch_threads.v1")
def make_torch_threads(n_threads: Optional[int] = None) -> Callable[[T], T]:
    """Set torch's CPU thread count when the pipeline is created.

    n_threads (Optional[int]): threads for torch's CPU operations (``torch.set_num_threads``);
        None (the default) leaves torch's own setting alone.
    RETURNS (Callable[[Type[Language]], Type[Language]]): the ``[nlp.before_creation]`` callback.
    """
    if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, int)
                                  or n_threads < 1):
        raise ValueError(
            f"[nlp.before_creation] n_threads of spacy_crossner.torch_threads.v1 must be a "
            f"positive integer or null (leave torch alone), got {n_threads!r}"
        )
    return _SetTorchThreads(n_threads)


class _SetTorchThreads:
    """The callback itself: a plain object, so a pipeline holding it pickles."""

    def __init__(self, n_threads: Optional[int]) -> None:
        self.n_threads = n_threads

    def __call__(self, lang_cls: Type[T]) -> Type[T]:
        if self.n_threads is not None:
            import torch  # here, not at import: a pipeline without the setting never pays for it

            torch.set_num_threads(self.n_threads)
        return lang_cls
