"""Any corpus, any label set, end to end (issue 12): five small corpora of our own making, in
shapes CrossNER does not have, are converted, trained a few steps with configs/bilstm_target.cfg,
configs/bilstm_joint.cfg (with a non-CoNLL source) and configs/moee_zero.cfg (zero-shot, scored
through a label map), and evaluated, using only documented overrides (--paths.*, --vars.*,
training and size settings)."""
import json
from pathlib import Path

import pytest
import spacy
from spacy.cli.train import train
from spacy.tokens import DocBin
from spacy.vocab import Vocab
from typer.testing import CliRunner

from spacy_crossner.cli import app
from spacy_crossner.domains import get_domain
from spacy_crossner.evaluate import evaluate

CONFIGS = Path(__file__).parents[1] / "configs"

# (words, entities as (start, end, label)) per sentence; each corpus writes them in its format
SENTENCES = {
    # BIOES, space-separated, PER/LOC/ORG
    "bioes": [
        ("Ada Lovelace lived in London .", [(0, 2, "PER"), (4, 5, "LOC")]),
        ("Acme Corp hired Alan Turing .", [(0, 2, "ORG"), (3, 5, "PER")]),
        ("Paris is far from Rome .", [(0, 1, "LOC"), (4, 5, "LOC")]),
        ("Grace works for Globex .", [(0, 1, "PER"), (3, 4, "ORG")]),
    ],
    # IOB2, tab-separated, CRLF, eight OntoNotes-like types (none of CoNLL's)
    "tab8": [
        ("The Eiffel Tower hosted the World Cup final .", [(1, 3, "FACILITY"), (5, 7, "EVENT")]),
        ("French speakers read Les Miserables in Quebec .", [(0, 1, "NORP"), (3, 5, "WORK_OF_ART"), (6, 7, "GPE")]),
        ("The iPhone obeys the Clean Air Act .", [(1, 2, "PRODUCT"), (4, 7, "LAW")]),
        ("Basque is spoken near Bilbao .", [(0, 1, "LANGUAGE"), (4, 5, "GPE")]),
    ],
    # IOB2, old Mac line endings (CR only), PER/LOC
    "mac": [
        ("Steve met Woz in Cupertino .", [(0, 1, "PER"), (2, 3, "PER"), (4, 5, "LOC")]),
        ("Tim visited Dublin .", [(0, 1, "PER"), (2, 3, "LOC")]),
        ("Nobody came .", []),
    ],
    # IOB2, tab-separated, with control characters and empty columns after the tags
    "ctrl": [
        ("Marie Curie studied in Warsaw .", [(0, 2, "PER"), (4, 5, "LOC")]),
        ("Pierre taught at the Sorbonne .", [(0, 1, "PER"), (4, 5, "ORG")]),
        ("Lyon is in France .", [(0, 1, "LOC"), (3, 4, "LOC")]),
    ],
    # biomedical-style labels with "_" and "-"
    "bio": [
        ("Aspirin inhibits COX-1 in platelets .", [(0, 1, "Simple_chemical"), (2, 3, "Gene_or_gene-product"), (4, 5, "Cell-type")]),
        ("Cisplatin damages DNA repair genes like BRCA1 .", [(0, 1, "Simple_chemical"), (6, 7, "Gene_or_gene-product")]),
        ("Insulin acts on hepatocytes .", [(0, 1, "Gene_or_gene-product"), (3, 4, "Cell-type")]),
    ],
}
# how each corpus's labels map onto the zero-shot model's source labels (the bioes corpus)
ZERO_SHOT_MAPS = {
    "tab8": {"GPE": "LOC", "FACILITY": "LOC"},
    "mac": {},
    "ctrl": {},
    "bio": {"Gene_or_gene-product": "ORG"},
}


def tags(n, ents, scheme):
    out = ["O"] * n
    for start, end, label in ents:
        for i in range(start, end):
            out[i] = f"I-{label}"
        out[start] = f"B-{label}"
        if scheme == "BIOES":
            if end - start == 1:
                out[start] = f"S-{label}"
            else:
                out[end - 1] = f"E-{label}"
    return out


def render(name: str) -> bytes:
    """The corpus in its own format."""
    lines = []
    for text, ents in SENTENCES[name]:
        words = text.split()
        sent_tags = tags(len(words), ents, "BIOES" if name == "bioes" else "IOB2")
        for i, (word, tag) in enumerate(zip(words, sent_tags)):
            if name in ("bioes", "mac"):
                lines.append(f"{word} {tag}")
            elif name == "ctrl":
                # \v or a trailing tab or "\r\r" after the tag, in turn
                lines.append(f"{word}\t{tag}" + ("\x0b", "\t", "\r\r", "")[i % 4])
            else:
                lines.append(f"{word}\t{tag}")
        lines.append("")
    newline = {"tab8": "\r\n", "mac": "\r"}.get(name, "\n")
    if name == "bioes":
        lines = ["-docstart- -X- O O", ""] + lines
    return newline.join(lines).encode("utf-8")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """name -> folder of train/dev/test.spacy, converted with the CLI."""
    root = tmp_path_factory.mktemp("any_corpus")
    out = {}
    for name in SENTENCES:
        raw = root / "raw" / name
        raw.mkdir(parents=True)
        for split in ("train", "dev", "test"):
            (raw / f"{split}.txt").write_bytes(render(name))
        result = CliRunner().invoke(app, ["convert", str(raw), str(root / name), "--domain", name,
                                          "--strict", "--no-progress"])
        assert result.exit_code == 0, result.output
        out[name] = root / name
    return out


def read(path):
    return list(DocBin().from_disk(path).get_docs(Vocab()))


@pytest.mark.parametrize("name", list(SENTENCES))
def test_every_corpus_converts_fully(corpora, name):
    docs = read(corpora[name] / "train.spacy")
    assert [d.text for d in docs] == [text for text, _ in SENTENCES[name]]
    expected = [[(" ".join(t.split()[s:e]), label) for s, e, label in ents] for t, ents in SENTENCES[name]]
    assert [[(e.text, e.label_) for e in d.ents] for d in docs] == expected
    assert {get_domain(d) for d in docs} == {name}


TINY = {
    "components.crossner.model.hidden_size": 8,
    "components.crossner.model.tok2vec.word_width": 8,
    "components.crossner.model.tok2vec.word_rows": 100,
    "components.crossner.model.tok2vec.char_width": 4,
    "components.crossner.model.tok2vec.char_filters": 4,
    "training.max_steps": 3,
    "training.eval_frequency": 1,
}


def tiny_train(config: str, out: Path, overrides: dict) -> Path:
    train(CONFIGS / config, out, overrides={**TINY, **overrides}, use_gpu=-1)
    return out / "model-last"


def expected_labels(name):
    return {label for _, ents in SENTENCES[name] for _, _, label in ents}


@pytest.mark.parametrize("name", list(SENTENCES))
def test_target_only_training_and_evaluation(corpora, name, tmp_path):
    data = corpora[name]
    model = tiny_train("bilstm_target.cfg", tmp_path / "target", {
        "paths.target_train": str(data / "train.spacy"),
        "paths.target_dev": str(data / "dev.spacy"),
        "vars.target_domain": name,
    })
    pipe = spacy.load(model).get_pipe("crossner")
    assert pipe.target_domain == name and set(pipe.label_data[name]) == expected_labels(name)
    result = evaluate(model=model, data=data / "test.spacy", output=tmp_path / "m.json")
    assert result["domain"] == name and result["n_docs"] == len(SENTENCES[name])
    assert result["n_gold_entities"] == sum(len(e) for _, e in SENTENCES[name])
    saved = json.loads((tmp_path / "m.json").read_text())
    assert {"ents_p", "ents_r", "ents_f", "ents_per_type", "speed", "token_acc"} <= set(saved)


@pytest.mark.parametrize("name", list(SENTENCES))
def test_joint_training_with_a_non_conll_source(corpora, name, tmp_path, capsys):
    # no --vars.target_domain: the target is the labelled domain of the dev corpus's docs
    source = "tab8" if name != "tab8" else "bio"
    model = tiny_train("bilstm_joint.cfg", tmp_path / "joint", {
        "paths.source_train": str(corpora[source] / "train.spacy"),
        "paths.target_train": str(corpora[name] / "train.spacy"),
        "paths.target_dev": str(corpora[name] / "dev.spacy"),
        "vars.target_upsample": 2,
    })
    printed = " ".join(capsys.readouterr().out.split())  # wasabi wraps long lines
    assert f"target_domain = '{name}': the domain of the dev corpus [corpora.dev]" in printed
    pipe = spacy.load(model).get_pipe("crossner")
    assert set(pipe.domains) == {source, name} and pipe.target_domain == name
    assert pipe.doc_labels(spacy.blank("en")("a b")) == pipe.label_data[name]  # no doc._.domain
    assert set(pipe.label_data[source]) == expected_labels(source)
    assert set(pipe.label_data[name]) == expected_labels(name)
    result = evaluate(model=model, data=corpora[name] / "test.spacy")
    assert result["domain"] == name and result["unpredictable_labels"] == {}


@pytest.fixture(scope="module")
def zero_shot_model(corpora, tmp_path_factory):
    """MoEE trained on the bioes corpus only; every other corpus is tagged with its labels."""
    out = tmp_path_factory.mktemp("zero")
    targets = [n for n in SENTENCES if n != "bioes"]
    train(CONFIGS / "moee_zero.cfg", out, use_gpu=-1, overrides={
        "paths.source_train": str(corpora["bioes"] / "train.spacy"),
        "paths.source_dev": str(corpora["bioes"] / "dev.spacy"),
        "vars.source_domain": "bioes",
        "vars.target_domains": targets,
        "components.crossner.model.hidden_size": 8,
        "components.crossner.model.expert_width": 8,
        "components.crossner.model.depth": 1,
        **{k: v for k, v in TINY.items() if "tok2vec" in k or "training" in k},
    })
    return out / "model-last"


@pytest.mark.parametrize("name", [n for n in SENTENCES if n != "bioes"])
def test_zero_shot_with_a_label_map(corpora, zero_shot_model, name):
    pipe = spacy.load(zero_shot_model).get_pipe("crossner")
    assert pipe.cfg["domain_aliases"][name] == "bioes"
    label_map = ZERO_SHOT_MAPS[name]
    result = evaluate(model=zero_shot_model, data=corpora[name] / "test.spacy",
                      label_map=json.dumps(label_map) if label_map else None)
    assert result["domain"] == name
    gold = {label_map.get(label, label) for label in expected_labels(name)}
    # what the source's labels (PER/LOC/ORG) cannot cover is listed, after mapping
    assert set(result["unpredictable_labels"]) == gold - {"PER", "LOC", "ORG"}
    assert set(result["ents_per_type"]) >= gold


def test_empty_target_corpus_in_a_joint_config_names_the_section(corpora, tmp_path):
    empty = tmp_path / "empty.spacy"
    DocBin().to_disk(empty)
    with pytest.raises(ValueError) as info:
        tiny_train("bilstm_joint.cfg", tmp_path / "joint", {
            "paths.source_train": str(corpora["tab8"] / "train.spacy"),
            "paths.target_train": str(empty),
            "paths.target_dev": str(corpora["bio"] / "dev.spacy"),
            "vars.target_domain": "bio",
        })
    assert "[corpora.*.domains.target]" in str(info.value) and str(empty) in str(info.value)
    assert "Unknown domain" not in str(info.value)


def test_target_domain_that_the_dev_corpus_does_not_single_out_is_asked_for(corpora, tmp_path):
    mixed = DocBin(store_user_data=True)
    for name in ("bio", "tab8"):
        for doc in read(corpora[name] / "dev.spacy"):
            mixed.add(doc)
    mixed.to_disk(tmp_path / "mixed.spacy")
    with pytest.raises(ValueError) as info:
        tiny_train("bilstm_joint.cfg", tmp_path / "joint", {
            "paths.source_train": str(corpora["tab8"] / "train.spacy"),
            "paths.target_train": str(corpora["bio"] / "train.spacy"),
            "paths.target_dev": str(tmp_path / "mixed.spacy"),
        })
    message = str(info.value)
    assert "--vars.target_domain" in message and "[corpora.dev]" in message
    assert "'bio'" in message and "'tab8'" in message


def test_finetune_reads_the_target_domain_from_its_corpus(corpora, tmp_path, capsys):
    pretrained = tiny_train("bilstm_pretrain.cfg", tmp_path / "pre", {
        "paths.source_train": str(corpora["tab8"] / "train.spacy"),
        "paths.source_dev": str(corpora["tab8"] / "dev.spacy"),
    })
    train(CONFIGS / "bilstm_finetune.cfg", tmp_path / "fine", use_gpu=-1, overrides={
        "paths.pretrained": str(pretrained),
        "paths.target_train": str(corpora["bio"] / "train.spacy"),
        "paths.target_dev": str(corpora["bio"] / "dev.spacy"),
        "vars.init_from": "tab8",
        "training.max_steps": 3,
        "training.eval_frequency": 1,
    })
    model = tmp_path / "fine" / "model-last"
    assert "target_domain = 'bio': the domain of labels_from" in " ".join(capsys.readouterr().out.split())
    pipe = spacy.load(model).get_pipe("crossner")
    assert pipe.target_domain == "bio" and set(pipe.domains) == {"tab8", "bio"}
