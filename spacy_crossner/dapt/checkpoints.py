"""Which of a DAPT run's checkpoints a resumed run can continue from. No torch or transformers
here: the study asks before it starts a run.

A run stopped while the Trainer saved leaves a ``checkpoint-N`` folder without all its files.
transformers writes the Trainer's state file and the RNG state last (which of the two comes last
depends on its version), so a checkpoint counts as complete when its state file parses and names
its own step and the RNG state is there.
"""
import json
import re
from pathlib import Path
from typing import Callable, List, Optional, Tuple, Union

CHECKPOINT_DIR = "checkpoints"
TRAINER_STATE_FILE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME
RNG_STATE_GLOB = "rng_state*.pth"  # rng_state.pth, or rng_state_<rank>.pth for each process


def checkpoint_folders(folder: Union[str, Path]) -> List[Tuple[int, Path]]:
    """The ``checkpoint-N`` folders in ``folder`` as (N, path), newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = re.fullmatch(r"checkpoint-(\d+)", path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def is_complete(step: int, path: Path) -> bool:
    """Whether the save of checkpoint ``path`` (of step ``step``) finished."""
    try:
        state = json.loads((path / TRAINER_STATE_FILE).read_text(encoding="utf8"))
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and state.get("global_step") == step and any(path.glob(RNG_STATE_GLOB))


def last_complete_checkpoint(folder: Union[str, Path], say: Optional[Callable[[str], None]] = None) -> Optional[str]:
    """The newest complete checkpoint in ``folder`` (a run's ``checkpoints``), or None; ``say``
    hears of each newer one skipped because its save was stopped."""
    for step, path in checkpoint_folders(folder):
        if is_complete(step, path):
            return str(path)
        if say is not None:
            say(f"[dapt] {path} is incomplete (its save was stopped): skipped")
    return None
