"""Label maps: renaming entity labels between data sets (``--label-map``).

Corpora name the same types differently (CrossNER's CoNLL: person/organisation/location/misc;
most others PER/ORG/LOC/MISC). A label map is a JSON object from a label as written in the data
to the label wanted, e.g. ``{"PER": "person", "ORG": "organisation"}``; labels not in it are kept
as they are. ``convert --label-map`` renames while converting, ``evaluate --label-map`` renames the
gold labels of the test data before scoring.
"""
import json
from pathlib import Path
from typing import Dict, Optional, Union


class LabelMapError(ValueError):
    """A label map that cannot be read; the message names the option or setting."""


def load_label_map(
    value: Optional[Union[str, Path, Dict[str, str]]], *, option: str = "--label-map"
) -> Optional[Dict[str, str]]:
    """Read a label map from a JSON file, inline JSON, or a dict.

    value (Optional[Union[str, Path, Dict[str, str]]]): a path to a JSON file, a JSON object
        as text (``'{"PER": "person"}'``), a dict, or None / "" (no map).
    option (str): the option or setting named in error messages.
    RETURNS (Optional[Dict[str, str]]): label as written → new label; None for no map.
    Raises LabelMapError naming ``option`` for a missing file, bad JSON, a value that is not an
    object, or a key or value that is not a non-empty string.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    source = "the inline JSON"
    if isinstance(value, dict):
        data = value
        source = "the mapping"
    else:
        text = str(value).strip()
        inline = text.startswith(("{", "["))
        path = Path(text)
        if not inline and len(text) < 4096 and path.is_file():
            source = str(path)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise LabelMapError(f"{option}: cannot read {path}: {err}") from None
        elif not inline:
            raise LabelMapError(
                f"{option}: {text!r} is neither an existing JSON file nor an inline JSON object "
                "such as '{\"PER\": \"person\"}'"
            )
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise LabelMapError(f"{option}: {source} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise LabelMapError(
            f"{option}: {source} must be a JSON object of label → label, got {type(data).__name__}"
        )
    for key, new in data.items():
        if not isinstance(key, str) or not key.strip():
            raise LabelMapError(f"{option}: {source} has the key {key!r}; labels are non-empty strings")
        if not isinstance(new, str) or not new.strip():
            raise LabelMapError(
                f"{option}: {source} maps {key!r} to {new!r}; map every label to a non-empty "
                "string"
            )
        if new != new.strip() or any(c.isspace() for c in new):
            raise LabelMapError(f"{option}: {source} maps {key!r} to {new!r}, which holds whitespace")
    return dict(data) if data else None


def map_label(label: str, label_map: Optional[Dict[str, str]]) -> str:
    """``label`` renamed by ``label_map`` (kept when the map has no entry for it)."""
    if not label_map:
        return label
    return label_map.get(label, label)
