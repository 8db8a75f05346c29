"""The configs the study and the project train, as init-config choices: one entry per config name
(the old configs/NAME.cfg), regenerated with ``spacy_crossner.init_config``.

    python scripts/study_configs.py ../configs            # write every NAME.cfg there
    python scripts/study_configs.py ../configs bilstm_joint trf_finetune

Each setting lives once in the package's pieces (spacy_crossner/configs/); the only values here
are the few that one study config sets for itself (a variant's optimizer, a default domain).
tests/test_init_config.py checks that each entry fills to the same config as the file the study's
numbers were trained with. The entries added after the study (``AFTER_STUDY``, issue 47) have no
such file: each is its base config with the optimizer of a ``FineTune``, an augmenter or other
token features laid over it, which the tests check instead.
"""
import argparse
import os
import tempfile
import sys
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional

from spacy_crossner.init_config import FineTune, config_text


class StudyConfig(NamedTuple):
    arch: str
    features: str
    setting: str
    overrides: Optional[Dict[str, Any]] = None
    # the joint setting's mix: the study's configs keep v1's fixed factors (target x10)
    mix: Optional[str] = None
    # the optimizer's schedule and group rates (init-config's --schedule, --head-lr-multiplier...)
    fine_tune: Optional[FineTune] = None


# CrossNER's names, the defaults the zero-resource and UDA study configs were run with.
_CROSSNER_ZERO = {"vars.source_domain": "conll2003",
                  "vars.target_domains": ["ai", "literature", "music", "politics", "science"]}
_CROSSNER_UDA = {"vars.source_domain": "conll2003", "vars.target_domain": "ai"}

STUDY_CONFIGS: Dict[str, StudyConfig] = {
    "bilstm_target": StudyConfig("bilstm", "wordchar", "target"),
    "bilstm_target_sm": StudyConfig("bilstm", "spacy_tok2vec", "target"),
    "bilstm_joint": StudyConfig("bilstm", "wordchar", "joint", mix="upsample"),
    "bilstm_joint_sm": StudyConfig("bilstm", "spacy_tok2vec", "joint", mix="upsample"),
    "bilstm_joint_trf": StudyConfig("bilstm", "transformer_frozen", "joint", mix="upsample"),
    "bilstm_pretrain": StudyConfig("bilstm", "wordchar", "pretrain"),
    "bilstm_finetune": StudyConfig("bilstm", "wordchar", "finetune"),
    "trf_target": StudyConfig("trf", "transformer", "target"),
    "trf_joint": StudyConfig("trf", "transformer", "joint", mix="upsample"),
    "trf_pretrain": StudyConfig("trf", "transformer", "pretrain"),
    "trf_finetune": StudyConfig("trf", "transformer", "finetune"),
    "multi_cell_sda": StudyConfig("multi_cell", "wordchar", "joint", mix="upsample"),
    "multi_cell_sda_sm": StudyConfig("multi_cell", "spacy_tok2vec", "joint", mix="upsample"),
    "multi_cell_sda_trf": StudyConfig("multi_cell", "transformer_frozen", "joint", mix="upsample"),
    "multi_cell_uda": StudyConfig("multi_cell", "wordchar", "uda", _CROSSNER_UDA),
    "pgn_sda": StudyConfig("pgn", "wordchar", "joint", mix="upsample"),
    "pgn_sda_sm": StudyConfig("pgn", "spacy_tok2vec", "joint", mix="upsample"),
    # the paper's optimizer (SGD 0.015 decaying, L2 1e-8, no clipping) and no target upsampling
    "pgn_sda_paper": StudyConfig("pgn", "wordchar", "joint", mix="upsample", overrides={
        "vars.target_upsample": 1,
        "training.optimizer": {
            "@optimizers": "SGD.v1", "L2": 1e-8, "L2_is_weight_decay": True, "grad_clip": 0.0,
            "use_averages": False,
            "learn_rate": {"@schedules": "decaying.v1", "base_rate": 0.015, "decay": 0.0001, "t": 0},
        },
    }),
    "pgn_uda": StudyConfig("pgn", "wordchar", "uda", _CROSSNER_UDA),
    "moee_zero": StudyConfig("moee", "wordchar", "zero", _CROSSNER_ZERO),
    "moee_zero_sm": StudyConfig("moee", "spacy_tok2vec", "zero", _CROSSNER_ZERO),
    "moee_zero_trf": StudyConfig("moee", "transformer", "zero", _CROSSNER_ZERO),
    "label_aware_source": StudyConfig("label_aware", "transformer", "pretrain"),
    "label_aware_target": StudyConfig("label_aware", "transformer", "finetune"),
    # issue 47 part 5, a better fine-tune: trf_finetune's stage 2 with a warm-up of 100 steps and a
    # linear decay to 0 at training.max_steps, the head's rate x10, each encoder layer down x0.9
    "trf_finetune_tuned": StudyConfig("trf", "transformer", "finetune", fine_tune=FineTune(
        schedule="warmup_linear", warmup_steps=100, head_lr_multiplier=10.0, layer_decay=0.9)),
    # ... and each of its three changes on its own, and entity mention replacement (the target's
    # own mentions swapped among themselves, each entity with probability 0.3)
    "trf_finetune_warmup": StudyConfig("trf", "transformer", "finetune", fine_tune=FineTune(
        schedule="warmup_linear", warmup_steps=100)),
    "trf_finetune_head_lr": StudyConfig("trf", "transformer", "finetune", fine_tune=FineTune(
        head_lr_multiplier=10.0)),
    "trf_finetune_layer_decay": StudyConfig("trf", "transformer", "finetune", fine_tune=FineTune(
        layer_decay=0.9)),
    "trf_finetune_mentions": StudyConfig("trf", "transformer", "finetune", overrides={
        "corpora.train.augmenter": {"@augmenters": "spacy_crossner.mention_replace.v1", "probability": 0.3,
                                    "seed": "${system.seed}", "from_corpus": True},
    }),
    # MiniLM plus each token's shape (case, digits: the uncased encoder does not see them) as
    # trf_finetune's stage 1; its stage 2 (trf_finetune.cfg) sources the components as they are
    "trf_pretrain_shape": StudyConfig("trf", "transformer_shape", "pretrain"),
}
# the entries added after the study's configs were written by hand (no reference file): {name: base}
AFTER_STUDY: Dict[str, str] = {
    **{name: "trf_finetune" for name in (
        "trf_finetune_tuned", "trf_finetune_warmup", "trf_finetune_head_lr", "trf_finetune_layer_decay",
        "trf_finetune_mentions")},
    "trf_pretrain_shape": "trf_pretrain",
}


def write_config(name: str, output_dir: Path) -> Path:
    """Write the study config ``name`` as ``output_dir/name.cfg``; return its path. The file is
    replaced in one step and only when its text changes, so a training reading it meanwhile
    never sees half a file, and an unchanged file keeps its time stamp."""
    if name not in STUDY_CONFIGS:
        raise KeyError(f"No study config {name!r}; known: {', '.join(STUDY_CONFIGS)}.")
    choice = STUDY_CONFIGS[name]
    path = Path(output_dir) / f"{name}.cfg"
    text = config_text(arch=choice.arch, features=choice.features, setting=choice.setting,
                       output=f"configs/{name}.cfg", overrides=choice.overrides, mix=choice.mix,
                       fine_tune=choice.fine_tune)
    if path.exists() and path.read_text(encoding="utf8") == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf8", dir=path.parent, suffix=".tmp",
                                     delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)
    return path


def write_configs(output_dir: Path, names=None) -> list:
    """Write the named study configs (default: all) into ``output_dir``; return their paths."""
    return [write_config(name, output_dir) for name in (names or STUDY_CONFIGS)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", type=Path, help="Folder to write NAME.cfg files into.")
    parser.add_argument("names", nargs="*", help=f"Config names (default: all): {', '.join(STUDY_CONFIGS)}.")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in STUDY_CONFIGS]
    if unknown:
        print(f"Error: unknown config {', '.join(unknown)}; known: {', '.join(STUDY_CONFIGS)}.", file=sys.stderr)
        return 1
    for path in write_configs(args.output_dir, args.names):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
