"""Cheap, explainable text signals for comparing two memory statements.

Nothing here knows about particular slots (city, employer, ...): the signals are generic
English cues (change / addition / negation markers), token overlap with the shared words
masked, and literal values (numbers, dates, identifiers) that differ. The judge combines them
with embedding similarity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


def _wordset(text: str) -> frozenset[str]:
    """Word lists read better as one whitespace-separated string."""
    return frozenset(text.split())


_WORD = re.compile(r"[a-z0-9][a-z0-9_+#@.\-/']*[a-z0-9+#]|[a-z0-9]")

# Function words and generic subject words: they say nothing about *which* fact is stated.
STOPWORDS = _wordset(
    """
    a an the and or but nor of to in on at for from by with without into onto over under about as is
    are was were be been being am do does did doing done have has had having get gets got i me my
    mine myself we us our ours you your yours he him his she her hers they them their theirs it its
    this that these those there here which who whom whose what when where why how so very just
    really quite rather pretty much many more most some any all each every few can could will would
    shall should may might must also too still already yet ever user user's users the_user s t ll re
    ve d m not no never don't doesn't didn't isn't aren't i'm i've i'd i'll we're we've it's that's
    let's via per e.g i.e etc please
    """
)

# Generic markers that a statement reports a change of state, not an extra fact.
_CHANGE = re.compile(
    r"\b(now|nowadays|these days|no longer|not anymore|any ?more|moved|moving|move|relocat\w*|switch\w*|"
    r"changed?|changing|replac\w*|instead|new|newly|started|starting|since|as of|from now on|"
    r"left|leaving|quit|sold|migrat\w*|became|become|ended|former(ly)?|previously|used to|gave up|"
    r"stop|stopped|upgraded|downgraded|finally|went from|transferred|took a job|joined|converted|"
    r"dropped|ditched|retired|took over|going forward|any longer|rewrote|rewritten|ported)\b"
)
# Generic markers that a statement adds one more value to a multi-valued fact.
_ADDITIVE = re.compile(
    r"\b(also|too|as well|another|second|third|both|in addition|additionally|on the side|other|"
    r"besides|along with|alongside|plus)\b"
)
# Words that put a third party, not the user, in the subject or owner position.
_THIRD_PARTY = re.compile(
    r"\b(friend|flatmate|roommate|housemate|mom|mum|mother|dad|father|parents?|sister|brother|sibling|"
    r"wife|husband|partner|boyfriend|girlfriend|fianc\w*|son|daughter|colleague|co-?worker|boss|"
    r"neighbou?r|cousin|aunt|uncle|grand\w+|niece|nephew|teammate|landlord|in-laws?)s?\b"
)
_EPISODE = _wordset(
    """
    monday tuesday wednesday thursday friday saturday sunday today yesterday tonight tomorrow
    morning afternoon evening
    """
)
# Negative polarity: negation, and verbs that carry it ("hates olives" = "can't stand olives").
_NEGATION = re.compile(
    r"\b(not|no|never|don't|doesn't|didn't|isn't|aren't|won't|can't|cannot|avoid\w*|n't|"
    r"dislik\w*|hat(?:e|es|ed|ing)|detest\w*|loath\w*|banned|forbid\w*|prohibit\w*|refus\w*)\b"
)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_TIME_WORDS = _wordset(
    """
    monday tuesday wednesday thursday friday saturday sunday today yesterday tonight tomorrow
    morning afternoon evening weekend january february march april may june july august september
    october november december jan feb mar apr jun jul aug sep sept oct nov dec
    """
)
_SUFFIXES = ("ies", "es", "s", "ing", "ed")


@lru_cache(maxsize=65536)
def words(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens; keeps identifiers like `make lint`, v1.2.3, c++, problem+json."""
    return tuple(_WORD.findall(text.lower().replace("\u2019", "'")))


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A deliberately crude suffix stripper: enough to match 'runs'/'run', 'cats'/'cat'."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and not any(ch.isdigit() for ch in word):
        for suf in _SUFFIXES:
            if word.endswith(suf) and len(word) - len(suf) >= 3:
                base = word[: -len(suf)] + ("y" if suf == "ies" else "")
                if suf in ("ing", "ed") and len(base) >= 4 and base[-1] == base[-2] and base[-1] not in "lsfzdeo":
                    base = base[:-1]  # "running" -> "run", "submitted" -> "submit"
                return base
    return word


def same_stem(a: str, b: str) -> bool:
    """One word's stem, allowing what the crude stripper misses ("submitt" / "submit",
    "supportive" / "support"): one a prefix of the other, at most 3 letters apart, both 5+ long."""
    if a == b:
        return True
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 5 and len(long_) - len(short) <= 3 and long_.startswith(short)


@lru_cache(maxsize=65536)
def content(text: str) -> tuple[str, ...]:
    """Content stems in order of first appearance (function words dropped)."""
    out: list[str] = []
    for w in words(text):
        if w in STOPWORDS:
            continue
        s = stem(w)
        if s not in out:
            out.append(s)
    return tuple(out)


@lru_cache(maxsize=65536)
def numbers(text: str) -> frozenset[str]:
    return frozenset(_NUMBER.findall(text))


def time_words(text: str) -> frozenset[str]:
    return frozenset(w for w in words(text) if w in _TIME_WORDS)


@lru_cache(maxsize=65536)
def has_change_cue(text: str, other: str = "") -> bool:
    """A change marker in `text`; with `other`, only one whose word `other` does not share: a cue
    word both statements use is part of the topic ("schema changes need review"), not a change."""
    topic = {stem(w).rstrip("e") for w in words(other)}
    return any(
        not {stem(w).rstrip("e") for w in words(m.group(0))} <= topic
        for m in _CHANGE.finditer(text.lower())
    )


@lru_cache(maxsize=65536)
def has_additive_cue(text: str) -> bool:
    return _ADDITIVE.search(text.lower()) is not None


_POSSESSIVE = re.compile(r"(?:\b(?:my|our|his|her|their|your)|'s)\s+(?:\w+\s+)?$")


_SUBJECT_OWNER = re.compile(
    r"(?:(?:the )?user's|my|our|his|her|their|your|[\w-]+'s)?(?: (?:new|old|best|younger|older|little|big))?"
)
_NAMED_RELATION = re.compile(
    r"^\s*(?i:(?:(?:my|our|the user's|user's)\s+)?"
    + _THIRD_PARTY.pattern.replace("\\b(", "(", 1).rsplit("s?", 1)[0] + r"s?)\s+[A-Z][a-z]"
)


@lru_cache(maxsize=65536)
def third_parties(text: str) -> frozenset[str]:
    """Relation nouns in the first clause, owned by someone ("my sister", "the user's friend Ana"):
    the fact is about that person. A later clause ("...; my mother is from Utrecht") only adds context."""
    low = text.lower().replace("\u2019", "'")
    named = _NAMED_RELATION.match(text.replace("\u2019", "'"))
    if named:  # "Friend Ravi works as ...", "Coworker Rosa quit coffee"
        return frozenset((named.group(1).lower(),))
    head = re.split(r"[;:(]| - |, (?:and|but|so|because)\b", low, maxsplit=1)[0]
    out = set()
    for m in _THIRD_PARTY.finditer(head):
        before = head[: m.start()]
        if not _SUBJECT_OWNER.fullmatch(before.strip()):
            continue  # "bakes bread for her neighbours": someone else as the object, not the subject
        after = head[m.end() :].split()
        verb_next = bool(after) and (after[0] in _SUBJ_VERB or (after[0].endswith("s") and not after[0].endswith("ss")))
        if _POSSESSIVE.search(before) or (not before.strip() and verb_next):
            out.add(m.group(1))
    return frozenset(out)


def episode_words(text: str) -> frozenset[str]:
    """Day-level time anchors: a statement with one is an occurrence, not a standing fact."""
    return frozenset(w for w in words(text) if w in _EPISODE)


_DIRECTIONAL = frozenset(("to", "from", "into", "me", "us", "than", "by", "against"))
_USER_REF = frozenset(("i", "me", "my", "myself", "user", "user's", "we", "us", "our"))
_RAW = re.compile(r"[\w$€£][\w+#@.\-/'’]*[\w+#]|\w")


def _raw(text: str) -> list[str]:
    return _RAW.findall(text.replace("\u2019", "'"))


@lru_cache(maxsize=65536)
def _names(text: str) -> frozenset[str]:
    """Capitalised words past the first (names), numbers and amounts, lower-cased."""
    toks = _raw(text)
    return frozenset({
        t.lower().strip("$€£")
        for i, t in enumerate(toks)
        if any(ch.isdigit() for ch in t) or (i > 0 and t[:1].isupper() and t != "I")
    } - STOPWORDS - _TIME_WORDS - _USER_REF)


@lru_cache(maxsize=65536)
def _definite(text: str) -> frozenset[str]:
    """Words right after "the": the entities a statement names ("the auth service")."""
    w = words(text)
    return frozenset(b for a, b in zip(w, w[1:], strict=False) if a == "the" and b not in STOPWORDS)


def _participants(text: str, names: frozenset[str]) -> list[str]:
    """The statement's participants in order: runs of `names`, and "USER" where the user is.

    A subject-less note ("Lent Jamal €120.") is about the user, who comes first."""
    out: list[str] = []
    run: list[str] = []
    for tok in _raw(text):
        low = tok.lower().strip("$€£")
        if low in names and not any(ch.isdigit() for ch in low):
            run.append(low)  # one multi-word name: "ETH Zurich"
            continue
        if run:
            out.append(" ".join(run))
            run = []
        if low in names:
            out.append(low)
        elif low in _USER_REF and "USER" not in out:
            out.append("USER")
    if run:
        out.append(" ".join(run))
    if "USER" not in out:
        out.insert(0, "USER")
    return out


@lru_cache(maxsize=65536)
def order_swapped(new_text: str, old_text: str) -> bool:
    """Same participants, exchanged ("I lent Ana €20" / "Ana lent me €20", "from X to Y" / "from Y
    to X"): two names, literals or the user that both statements share appear in opposite order.

    Only counts where a directional function word is present, and only names / literals / the user
    count: plain paraphrases reorder their other words freely ("Use PostgreSQL for auth" / "Auth DB
    is PostgreSQL", "a degree in philosophy" / "a philosophy degree").
    """
    if not _DIRECTIONAL & (set(words(new_text)) | set(words(old_text))):
        return False
    names = _names(new_text) | _names(old_text) | (_definite(new_text) & _definite(old_text))
    a, b = _participants(new_text, names), _participants(old_text, names)
    pos_b = [b.index(p) for p in dict.fromkeys(a) if p in b]  # first mentions
    return any(x > y for x, y in zip(pos_b, pos_b[1:], strict=False))


def is_polarity_word(word: str) -> bool:
    """A word that only carries negative polarity ("never", "hates", "avoids")."""
    return _NEGATION.fullmatch(word) is not None


@lru_cache(maxsize=65536)
def has_negation(text: str) -> bool:
    return _NEGATION.search(text.lower()) is not None


_CLAUSE = re.compile(r"[,;:(—]|\s-\s|\b(?:and|but|though|although|while|whereas)\b")


@lru_cache(maxsize=65536)
def negation_only_in_added_clause(text: str) -> bool:
    """The negation sits in a clause of its own that adds content ("Prefers email, and dislikes
    unscheduled calls"; "Secrets live in Doppler, never in the repo"): the first clause states the
    fact positively, so the statement elaborates a positive one rather than reversing it. A tail of
    bare negation or change words ("..., but not anymore") is a reversal and does not count."""
    lowered = text.lower()
    m = _CLAUSE.search(lowered)
    if m is None:
        return False
    head, tail = lowered[: m.start()], lowered[m.end():]
    if has_negation(head) or not has_negation(tail):
        return False
    extra = [w for w in content(tail) if not _NEGATION.fullmatch(w) and not _CHANGE.fullmatch(w)]
    return len(extra) >= 1 and len(content(head)) >= 2


@dataclass(frozen=True)
class Overlap:
    """Token-level comparison of a new statement with an older one."""

    shared: frozenset[str]
    only_new: tuple[str, ...]
    only_old: tuple[str, ...]
    new_len: int
    old_len: int
    num_new: frozenset[str]  # numbers only in the new text
    num_old: frozenset[str]  # numbers only in the old text
    time_new: frozenset[str]
    time_old: frozenset[str]

    @property
    def jaccard(self) -> float:
        union = len(self.shared) + len(self.only_new) + len(self.only_old)
        return len(self.shared) / union if union else 1.0

    @property
    def old_in_new(self) -> float:
        """Share of the old statement's content that the new one repeats."""
        return len(self.shared) / self.old_len if self.old_len else 1.0

    @property
    def new_in_old(self) -> float:
        return len(self.shared) / self.new_len if self.new_len else 1.0

    @property
    def literal_conflict(self) -> bool:
        """A number or date stated by each side but not the other: a different value or occasion."""
        return bool((self.num_new and self.num_old) or (self.time_new and self.time_old))


def overlap(new_text: str, old_text: str) -> Overlap:
    a, b = content(new_text), content(old_text)
    sa, sb = frozenset(a), frozenset(b)
    na, nb = numbers(new_text), numbers(old_text)
    ta, tb = time_words(new_text), time_words(old_text)
    return Overlap(
        shared=sa & sb,
        only_new=tuple(w for w in a if w not in sb),
        only_old=tuple(w for w in b if w not in sa),
        new_len=len(a),
        old_len=len(b),
        num_new=na - nb,
        num_old=nb - na,
        time_new=ta - tb,
        time_old=tb - ta,
    )


def completeness(text: str) -> int:
    """How much a statement says: its distinct content stems plus its numbers."""
    return len(content(text)) + len(numbers(text))


# --- frames: the statement with its values masked ------------------------------------------------
_TOKEN = re.compile(r"`[^`]+`|\w[\w+#@.\-/'’]*[\w+#]|\w|[;:,()]")
_SUBJECT_LEAD = re.compile(
    r"^(?:the user's|the user|user's|user|i'm|i am|i've|i'd|i|my|we're|we've|we|our)\b\s*", re.IGNORECASE
)
# Third-person verb forms that follow a name used as the subject ("Ruth was raised ...").
_SUBJ_VERB = _wordset("is was has had does doesn't isn't wasn't can can't will would should never always also just")
_CLAUSE_START = frozenset((";", ":", "(", ","))


def _is_value(tok: str, first: bool) -> bool:
    """Literal values: identifiers, numbers, code spans and proper nouns (not a sentence's first word)."""
    if tok.startswith("`") or any(ch.isdigit() for ch in tok):
        return True
    if any(ch in tok for ch in "._/@#+") and len(tok) > 2:
        return True
    if any(ch.isupper() for ch in tok[1:]):
        return True  # camel-case names: iPhone, GitFlow
    return not first and tok[:1].isupper() and tok.lower() not in STOPWORDS and tok != "I"


@lru_cache(maxsize=65536)
def frame(text: str) -> tuple[str, frozenset[str], str]:
    """The statement's frame (subject normalised to "user", literal values replaced by "X") and its values.

    Two statements with one frame and different values state one slot with another value
    ("I work at Acme" / "Ruth works at Globex"); with equal values, the same fact. The third item
    is a name used as the subject ("" for I / User / none): the user's own name or someone else's.
    """
    subject = ""
    body = _SUBJECT_LEAD.sub("", text.strip().replace("\u2019", "'"))
    toks = _TOKEN.findall(body)
    out: list[str] = ["user"]
    values: list[str] = []
    run: list[str] = []
    first = True
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        verb_next = nxt.lower() in _SUBJ_VERB or (nxt.islower() and nxt.endswith("s") and not nxt.endswith("ss"))
        if (
            first
            and not out[1:]
            and tok[:1].isupper()
            and tok != "I"
            and (verb_next or tok.endswith("'s"))
            and not _THIRD_PARTY.fullmatch(tok.lower().removesuffix("'s"))
        ):
            first = False
            subject = tok.lower().removesuffix("'s")  # a name as the subject: the same slot as "I" / "User"
            continue
        if _is_value(tok, first) or (run and tok[:1].isupper()):
            run.append(tok.strip("`"))
        else:
            if run:
                values.append(" ".join(run).lower())
                out.append("X")
                run = []
            if tok not in _CLAUSE_START:
                out.append(tok.lower())
        first = tok == ";"  # after "Car:" or "," a capitalised word is a value, after ";" a new sentence
    if run:
        values.append(" ".join(run).lower())
        out.append("X")
    return " ".join(out), frozenset(values), subject


_PAST = re.compile(
    r"^(?:\w+ ){0,2}?(?:\w+ed|went|ran|had|got|took|made|met|saw|flew|drove|bought|sold|did|gave|came|"
    r"released|shipped|deployed)\b"
)


@lru_cache(maxsize=65536)
def is_event(text: str) -> bool:
    """A past occurrence ("Deployed v2.3 to staging.", "Ran 10 km."), not a standing fact: two such
    statements with other values are two events, not a changed value."""
    body = _SUBJECT_LEAD.sub("", text.strip().lower())
    return _PAST.match(body) is not None and not has_change_cue(text)
