"""Domain-adaptive pre-training (CrossNER DAPT): corpus levels, span masking, the masked-LM run.

- ``corpus.select_corpus``: domain-, entity-, task-level and integrated corpora;
- ``masking.MaskedLMCollator``: token-level and CrossNER span-level masking;
- ``train.run_dapt``: the Hugging Face Trainer run whose output is a spacy-transformers ``name``.

``train`` imports transformers, so it is not imported here; import it where it is used.
"""
from .corpus import DaptInputError, select_corpus
from .masking import MaskedLMCollator, mask_tokens, move_lone_masks

__all__ = ["DaptInputError", "select_corpus", "MaskedLMCollator", "mask_tokens", "move_lone_masks"]
