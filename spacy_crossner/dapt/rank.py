"""Ranking the sentences of a general corpus by similarity to a target's labelled text.

Used by :func:`~spacy_crossner.dapt.corpus.select_corpus` when a scorer is given: the corpus is
streamed once; each candidate sentence gets a score, and a bounded selection
(:class:`TopSelector`) keeps the best ones.

Scorers (``fit`` on the target's sentences, then ``score`` batches of sentences; higher = more
like the target):

- :class:`LexicalScorer` (``lexical``): TF-IDF cosine of a sentence's unigrams and bigrams
  (case-folded word tokens) to the centroid of the target sentences. Document frequencies are
  counted over the target sentences plus a *background sample*, the first ``background``
  sentences of the corpus (buffered, then scored like the rest): words common in general text
  (function words) get an IDF near zero, words frequent only in the target carry the score. When
  the corpus is ordered by topic, the first sentences are not a fair sample of it: raise
  ``background`` or shuffle the corpus first.
- :class:`EmbeddingScorer` (``minilm``): cosine between a sentence-embedding (mean of the
  encoder's token states over the attention mask, L2-normalised: how the bundled MiniLM, a
  sentence-transformers model, was trained) and the normalised mean of the target sentences'
  embeddings. Any Hugging Face encoder directory works; the default is the bundled MiniLM, read
  from its installed path (offline).

Reference text (the target's labelled text and the ``exclude`` corpora) is read from the formats
the CLI reads elsewhere: token/tag column files, ``.spacy`` DocBins, and plain text with one
whitespace-tokenised sentence per line (a folder stands for its data files).

Duplicates of dev/test text (:class:`Exclusion`): a corpus sentence is dropped when its
*normalised* text (case-folded, everything but letters and digits removed, so tokenisation and
spacing do not matter) equals that of a reference sentence, or when it shares a run of
``ngram`` normalised word tokens with one (the corpus and the reference may split sentences
differently).
"""
import hashlib
import heapq
import math
import tempfile
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from .text import DaptInputError, tokenize_words

SCORERS = ("lexical", "minilm")
DEFAULT_BACKGROUND = 20_000
DEFAULT_EXCLUDE_NGRAM = 13


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf8"), digest_size=8).digest()


def normalized_tokens(text: str) -> List[str]:
    """Case-folded word tokens that hold a letter or digit (punctuation dropped)."""
    out = []
    for token in tokenize_words(text):
        norm = "".join(ch for ch in token.casefold() if ch.isalnum())
        if norm:
            out.append(norm)
    return out


@dataclass
class ReferenceText:
    """Sentences (as token lists) and entity mentions read from reference files.

    sentences (List[List[str]]): the sentences' tokens.
    entities (List[Tuple[str, str]]): ``(surface, label)`` of every entity annotated in them.
    files (List[str]): the files read.
    """

    sentences: List[List[str]] = field(default_factory=list)
    entities: List[Tuple[str, str]] = field(default_factory=list)
    files: List[str] = field(default_factory=list)

    @property
    def texts(self) -> List[str]:
        return [" ".join(words) for words in self.sentences]


def _reference_files(path: Path) -> List[Path]:
    from ..convert import scan_directory

    if not path.exists():
        raise DaptInputError(f"File not found: {path}")
    if path.is_file():
        return [path]
    spacy = sorted(path.glob("**/*.spacy"))
    found = spacy or scan_directory(path)[0]
    if not found:
        raise DaptInputError(f"No .spacy or data files (.txt, .conll, ...) in the folder {path}")
    return found


def read_reference(paths: Sequence[Union[str, Path]]) -> ReferenceText:
    """Read labelled or plain reference text: column files, ``.spacy`` files, plain text.

    paths (Sequence[Union[str, Path]]): files or folders (a folder stands for its ``.spacy``
        files if it has any, else for its data files).
    RETURNS (ReferenceText): every sentence, and the entities of labelled files.
    Raises DaptInputError naming the file (and line) that cannot be read.
    """
    from spacy.vocab import Vocab

    from ..convert import looks_like_columns
    from ..docbin import read_docbin
    from ..formats import FormatError, read_column_file, read_utf8, split_lines, tags_to_spans

    ref = ReferenceText()
    for given in paths:
        for path in _reference_files(Path(given)):
            ref.files.append(str(path))
            if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
                # Read as plain text, each JSON line would become one "sentence" of its
                # keys and quotes.
                raise DaptInputError(
                    f"{path}: JSON is not read as reference text; give labelled text (a token/tag "
                    "column file or .spacy) or plain text with one sentence a line"
                )
            if path.suffix == ".spacy":
                try:
                    docs = list(read_docbin(path, Vocab()))
                except Exception as err:  # msgpack/zlib errors do not name the file
                    raise DaptInputError(
                        f"Cannot read {path} as a .spacy DocBin ({type(err).__name__}: {err})"
                    ) from None
                for doc in docs:
                    ref.sentences.append([t.text for t in doc])
                    ref.entities.extend((ent.text, ent.label_) for ent in doc.ents)
                continue
            try:
                text = read_utf8(path)
                if looks_like_columns(text):
                    column_file = read_column_file(path)
                    for sentence in column_file.sentences:
                        ref.sentences.append(sentence.words)
                        spans, _ = tags_to_spans(sentence.tags, column_file.scheme)
                        ref.entities.extend(
                            (" ".join(sentence.words[s.start : s.end]), s.label) for s in spans
                        )
                else:
                    ref.sentences.extend(line.split() for line in split_lines(text) if line.strip())
            except FormatError as err:
                raise DaptInputError(str(err)) from None
    return ref


class Exclusion:
    """Normalised sentences and word n-grams of dev/test text, for dropping their duplicates.

    sentences (Iterable[Sequence[str]]): the reference sentences' tokens.
    ngram (int): a corpus sentence sharing this many consecutive normalised tokens with a
        reference sentence is dropped too (0: exact normalised matches only).
    Memory: 8 bytes per reference sentence and per n-gram.
    """

    def __init__(self, sentences: Iterable[Sequence[str]], ngram: int = DEFAULT_EXCLUDE_NGRAM) -> None:
        if ngram < 0:
            raise DaptInputError(f"The exclusion n-gram length must be >= 0 (0 = off), got {ngram}")
        self.ngram = ngram
        self.keys: Set[bytes] = set()
        self.ngrams: Set[bytes] = set()
        for words in sentences:
            tokens = normalized_tokens(" ".join(words))
            if not tokens:
                continue
            self.keys.add(_digest("".join(tokens)))
            self.ngrams.update(self._ngrams(tokens))

    def _ngrams(self, tokens: List[str]) -> Iterable[bytes]:
        if not self.ngram:
            return ()
        return (_digest(" ".join(tokens[i : i + self.ngram])) for i in range(len(tokens) - self.ngram + 1))

    def __len__(self) -> int:
        return len(self.keys)

    def matches(self, sentence: str) -> bool:
        """Whether a corpus sentence duplicates (or overlaps) the reference text."""
        tokens = normalized_tokens(sentence)
        if not tokens:
            return False
        if _digest("".join(tokens)) in self.keys:
            return True
        return any(gram in self.ngrams for gram in self._ngrams(tokens))


class LexicalScorer:
    """TF-IDF cosine (unigrams + bigrams) to the target centroid (see the module docstring).

    background (int): corpus sentences buffered to count document frequencies with.
    """

    name = "lexical"

    def __init__(self, background: int = DEFAULT_BACKGROUND) -> None:
        if background < 0:
            raise DaptInputError(f"The background sample must be >= 0 sentences, got {background}")
        self.background_size = background
        self.idf: Dict[str, float] = {}
        self.default_idf = 0.0
        self.centroid: Dict[str, float] = {}

    @staticmethod
    def terms(text: str) -> Counter:
        tokens = normalized_tokens(text)
        counts = Counter(tokens)
        counts.update(f"{a} {b}" for a, b in zip(tokens, tokens[1:]))
        return counts

    def _vector(self, text: str) -> Dict[str, float]:
        vector = {
            term: (1.0 + math.log(tf)) * self.idf.get(term, self.default_idf)
            for term, tf in self.terms(text).items()
        }
        norm = math.sqrt(sum(v * v for v in vector.values()))
        return {t: v / norm for t, v in vector.items()} if norm > 0 else {}

    def fit(self, target: Sequence[str], background: Sequence[str]) -> None:
        """Count document frequencies and build the target centroid.

        target (Sequence[str]): the target's sentences.
        background (Sequence[str]): the background sample of the corpus.
        """
        df: Counter = Counter()
        for text in list(target) + list(background):
            df.update(self.terms(text).keys())
        n_docs = len(target) + len(background)
        self.idf = {term: math.log((1 + n_docs) / (1 + n)) for term, n in df.items()}
        self.default_idf = math.log(1 + n_docs)
        centroid: Counter = Counter()
        for text in target:
            centroid.update(self._vector(text))
        norm = math.sqrt(sum(v * v for v in centroid.values()))
        if norm == 0:
            raise DaptInputError("The target text has no word the lexical scorer can use")
        self.centroid = {t: v / norm for t, v in centroid.items()}

    def score(self, texts: Sequence[str]) -> List[float]:
        """Cosine of each text to the target centroid, in [0, 1]."""
        out = []
        for text in texts:
            vector = self._vector(text)
            out.append(sum(v * self.centroid.get(t, 0.0) for t, v in vector.items()))
        return out


class EmbeddingScorer:
    """Sentence-embedding cosine to the target centroid (see the module docstring).

    model (Optional[str]): a Hugging Face encoder directory or hub name; None = the bundled MiniLM.
    batch_size (int): sentences encoded at once.
    gpu_id (Optional[int]): None: the first GPU when torch sees one, else CPU; -1: CPU; N: GPU N.
    max_length (int): word pieces per sentence (longer ones are truncated).
    """

    name = "minilm"
    background_size = 0

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        batch_size: int = 64,
        gpu_id: Optional[int] = None,
        max_length: int = 128,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from ..misc import bundled_transformer

        if batch_size < 1:
            raise DaptInputError(f"The batch size must be >= 1, got {batch_size}")
        if gpu_id is not None and gpu_id >= torch.cuda.device_count():
            # Before loading the encoder: moving it there would fail with torch's AssertionError.
            raise DaptInputError(
                f"--gpu-id {gpu_id}: torch sees {torch.cuda.device_count()} GPU(s); give one of "
                "them, or --gpu-id -1 for the CPU"
            )
        self.model_name = model or bundled_transformer()
        if model and model.startswith(("/", ".", "~")) and not Path(model).expanduser().exists():
            # Else transformers reads the path as a hub name and blames its form.
            raise DaptInputError(f"--model {model}: no such encoder directory")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_name)
            self.model = AutoModel.from_pretrained(self.model_name)
        except (OSError, ValueError) as err:
            raise DaptInputError(f"Cannot load the encoder {self.model_name}: {err}") from None
        # thinc's ops choose the device, as `spacy train --gpu-id` does; torch follows them
        from thinc.api import prefer_gpu, require_cpu, require_gpu
        from thinc.util import get_torch_default_device

        if gpu_id is None:
            prefer_gpu()
        elif gpu_id < 0:
            require_cpu()
        else:
            try:
                require_gpu(gpu_id)
            except ValueError as err:
                raise DaptInputError(f"--gpu-id {gpu_id}: {err}; use --gpu-id -1 for the CPU") from None
        self.device = get_torch_default_device()
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.max_length = max_length
        self.centroid = None

    def embed(self, texts: Sequence[str]):
        """L2-normalised mean-pooled embeddings, a float tensor (len(texts), width) on CPU."""
        import torch

        chunks = []
        with torch.no_grad():
            for i in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    list(texts[i : i + self.batch_size]), padding=True, truncation=True,
                    max_length=self.max_length, return_tensors="pt",
                ).to(self.device)
                states = self.model(**batch).last_hidden_state  # (batch, pieces, width)
                mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)  # (batch, pieces, 1)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (batch, width)
                chunks.append(torch.nn.functional.normalize(pooled, dim=-1).cpu())
        return torch.cat(chunks) if chunks else torch.zeros((0, 0))

    def fit(self, target: Sequence[str], background: Sequence[str] = ()) -> None:
        """The normalised mean of the target sentences' embeddings."""
        import torch

        if not target:
            raise DaptInputError("The target text holds no sentence")
        self.centroid = torch.nn.functional.normalize(self.embed(target).mean(0), dim=0)

    def score(self, texts: Sequence[str]) -> List[float]:
        """Cosine of each text to the target centroid, in [-1, 1]."""
        if not texts:
            return []
        return (self.embed(texts) @ self.centroid).tolist()


def make_scorer(
    name: str,
    *,
    background: int = DEFAULT_BACKGROUND,
    model: Optional[str] = None,
    batch_size: int = 64,
    gpu_id: Optional[int] = None,
):
    """A scorer by name (:data:`SCORERS`)."""
    if name == "lexical":
        return LexicalScorer(background=background)
    if name == "minilm":
        return EmbeddingScorer(model, batch_size=batch_size, gpu_id=gpu_id)
    raise DaptInputError(f"Unknown scorer {name!r}: use one of {', '.join(SCORERS)}")


class TopSelector:
    """Keeps the best-scored sentences of a stream, by one of three budgets.

    top_n (Optional[int]): keep the N best sentences (memory: N sentences).
    top_tokens (Optional[int]): keep the best sentences until they hold at least this many tokens
        (memory: about that many tokens of text).
    top_share (Optional[float]): keep the best share (0 < share <= 1) of the sentences scored.
        The share of an unknown total cannot be kept in a bounded heap: every sentence goes to a
        temporary file and only its score, offset and length stay in memory (16 bytes each).
    Exactly one budget is given. Ties keep the earlier sentence.
    """

    def __init__(
        self, *, top_n: Optional[int] = None, top_tokens: Optional[int] = None,
        top_share: Optional[float] = None,
    ) -> None:
        given = [(k, v) for k, v in (("top_n", top_n), ("top_tokens", top_tokens), ("top_share", top_share)) if v is not None]
        if len(given) != 1:
            raise DaptInputError(
                "Give exactly one selection size: --top-n (sentences), --top-tokens or --top-share"
                + (f" (got {', '.join(k for k, _ in given)})" if given else "")
            )
        kind, value = given[0]
        if kind == "top_share" and not 0 < value <= 1:
            raise DaptInputError(f"--top-share must be in (0, 1], got {value}")
        if kind != "top_share" and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise DaptInputError(f"--{kind.replace('_', '-')} must be a whole number > 0, got {value!r}")
        self.kind, self.value = kind, value
        self.heap: List[Tuple[float, int, str, int]] = []
        self.heap_tokens = 0
        self.seen = 0
        self.peak_held = 0
        self.min_score = math.inf
        self.max_score = -math.inf
        if kind == "top_share":
            self._spill = tempfile.TemporaryFile("w+b")
            self._scores = array("d")
            self._offsets = array("q")
            self._lengths = array("l")

    def add(self, score: float, sentence: str, n_tokens: int) -> None:
        """Offer one scored sentence."""
        self.seen += 1
        self.min_score = min(self.min_score, score)
        self.max_score = max(self.max_score, score)
        if self.kind == "top_share":
            self._scores.append(score)
            self._offsets.append(self._spill.tell())
            self._lengths.append(n_tokens)
            self._spill.write(sentence.encode("utf8") + b"\n")
            return
        # -seen: on equal scores the later sentence is the smaller item, evicted first.
        item = (score, -self.seen, sentence, n_tokens)
        if self.kind == "top_n":
            if len(self.heap) < self.value:
                heapq.heappush(self.heap, item)
            elif item > self.heap[0]:
                heapq.heapreplace(self.heap, item)
        else:
            heapq.heappush(self.heap, item)
            self.heap_tokens += n_tokens
            while self.heap and self.heap_tokens - self.heap[0][3] >= self.value:
                self.heap_tokens -= heapq.heappop(self.heap)[3]
        self.peak_held = max(self.peak_held, len(self.heap))

    def result(self) -> List[Tuple[float, str, int]]:
        """The kept sentences, best first: ``(score, sentence, n_tokens)``."""
        if self.kind != "top_share":
            return [(s, text, n) for s, _, text, n in sorted(self.heap, reverse=True)]
        import numpy

        scores = numpy.frombuffer(self._scores, dtype=numpy.float64)
        keep = math.ceil(self.value * len(scores))
        # A stable sort of the negated scores keeps the earlier sentence on ties.
        order = numpy.argsort(-scores, kind="stable")[:keep]
        out = []
        for i in order:
            self._spill.seek(self._offsets[i])
            text = self._spill.readline().decode("utf8").rstrip("\n")
            out.append((float(scores[i]), text, int(self._lengths[i])))
        self._spill.close()
        return out
