"""A check for pipelines that read a sourced spaCy tok2vec through a listener.

``spacy.Tok2VecListener.v1`` is given its width in the config (it cannot read it from a tok2vec
that is only sourced when the pipeline is built); a wrong width would otherwise surface as a
matrix-shape error inside torch on the first update.
"""
from typing import Callable

from spacy.language import Language
from spacy.pipeline.tok2vec import Tok2Vec
from spacy.util import registry


@registry.callbacks("spacy_crossner.check_listener_widths.v1")
def make_check_listener_widths(setting: str = "vars.tok2vec_width") -> Callable[[Language], Language]:
    """An ``[initialize.after_init]`` callback: every tok2vec listener's width must be its
    upstream tok2vec's output width.

    setting (str): the config setting that holds the listeners' width, named in the error.
    """

    def check_listener_widths(nlp: Language) -> Language:
        for name, component in nlp.components:
            if not isinstance(component, Tok2Vec) or not component.model.has_dim("nO"):
                continue
            width = component.model.get_dim("nO")
            for listening in component.listening_components:
                for listener in component.listener_map[listening]:
                    if listener.get_dim("nO") != width:
                        raise ValueError(
                            f"The listener of '{listening}' expects {listener.get_dim('nO')}-wide "
                            f"vectors, but the tok2vec component '{name}' gives {width}: set "
                            f"{setting} = {width} (the width of the sourced tok2vec)."
                        )
        return nlp

    return check_listener_widths
