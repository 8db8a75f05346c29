"""Domain-adaptive pre-training (CrossNER DAPT): corpus levels, span masking, the masked-LM run.

- ``corpus.select_corpus``: domain-, entity-, task-level and integrated corpora;
- ``masking.MaskedLMCollator``: token-level and CrossNER span-level masking;
- ``train.run_dapt``: the Hugging Face Trainer run whose output is a spacy-transformers ``name``.

torch and transformers are imported only when ``masking`` or ``train`` is used, so that the
command line starts fast.
"""
from .corpus import DaptInputError, select_corpus

__all__ = ["DaptInputError", "select_corpus", "MaskedLMCollator", "mask_tokens", "move_lone_masks", "run_dapt"]


def __getattr__(name):
    if name in ("MaskedLMCollator", "mask_tokens", "move_lone_masks"):
        from . import masking

        return getattr(masking, name)
    if name == "run_dapt":
        from .train import run_dapt

        return run_dapt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
