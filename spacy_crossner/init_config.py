"""Composed training configs: one short partial per architecture, feature fragments and training
settings, layered and filled the spaCy way.

The pieces ship with the package in ``spacy_crossner/configs/``:

- ``base.cfg``: what every config shares (nlp, batcher, optimizer, scorer);
- ``features/*.cfg``: the input features (``components.crossner.model.tok2vec`` and the
  components it needs);
- ``arch/*.cfg``: one partial per architecture (``components.crossner.model``, and the training
  schedule where the architecture has its own);
- ``settings/*.cfg``: the training setting (corpora, dev set, domains, sourcing);
- ``combos/ARCH.FEATURES.cfg`` and ``combos/ARCH.SETTING.cfg``: the few settings that belong to a
  pair (e.g. PGN's unsupervised objective and optimizer).

They are layered in that order (later wins; a block naming another registered function, e.g.
``@optimizers = "SGD.v1"`` over ``"Adam.v1"``, replaces the block instead of merging into it), then
the user's overrides, then filled with spaCy's defaults (its ``default_config.cfg``, each factory's
default config and every registered function's defaults), as ``spacy init fill-config`` does.
"""
import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from thinc.api import Config

CONFIGS_DIR = Path(__file__).parent / "configs"


class InitConfigError(ValueError):
    """A choice or override init-config cannot use; the message says what to do."""


@dataclass(frozen=True)
class Choice:
    """One value of an init-config option: its fragment files and a line of help."""
    fragments: Tuple[str, ...]
    help: str


ARCHS: Dict[str, Choice] = {
    "bilstm": Choice(("arch/bilstm",), "spacy_crossner.BiLSTMCRF.v1: shared BiLSTM, one CRF per domain"),
    "trf": Choice(("arch/trf",), "spacy_crossner.TransformerTagger.v1: linear/CRF head on a transformer"),
    "multi_cell": Choice(("arch/multi_cell",), "spacy_crossner.MultiCellLSTM.v1: Multi-Cell LSTM"),
    "pgn": Choice(("arch/pgn",), "spacy_crossner.PGNBiLSTM.v1: parameter generation network + LMs"),
    "moee": Choice(("arch/moee",), "spacy_crossner.MoEE.v1: multi-task + mixture of entity experts"),
    "label_aware": Choice(("arch/label_aware",), "spacy_crossner.LabelAwareTagger.v1: LANER"),
}

FEATURES: Dict[str, Choice] = {
    "wordchar": Choice(("features/wordchar",), "context-free word + character-CNN embeddings"),
    "wordchar_vectors": Choice(
        ("features/wordchar", "features/static_vectors"),
        "word/char plus static vectors (train with --paths.vectors, e.g. GloVe from `vectors`)",
    ),
    "spacy_tok2vec": Choice(
        ("features/spacy_tok2vec",),
        "the tok2vec of an installed spaCy pipeline (--vars.tok2vec_pipeline, default en_core_web_sm)",
    ),
    "transformer": Choice(
        ("features/transformer", "features/transformer_finetuned"),
        "a transformer fine-tuned with NER (--paths.transformer; default the bundled MiniLM)",
    ),
    "transformer_frozen": Choice(
        ("features/transformer", "features/transformer_frozen"),
        "a transformer kept as pre-trained (no gradient into it)",
    ),
    "transformer_shape": Choice(
        ("features/transformer", "features/transformer_finetuned", "features/transformer_shape"),
        "a transformer fine-tuned with NER, plus each token's shape (case, digits: an uncased "
        "transformer such as the bundled MiniLM does not see them)",
    ),
}
# the features whose transformer is fine-tuned: the ones --head-lr-multiplier and --layer-decay apply to
FINE_TUNED_TRANSFORMER = ("transformer", "transformer_shape")
# features that take the combos/ARCH.FEATURES.cfg pieces of others (a fine-tuned transformer's)
FEATURE_FAMILY = {"transformer_shape": "transformer"}

SETTINGS: Dict[str, Choice] = {
    "target": Choice(("settings/target",), "the target's labelled data only"),
    "joint": Choice(("settings/joint",), "labelled source + labelled target in one training (SDA), mixed by --mix"),
    "pretrain": Choice(("settings/pretrain",), "stage 1: the source only, selected on source dev"),
    "finetune": Choice(
        ("settings/finetune",), "stage 2: source every component from --paths.pretrained, train on the target"
    ),
    "zero": Choice(("settings/zero",), "source only; target domains tagged with the source's labels"),
    "uda": Choice(("settings/uda",), "labelled source + raw target text (LM objectives), no target labels"),
}

# The settings whose objective the architecture lacks: unsupervised adaptation needs a
# language-model objective over raw text.
UNSUPPORTED = {
    ("bilstm", "uda"), ("trf", "uda"), ("moee", "uda"), ("label_aware", "uda"),
}

# The settings trained on labelled source corpora, which take any number of them (source_count):
# one numbered [corpora.train.domains.source_I] per source. spaCy's command-line overrides cannot
# add a section (`spacy train C --corpora.train.domains.extra.path X` stops with "not a section
# value that can be overridden"), so the number of sources is chosen when the config is written.
SOURCE_SETTINGS = ("joint", "pretrain")

# What `spacy train` needs on the command line for each setting, for the header.
TRAIN_ARGS: Dict[str, str] = {
    "target": "--paths.target_train T/train.spacy --paths.target_dev T/dev.spacy",
    "joint": "--paths.source_train S/train.spacy --paths.target_train T/train.spacy "
             "--paths.target_dev T/dev.spacy",
    "pretrain": "--paths.source_train S/train.spacy --paths.source_dev S/dev.spacy",
    "finetune": "--paths.target_train T/train.spacy --paths.target_dev T/dev.spacy "
                "--paths.pretrained PRETRAINED/model-best",
    "zero": "--paths.source_train S/train.spacy --paths.source_dev S/dev.spacy "
            "--vars.source_domain SOURCE --vars.target_domains '[\"TARGET\"]'",
    "uda": "--paths.source_train S/train.spacy --paths.source_dev S/dev.spacy "
           "--paths.target_raw raw/TARGET.txt --vars.source_domain SOURCE --vars.target_domain TARGET",
}


# What the header adds for some features: how to use them when training.
FEATURE_NOTES: Dict[str, str] = {
    "wordchar_vectors": "# Vectors: add --paths.vectors VECTORS_DIR (`python -m spacy_crossner vectors` writes one).",
    "spacy_tok2vec": "# The sourced tok2vec trains with the NER loss; to freeze it add --training.frozen_components "
                     "'[\"tok2vec\"]' --training.annotating_components '[\"tok2vec\"]' (a frozen tok2vec that does "
                     "not annotate leaves the listener nothing to read).",
    "transformer": "# Transformer: --paths.transformer NAME_OR_DIR (a Hugging Face model or a DAPT output); "
                   "null = the bundled MiniLM.",
    "transformer_frozen": "# Transformer: --paths.transformer NAME_OR_DIR (a Hugging Face model or a DAPT output); "
                          "null = the bundled MiniLM.",
    "transformer_shape": "# Transformer: --paths.transformer NAME_OR_DIR (a Hugging Face model or a DAPT output); "
                         "null = the bundled MiniLM. The shape embedding is [components.crossner.model.tok2vec] "
                         "width / rows.",
}


# How the joint setting mixes its labelled corpora in a pass (--mix). "upsample" is
# spacy_crossner.MultiDomainCorpus.v1's fixed factors (CrossNER's target x10, the study's configs);
# the others are MultiDomainCorpus.v2's mixes by corpus size, which fit a target of any size.
MIXES: Dict[str, str] = {
    "sqrt": "each labelled corpus gets a part of a pass in proportion to the square root of its size "
            "(MultiDomainCorpus.v2; a 100-sentence target beside CoNLL-2003's 14,041 gets 7.8 %, about "
            "CrossNER's x10; a 2,321-sentence one 29 %)",
    "size": "in proportion to the sizes: each sentence once a pass (MultiDomainCorpus.v2)",
    "equal": "equal parts of a pass (MultiDomainCorpus.v2)",
    "upsample": "fixed copies per pass: the target x --vars.target_upsample (default 10), each source once "
                "(MultiDomainCorpus.v1, the study's configs)",
}
DEFAULT_MIX = "sqrt"
# the settings with labelled source and labelled target corpora in one training stream
MIX_SETTINGS = ("joint",)


SCHEDULES: Dict[str, str] = {
    "constant": "the config's learn_rate throughout",
    "warmup_linear": "from 0 up to learn_rate over --warmup-steps, then linearly down to 0 at training.max_steps",
}


@dataclass(frozen=True)
class FineTune:
    """How the optimizer fine-tunes (init-config's --schedule, --warmup-steps,
    --head-lr-multiplier, --layer-decay, --num-layers); the defaults change nothing.

    schedule (str): a key of SCHEDULES. warmup_steps (Optional[int]): the warm-up's steps
    (warmup_linear only). head_lr_multiplier (float): the head's rate over the encoder's.
    layer_decay (float): the rate's factor per encoder layer down. num_layers (Optional[int]):
    the encoder's layers; None = read from the bundled (or a local --paths.transformer) model.
    """
    schedule: str = "constant"
    warmup_steps: Optional[int] = None
    head_lr_multiplier: float = 1.0
    layer_decay: float = 1.0
    num_layers: Optional[int] = None

    def flags(self) -> str:
        """The init-config options that make this, for the header."""
        out = ""
        if self.schedule != "constant":
            out += f" --schedule {self.schedule} --warmup-steps {self.warmup_steps}"
        if self.head_lr_multiplier != 1.0:
            out += f" --head-lr-multiplier {self.head_lr_multiplier}"
        if self.layer_decay != 1.0:
            out += f" --layer-decay {self.layer_decay}"
        if self.num_layers is not None:
            out += f" --num-layers {self.num_layers}"
        return out


def _encoder_layers(transformer: Optional[str]) -> int:
    """The number of layers of the transformer a config names (None: the bundled MiniLM), read
    from its local config.json (init-config downloads nothing)."""
    from .misc import transformer_name

    path = Path(transformer_name(transformer)) / "config.json"
    if not path.is_file():
        raise InitConfigError(
            f"--layer-decay needs the encoder's number of layers: {transformer!r} is no local model "
            f"folder with a config.json to read it from; pass --num-layers N."
        )
    layers = json.loads(path.read_text(encoding="utf8")).get("num_hidden_layers")
    if not isinstance(layers, int):
        raise InitConfigError(f"{path} has no num_hidden_layers; pass --num-layers N.")
    return layers


def _apply_fine_tune(config: Dict[str, Any], tune: FineTune, features: str,
                     overrides: Optional[Dict[str, Any]]) -> None:
    """Lay the optimizer pieces of ``tune`` over ``config`` (in place)."""
    if tune.schedule not in SCHEDULES:
        raise InitConfigError(f"Unknown schedule (--schedule) {tune.schedule!r}; choose one of: {', '.join(SCHEDULES)}.")
    if (tune.schedule == "warmup_linear") != (tune.warmup_steps is not None):
        raise InitConfigError(
            "--warmup-steps N goes with --schedule warmup_linear (the steps of the warm-up, e.g. a "
            "tenth of training.max_steps), and that schedule needs it."
        )
    if tune.warmup_steps is not None and tune.warmup_steps < 0:
        raise InitConfigError(f"--warmup-steps must be >= 0 (got {tune.warmup_steps}).")
    if not tune.head_lr_multiplier > 0:
        raise InitConfigError(f"--head-lr-multiplier must be > 0 (got {tune.head_lr_multiplier}); 1.0 = off.")
    if not 0 < tune.layer_decay <= 1:
        raise InitConfigError(f"--layer-decay must be in (0, 1] (got {tune.layer_decay}); 1.0 = off.")
    if tune.num_layers is not None and tune.num_layers < 1:
        raise InitConfigError(f"--num-layers must be >= 1 (got {tune.num_layers}).")
    if tune.num_layers is not None and tune.layer_decay == 1.0:
        raise InitConfigError("--num-layers is the encoder's layers for --layer-decay; give --layer-decay too.")
    optimizer = config["training"]["optimizer"]
    if tune.head_lr_multiplier != 1.0 or tune.layer_decay != 1.0:
        if features not in FINE_TUNED_TRANSFORMER:
            raise InitConfigError(
                f"--head-lr-multiplier and --layer-decay set the rates of a fine-tuned transformer "
                f"against its head; --features {features} fine-tunes none (use --features "
                f"{' or '.join(FINE_TUNED_TRANSFORMER)})."
            )
        if optimizer.get("@optimizers") != "Adam.v1":
            raise InitConfigError(
                f"--head-lr-multiplier and --layer-decay go on Adam.v1; this config's optimizer is "
                f"{optimizer.get('@optimizers')}."
            )
        piece = _read_fragment("optimizer/grouped_adam")["training"]["optimizer"]
        # the Adam settings of the config stay; the function and the group rates are the piece's
        grouped = {"@optimizers": piece.pop("@optimizers"),
                   **{k: v for k, v in optimizer.items() if not k.startswith("@")}, **piece}
        grouped.update(head_lr_multiplier=tune.head_lr_multiplier, layer_decay=tune.layer_decay)
        if tune.layer_decay != 1.0:
            grouped["num_layers"] = tune.num_layers or _encoder_layers((overrides or {}).get("paths.transformer"))
        config["training"]["optimizer"] = optimizer = grouped
    if tune.schedule == "warmup_linear":
        rate = optimizer.get("learn_rate")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool):
            raise InitConfigError(f"--schedule replaces a fixed learn_rate; this config's is {rate!r}.")
        max_steps = config["training"].get("max_steps")
        if isinstance(max_steps, int) and max_steps <= tune.warmup_steps:
            raise InitConfigError(
                f"--schedule warmup_linear decays to 0 at training.max_steps ({max_steps}), which must be "
                f"larger than --warmup-steps ({tune.warmup_steps})"
                + (" (max_steps = 0 trains by max_epochs: give --training.max_steps N)." if max_steps == 0 else ".")
            )
        piece = _read_fragment("optimizer/warmup_linear")["training"]["optimizer"]["learn_rate"]
        schedule = {"@schedules": piece.pop("@schedules"), "initial_rate": rate, **piece}
        schedule["warmup_steps"] = tune.warmup_steps
        optimizer["learn_rate"] = schedule


def _check(name: str, value: str, choices: Dict[str, Choice]) -> Choice:
    if value not in choices:
        raise InitConfigError(
            f"Unknown {name} {value!r}; choose one of: {', '.join(choices)}."
        )
    return choices[value]


def _read_fragment(name: str) -> Dict[str, Any]:
    """A piece as a dict. Pieces name only the sections they set; the parent sections the config
    parser wants declared first are added here, so a fragment stays a few lines."""
    path = CONFIGS_DIR / f"{name}.cfg"
    text = path.read_text(encoding="utf8")
    sections = re.findall(r"^\[([^\]]+)\]\s*$", text, flags=re.MULTILINE)
    parents = []
    for section in sections:
        parts = section.split(".")
        for depth in range(1, len(parts)):
            parent = ".".join(parts[:depth])
            if parent not in sections and parent not in parents:
                parents.append(parent)
    prefix = "".join(f"[{parent}]\n" for parent in sorted(parents, key=lambda p: p.count(".")))
    return Config().from_str(prefix + text, interpolate=False)


def _function_key(block: Dict[str, Any]) -> Optional[Tuple[str, Any]]:
    for key, value in block.items():
        if key.startswith("@"):
            return key, value
    return None


def _merge(base: Dict[str, Any], update: Dict[str, Any]) -> Dict[str, Any]:
    """Merge ``update`` into ``base`` in place. A block that names another registered function
    than the block under it replaces it whole (its arguments are not that function's)."""
    for key, value in update.items():
        below = base.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            mine, theirs = _function_key(value), _function_key(below)
            if mine is not None and theirs is not None and mine != theirs:
                base[key] = copy.deepcopy(value)
            else:
                _merge(below, value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _nest(overrides: Dict[str, Any]) -> Dict[str, Any]:
    nested: Dict[str, Any] = {}
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if len(parts) < 2 or not all(parts):
            raise InitConfigError(
                f"Override {dotted!r} is not a dotted setting such as training.max_steps."
            )
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InitConfigError(f"Override {dotted!r} goes inside a value that is not a section.")
        node[parts[-1]] = value
    return nested


def check_source_count(setting: str, source_count: Optional[int]) -> None:
    """``source_count`` is None or a whole number >= 1, for a setting with labelled sources."""
    if source_count is None:
        return
    if isinstance(source_count, bool) or not isinstance(source_count, int) or source_count < 1:
        raise InitConfigError(f"--source-count must be a whole number of at least 1, not {source_count!r}.")
    if setting not in SOURCE_SETTINGS:
        hint = (" (pre-train -> fine-tune: give the sources to the pretrain stage; finetune sources "
                "its pipeline, every source's head included)" if setting == "finetune" else "")
        raise InitConfigError(
            f"--source-count {source_count}: the {setting} setting has no labelled sources to number; "
            f"it is for the settings {', '.join(SOURCE_SETTINGS)}{hint}."
        )


def source_names(source_count: int) -> List[str]:
    """The names of the numbered sources: ``source_0``, ``source_1``, ..."""
    return [f"source_{i}" for i in range(source_count)]


def number_sources(config: Dict[str, Any], source_count: int, setting: str) -> None:
    """Replace the setting's one labelled source by ``source_count`` numbered ones, in place.

    Each source I gets ``[corpora.train.domains.source_I]`` (the keys of the setting's
    ``source`` section, e.g. its ``upsample``), its train file from ``paths.source_train_I`` and
    its domain from ``vars.source_domain_I`` (null: the docs' own ``doc._.domain``). The pretrain
    setting is selected on every source's dev set (``paths.source_dev_I``), read together as one
    dev corpus in which each doc keeps its domain; with several sources the component's
    ``target_domain`` (the domain of docs that carry none) is ``vars.target_domain``, since no
    single labelled domain is the default any more. The single source's settings
    (``paths.source_train``, ``paths.source_dev``, ``vars.source_domain``) are removed: the
    config lists only what it reads.
    """
    domains = config["corpora"]["train"]["domains"]
    template = {k: v for k, v in domains.pop("source").items() if k not in ("path", "domain")}
    for key in ("source_train", "source_dev"):
        config["paths"].pop(key, None)
    config["vars"].pop("source_domain", None)
    named = {}
    for i, name in enumerate(source_names(source_count)):
        config["paths"][f"source_train_{i}"] = None
        config["vars"][f"source_domain_{i}"] = None
        named[name] = {"path": f"${{paths.source_train_{i}}}", "domain": f"${{vars.source_domain_{i}}}",
                       **copy.deepcopy(template)}
    # the sources first, in order, as the single source was
    config["corpora"]["train"]["domains"] = {**named, **domains}
    if setting != "pretrain":
        return
    for i in range(source_count):
        config["paths"][f"source_dev_{i}"] = None
    dev = config["corpora"]["dev"]
    if source_count == 1:
        dev.update(path="${paths.source_dev_0}", domain="${vars.source_domain_0}")
        return
    config["corpora"]["dev"] = {
        "@readers": "spacy_crossner.MultiDomainCorpus.v1", "seed": "${system.seed}", "shuffle": False,
        "max_length": dev.get("max_length", 0), "limit": dev.get("limit", 0),
        "domains": {name: {"path": f"${{paths.source_dev_{i}}}", "domain": f"${{vars.source_domain_{i}}}"}
                    for i, name in enumerate(source_names(source_count))},
    }
    config["components"]["crossner"]["target_domain"] = "${vars.target_domain}"


def check_mix(setting: str, mix: Optional[str]) -> Optional[str]:
    """The mix of a setting (None for a setting without labelled source and target corpora)."""
    if setting not in MIX_SETTINGS:
        if mix is not None:
            raise InitConfigError(
                f"--mix {mix}: the {setting} setting has no labelled target beside its sources to mix; "
                f"--mix goes with --setting {' or '.join(MIX_SETTINGS)}."
            )
        return None
    mix = DEFAULT_MIX if mix is None else mix
    if mix not in MIXES:
        raise InitConfigError(f"Unknown mix (--mix) {mix!r}; choose one of: {', '.join(MIXES)}.")
    return mix


def apply_mix(config: Dict[str, Any], mix: str) -> None:
    """Set how the training corpus mixes its labelled corpora, in place. "upsample" keeps the
    setting's spacy_crossner.MultiDomainCorpus.v1 (fixed ``upsample`` per corpus, the target's
    from ``vars.target_upsample``); the other mixes read with spacy_crossner.MultiDomainCorpus.v2,
    which refuses a fixed ``upsample`` on a labelled corpus, so those (and
    ``vars.target_upsample``) are removed; raw-text corpora keep theirs."""
    if mix == "upsample":
        return
    train = config["corpora"]["train"]
    train["@readers"] = "spacy_crossner.MultiDomainCorpus.v2"
    train["mix"] = mix
    train["pass_size"] = 0
    for section in train["domains"].values():
        if not section.get("raw"):
            section.pop("upsample", None)
    config["vars"].pop("target_upsample", None)


def compose(
    *, arch: str, features: str, setting: str, overrides: Optional[Dict[str, Any]] = None,
    fine_tune: Optional[FineTune] = None, source_count: Optional[int] = None, mix: Optional[str] = None,
) -> Config:
    """The partial config of one choice, before spaCy's defaults are filled in.

    arch (str): a key of ARCHS. features (str): a key of FEATURES. setting (str): a key of
    SETTINGS. overrides (Dict[str, Any]): dotted settings (``{"training.max_steps": 100}``) laid
    over the pieces; a section value naming another registered function replaces that section.
    fine_tune (Optional[FineTune]): the optimizer's schedule and rates per group, laid over the
    overrides (an overridden learn_rate is where the schedule starts).
    source_count (Optional[int]): train on this many labelled source corpora, numbered from 0
    (:func:`number_sources`; settings in SOURCE_SETTINGS); None: the setting's one source,
    ``paths.source_train``.
    mix (Optional[str]): how the joint setting mixes its labelled corpora (a key of MIXES; None:
    DEFAULT_MIX); see :func:`apply_mix`.
    """
    arch_choice = _check("architecture (--arch)", arch, ARCHS)
    feature_choice = _check("features (--features)", features, FEATURES)
    setting_choice = _check("setting (--setting)", setting, SETTINGS)
    if (arch, setting) in UNSUPPORTED:
        able = sorted(a for a in ARCHS if (a, setting) not in UNSUPPORTED)
        raise InitConfigError(
            f"The {arch} architecture has no objective for the {setting} setting; use "
            f"--arch {' or '.join(able)}, or another --setting."
        )
    check_source_count(setting, source_count)
    mix = check_mix(setting, mix)
    if mix not in (None, "upsample") and overrides and "vars.target_upsample" in overrides:
        raise InitConfigError(
            f"--vars.target_upsample is the fixed factor of --mix upsample; --mix {mix} sizes the target's "
            "part from the corpora (set a fixed part with --corpora.train.domains.target.share, e.g. 0.5)."
        )
    names: List[str] = ["base", *feature_choice.fragments, *arch_choice.fragments,
                        *setting_choice.fragments]
    for combo in (f"{arch}.{FEATURE_FAMILY.get(features, features)}", f"{arch}.{setting}"):
        if (CONFIGS_DIR / "combos" / f"{combo}.cfg").exists():
            names.append(f"combos/{combo}")
    config: Dict[str, Any] = {}
    for name in names:
        _merge(config, _read_fragment(name))
    if setting == "finetune":
        # Stage 2 sources every component of the stage-1 pipeline as it was trained.
        config["components"] = {
            name: {"source": "${paths.pretrained}"} for name in config["nlp"]["pipeline"]
        }
    if source_count is not None:
        number_sources(config, source_count, setting)
    if mix is not None:
        apply_mix(config, mix)
    if overrides:
        # A section spacy train does not read would keep a (mistyped) override, silently unused.
        known = set(config) | {"paths", "system", "nlp", "components", "corpora", "training",
                               "pretraining", "initialize", "vars"}
        unknown = sorted({dotted.split(".")[0] for dotted in overrides if "." in dotted} - known)
        if unknown:
            raise InitConfigError(
                f"No section [{unknown[0]}] in a spaCy config (override --{unknown[0]}...); "
                f"sections: {', '.join(sorted(known))}."
            )
        _merge(config, _nest(overrides))
    if fine_tune is not None:
        # after the overrides: an overridden learn_rate is the one the schedule starts from
        _apply_fine_tune(config, fine_tune, features, overrides)
    return Config(config)


def fill(config: Union[Config, Dict[str, Any]]) -> Config:
    """Fill spaCy's defaults into a config without building the pipeline: spaCy's
    ``default_config.cfg`` under it, each factory's default config under its component, then every
    registered function's default arguments (``registry.fill``). Variables stay variables."""
    import spacy
    from spacy.language import Language
    from spacy.util import registry

    import spacy_crossner.pipeline  # noqa: F401  (the crossner factory)

    filled = Config(spacy.util.load_config_from_str(Language.default_config.to_str(), interpolate=False))
    filled = filled.merge(Config(config))
    components = filled.get("components", {})
    for name, block in components.items():
        factory = block.get("factory")
        if factory is None:
            continue
        if factory == "transformer":
            import spacy_transformers  # noqa: F401  (registers the factory)
        if not Language.has_factory(factory):
            raise InitConfigError(f"Component {name!r} uses factory {factory!r}, which is not registered.")
        defaults = Language.get_factory_meta(factory).default_config or {}
        components[name] = Config(copy.deepcopy(defaults)).merge(Config(block))
    return registry.fill(filled, validate=False)


# Sections whose keys spaCy reads by name (its schemas): a key they lack would be ignored. Other
# sections (paths, vars, corpora, components, score_weights, ...) take new entries.
CLOSED_SECTIONS = {("training",), ("nlp",), ("pretraining",), ("initialize",), ("system",)}


def _closed(path: Tuple[str, ...], section: Dict[str, Any], replaced: set) -> bool:
    """Whether an override may not add a key to ``section`` (at ``path`` of the config)."""
    if not section or path in replaced:
        return False  # an empty section is filled by the user; a replaced function has other arguments
    return path in CLOSED_SECTIONS or "factory" in section or any(key.startswith("@") for key in section)


def check_overrides(base: Config, filled: Config, overrides: Dict[str, Any]) -> None:
    """Refuse overrides ``spacy train`` would refuse or ignore, before the config is written.

    base (Config): the filled config without the overrides. filled (Config): the filled config with
    them. overrides (Dict[str, Any]): the dotted settings.
    An override naming a key that a known section lacks is an error naming the section's keys; a
    value of the wrong type in ``[training]`` is found by spaCy's own training schema.
    """
    from confection import ConfigValidationError
    from spacy.schemas import ConfigSchemaTraining
    from spacy.util import registry

    replaced = {tuple(dotted.split(".")[:-1]) for dotted in overrides if dotted.split(".")[-1].startswith("@")}
    for dotted in overrides:
        parts = dotted.split(".")
        node: Any = base
        for depth, part in enumerate(parts):
            if not isinstance(node, dict):
                break
            path = tuple(parts[:depth])
            if part not in node:
                if depth and _closed(path, node, replaced):
                    section = ".".join(path)
                    raise InitConfigError(
                        f"The override --{dotted} names no setting of [{section}]: it has no key "
                        f"{part!r} (its keys: {', '.join(sorted(node))})."
                    )
                break
            node = node[part]
    if not any(dotted.startswith("training.") for dotted in overrides):
        return
    try:
        registry.resolve(filled.interpolate()["training"], schema=ConfigSchemaTraining, validate=True)
    except ConfigValidationError as err:
        problems = "; ".join(
            f"training.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in err.errors
        ) or str(err)
        raise InitConfigError(
            f"spaCy's [training] schema refuses the config with the overrides "
            f"({' '.join(f'--{k} {v}' for k, v in overrides.items())}): {problems}."
        ) from None


def train_args(setting: str, source_count: Optional[int] = None) -> str:
    """What ``spacy train`` needs on the command line for a setting (TRAIN_ARGS), the numbered
    sources' paths in place of the single source's."""
    if source_count is None:
        return TRAIN_ARGS[setting]
    args = " ".join(f"--paths.source_train_{i} S{i}/train.spacy" for i in range(source_count))
    if setting == "pretrain":
        args += " " + " ".join(f"--paths.source_dev_{i} S{i}/dev.spacy" for i in range(source_count))
        if source_count > 1:
            args += " --vars.target_domain S0_DOMAIN"
        return args
    return args + " " + TRAIN_ARGS[setting].split(" ", 2)[2]


def header(*, arch: str, features: str, setting: str, output: str,
           overrides: Optional[Dict[str, Any]] = None, fine_tune: Optional[FineTune] = None,
           source_count: Optional[int] = None, mix: Optional[str] = None) -> str:
    """The comment lines on top of a written config: what made it and how to train it."""
    made = f"python -m spacy_crossner init-config {output} --arch {arch} --features {features} --setting {setting}"
    if source_count is not None:
        made += f" --source-count {source_count}"
    mix = check_mix(setting, mix)
    if mix is not None:
        made += f" --mix {mix}"
    made += fine_tune.flags() if fine_tune is not None else ""
    for key, value in (overrides or {}).items():
        made += f" --{key} " + (f"'{json.dumps(value)}'" if isinstance(value, (dict, list)) else json.dumps(value))
    lines = [
        f"# {ARCHS[arch].help}; features: {FEATURES[features].help}; setting: {SETTINGS[setting].help}",
        f"# Made by: {made}",
        f"# Train:   python -m spacy train {output} {train_args(setting, source_count)} --gpu-id 0",
        "# (drop --gpu-id 0 on CPU; any setting below can be overridden on the command line the same way)",
    ]
    if source_count is not None:
        lines.append(
            f"# Sources: {source_count} labelled corpora, [corpora.train.domains.source_0] ...; each one's domain "
            "is its docs' doc._.domain (convert --domain), or --vars.source_domain_I NAME"
            + ("; --vars.target_domain names the domain of docs that carry none (any source's)."
               if setting == "pretrain" and source_count > 1 else ".")
        )
    if mix is not None:
        lines.append(f"# Mix: {mix}: {MIXES[mix]}.")
    if features in FEATURE_NOTES:
        lines.append(FEATURE_NOTES[features])
    return "\n".join(lines) + "\n"


def config_text(
    *, arch: str, features: str, setting: str, output: str = "config.cfg",
    overrides: Optional[Dict[str, Any]] = None, fine_tune: Optional[FineTune] = None,
    source_count: Optional[int] = None, mix: Optional[str] = None,
) -> str:
    """The text of the complete config of one choice: the header, then the filled config.

    arch, features, setting (str): the choices (keys of ARCHS, FEATURES, SETTINGS). output (str):
    the file name the header's commands use. overrides (Dict[str, Any]): dotted settings laid
    over the pieces. fine_tune (Optional[FineTune]): the optimizer's schedule and group rates.
    source_count (Optional[int]): numbered labelled sources (see compose). mix (Optional[str]): the
    joint setting's mix (see compose).
    """
    choice = dict(arch=arch, features=features, setting=setting, source_count=source_count, fine_tune=fine_tune,
                  mix=mix)
    filled = fill(compose(**choice, overrides=overrides))
    if overrides:
        check_overrides(fill(compose(**choice)), filled, overrides)
    return header(arch=arch, features=features, setting=setting, output=output,
                  overrides=overrides, fine_tune=fine_tune, source_count=source_count,
                  mix=mix) + filled.to_str(interpolate=False)


def init_config(
    output: Union[str, Path], *, arch: str, features: str, setting: str,
    overrides: Optional[Dict[str, Any]] = None, force: bool = True,
    fine_tune: Optional[FineTune] = None, source_count: Optional[int] = None, mix: Optional[str] = None,
) -> str:
    """Write the complete config of one choice to ``output`` ("-" = stdout); return its text.

    output (Union[str, Path]): the .cfg file to write. arch, features, setting (str): the choices
    (keys of ARCHS, FEATURES, SETTINGS). overrides (Dict[str, Any]): dotted settings laid over the
    pieces. force (bool): overwrite an existing file. fine_tune (Optional[FineTune]): the
    optimizer's schedule and rates per group (FineTune's defaults: the config's own).
    source_count (Optional[int]): train on this many labelled source corpora, given as
    --paths.source_train_0 ... (settings joint and pretrain); None: one, --paths.source_train.
    mix (Optional[str]): how the joint setting mixes its labelled corpora (a key of MIXES;
    None: DEFAULT_MIX).
    """
    path = Path(output)
    if str(output) != "-":
        if path.is_dir():
            raise InitConfigError(f"{path} is a folder: give the path of the .cfg file to write.")
        if path.exists() and not force:
            raise InitConfigError(f"{path} exists; pass --force to overwrite it.")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise InitConfigError(f"{path}: {parent} is a file, not a folder.")
                break
    text = config_text(arch=arch, features=features, setting=setting, output=str(output),
                       overrides=overrides, fine_tune=fine_tune, source_count=source_count, mix=mix)
    if str(output) == "-":
        print(text, end="")
        return text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf8")
    return text


def parse_overrides(args: Sequence[str]) -> Dict[str, Any]:
    """``["--training.max_steps", "100"]`` -> ``{"training.max_steps": 100}`` (spaCy's parser)."""
    from spacy.cli._util import parse_config_overrides

    args = list(args)
    for i, arg in enumerate(args):
        # spaCy's parser reads a flag with no value as true: `--training.max_steps` alone would
        # write max_steps = true.
        if arg.startswith("--") and "=" not in arg and (i + 1 == len(args) or args[i + 1].startswith("--")):
            raise InitConfigError(f"The override {arg} has no value: write it as {arg} VALUE.")
    try:
        return parse_config_overrides(list(args))
    except SystemExit as err:  # spaCy's parser exits on a flag with no dotted name
        raise InitConfigError(
            f"Could not read the overrides {' '.join(args)!r}: write them as --section.key value."
        ) from err
