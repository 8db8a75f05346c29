"""``python -m spacy_crossner``: the command-line interface."""
from .cli import app

if __name__ == "__main__":
    app()
