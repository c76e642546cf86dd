"""Decide, for one new memory, whether it restates, completes or replaces a user's active facts.

Pure logic: no Kafka, no Qdrant, no network. The ingest pipeline calls `decide(new, candidates)`
with the same user's active facts (exact text matches first, then nearest by cosine, at most
`CANDIDATE_K`) and applies the returned `Decision`s.

Structure: a `Judge` labels each (new, candidate) pair as "same" / "replaces" / "unrelated", or
abstains ("review_same" / "review_replaces"); `gate` holds every judge's automatic actions to the
same checks; `decide_with` turns the verdicts into decisions (which duplicate is canonical, which
fact is superseded, pinned targets -> `conflict`, abstentions -> one `review`). The default
`OfflineJudge` is precision first: similarity only nominates, and an action needs positive
evidence (word-level containment for a merge, an explicit update for a supersede), read from the
word features stored with each memory, so judging embeds nothing.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Literal, Protocol

import numpy as np

from dreamstream.agents import alignment as al
from dreamstream.agents import text_features as tf
from dreamstream.agents import update_cues as uc
from dreamstream.agents.decisions import Decision
from dreamstream.schemas.memory import Memory, parse_time

CANDIDATE_K: int = 20
"""Nearest active facts of the same user the pipeline passes, with no similarity floor (the learned
judge has its own, `Thresholds.floor`, which lets update cues through). Replacements can have low
cosine ("is looking to adopt a dog" -> "got a puppy named Toby"); on unseen real text the true
partner is among the 20 nearest for every restatement and 89% of updates. The learned judge's corpus
nominates its pairs the same way (`streams/dev/judge_corpus.py`)."""

Relation = Literal["same", "replaces", "unrelated", "review_same", "review_replaces"]
"""review_*: the judge abstains; the pair is recorded for a person to decide, nothing is applied."""


@dataclass(frozen=True)
class Verdict:
    """A judge's reading of one (new, candidate) pair, with the evidence for the audit trail."""

    candidate_id: str
    relation: Relation
    confidence: float
    rule: str
    scores: dict[str, float] = field(default_factory=dict)
    new_fuller: bool | None = None
    """For "same": whether the new memory is the more complete statement; None = let the policy judge."""


class Judge(Protocol):
    """Anything that labels each candidate against the new memory. Must be deterministic."""

    name: str

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]: ...


def cosine(new: Memory, old: Memory) -> float:
    """The two sentence vectors' cosine (they are unit length); 0 where either has none."""
    if new.vector is None or old.vector is None:
        return 0.0
    return float(np.dot(np.asarray(new.vector, np.float32), np.asarray(old.vector, np.float32)))


_TRIVIAL = frozenset(("Ps", "Pe", "Pi", "Pf"))
"""Brackets and quotes (Unicode categories): they do not change what a sentence states."""
_TRIVIAL_MARKS = frozenset(".,;:!?'\"¡¿…·、。，；：！？")
"""Sentence punctuation that does not either (unlike "-" of -5, "#" of C#, "%", "/", "&", "@")."""


@lru_cache(maxsize=8192)
def _norm(text: str) -> str:
    """The text for the exact-duplicate rule: case, spacing and punctuation (but a minus sign) do not count;
    every letter of any script, digit, symbol and emoji does. ASCII word tokens made every Cyrillic or Chinese
    text "" (two different facts one duplicate), "-5 degrees" equal to "5", "I love 🍕" to "I love 🍣".
    Kept per text: a stored memory meets many new ones (it was a sixth of the rules' time)."""
    out = []
    for ch in unicodedata.normalize("NFKC", text).casefold():
        if ch.isspace() or unicodedata.category(ch) in _TRIVIAL or ch in _TRIVIAL_MARKS:
            out.append(" ")
        else:
            out.append(ch)
    return " ".join("".join(out).split())


FeaturesOf = Callable[[list[str]], list[al.TokenFeatures]]

SESSION_GAP_S = 3600.0
"""Without run ids, statements less than this apart are one session: both hold at once."""


def same_session(a: Memory, b: Memory) -> bool:
    """One conversation: the same run id, or (without run ids) created within `SESSION_GAP_S`.

    Two facts said in one session are both true then; neither can be the other's newer value."""
    if a.run_id and b.run_id:
        return a.run_id == b.run_id
    if a.run_id or b.run_id:
        return False
    try:
        ta = parse_time(a.created_at)
        tb = parse_time(b.created_at)
    except ValueError:
        return True  # unknown times: do not assume an order
    return abs((ta - tb).total_seconds()) < SESSION_GAP_S


@dataclass
class OfflineJudge:
    """Precision first: every automatic action needs positive evidence; similarity only nominates.

    - "same" (merge) only when the kept statement says everything the other says, word by word
      (`alignment.coverage`), with the same polarity, names, numbers and occasion, and neither is a
      plan the other reports done.
    - "replaces" (supersede) only on an explicit end of the old value, a single-valued slot with
      another value, a reversal ("... anymore"), or a plan now done (`update_cues`), from a later
      session, about the same person.
    - "review_same" / "review_replaces": a likely case without that evidence. Nothing is applied;
      the pair is kept for the consolidation pass, where a person decides.
    Deterministic; reads the word features stored with each memory (`featurize` is only called for
    memories stored before features were kept).
    """

    featurize: FeaturesOf | None = None
    name: str = "offline"
    review_merge_cos: float = 0.80
    review_replace_cos: float = 0.60
    role_match: float = 0.75
    strict_role_match: float = 0.85
    _legacy: dict[str, al.TokenFeatures] = field(default_factory=dict, repr=False)
    memo: al.CoverageMemo | None = field(default=None, repr=False)
    """Set for one judging pass by a judge that aligns the same pairs again (the learned judge)."""

    def features(self, memories: Sequence[Memory]) -> list[al.TokenFeatures | None]:
        """Each memory's stored word features; computed (and kept in process) only where missing."""
        out = [al.TokenFeatures.from_payload(m.features) for m in memories]
        need = list(dict.fromkeys(m.text for m, f in zip(memories, out, strict=True)
                                  if f is None and m.text not in self._legacy))
        if need and self.featurize is not None:
            if len(self._legacy) > 4096:
                self._legacy.clear()
            self._legacy.update(zip(need, self.featurize(need), strict=True))
        return [f if f is not None else self._legacy.get(m.text) for m, f in zip(memories, out, strict=True)]

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        feats = self.features([new, *candidates])
        return [self.judge_pair(new, c, feats[0], f) for c, f in zip(candidates, feats[1:], strict=True)]

    def judge_pair(self, new: Memory, old: Memory, fn: al.TokenFeatures | None = None,
                   fo: al.TokenFeatures | None = None) -> Verdict:
        if fn is None or fo is None:
            got = self.features([new, old])
            fn, fo = fn or got[0], fo or got[1]
        cos = cosine(new, old)
        scores: dict[str, float] = {"cos": round(cos, 4)}

        def v(rel: Relation, conf: float, rule: str, new_fuller: bool | None = None) -> Verdict:
            return Verdict(old.memory_id, rel, round(conf, 4), rule, scores, new_fuller)

        same_text = _norm(new.text) == _norm(old.text)
        if same_text or tf.words(new.text) == tf.words(old.text):
            if uc.occasions(new.text) and new.created_at[:10] != old.created_at[:10]:
                return v("unrelated", 0.0, "another_occasion")  # "this morning" on two days: two events
            if same_text:
                return v("same", 1.0, "exact_text")
            # The same word tokens, other text: what differs (a sign, a symbol, an emoji, letters of a script
            # the word features do not read) is beyond every feature. Never acted on (learned_judge.py).
            return v("unrelated", 1 - cos, "unseen_difference")
        if fn is None or fo is None:
            return v("unrelated", 1 - cos, "no_features")
        # About someone else, or the same people in exchanged roles: never one fact, never an update.
        tp_new, tp_old = tf.third_parties(new.text), tf.third_parties(old.text)
        if tp_new != tp_old:
            return v("unrelated", 1 - cos, "different_subject")
        subj_new, subj_old = tf.frame(new.text)[2], tf.frame(old.text)[2]
        if subj_new and subj_old and subj_new != subj_old:
            return v("unrelated", 1 - cos, "different_subject")
        if tf.order_swapped(new.text, old.text) or uc.user_is_object(new.text) != uc.user_is_object(old.text):
            return v("unrelated", 1 - cos, "roles_swapped")
        if uc.occasions(new.text) != uc.occasions(old.text):
            return v("unrelated", 1 - cos, "another_occasion")
        later = not same_session(new, old) and not said_later(old, new)
        # "Felix got a new job" is no update of "User works at ...": another person's statement.
        update = partial(self._update, v, later, cos) if uc.same_subject(new.text, old.text) else (
            lambda rule: v("unrelated", 1 - cos, f"different_subject:{rule}"))
        if uc.plan(new.text) or uc.future(new.text):
            # "thinking about moving to Seattle" moves no one yet: a person may still want to know.
            update = partial(lambda rule: v("review_replaces", cos, f"only_planned:{rule}"))

        ended = self._ended(new.text, old.text, fn, fo)
        neg_new, neg_old = tf.has_negation(new.text), tf.has_negation(old.text)
        cover = self.memo or al.coverage
        old_in_new, new_in_old = cover(fo, fn), cover(fn, fo)
        scores.update({"old_in_new_weakest": old_in_new.weakest, "new_in_old_weakest": new_in_old.weakest})

        if neg_new != neg_old and not ended:
            negated = new.text if neg_new else old.text
            if neg_new and uc.reverses(new.text) and old_in_new.full:
                return update("reversal")
            if not tf.negation_only_in_added_clause(negated):
                if cos >= self.review_replace_cos and (old_in_new.full or new_in_old.full):
                    return v("review_replaces", cos, "polarity_unclear")
                return v("unrelated", 1 - cos, "polarity_differs")
        if not ended:
            same = self._same(new, old, old_in_new, new_in_old)
            if same is not None:
                return v("same", cos, same[0], same[1])

        if ended:
            return update(f"explicit_end:{ended}")
        slot = self._slot_change(new.text, old.text)
        if slot:
            if tf.has_additive_cue(new.text):
                return v("review_replaces", cos, f"slot_change_additive:{slot}")
            return update(f"slot_change:{slot}")
        done = self._plan_done(new.text, old.text, fn, fo)
        if done == "done":
            return update("plan_done")
        if done == "partial" and later and cos >= self.review_replace_cos:
            return v("review_replaces", cos, "plan_maybe_done")
        if cos >= self.review_merge_cos and _near_cover(old_in_new, new_in_old):
            return v("review_same", cos, "near_restatement")
        return v("unrelated", 1 - cos, "no_evidence")

    @staticmethod
    def _update(v: Callable[..., Verdict], later: bool, cos: float, rule: str) -> Verdict:
        """An update only from a later session: two statements of one session both hold."""
        if later:
            return v("replaces", max(cos, 0.5), rule)
        return v("review_replaces", cos, f"same_session:{rule}")

    def _same(self, new: Memory, old: Memory, old_in_new: al.Coverage,
              new_in_old: al.Coverage) -> tuple[str, bool | None] | None:
        """("contained"|"equivalent", new is fuller) when one says everything the other says."""
        new_keeps, old_keeps = _keeps(new.text, old.text, old_in_new), _keeps(old.text, new.text, new_in_old)
        if not (new_keeps or old_keeps):
            return None
        # An update said as a restatement ("planning a trip to Oslo" / "booked a flight to Oslo")
        # hides the newer state: plans, reports of what was done and what is still to come are not one fact.
        if (bool(uc.plan(new.text)) != bool(uc.plan(old.text))
                or uc.reports_done(new.text) != uc.reports_done(old.text)
                or uc.future(new.text) != uc.future(old.text)):
            return None
        if (uc.reports_done(new.text) or tf.is_event(new.text)) and tf.numbers(new.text) != tf.numbers(old.text):
            return None  # a dated or counted occurrence is another occasion, not more detail
        if new_keeps and old_keeps:
            return "equivalent", None
        return "contained", new_keeps

    def _ended(self, new_text: str, old_text: str, fn: al.TokenFeatures, fo: al.TokenFeatures) -> str:
        """The cue of an explicit end in `new_text` whose object the old statement states ("" if none)."""
        if uc.endings(old_text) or tf.has_negation(old_text) or tf.has_change_cue(old_text):
            return ""  # the old statement reports a change itself ("cut out coffee", "since March"): a restatement
        old_names = {tf.stem(w) for w, n in zip(fo.words, fo.names, strict=True) if n}
        old_stems = set(fo.stems)
        for e in uc.endings(new_text):
            head, obj = e.obj[0], e.obj[:2]
            if tf.stem(head) in old_names:
                return e.cue  # the name the old statement states ("sold the Subaru", "left Google")
            if not e.owned:  # "replace oxlint": the old statement's very word, in the same role
                if head in fo.words and _role_sim(fn, head, fo) >= self.strict_role_match:
                    return e.cue
                continue
            # Common nouns: every word of the object ("the bass amp" is not "bass"), the head in the
            # same role ("the painting" is not "painted").
            if all(tf.stem(w) in old_stems for w in obj) and _role_sim(fn, head, fo) >= self.role_match:
                return e.cue
        return ""

    @staticmethod
    def _slot_change(new_text: str, old_text: str) -> str:
        """A single-valued slot both fill, with values that differ and neither names the other."""
        if uc.about_the_past(new_text) or uc.about_the_past(old_text):
            return ""  # "when she first moved to Canada": where someone was, not where they are
        sn, so = uc.slots(new_text), uc.slots(old_text)
        for slot in sorted(set(sn) & set(so)):
            a, b = sn[slot], so[slot]
            if a != b and not a.startswith(b) and not b.startswith(a) and a not in old_text.lower():
                return slot  # (a value the old statement already names is detail: "Belleville, in Paris")
        return ""

    @staticmethod
    def _plan_done(new_text: str, old_text: str, fn: al.TokenFeatures, fo: al.TokenFeatures) -> str:
        """"done" when the new statement reports the old plan done: the planned verb in the past tense
        (any past verb for "organizing" / "preparing for") and every word of the planned object, three
        words of evidence at least (or the verb and a name); "partial" when some of it comes back."""
        p = uc.plan(old_text)
        if p is None or uc.plan(new_text) or not uc.reports_done(new_text):
            return ""
        new_bases = {uc.base(w) for w in fn.words}

        def said(word: str) -> bool:
            return any(tf.same_stem(uc.base(word), s) for s in new_bases)

        verb_ok = p.verb is None or uc.past_form_of(p.verb, new_text)
        obj_hits = sum(1 for w in p.obj if said(w))
        evidence = obj_hits + 1  # the planned verb said again, or a marker that is its own verb ("organizing")
        named = any(n and w in p.obj for w, n in zip(fo.words, fo.names, strict=True))
        if verb_ok and p.obj and obj_hits == len(p.obj) and (evidence >= 3 or (p.verb is not None and named)):
            return "done"  # "see 'Paddington'" -> "saw 'Paddington'"; one common noun is too little
        return "partial" if (p.verb and verb_ok and obj_hits) or obj_hits >= 2 else ""


def _role_sim(feats: al.TokenFeatures, word: str, fo: al.TokenFeatures) -> float:
    """Cosine between `word` in one statement and the same stem in the other (same word, same role)."""
    s = tf.stem(word)
    idx = [i for i, w in enumerate(feats.words) if tf.stem(w) == s]
    jdx = [j for j, w in enumerate(fo.words) if tf.stem(w) == s]
    if not idx or not jdx:
        return 0.0
    return float((feats.vecs[idx] @ fo.vecs[jdx].T).max())


def _keeps(kept: str, other: str, cov: al.Coverage) -> bool:
    """`kept` says everything `other` says: every word, number, how-often word and occasion; what
    is owned stays owned; no change, and no opinion about it in place of the plain fact."""
    return (cov.full and _literals_within(other, kept) and not _changes(kept, other)
            and uc.possession_kept(other, kept) and not (uc.reported(kept) and not uc.reported(other)))


def _changes(kept: str, other: str) -> bool:
    """`kept` marks a change `other` does not ("... now, not Redis", "replace X with Y", "stop
    deploying to X"): the fuller statement then reports a new state, and merging would hide the old."""
    cue = tf.has_change_cue(kept, other) and not tf.has_change_cue(other, kept)  # both: the topic ("left-handed")
    return cue or (bool(uc.endings(kept)) and not uc.endings(other))


_QUANTIFIERS = tf._wordset(
    "most many few all every each some always never often usually sometimes rarely daily weekly monthly "
    "twice once several"
)


def _literals_within(other: str, kept: str) -> bool:
    """The numbers, day anchors and how-often words of `other` are all in `kept` (another number is
    another fact; "most mornings" is not "three mornings a week")."""
    quant = set(tf.words(other)) & _QUANTIFIERS <= set(tf.words(kept))
    return quant and tf.numbers(other) <= tf.numbers(kept) and uc.occasions(other) <= uc.occasions(kept)


def _near_cover(a: al.Coverage, b: al.Coverage) -> bool:
    """All but one word of either side covered: worth a person's look, not an automatic merge."""
    return any(c.required >= 3 and len(c.missing) <= 1 for c in (a, b))


def _more_complete(new: Memory, old: Memory) -> bool:
    """Strictly more complete: says clearly more than the old statement (ties keep the first)."""
    return tf.completeness(new.text) >= tf.completeness(old.text) + 2


def gate(verdict: Verdict, new: Memory, old: Memory, session_veto: bool = True) -> Verdict:
    """The checks every judge's automatic action passes (rules, learned, NLI or LLM alike); a verdict
    that fails one becomes a review item. Neither a merge nor a supersede joins a fact with a question about
    it, nor two things of one kind told apart at the start (`_other_mood`, `_other_qualifier`). A merge never
    joins a fact with a wish for it, nor opposite statements (`_opposite`), never hides
    the memory that says more, and keeps every name, number, sign, unit, person, code span and URL of the
    memory it hides; a supersede never puts an older statement over a newer one, and (for judges that cannot
    weigh the session as evidence, `session_veto`) comes from a later session."""
    if verdict.relation in ("same", "replaces"):
        kind = _other_mood(new.text, old.text, verdict.relation == "same") \
            or ("qualifier" if _other_qualifier(new.text, old.text) else None)
        if kind:
            return Verdict(verdict.candidate_id, "review_same" if verdict.relation == "same" else "review_replaces",
                           verdict.confidence,
                           f"gate_{kind}:{verdict.rule}", verdict.scores, verdict.new_fuller)
    if verdict.relation == "same" and verdict.rule.rsplit(":", 1)[-1] != "exact_text":  # a duplicate loses nothing
        opposite = _opposite(new.text, old.text)
        if opposite:
            return Verdict(verdict.candidate_id, "review_same", verdict.confidence,
                           f"gate_{opposite}:{verdict.rule}", verdict.scores, verdict.new_fuller)
        if _substituted(new.text, old.text):
            return Verdict(verdict.candidate_id, "review_same", verdict.confidence,
                           f"gate_substitution:{verdict.rule}", verdict.scores, verdict.new_fuller)
        kept, hidden = (new, old) if verdict.new_fuller or (
            verdict.new_fuller is None and _more_complete(new, old)) else (old, new)
        if _says_more(hidden.text, kept.text):  # the fuller one is canonical: never hide what says more
            return Verdict(verdict.candidate_id, "review_same", verdict.confidence,
                           f"gate_fuller:{verdict.rule}", verdict.scores, verdict.new_fuller)
        if not (_literals_within(hidden.text, kept.text)
                and _names(hidden.text) <= set(tf.words(kept.text))
                and _marks(hidden.text) <= _marks(kept.text)
                and _literals(hidden.text) <= _literals(kept.text)):
            return Verdict(verdict.candidate_id, "review_same", verdict.confidence,
                           f"gate_detail:{verdict.rule}", verdict.scores, verdict.new_fuller)
    if verdict.relation == "replaces" and ((session_veto and same_session(new, old)) or said_later(old, new)):
        return Verdict(verdict.candidate_id, "review_replaces", verdict.confidence,
                       f"gate_session:{verdict.rule}", verdict.scores)
    return verdict


_WISH = re.compile(
    r"\b(?:(?:wants?|wanted|wanting)\s+to|wish(?:es|ed)?|hopes?|hoped|hoping|intends?|aims?|"
    r"dreams?|considering|thinking\s+(?:about|of)|would(?:\s+\w+)?\s+(?:like|love|prefer)|'d\s+(?:like|love)|"
    r"should|shall|ought\s+to|needs?\s+to|might|(?-i:may)\s+(?!\d)|could|someday|one\s+day|"
    r"if\s+\w+\s+(?:could|had|were|ever))\b",
    re.IGNORECASE)
"""Words that put a statement in another mood than fact: a wish, an obligation, a possibility ("I'd love to own
a sailboat", "the app should support dark mode", "wants to adopt a greyhound"; "may" in lower case only: "May"
is a month). "Wants" with a thing ("wants Tailwind for styling") is a preference, and a plan ("planning a trip
in May", "going to Porto") a fact about what is arranged: facts of their own."""


def _asks(text: str) -> bool:
    """A question, not a statement ("Is Malik vegetarian?"), or a statement hedged by one ("Carla quit violin?
    User wasn't sure."): any sentence of it that ends in a question mark."""
    return _QUESTION.search(text) is not None or text.lstrip().startswith("¿")


_QUESTION = re.compile(r"(?<=[^\W_])[?？][\"')»”]*(?:\s|$)")
"""A question mark closing a word ("violin? User wasn't sure"), not an operator in a coding memory ("use ? or
expect()", "x?.y")."""


def _other_mood(a: str, b: str, merge: bool) -> str | None:
    """"question" where one memory states a fact and the other asks about it; for a merge, "mood" where one
    wishes, hopes or owes what the other states: the same words, another claim. The models read the shared
    words and scored such pairs the same (a blind audit's minimal pairs: 13 of 18 questions and 9 of 10 wishes
    merged with the fact); no feature of theirs reads a question, and the corpus holds none. A plan and what
    came of it may be an update ("wants to adopt a greyhound" / "adopted a greyhound"): the models' to read."""
    if _asks(a) != _asks(b):
        return "question"
    if merge and bool(_WISH.search(a)) != bool(_WISH.search(b)):
        x, y = ({tf.stem(w).removesuffix("s") for w in tf.words(_WISH.sub(" ", t)) if w not in tf.STOPWORDS}
                for t in (a, b))  # "owns" / "own": the stemmer leaves short words whole
        if x and y and len(x & y) >= 0.6 * len(x | y):
            return "mood"  # the same claim in another mood; worded apart, the models read it
    return None


_DETERMINERS = tf._wordset("the my our your his her their its this that these those a an")


def _other_qualifier(a: str, b: str) -> bool:
    """Both open on the same thing told apart by another word before it ("my older brother" / "my younger
    brother", "the staging cluster" / "the production cluster", "the mobile app" / "the web app"): two things
    of one kind, each with its own facts, neither an update nor a restatement of the other. Read only at the
    start of each (the subject), where a qualifier names which thing; another adjective on an object ("drives
    a red car" / "a blue car") is a value, the models' to read."""
    def opening(text: str) -> tuple[str, str] | None:
        w = list(tf.words(text)[:4])
        if not w or not (w[0] in _DETERMINERS or w[0].endswith("'s")):
            return None  # no noun phrase first ("Ana lives ...", "weight 56 kg")
        while w and (w[0] in _DETERMINERS or w[0].endswith("'s")):
            w = w[1:]
        if len(w) < 2 or w[0] in tf.STOPWORDS or w[1] in tf.STOPWORDS or w[0] in _WHEN:
            return None
        return w[0], w[1]

    x, y = opening(a), opening(b)
    if x is None or y is None or tf.stem(x[1]) != tf.stem(y[1]) or tf.stem(x[0]) == tf.stem(y[0]):
        return False
    if difflib.SequenceMatcher(a=x[0], b=y[0]).ratio() >= 0.75:
        return False  # one word spelt two ways ("favorite" / "favourite")
    return x[0] not in tf.words(b) and y[0] not in tf.words(a)


_WHEN = tf._wordset("new old current former latest previous first next last present recent ex now usual")
"""Qualifiers that date a thing rather than tell two apart ("my old car" / "my new car" is an update)."""


def _substituted(a: str, b: str) -> bool:
    """One sentence with one word put in another's place, the rest word for word: "prefers
    tea" / "prefers coffee", "two cats" / "three cats", "every morning" / "every evening". Another value in
    the same slot is another fact or an update, not a restatement, unless the words are forms of one word
    ("runs" / "run"); a synonym ("likes" / "loves") goes to a person too. The models scored such pairs 0.99
    the same (they read the shared words); no feature of theirs compares the one slot."""
    wa, wb = tf.words(a), tf.words(b)
    ops = [op for op in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return False
    _, i1, i2, j1, j2 = ops[0]
    if i2 - i1 != 1 or j2 - j1 != 1:
        return False  # a phrase for a phrase ("hates" / "can't stand"), or words added: the models' to read
    x, y = tf.stem(wa[i1]), tf.stem(wb[j1])
    if wa[i1] in tf.STOPWORDS or wb[j1] in tf.STOPWORDS:
        return False
    return not (x.startswith(y) or y.startswith(x))  # one word's forms, or its short form ("vet" / "veterinarian")


def _marks(text: str) -> set[str]:
    """The signs and symbols a text holds beyond words and sentence punctuation (the "-" of A-, "+", "#",
    "%", an emoji): no word feature reads them, so a merge must not hide one the kept memory lacks."""
    return {ch for ch in unicodedata.normalize("NFKC", text) if not (ch.isalnum() or ch.isspace())
            and ch not in _TRIVIAL_MARKS and unicodedata.category(ch) not in _TRIVIAL}


_NEGATED = re.compile(
    r"\b(?:nicht|kein\w*|nie|niemals|não|nunca|jamais|jamás|ningun\w*|ningún|nenhum\w*|non|mai|niet|geen|nooit|"
    r"pas|aucun\w*|не|нет|никогда|ни|لا|ليس|لم|لن|नहीं|नही|मत)\b|[不没沒无無別别]",
    re.IGNORECASE)
"""Negation in the languages people write memories in besides English (which `text_features` reads): the gate
only, never the models' features."""
_UNITS = tf._wordset("""km kms kilometer kilometers kilometre kilometres mile miles meter meters metre metres cm mm
ft foot feet inch inches yd yard yards kg kgs kilo kilos kilogram kilograms gram grams mg milligram milligrams mcg
lb lbs pound pounds oz ounce ounces liter liters litre litres ml cup cups seconds minute minutes hour hours day days
week weeks month months year years celsius fahrenheit percent usd eur gbp dollars euros""")
"""Units: "5 km" and "5 miles" share their number; another unit, like another number, is another fact (not
the letters that are words too: "in", "m", "g")."""
_PEOPLE_AND_DAYS = tf._wordset("""mom mum mother dad father parent parents son daughter brother sister wife husband
partner boyfriend girlfriend grandma grandmother grandpa grandfather aunt uncle cousin niece nephew fiance fiancee
friend boss colleague lunes martes miércoles jueves viernes sábado domingo montag dienstag mittwoch donnerstag
freitag samstag sonntag lundi mardi mercredi jeudi vendredi samedi dimanche segunda terça quarta quinta sexta""")
"""Who a statement is about or with ("Call mom" and "Call dad" name two people, as two names do), and the
weekdays other languages write in lower case (English ones are capitalised: names already)."""
_MEASURE = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)?)\s?([^\W\d_]{1,3}|[°%µ][^\W\d_]{0,2})(?![\w])")
"""A number and the short unit written after it ("10 g", "10 mg", "5k", "8 am", "20°C"): read as one, so the
one-letter units the word list leaves out ("g", "m") still tell "10 g" from "10 mg"."""
_CODE = re.compile(r"`([^`]+)`|(https?://\S+?)[.,;]?(?:\s|$)")


def _literals(text: str) -> set[str]:
    """What a merge must not hide unless the kept memory says it too: units, people, days, code spans and URLs,
    read exactly ("tests/" is not "tests/unit", a staging URL is not the production one)."""
    words = set(tf.words(text))
    spans = {m.group(1) or m.group(2) for m in _CODE.finditer(text)}
    measures = {f"{n}{u.lower()}" for n, u in _MEASURE.findall(text) if u.lower() not in tf.STOPWORDS}
    return (words & _UNITS) | (words & _PEOPLE_AND_DAYS) | {f"`{x}`" for x in spans} | measures


def _says_more(a: str, b: str) -> bool:
    """`a` says everything `b` says, word for word, and more ("milk, eggs, bread, butter, cheese" against
    "milk, eggs, bread, butter")."""
    wa, wb = set(tf.words(a)) - tf.STOPWORDS, set(tf.words(b)) - tf.STOPWORDS
    return bool(wb) and wb < wa


def _opposite(a: str, b: str) -> str | None:
    """Why two statements cannot be one fact whatever a model scores them: one is negated and the other
    not ("Ben is allergic to peanuts" / "Ben is not allergic to peanuts": a learned judge scored such pairs
    0.99 the same, in English, Spanish, Portuguese and German), or one tells of an earlier time and the
    other not ("Leo used to be vegan" / "Leo is vegan"). A negation in a clause that only adds content
    ("likes tea, but not coffee") is no opposite."""
    neg_a = tf.has_negation(a) or _NEGATED.search(a) is not None
    neg_b = tf.has_negation(b) or _NEGATED.search(b) is not None
    if neg_a != neg_b and not tf.negation_only_in_added_clause(a if neg_a else b):
        return "polarity"
    if uc.about_the_past(a) != uc.about_the_past(b):
        return "past"
    if bool(_RARELY.search(a)) != bool(_RARELY.search(b)):
        return "rarely"  # "rarely eats fish" is nearly the opposite of "eats fish"
    stop_a, stop_b = _STOPPED.search(a) is not None, _STOPPED.search(b) is not None
    if stop_a != stop_b and not (neg_a or neg_b):
        return "stopped"  # "quit smoking" ends "smokes": an update, never the same fact
    return None


_RARELY = re.compile(r"\b(?:rarely|seldom|hardly|barely|scarcely|almost\s+never)\b", re.IGNORECASE)
_STOPPED = re.compile(r"\b(?:quit|quits|quitting|stopped|stopping|(?:gave|given|gives|giving)(?:\s+\w+)?\s+up|"
                      r"ceased|no\s+longer|any\s?more)\b", re.IGNORECASE)
"""A blind audit's fresh pairs: "rarely / hardly ever X" merged into "X" (6 of 6), and "quit smoking" merged
into "smokes" (3 of 27 stop-pairs) - each hid a fact behind one that contradicts it."""


def _names(text: str) -> set[str]:
    return {w for w in tf._names(text) if not any(ch.isdigit() for ch in w)}


def decide_with(judge: Judge, new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
    """Turn a judge's verdicts into decisions for one new memory.

    Merges win over supersedes; when the judge abstains on every pair, the likeliest abstention
    becomes one `review` decision (nothing changes; the consolidation pass lists it)."""
    cands = [c for c in candidates if c.user_id == new.user_id and c.memory_id != new.memory_id]
    if not cands:
        return []
    by_id = {c.memory_id: c for c in cands}
    veto = bool(getattr(judge, "session_veto", True))
    verdicts = [gate(x, new, by_id[x.candidate_id], veto) for x in judge.judge(new, cands)]
    same = [x for x in verdicts if x.relation == "same"]
    repl = [x for x in verdicts if x.relation == "replaces"]
    review = [x for x in verdicts if x.relation in ("review_same", "review_replaces")]
    out: list[Decision] = []

    def mk(action: str, targets: list[Verdict], rule: str, **detail: str) -> Decision:
        ids = tuple(x.candidate_id for x in targets)
        return Decision(
            action=action,  # type: ignore[arg-type]
            new_id=new.memory_id,
            user_id=new.user_id,
            targets=ids,
            judge=judge.name,
            rule=rule,
            scores={f"{x.candidate_id}:{k}": val for x in targets for k, val in x.scores.items()},
            detail={"verdicts": {x.candidate_id: x.rule for x in targets}, **detail},
        )

    if same:
        same.sort(key=lambda x: (-x.confidence, x.candidate_id))
        fuller = [
            x.new_fuller if x.new_fuller is not None else _more_complete(new, by_id[x.candidate_id])
            for x in same
        ]
        if all(fuller):
            action, targets = "merge_old", same
        else:
            action, targets = "merge_new", [x for x, f in zip(same, fuller, strict=True) if not f][:1]
        rule = "+".join(sorted({x.rule for x in targets}))
        if any(by_id[x.candidate_id].pinned for x in targets) or (action == "merge_new" and new.pinned):
            out.append(mk("conflict", targets, f"pinned:{action}:{rule}"))
        else:
            out.append(mk(action, targets, rule))
        return out
    late = _replaced_by_later(judge, new, [c for c in cands if said_later(c, new)], veto)
    if late is not None:
        # An older statement that arrived after its replacement ("lives in Lisbon" after "moved to Porto"): history
        # on arrival, as it would have become had it come in time; judged as that pair would have been.
        x, newer = late
        kind = "conflict" if new.pinned else "supersede_new"
        return [Decision(kind, new.memory_id, new.user_id, (newer.memory_id,), judge=judge.name,  # type: ignore[arg-type]
                         rule=x.rule if kind == "supersede_new" else f"pinned:supersede_new:{x.rule}",
                         scores={f"{newer.memory_id}:{k}": val for k, val in x.scores.items()},
                         detail={"verdicts": {newer.memory_id: x.rule}, "arrived_late": "true"})]
    if repl:
        repl.sort(key=lambda x: (-x.confidence, x.candidate_id))
        best = repl[:1]
        rule = best[0].rule
        if by_id[best[0].candidate_id].pinned:
            out.append(mk("conflict", best, f"pinned:supersede:{rule}"))
        else:
            out.append(mk("supersede", best, rule))
        return out
    if review:
        review.sort(key=lambda x: (x.relation != "review_replaces", -x.confidence, x.candidate_id))
        best = review[:1]
        proposal = "supersede" if best[0].relation == "review_replaces" else "merge"
        out.append(mk("review", best, best[0].rule, proposal=proposal))
    return out


def said_later(a: Memory, b: Memory) -> bool:
    """Whether `a` was said after `b`, by the instants their `created_at` name (the strings do not sort in time
    where one has a fraction of a second and the other none); False where either cannot be read."""
    try:
        return parse_time(a.created_at) > parse_time(b.created_at)
    except ValueError:
        return False


def _replaced_by_later(judge: Judge, new: Memory, later: Sequence[Memory], veto: bool) -> tuple[Verdict, Memory] | None:
    """The later-said current fact that replaces `new`, with the verdict, read the way round the pair was said
    (the later one as the newer memory), or None. Judged only against facts said after `new`: in a stream in
    time order there are none, and an older fact that arrived late was otherwise judged as if it were the
    newer one, and stayed current beside its replacement."""
    found = []
    for c in later:
        verdict = gate(judge.judge(c, [new])[0], c, new, veto)
        if verdict.relation == "replaces":
            found.append((verdict, c))
    if not found:
        return None
    return min(found, key=lambda vc: (-vc[0].confidence, vc[1].memory_id))


def restates_replaced(new: Memory, replaced: Sequence[tuple[Memory, Memory]]) -> Decision | None:
    """A late event saying word for word a fact that a newer one replaced, dated before that newer one (a
    backfill, a producer's retry): merged into the replaced fact, as it would have been had it arrived in
    time, so it is history and not a second current fact ("lives in Lisbon" beside "moved to Madrid").
    `replaced`: (the replaced fact with the same normalised text, what replaced it). Dated after the
    replacement, it is the fact said again (moved back): None, judged as usual. A rule, not the model's:
    the model reads two texts, not when each was said."""
    said = parse_time(new.created_at)
    for old, newer in replaced:
        if old.user_id == new.user_id == newer.user_id and old.status == "superseded" \
                and old.superseded_by == newer.memory_id and parse_time(newer.created_at) > said:
            return Decision("merge_new", new.memory_id, new.user_id, (old.memory_id,), judge="rules",
                            rule="restates_replaced", detail={"replaced_by": newer.memory_id})
    return None


_DEFAULT = OfflineJudge()


def decide(new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
    """Decisions for `new` against the user's active `candidates` with the offline judge, from the
    memories' stored word features (the pipeline builds its judge with a featurizer for memories
    stored without them: `streams/core/judges.py`)."""
    return decide_with(_DEFAULT, new, candidates)
