"""Imports every module that defines a command of ``python -m spacy_crossner``."""
