"""Every registered name is an entry point, so spaCy finds it without --code."""
import ast
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from spacy.util import registry

SETUP = Path(__file__).parents[1] / "setup.py"
GROUPS = {
    "spacy_factories": "factories",
    "spacy_architectures": "architectures",
    "spacy_readers": "readers",
    "spacy_scorers": "scorers",
    "spacy_misc": "misc",
    "spacy_callbacks": "callbacks",
    "spacy_batchers": "batchers",
    "spacy_augmenters": "augmenters",
    "thinc_optimizers": "optimizers",
    "thinc_schedules": "schedules",
    "thinc_layers": "layers",
}


def declared():
    tree = ast.parse(SETUP.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ENTRY_POINTS":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no ENTRY_POINTS")


def test_installed_entry_points_match_setup():
    installed = {
        group: sorted(f"{ep.name} = {ep.value}" for ep in entry_points(group=group) if ep.value.startswith("spacy_crossner"))
        for group in GROUPS
    }
    assert installed == {g: sorted(v) for g, v in declared().items()}


@pytest.mark.parametrize("group,name,value", [
    (group, line.split(" = ")[0], line.split(" = ")[1])
    for group, lines in declared().items() for line in lines
])
def test_entry_point_resolves_through_registry(group, name, value):
    module, attr = value.split(":")
    func = getattr(__import__(module, fromlist=[attr]), attr)
    if group == "spacy_factories":
        from spacy.language import Language
        assert Language.has_factory(name)
        assert Language.get_factory_meta(name).factory == name
    else:
        assert getattr(registry, GROUPS[group]).get(name) is func


def test_every_registered_name_is_an_entry_point():
    import spacy_crossner  # noqa: F401  registers everything
    names = {line.split(" = ")[0] for lines in declared().values() for line in lines}
    for group in GROUPS.values():
        if group == "factories":
            continue
        for name in getattr(registry, group).get_all():
            if name.startswith("spacy_crossner."):
                assert name in names, f"{name} is registered but not an entry point in setup.py"
