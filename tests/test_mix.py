"""spacy_crossner.MultiDomainCorpus.v2: a mix of labelled corpora that fits any target size."""
from collections import Counter

import pytest
import spacy
from spacy.tokens import DocBin
from spacy.util import registry

from spacy_crossner import get_domain
from spacy_crossner.readers import (
    create_multi_domain_corpus,
    create_multi_domain_corpus_v2,
    mix_counts,
)
from util import make_doc


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


def write_domain(path, nlp, domain, n):
    """n distinct one-entity sentences of a domain, as a .spacy file."""
    db = DocBin(store_user_data=True)
    for i in range(n):
        db.add(make_doc(nlp, [f"{domain}{i}", "is", "here"], [(0, 1, "thing")], domain))
    db.to_disk(path)
    return str(path)


@pytest.fixture
def sizes(tmp_path, nlp):
    """A large source (400 docs), a small target (4) and a large target (100)."""
    return {
        "source": write_domain(tmp_path / "source.spacy", nlp, "news", 400),
        "small": write_domain(tmp_path / "small.spacy", nlp, "ai", 4),
        "large": write_domain(tmp_path / "large.spacy", nlp, "bio", 100),
        "raw": str(_raw(tmp_path / "raw.txt")),
    }


def _raw(path):
    path.write_text("raw text one\nraw text two\n", encoding="utf8")
    return path


def domain_counts(corpus, nlp):
    return Counter(get_domain(eg.reference) for eg in corpus(nlp))


def test_sqrt_mix_is_the_default_and_grows_with_the_target(nlp, sizes):
    small = create_multi_domain_corpus_v2(
        domains={"source": {"path": sizes["source"]}, "target": {"path": sizes["small"]}}
    )
    large = create_multi_domain_corpus_v2(
        domains={"source": {"path": sizes["source"]}, "target": {"path": sizes["large"]}}
    )
    # shares in proportion to sqrt(size): 20 : 2 and 20 : 10 of a pass of 404 and 500 docs
    assert domain_counts(small, nlp) == {"news": round(404 * 20 / 22), "ai": round(404 * 2 / 22)}
    assert domain_counts(large, nlp) == {"news": round(500 * 20 / 30), "bio": round(500 * 10 / 30)}
    # the small target is upsampled (37 docs from 4: every doc 9 times, 1 at random) ...
    texts = Counter(eg.reference.text for eg in small(nlp) if get_domain(eg.reference) == "ai")
    assert sorted(texts.values()) == [9, 9, 9, 10]
    # ... the source of the small-target mix subsampled, without repeats
    news = Counter(eg.reference.text for eg in small(nlp) if get_domain(eg.reference) == "news")
    assert max(news.values()) == 1


def test_shares_fix_a_corpus_part_and_the_rest_follow_the_mix(nlp, sizes):
    corpus = create_multi_domain_corpus_v2(
        domains={
            "source": {"path": sizes["source"]},
            "target": {"path": sizes["small"], "share": 0.5},
            "raw": {"path": sizes["raw"], "raw": True, "domain": "ai", "upsample": 2},
        },
        pass_size=100,
    )
    examples = list(corpus(nlp))
    labelled = Counter(get_domain(eg.reference) for eg in examples if eg.reference.has_annotation("ENT_IOB"))
    assert labelled == {"news": 50, "ai": 50}
    # raw text keeps its upsample factor, outside the labelled mix
    assert sum(not eg.reference.has_annotation("ENT_IOB") for eg in examples) == 4
    assert mix_counts([400, 4, 100], [None, None, None], "equal") == [168, 168, 168]
    assert mix_counts([400, 4, 100], [None, None, None], "size") == [400, 4, 100]
    assert mix_counts([400, 4], [0.25, 0.75], "sqrt", 8) == [2, 6]


def test_upsample_mix_is_v1s_stream(nlp, sizes):
    """mix = "upsample" gives exactly v1's passes (CrossNER's target x10), seed for seed."""
    domains = {"source": {"path": sizes["source"], "upsample": 0.5},
               "target": {"path": sizes["small"], "upsample": 10}}
    v1 = create_multi_domain_corpus(domains=domains, seed=3)
    v2 = create_multi_domain_corpus_v2(domains=domains, mix="upsample", seed=3)
    for _ in range(2):
        assert [eg.reference.text for eg in v1(nlp)] == [eg.reference.text for eg in v2(nlp)]
    assert domain_counts(v2, nlp) == {"news": 200, "ai": 40}


def test_v2_passes_are_reproducible_and_reshuffled(nlp, sizes):
    domains = {"source": {"path": sizes["source"]}, "target": {"path": sizes["small"]}}
    a = create_multi_domain_corpus_v2(domains=domains, seed=1)
    b = create_multi_domain_corpus_v2(domains=domains, seed=1)
    first = [eg.reference.text for eg in a(nlp)]
    assert first == [eg.reference.text for eg in b(nlp)]
    assert [eg.reference.text for eg in a(nlp)] != first


def test_v2_is_registered_and_v1_rejects_share(sizes):
    assert registry.readers.get("spacy_crossner.MultiDomainCorpus.v2") is create_multi_domain_corpus_v2
    with pytest.raises(ValueError, match=r"share needs @readers = \"spacy_crossner.MultiDomainCorpus.v2\""):
        create_multi_domain_corpus(domains={"t": {"path": sizes["small"], "share": 0.5}})


@pytest.mark.parametrize(
    "domains,kwargs,message",
    [
        ({"s": {"upsample": 2}}, {}, r"\[corpora.\*.domains.s\] upsample = 2 but mix = \"sqrt\".*share"),
        ({"s": {"share": 0.5}}, {"mix": "upsample"}, r"domains.s\] share = 0.5 but mix = \"upsample\""),
        ({"s": {"share": 0.7}, "t": {"share": 0.6}}, {}, r"add up to 1.3.*make them add up to 1"),
        ({"s": {"share": 1.0}, "t": {}}, {}, r"leaving nothing for t"),
        ({"s": {"share": 0}}, {}, r"share must be a number with 0 < share <= 1"),
        ({"r": {"raw": True, "share": 0.5}}, {}, r"share is for labelled corpora"),
        ({"s": {}}, {"mix": "temperature"}, r"mix must be one of"),
        ({"s": {}}, {"pass_size": -1}, r"pass_size must be an integer >= 0"),
    ],
)
def test_v2_settings_errors_name_the_setting(sizes, domains, kwargs, message):
    full = {name: {"path": sizes["raw" if v.get("raw") else "small"], **v} for name, v in domains.items()}
    with pytest.raises(ValueError, match=message):
        create_multi_domain_corpus_v2(domains=full, **kwargs)


def test_a_joint_config_switches_to_v2_by_overrides(tmp_path, nlp, sizes):
    """The README's overrides: v2 reader, the fixed factors set to null."""
    from pathlib import Path

    from spacy.util import load_config, resolve_dot_names

    config = load_config(Path(__file__).parents[1] / "configs" / "bilstm_joint.cfg", overrides={
        "paths.source_train": sizes["source"], "paths.target_train": sizes["small"],
        "paths.target_dev": sizes["small"],
        "corpora.train.@readers": "spacy_crossner.MultiDomainCorpus.v2",
        "corpora.train.domains.source.upsample": None, "corpora.train.domains.target.upsample": None,
    }, interpolate=False)
    corpus = resolve_dot_names(config.interpolate(), ["corpora.train"])[0]
    assert domain_counts(corpus, nlp) == {"news": round(404 * 20 / 22), "ai": round(404 * 2 / 22)}
    # v1 keeps refusing a null factor
    with pytest.raises(ValueError, match="target.upsample must be a number >= 0, got None"):
        create_multi_domain_corpus(domains={"target": {"path": sizes["small"], "upsample": None}})
