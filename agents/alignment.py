"""Word-level alignment of two statements with the model's contextual token vectors.

Whole-sentence similarity says two memories share a topic; it cannot say one *contains* the other
("volunteers at an animal rescue" / "volunteers at a soup kitchen" score high). Aligning words
does (BERTScore-style): every content word of the barer statement needs a counterpart in the
fuller one, the same stem or a contextual vector close enough to be the same word in the same
role ("novel" / "book"), while "rescue" / "kitchen" or "writing" / "reading" stay apart.

Pure: the vectors come with each memory (`TokenFeatures`, computed once when it is ingested, in
the same model pass as its sentence vector) so judging a new memory never re-embeds stored ones.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from dreamstream.agents import text_features as tf

FEATURES_VERSION = 2
"""2: int8 word vectors (about 0.5 KB a word); 1: float16 ones (1 KB a word), still read as they are."""

WORD_MATCH = 0.80
"""Contextual cosine at which two different words count as the same word in the same role.
MiniLM's last layer gives one word in two sentences 0.85-0.99, close synonyms about 0.8
("novel" / "book"), different words of one topic 0.4-0.65 ("writing" / "reading", "booked" / "planning")."""

LIGHT = tf._wordset(
    """
    use uses used using named name called has have having get got thing things something stuff
    lot lots kind sort really actually currently person someone one ones people also just
    mention mentions mentioned say says said tell tells told explain explains explained
    """
)
"""Words whose absence in the other statement hides nothing ("User has a dog named Rex" / "My dog
Rex is ..."), or report that it was said ("mentioned that ..."): they carry the sentence, not the
fact. Preference verbs ("like", "love") are not light: "I like shopping" is not said by "I often
shop for shoes"."""


@dataclass(frozen=True)
class TokenFeatures:
    """A statement's content words, in order, with one unit contextual vector each."""

    words: tuple[str, ...]
    names: tuple[bool, ...]
    """A name or literal: capitalised past the sentence's first word, or with a digit. These
    match only by their own stem, never by vector ("Lisbon" is not "Berlin")."""
    vecs: np.ndarray

    @cached_property
    def stems(self) -> tuple[str, ...]:
        """Computed once per statement: the judge compares one statement with dozens of others."""
        return tuple(tf.stem(w) for w in self.words)

    @cached_property
    def _stem_index(self) -> tuple[frozenset[str], frozenset[str]]:
        stems = frozenset(self.stems)
        prefixes = frozenset(k[: len(k) - d] for k in stems for d in (1, 2, 3) if len(k) - d >= 5)
        return stems, prefixes

    def stem_match(self, s: str) -> bool:
        """Whether any of these words has stem `s` by `tf.same_stem`, from an index (no pairwise loop):
        the same stem, or one a prefix of the other at most 3 letters shorter, the shorter 5+ long."""
        stems, prefixes = self._stem_index
        if s in stems or s in prefixes:
            return True
        n = len(s)  # s shortened by 1, 2 or 3 letters, still 5+ long (no generator: called per word pair)
        return (n >= 6 and s[: n - 1] in stems) or (n >= 7 and s[: n - 2] in stems) or (n >= 8 and s[: n - 3] in stems)

    @cached_property
    def required(self) -> tuple[bool, ...]:
        """Per word, whether `coverage` needs a counterpart for it (not light, not a polarity word)."""
        return tuple(not (w in LIGHT or tf.is_polarity_word(w)) for w in self.words)

    def to_payload(self) -> dict[str, Any]:
        """Compact payload form: each word's unit vector as int8 over its largest component, base64
        (about 0.5 KB a word; the features were three quarters of a stored memory). The scale is not
        kept: `from_payload` makes each a unit vector again. Word cosines move by about 0.001 (at most
        0.002 over 300 dev texts)."""
        vecs = np.asarray(self.vecs, dtype=np.float32)
        top = np.abs(vecs).max(axis=1, keepdims=True) if vecs.size else np.ones((vecs.shape[0], 1), np.float32)
        q = np.round(127.0 * vecs / np.maximum(top, 1e-12)).astype(np.int8)
        return {"v": FEATURES_VERSION, "words": list(self.words), "names": [int(n) for n in self.names],
                "dim": int(vecs.shape[1]) if vecs.ndim == 2 else 0,
                "vecs": base64.b64encode(q.tobytes()).decode("ascii")}

    @classmethod
    def from_payload(cls, data: dict[str, Any] | None) -> TokenFeatures | None:
        """None for a missing or unknown payload (the caller computes features anew)."""
        version = data.get("v") if data else None
        if not data or version not in (1, FEATURES_VERSION):
            return None
        words = tuple(str(w) for w in data.get("words") or ())
        names = tuple(bool(n) for n in data.get("names") or ())
        return _decoded(words, names, int(data.get("dim") or 0), str(data.get("vecs") or ""), int(version))


@lru_cache(maxsize=8192)
def _decoded(words: tuple[str, ...], names: tuple[bool, ...], dim: int, vecs_b64: str, version: int) -> TokenFeatures:
    """Decoded once per stored statement: a user's facts are candidates for many of their new memories."""
    raw = base64.b64decode(vecs_b64)
    vecs = np.frombuffer(raw, dtype=np.float16 if version == 1 else np.int8).astype(np.float32)
    vecs = vecs.reshape(len(words), dim) if words and dim else np.zeros((0, dim or 1), np.float32)
    if version != 1 and len(vecs):
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    vecs.flags.writeable = False  # shared between callers
    return TokenFeatures(words=words, names=names, vecs=vecs)


def from_tokens(text: str, offsets: Sequence[tuple[int, int]], word_ids: Sequence[int | None],
                token_vectors: np.ndarray) -> TokenFeatures:
    """Features from one tokenised text: word pieces averaged per word, function words dropped.

    `offsets`, `word_ids` and `token_vectors` are per word piece (the tokenizer's and the model's
    output for `text`); special tokens have `word_id` None."""
    spans: dict[int, list[int]] = {}
    for i, w in enumerate(word_ids):
        if w is not None and i < len(token_vectors):
            spans.setdefault(int(w), []).append(i)
    words: list[str] = []
    names: list[bool] = []
    vecs: list[np.ndarray] = []
    first = True
    for _, idx in sorted(spans.items()):
        start, end = offsets[idx[0]][0], offsets[idx[-1]][1]
        surface = text[start:end]
        low = surface.lower()
        if not any(ch.isalnum() for ch in surface):
            if surface in ".!?;":
                first = True
            continue
        was_first, first = first, False
        if low in tf.STOPWORDS or len(low) == 1 and not low.isdigit():
            continue
        v = np.asarray(token_vectors[idx], dtype=np.float32).mean(axis=0)
        v /= float(np.linalg.norm(v)) or 1.0
        words.append(low)
        names.append(any(ch.isdigit() for ch in surface) or (not was_first and surface[:1].isupper()))
        vecs.append(v)
    arr = np.stack(vecs) if vecs else np.zeros((0, token_vectors.shape[-1]), np.float32)
    return TokenFeatures(words=tuple(words), names=tuple(names), vecs=arr)


@dataclass(frozen=True)
class Coverage:
    """How fully `kept` says what `other` says, word by word."""

    missing: tuple[str, ...]
    """Content words of `other` with no counterpart in `kept` (light words excluded)."""
    weakest: float
    """The lowest best-match cosine over `other`'s required words (1.0 for a stem match)."""
    required: int

    @property
    def full(self) -> bool:
        return self.required > 0 and not self.missing


def coverage(other: TokenFeatures, kept: TokenFeatures, threshold: float = WORD_MATCH) -> Coverage:
    """Does `kept` say everything `other` says? Each of `other`'s content words needs a counterpart."""
    best_of = (other.vecs @ kept.vecs.T).max(axis=1) if len(other.words) and len(kept.words) else None
    return _coverage(other, kept, best_of, threshold)


def _coverage(other: TokenFeatures, kept: TokenFeatures, best_of: np.ndarray | None,
              threshold: float = WORD_MATCH) -> Coverage:
    """`coverage` from each of `other`'s words' best cosine in `kept` (None when either has no words)."""
    missing: list[str] = []
    weakest = 1.0
    required = 0
    for i, (w, s, name, needed) in enumerate(zip(other.words, other.stems, other.names, other.required, strict=True)):
        if not needed:
            continue  # polarity is compared as a whole ("hates" / "can't stand"), not word by word
        required += 1
        if kept.stem_match(s):
            continue
        best = float(best_of[i]) if best_of is not None else 0.0
        if name:  # names and literals only match themselves
            missing.append(w)
            weakest = min(weakest, 0.0)
            continue
        weakest = min(weakest, best)
        if best < threshold:
            missing.append(w)
    return Coverage(missing=tuple(missing), weakest=round(weakest, 4), required=required)


@dataclass(frozen=True)
class PairAlignment:
    """Two statements' words against each other, from one similarity matrix: what each reading of a
    pair needs (coverage both ways, each word's best match, the words neither side matches)."""

    a: TokenFeatures
    b: TokenFeatures
    sims: np.ndarray
    """[a's words, b's words] contextual cosines (empty when either has no words)."""

    @cached_property
    def best_of_a(self) -> np.ndarray | None:
        """Each of a's words' best cosine in b."""
        return self.sims.max(axis=1) if self.sims.size else None

    @cached_property
    def best_of_b(self) -> np.ndarray | None:
        return self.sims.max(axis=0) if self.sims.size else None

    @cached_property
    def a_in_b(self) -> Coverage:
        """Does b say everything a says?"""
        return _coverage(self.a, self.b, self.best_of_a)

    @cached_property
    def b_in_a(self) -> Coverage:
        return _coverage(self.b, self.a, self.best_of_b)

    def unmatched(self) -> tuple[list[int], list[int]]:
        """a's and b's words with no counterpart in the other: no same stem, no cosine at `WORD_MATCH`."""
        if not self.sims.size:
            return [], []
        best_a, best_b = self.best_of_a, self.best_of_b
        assert best_a is not None and best_b is not None
        un_a = [i for i, s in enumerate(self.a.stems) if best_a[i] < WORD_MATCH and not self.b.stem_match(s)]
        un_b = [j for j, s in enumerate(self.b.stems) if best_b[j] < WORD_MATCH and not self.a.stem_match(s)]
        return un_a, un_b


def align(a: TokenFeatures, b: TokenFeatures) -> PairAlignment:
    """The pair's similarity matrix, computed once."""
    sims = a.vecs @ b.vecs.T if len(a.words) and len(b.words) else np.zeros((len(a.words), len(b.words)), np.float32)
    return PairAlignment(a, b, sims)


class CoverageMemo:
    """Each pair of feature objects aligned once, for one judging pass: the rule judge and the learned
    judge's features read the same pairs, both ways. Keyed by identity: use it only while the features
    it saw are alive (one `judge` call), then drop it."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], PairAlignment] = {}

    def pair(self, a: TokenFeatures, b: TokenFeatures) -> tuple[PairAlignment, bool]:
        """The alignment of a and b, and whether it is held as (b, a)."""
        hit = self._seen.get((id(a), id(b)))
        if hit is not None and hit.a is a and hit.b is b:
            return hit, False
        hit = self._seen.get((id(b), id(a)))
        if hit is not None and hit.a is b and hit.b is a:
            return hit, True
        pair = align(a, b)
        self._seen[(id(a), id(b))] = pair
        return pair, False

    def __call__(self, other: TokenFeatures, kept: TokenFeatures) -> Coverage:
        pair, flipped = self.pair(other, kept)
        return pair.b_in_a if flipped else pair.a_in_b
