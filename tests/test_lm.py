import pytest
import spacy
import torch
from spacy.tokens import Doc

from spacy_crossner.lm import EntityDictionary, build_lm_vocab, lm_word_ids, normalize_word
from spacy_crossner.models.pytorch_lm import SampledSoftmaxLM, expected_count, log_uniform_sample

DICT_DIR = __import__("pathlib").Path(__file__).parents[2] / "shared" / "data" / "dictionaries" / "conll2003"


def test_vocab_is_frequency_sorted_with_unk_first():
    vocab = build_lm_vocab([["a", "b", "b"], ["c", "b", "a", "2019"]], max_size=4)
    assert vocab == ["<unk>", "b", "a", "c"]
    assert build_lm_vocab([["x", "y", "x"]], min_count=2) == ["<unk>", "x"]
    assert normalize_word("A1b22") == "A0b00"


def test_word_ids_pad_and_unk():
    nlp = spacy.blank("en")
    docs = [Doc(nlp.vocab, words=["a", "zz"]), Doc(nlp.vocab, words=["b"])]
    ids = lm_word_ids(docs, {"<unk>": 0, "a": 1, "b": 2})
    assert ids.tolist() == [[1, 0], [2, -1]]


def test_neighbour_targets():
    ids = torch.tensor([[5, 6, 7], [8, 9, -1]])
    nxt, prv = SampledSoftmaxLM.neighbour_targets(ids, torch.tensor([3, 2]))
    assert nxt.tolist() == [[6, 7, 0], [9, 0, -1]]
    assert prv.tolist() == [[0, 5, 6], [0, 8, -1]]


def test_log_uniform_samples_are_distinct_and_zipfian():
    torch.manual_seed(0)
    ids, tries = log_uniform_sample(1000, 50)
    assert len(set(ids.tolist())) == 50 and tries >= 50
    counts = torch.zeros(1000)
    for _ in range(200):
        s, _ = log_uniform_sample(1000, 5)
        counts[s] += 1
    assert counts[:10].sum() > counts[500:].sum()
    assert torch.all(expected_count(torch.tensor([0, 999]), 1000, 50) <= 1)


def test_sampled_softmax_learns_and_full_softmax_matches_cross_entropy():
    torch.manual_seed(0)
    lm = SampledSoftmaxLM(200, 16, n_samples=20)
    states = torch.randn(64, 16)
    targets = torch.randint(0, 200, (64,))
    targets[:4] = -1
    full = lm.loss(states, targets, sampled=False)
    ref = torch.nn.functional.cross_entropy(states[4:] @ lm.weight.t() + lm.bias, targets[4:], reduction="sum")
    assert torch.allclose(full, ref)
    opt = torch.optim.Adam(lm.parameters(), lr=0.05)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = lm.loss(states, targets)
        loss.backward()
        opt.step()
        first = first if first is not None else float(loss.detach())
    assert float(lm.loss(states, targets, sampled=False).detach()) < float(full.detach())
    assert float(loss.detach()) < first


def test_dictionary_matches_multi_word_entries_as_spans(tmp_path):
    (tmp_path / "person.txt").write_text("John Smith\nMary\n", encoding="utf8")
    (tmp_path / "organization.txt").write_text("New York Times\nTimes", encoding="utf8")
    d = EntityDictionary.from_dir(tmp_path, {"organization": "organisation"})
    assert d.types == ["organisation", "person"]
    words = "John Smith read the New York Times with Mary".split()
    assert d.match(words) == [(0, 2, "person"), (4, 7, "organisation"), (8, 9, "person")]
    assert d.token_types(words, {"person": 3}) == [3, 3, -1, -1, -1, -1, -1, -1, 3]


def test_dictionary_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        EntityDictionary.from_dir(tmp_path / "missing")
    with pytest.raises(ValueError, match="has no <type>.txt files"):
        EntityDictionary.from_dir(tmp_path)
    (tmp_path / "x.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(ValueError, match="not UTF-8"):
        EntityDictionary.from_dir(tmp_path)


def test_shared_conll_dictionary_keeps_multi_word_entries():
    assert DICT_DIR.is_dir(), f"missing test data: {DICT_DIR}"
    d = EntityDictionary.from_dir(DICT_DIR)
    entries = d.to_dict()
    assert set(entries) == {"person", "location", "organization", "misc"}
    multi = [e for names in entries.values() for e in names if " " in e]
    assert multi, "multi-word entries must be kept"
    name = multi[0].split()
    assert d.match(["x"] + name + ["y"])[0][:2] == (1, 1 + len(name))
