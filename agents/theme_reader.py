"""Optional LLM grouping for synthesis: a reader of one person's whole record proposes the themes.

The offline grouping (`synthesis.find_themes`) links memories by how close their sentences are, and a
careful reader's themes are held together by a person and a story (a relationship moving forward: the
move, the engagement, the wedding date), which closeness of sentences does not see. With an endpoint
configured, the model reads the person's evidence (their current memories: superseded and merged ones are
never shown; oldest first, each with its month and a line number), applies the evidence rules its prompt
states (no replaced fact, no plan a later line reports done, no one else's fact) and answers
`{"themes": [{"theme": "<sentence>", "members": [<line numbers>]}]}`.

Whatever it answers goes through the same checks as an offline theme (`synthesis.read_themes`): members
must be lines it was shown, a theme needs three distinct pieces of evidence (restatements count once),
and each sentence is bounded. The call itself is injected (`ask`): this module does no I/O. A failed call
or an unusable reply gives `None`, and the offline grouping runs instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from dreamstream.agents.llm_reply import AskJSON, LLMReplyError

SYSTEM_PROMPT = """You read everything an assistant remembers about one person and find the patterns \
a careful reader sees across several memories, that no single memory states. Answer with JSON only: \
{"themes": [{"theme": "<sentence>", "members": [<line numbers>]}]}.

A theme is a habit (goes climbing every weekend, shown by three outings), a direction (moving from \
backend work towards machine learning: a course, a side project, a new role), a recurring activity, a \
value or preference shown in several concrete ways, or a long-running project with its steps. It needs \
at least three members, and every member must be about this person and still true at the end of the \
list: the lines are oldest first; a fact a later line replaced (moved, changed job, ended, corrected) \
is no member, and neither is a plan a later line reports done (use the later line). A friend's, \
partner's or child's facts are members only when the theme is about the person's relation to them and \
says so. Do not generalise one member's detail to all.

Not a theme: one fact said several times; unrelated facts joined by "and"; memories held together by \
one loose word; a list of everything about a topic without a thread. Most people have 2 to 6 themes, \
some none: prefer fewer, clearly true themes to many weak ones.

One thread per theme: its members are the memories that show that thread directly (usually 3 to 8), \
not everything on the same topic. When one area of the person's life holds two threads (say, how a \
career moves on and a side project in the same field), give them as two themes, each with its own \
members.

"theme": one sentence that names the thread, true at the end of the list, using the person's name as \
the memories use it ("User" when they use none); concrete supporting details may follow, each \
traceable to a member; at most 60 words. "members": the line numbers of its evidence."""

MAX_LINES = 400
"""Memories shown per person (the most recent, when there are more): a bounded prompt."""
MAX_CHARS = 450
MAX_THEMES = 12
MIN_MEMBERS = 3
"""As the guide for theme writers says: a pattern needs at least three memories."""
MEMO = 256
"""Replies kept per reader: the same lines in the same process ask nothing again. Across processes the run
state's digest of what was read (`synthesis.reading_digest`) keeps a re-run from asking."""


@dataclass(frozen=True)
class ReadTheme:
    """One theme as the reader gave it: its sentence and its members (indexes into the evidence shown)."""

    text: str
    members: tuple[int, ...]


def check_themes(data: dict[str, object], n_lines: int, min_members: int = MIN_MEMBERS) -> list[ReadTheme]:
    """The usable themes of a reply: members are 1-based line numbers shown (as indexes from 0), at least
    `min_members` distinct ones, a non-empty sentence of at most MAX_CHARS; at most MAX_THEMES of them.
    Single themes that fail the checks are dropped; a reply without a `themes` list, or whose every theme
    fails them (members counted from 0, given as strings: the reader misread the format), is unusable
    (`LLMReplyError`). An empty list is an answer: the reader sees no theme."""
    raw = data.get("themes")
    if not isinstance(raw, list):
        raise LLMReplyError("reply has no themes list")
    out: list[ReadTheme] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        text, members = item.get("theme"), item.get("members")
        if not isinstance(text, str) or not text.strip() or not isinstance(members, list):
            continue
        text = " ".join(text.split())
        if not all(isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= n_lines for m in members):
            continue  # a member it was never shown: the reader lost track, trust none of this theme
        lines = sorted({m - 1 for m in members})
        if len(text) > MAX_CHARS or len(lines) < min_members:
            continue
        out.append(ReadTheme(text=text, members=tuple(lines)))
    if raw and not out:
        raise LLMReplyError(f"none of the reply's {len(raw)} themes passes the checks")
    return out[:MAX_THEMES]


def month_of(created_at: str) -> str:
    """"2025-06-03T..." -> "2025-06": the precision a reader needs to see order and gaps."""
    return created_at[:7]


@dataclass(frozen=True)
class LLMThemeReader:
    """Groups a person's evidence through one JSON-mode chat call (`ask`); `None` means: group offline."""

    ask: AskJSON
    name: str = "llm"
    identity: str = ""
    """Who reads (the model's name): with the prompt, part of `reading_id`."""
    _memo: dict[object, list[ReadTheme]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def reading_id(self) -> str:
        """Names this reader and its prompt: a reading by another model or prompt is a different reading, so
        a changed prompt or model reads each person again rather than keeping the old answer for good."""
        return hashlib.sha1(f"{self.identity}\x1f{MAX_LINES}\x1f{SYSTEM_PROMPT}".encode()).hexdigest()[:12]

    def messages(self, lines: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """`lines`: (created_at, text) oldest first, at most MAX_LINES.

        Only the record: not the patterns of earlier runs. Shown those and asked to keep what still holds,
        a reader kept every earlier theme and added new ones, run after run (monthly runs over three
        calibration people: 9 to 10 patterns each, 7 of the 18 labelled themes found, precision 0.25;
        one reading of the final record: 14 of 18, precision 0.88)."""
        body = "\n".join(f"{n}. ({month_of(d)}) {' '.join(t.split())}" for n, (d, t) in enumerate(lines, start=1))
        return [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"Memories, oldest first:\n{body}"}]

    def __call__(self, lines: Sequence[tuple[str, str]]) -> list[ReadTheme] | None:
        key = tuple(lines)
        if key in self._memo:
            return self._memo[key]
        try:
            themes = check_themes(self.ask(self.messages(lines)), len(lines))
        except Exception:  # noqa: BLE001 - any failure means: group offline (and ask again next time)
            return None
        if len(self._memo) >= MEMO:
            self._memo.pop(next(iter(self._memo)))
        self._memo[key] = themes
        return themes
