"""Configs name no data set: domains come from [vars] (issue 12)."""
import re
from pathlib import Path

import pytest
from spacy.util import load_config, registry

from spacy_crossner.misc import domain_aliases

CONFIGS = Path(__file__).parents[1] / "configs"
CROSSNER_DOMAINS = ("conll2003", "politics", "science", "music", "literature", "ai")


def settings_outside_vars(path: Path):
    """(line number, line) of every setting line that is not in [vars] and not a comment."""
    section = None
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        elif stripped and not stripped.startswith("#") and section != "[vars]":
            yield number, line


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.cfg")))
def test_no_config_names_a_crossner_domain_outside_vars(name):
    pattern = re.compile(r"\b(%s)\b" % "|".join(CROSSNER_DOMAINS))
    found = [(n, line) for n, line in settings_outside_vars(CONFIGS / name) if pattern.search(line)]
    assert found == []
    text = (CONFIGS / name).read_text()
    for domain_var in ("target_domain", "source_domain"):
        if f"${{vars.{domain_var}}}" in text:
            default = re.search(rf"\n# [^\n]*\n(?:# [^\n]*\n)?{domain_var} = ", text)
            assert default, f"{domain_var} in [vars] has no comment documenting it"


def test_domain_aliases_function():
    assert domain_aliases("bio", "news") == {"bio": "news"}
    assert domain_aliases(["bio", "chem", "news"], "news") == {"bio": "news", "chem": "news"}
    assert domain_aliases(None, "news") == {} and domain_aliases([], None) == {}
    with pytest.raises(ValueError, match="`to`.*not set.*bio"):
        domain_aliases("bio", None)
    with pytest.raises(ValueError, match="non-empty strings"):
        domain_aliases(["bio", ""], "news")
    assert registry.misc.get("spacy_crossner.domain_aliases.v1") is domain_aliases


@pytest.mark.parametrize("name,overrides,expected", [
    ("multi_cell_uda.cfg", {"vars.target_domain": "bio", "vars.source_domain": "news"}, {"bio": "news"}),
    ("pgn_uda.cfg", {"vars.target_domain": "bio", "vars.source_domain": "news"}, {"bio": "news"}),
    ("moee_zero.cfg", {"vars.target_domains": ["bio", "chem"], "vars.source_domain": "news"},
     {"bio": "news", "chem": "news"}),
    ("moee_zero_trf.cfg", {"vars.source_domain": "news"},
     {d: "news" for d in ("ai", "literature", "music", "politics", "science")}),
])
def test_domain_aliases_follow_the_vars(name, overrides, expected):
    config = load_config(CONFIGS / name, overrides=overrides, interpolate=True)
    block = config["components"]["crossner"]["domain_aliases"]
    assert block["@misc"] == "spacy_crossner.domain_aliases.v1"
    assert registry.resolve({"aliases": block})["aliases"] == expected


def test_dictionary_label_map_is_a_var():
    config = load_config(CONFIGS / "multi_cell_uda.cfg",
                         overrides={"vars.dictionary_label_map": {"ORGANIZATION": "ORG"}},
                         interpolate=True)
    assert config["components"]["crossner"]["model"]["dictionary_label_map"] == {"ORGANIZATION": "ORG"}


@pytest.mark.parametrize("name", ["bilstm_joint.cfg", "pgn_sda.cfg", "bilstm_pretrain.cfg"])
def test_source_domain_var_names_the_source_section(name):
    default = load_config(CONFIGS / name, interpolate=True)
    assert default["corpora"]["train"]["domains"]["source"]["domain"] is None  # the docs' own
    config = load_config(CONFIGS / name, overrides={"vars.source_domain": "bc5cdr"}, interpolate=True)
    assert config["corpora"]["train"]["domains"]["source"]["domain"] == "bc5cdr"
