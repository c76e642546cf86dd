"""The evidence an update needs: English constructions that say one fact replaced another.

A supersede is applied only on positive evidence of one of three kinds (precision first: a wrong
supersede drops a true fact from `latest_only`, a missed one leaves an extra line):
- an explicit end of the old value: "sold the Subaru", "no longer vegetarian", "moved from Lisbon",
  "broke up with Sam", "instead of Jenkins", whose object the old memory states;
- one single-valued slot (where someone lives, works, what they drive, their age...) stated with
  another value of the same kind (a name or a number);
- a plan that is now done: "is planning a garden party" -> "hosted a garden party".
A change word alone ("new", "started", "joined", "now") is no evidence: it also opens added facts.
Pure: regular expressions over the text; no model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from dreamstream.agents import text_features as tf

_DET = r"(?:(?:the|my|our|his|her|their|your|a|an|its)\s+)?"
_END = re.compile(
    r"\b(?P<cue>no longer|not\b[^.;]{0,30}?\bany ?(?:more|longer)|stop(?:ped|s|ping)?|quit|gave up(?: on)?|"
    r"sold|moved (?:away |out )?from|relocated from|migrat\w*(?: \w+){0,2} from|left|broke up with|"
    r"split up with|split from|divorced|switch\w*(?: \w+){0,2} from|replac(?:e|es|ed|ing)|ditch\w*|drop(?:s|ped)?|"
    r"handed in (?:my|his|her|their) notice at|resigned from|(?:was |got )?laid off from|"
    r"lost (?:my|his|her|their) job at|"
    r"retired from|instead of|rather than|no more|got rid of|moved on from|gone from)\s+"
    + _DET + r"(?P<obj>[^.;,!?()]+)",
    re.IGNORECASE,
)
_OBJ_STOP = re.compile(r"\b(?:and|but|to|for|because|so|after|since|when|with|as|in favou?r of)\b")
_NEG_AGAIN = re.compile(r"\b(?:any ?more|any longer|no longer|stopped|quit|gave up)\b")

_PLAN = re.compile(
    r"\b(?:plan(?:s|ning|ned)? (?:to|on)|(?:is|are|am) planning(?! to| on)|looking forward to|wants? to|wanted to|"
    r"would like to|hopes? to|hoping to|(?:is|are|am) going to|intends? to|thinking (?:about|of)|"
    r"considering|can't wait to|cannot wait to|looking to|preparing (?:to|for)|getting ready (?:to|for)|"
    r"(?:is|are|am) organi[sz]ing|scheduled to|interest(?:ed)? in)\b",
    re.IGNORECASE,
)
_PLAN_VERBS_OWN = re.compile(r"(?:plann|organi[sz]|prepar|getting ready)", re.IGNORECASE)
_OBJECT_END = tf._wordset(
    """
    to for with at in on from about next this last later soon after before during because so that which
    who when while than since until one two three four five six seven eight nine ten few several
    """
)
_PAST_IRREGULAR = tf._wordset(
    """
    went got had took made saw met won bought ran wrote held gave found did began became flew drove
    built sold left came brought caught taught threw chose spoke heard kept lost paid read sang sent
    spent stood swam told thought understood wore
    """
)
_IRREGULAR_BASE = dict(
    pair.split(":", 1)
    for pair in tf._wordset(
        """
        went:go got:get had:have did:do took:take made:make saw:see met:meet won:win bought:buy ran:run wrote:write
        held:hold gave:give found:find began:begin became:become flew:fly drove:drive built:build
        sold:sell came:come brought:bring caught:catch taught:teach threw:throw chose:choose spoke:speak
        heard:hear kept:keep lost:lose paid:pay sang:sing sent:send spent:spend stood:stand swam:swim
        told:tell thought:think wore:wear
        """
    )
)


def base(word: str) -> str:
    """A verb's base form for matching a plan to its report ("ran" / "running" -> "run")."""
    return tf.stem(_IRREGULAR_BASE.get(word, word))


_NOT_PAST = tf._wordset(
    """
    excited interested based named called used need needed tired scared related dedicated
    motivated inspired talented determined focused committed passionate
    """
)
_EARLIER = re.compile(
    r"\b(?:years? ago|last year|until last \w+|as a (?:kid|child|teen(?:ager)?)|when (?:she|he|they|i) "
    r"(?:was|were|first)|childhood|used to|back then|in the past|growing up|once)\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=65536)
def about_the_past(text: str) -> bool:
    """Tells of an earlier time ("used to", "as a teenager", "when she first moved")."""
    return _EARLIER.search(text) is not None

# Single-valued slots: one person has one value at a time. The value must be a name or a number.
_SLOTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(p))
    for name, p in (
        ("residence", r"\b(?:[Ll]ives?|[Ll]iving|[Bb]ased|[Rr]esides?|[Mm]oved|[Rr]elocated|[Mm]oving)\s+"
                      r"(?:back\s+|now\s+)?(?:in|to|into)\s+(?:the\s+)?(?P<v>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)"),
        ("residence", r"\b[Hh]ome(?:town)? is (?:in\s+)?(?P<v>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)"),
        ("employer", r"\b(?:[Ww]orks?|[Ww]orking|[Ee]mployed|[Jj]ob|[Hh]ired)\s+(?:now\s+)?(?:as an? [a-z]+\s+)?"
                     r"(?:at|for|by)\s+"
                     r"(?P<v>[A-Z][\w&'-]*(?:\s+[A-Z][\w&'-]*)*)"),
        ("vehicle", r"\b(?:[Dd]rives?|[Dd]riving)\s+(?:a|an|the)?\s*(?P<v>[A-Z][\w-]*(?:\s+[A-Z0-9][\w-]*)*)"),
        ("partner", r"\b(?:[Mm]arried to|[Dd]ating|[Ee]ngaged to)\s+(?P<v>[A-Z][\w'-]*)"),
        ("age", r"\b(?P<v>\d{1,3})[ -]years?[ -]old\b"),
        ("employer", r"\b[Ee]mployer(?: is|:)\s*(?P<v>[A-Z][\w&'-]*(?:\s+[A-Z][\w&'-]*)*)"),
        ("manager", r"\b(?:[Mm]anager(?: is|:|,)|[Rr]eports? to|[Rr]eporting to)\s*(?P<v>[A-Z][\w'-]*)"),
        ("email", r"\b[Ee]-?mail(?: address)?(?: is|:)\s*(?P<v>\S+@\S+)"),
        ("phone", r"\b(?:[Pp]hone )?[Nn]umber(?: is|:)\s*(?P<v>[+\d][\d\s()-]{5,}\d)"),
    )
)


@dataclass(frozen=True)
class Ending:
    """An explicit end of a value in a statement: the cue and the words of what ended."""

    cue: str
    obj: tuple[str, ...]
    owned: bool = True
    """False for an everyday verb without a determiner ("sold clothes", "replace oxlint"): only the
    very word the old statement uses, in the same role, then counts."""


_OWNED_OBJECT = re.compile(r"\s+(?:the|my|our|his|her|their|your|[A-Z])")
_INSTITUTION = tf._wordset(
    """
    job company team band school college university position role club group church firm office
    partner boyfriend girlfriend husband wife fiance fiancee
    """
)


_SPLIT = re.compile(
    r"\band\s+(?:(?:her|his|their)\s+\w+\s+)?([A-Z][\w'-]*)\s+(?:broke up|split up|separated|divorced)\b"
)


@lru_cache(maxsize=65536)
def endings(text: str) -> tuple[Ending, ...]:
    """Each "stopped X" / "sold the X" / "no longer X" construction, with X's content words.

    Verbs that also name everyday acts need a thing of someone's as their object: "sold the Subaru"
    ends a value, "sold clothes" is a shop's day; "left his job" does, "left the city for a hike"
    does not; "instead of" only in a standing statement, not in one evening's choice."""
    out: list[Ending] = []
    for m in _END.finditer(text.replace("\u2019", "'")):
        cue = " ".join(m.group("cue").lower().split())
        rest = text[m.end("cue"):]
        if re.match(r"(?:stop|drop|sold)", cue) and re.match(r"\s+(?:by|at|in|for|to|over|off|out|into)\b", rest):
            continue  # "stopped by the cafe", "dropped off the kids", "sold out": visits and errands
        owned = not re.match(r"(?:sold|left|drop|ditch|replac|got rid)", cue) or bool(_OWNED_OBJECT.match(rest))
        if cue == "left" and not owned:
            continue  # "left review comments", "left-handed"
        if cue == "left" and re.search(r"\b(?:the|my|our|his|her|their|your|a)\s+$", text[: m.start("cue")]):
            continue  # "their left hand"
        if re.search(r"\b(?:would|could|might|if|hopes?|hoping|wants?|plans?)\b[^.;]{0,40}$", text[: m.start("cue")],
                     re.IGNORECASE):
            continue  # "a job that would mean no more early shifts": only a possibility
        if cue in ("instead of", "rather than") and reports_done(text):
            continue  # "played chess instead of video games": one occasion, not a changed habit
        obj = _OBJ_STOP.split(m.group("obj"), maxsplit=1)[0]
        words = tuple(w for w in tf.words(obj) if w not in tf.STOPWORDS)[:3]
        if cue == "left" and words and not (words[0] in _INSTITUTION or re.match(r"\s+[A-Z]", rest)):
            continue  # "left the city for a hike": a trip, not a move; a job, a band or a name is left for good
        if words:
            out.append(Ending(cue, words, owned))
    out += [Ending("broke up", (m.group(1).lower(),)) for m in _SPLIT.finditer(text)]  # "Mara and Leo broke up"
    return tuple(out)


@lru_cache(maxsize=65536)
def reverses(text: str) -> bool:
    """A negation that says a former state stopped ("don't ... anymore", "no longer", "quit")."""
    low = text.lower()
    negated_again = tf.has_negation(text) and _NEG_AGAIN.search(low) is not None
    return negated_again or re.search(r"\b(?:no longer|stopped|quit|gave up)\b", low) is not None


_FUTURE = re.compile(r"\b(?:next|will|soon|upcoming|tomorrow|someday|one day)\b", re.IGNORECASE)


@lru_cache(maxsize=65536)
def future(text: str) -> bool:
    """Speaks of what is still to come ("my next language", "will start"): not a present fact."""
    return _FUTURE.search(text) is not None


_USER_OBJECT = re.compile(r"^\s*[A-Z][\w'-]*\s+\w+\s+(?:the\s+)?(?:user|me)\b", re.IGNORECASE)
_LEAD_SKIP = tf._wordset("i user the a an my our we this that it there decision note goal current currently")


@lru_cache(maxsize=65536)
def user_is_object(text: str) -> bool:
    """Someone else acts on the user ("Amir lent the user £30"): roles the other way round from
    "Lent Amir £30" / "User gave Amir ..."."""
    return _USER_OBJECT.match(text) is not None and not re.match(r"^\s*(?:the\s+)?user\b", text, re.IGNORECASE)


_VERBISH = tf._wordset("is was has had does doesn't isn't wasn't can can't will would should never always also just")


@lru_cache(maxsize=65536)
def lead_subject(text: str) -> str:
    """Who the statement is about: a name that opens it as the subject ("Felix got a job"),
    lower-cased; "user" for an explicit I / User / My / We; "" when it has no subject ("Sold the
    Subaru", "Lives in Lisbon"), which fits anyone."""
    t = text.replace("\u2019", "'").strip()
    if re.match(r"(?:i|i'm|i've|i'd|we|we're|we've|my|our|(?:the )?user(?:'s)?)\b", t, re.IGNORECASE):
        return "user"
    m = re.match(r"([A-Z][\w'-]*?)(?:'s)?\s+([a-z][\w']*)", t)
    if m is None or m.group(1).lower() in _LEAD_SKIP:
        return ""
    nxt = m.group(2)
    verbish = (nxt in _VERBISH or nxt in _PAST_IRREGULAR or nxt.endswith("ed")
               or (nxt.endswith("s") and not nxt.endswith("ss")) or "'s" in m.group(0))
    return m.group(1).lower() if verbish else ""


def same_subject(a: str, b: str) -> bool:
    """Both statements can be about one person: the same subject, or one without a subject."""
    sa, sb = lead_subject(a), lead_subject(b)
    return sa == sb or not sa or not sb


def slots(text: str) -> dict[str, str]:
    """The single-valued slots a statement fills, with their value (lower-cased)."""
    return dict(_slots(text))


@lru_cache(maxsize=65536)
def _slots(text: str) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for name, pattern in _SLOTS:
        m = pattern.search(text.replace("\u2019", "'"))
        if m and name not in out:
            out[name] = " ".join(m.group("v").lower().split())
    return tuple(out.items())


@dataclass(frozen=True)
class Plan:
    """What a statement says someone intends: the verb (None when the marker is the verb itself,
    "organizing a party") and the object's content words ("garden party")."""

    verb: str | None
    obj: tuple[str, ...]


@lru_cache(maxsize=65536)
def plan(text: str) -> Plan | None:
    """The plan a statement states, or None."""
    m = _PLAN.search(text)
    if m is None:
        return None
    own = _PLAN_VERBS_OWN.search(m.group(0)) is not None
    toks = [w for w in tf.words(text[m.end():]) if w not in ("a", "an", "the", "my", "his", "her", "their", "our")]
    verb: str | None = None
    if not own and toks and toks[0] not in _OBJECT_END:
        verb = toks.pop(0)
    obj: list[str] = []
    for w in toks:
        if w in _OBJECT_END or any(ch.isdigit() for ch in w) or w in tf._TIME_WORDS or w in ("week", "month", "year"):
            break
        if w not in tf.STOPWORDS and w not in ("up", "out", "off", "down", "over", "back"):
            obj.append(w)
        if len(obj) == 3:
            break
    if not obj and verb is None:
        return None
    return Plan(verb=verb, obj=tuple(obj))


def past_form_of(verb: str, text: str) -> bool:
    """`text` says `verb` in the past ("watched" for "watch", "went" for "go"), not as a noun or a
    present ("the release show" is not "released")."""
    want = base(verb)
    return any(tf.same_stem(base(w), want) and (w in _PAST_IRREGULAR or w.endswith("ed")) for w in tf.words(text))


@lru_cache(maxsize=65536)
def reports_done(text: str) -> bool:
    """A completed occurrence: a simple past verb, no plan of its own, not a memory of long ago.
    A perfect ("has played the violin for years") reports a state that still holds, not a one-off."""
    if plan(text) or _EARLIER.search(text) or tf.has_negation(text) or re.search(r"\byet\b", text.lower()):
        return False  # "hasn't started learning Italian yet" reports nothing done
    ws = tf.words(text)
    return any((w in _PAST_IRREGULAR or (w.endswith("ed") and len(w) > 4 and w not in _NOT_PAST))
               and (i == 0 or ws[i - 1] not in _PERFECT) for i, w in enumerate(ws))


_PERFECT = tf._wordset("have has had i've we've they've she's he's been having")
_OCCASION = re.compile(
    r"(?<!every )(?<!each )(?<!most )\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|"
    r"yesterday|tonight|tomorrow|morning|afternoon|evening)\b(?!\s+(?:nights|mornings|afternoons|evenings))"
)


_HAVE = re.compile(r"\b(?:has|have|had|owns?|owned)\s+(?:(?:a|an|the|two|three|four|some)\s+)?(\w+)", re.I)


def possession_kept(hidden: str, kept: str) -> bool:
    """What `hidden` says someone has ("We have a flat in Leith"), `kept` says as theirs too ("has a
    flat", "my dog Rex"), not only as a thing ("The flat in Leith has a balcony")."""
    for m in _HAVE.finditer(hidden):
        noun = re.escape(m.group(1).lower())
        owned = rf"\b(?:has|have|had|owns?|owned|my|our|his|her|their|\w+'s)\s+(?:\w+[\s-]+){{0,3}}{noun}"
        if not re.search(owned, kept.lower()):
            return False
    return True


_SPEECH = re.compile(
    r"\b(?:says?|said|tells?|told|mentions?|mentioned|thinks?|thought|believes?|believed|explains?|explained|"
    r"claims?|claimed)\b",
    re.IGNORECASE,
)


def reported(text: str) -> bool:
    """Says what someone said or thinks ("says the wind makes cycling harder"): an opinion about a
    thing, which does not restate a plain fact about it ("is into cycling")."""
    return _SPEECH.search(text) is not None


@lru_cache(maxsize=65536)
def occasions(text: str) -> frozenset[str]:
    """Day anchors that make a statement one occasion ("on Monday", "this morning"); a habit's
    ("every morning") is no occasion."""
    return frozenset(_OCCASION.findall(text.lower()))
