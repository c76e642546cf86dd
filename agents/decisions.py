"""What a merge/supersede decision is, and how it turns into status changes.

Pure: no Kafka, no Qdrant. The ingest pipeline feeds `Decision`s to `plan_changes`, applies the
result to the store, and emits one `memory.status` event per decision.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["merge_new", "merge_old", "supersede", "supersede_new", "conflict", "review"]
"""merge_new: the new memory restates a canonical one and is stored `merged` into it.
merge_old: the new memory is the fuller statement; the targets become `merged` into it.
supersede: the targets held an older value; they become `superseded` by the new memory.
supersede_new: the new memory holds an older value than a current fact said after it (it arrived late); it is
stored `superseded` by that fact (the target).
conflict: a change was due but a target is pinned; nothing changes, the case is kept for review.
review: the judge abstained (a likely merge or update without enough evidence); nothing changes,
the pair is kept with its evidence for the consolidation pass, where a person decides."""

HIDDEN_ON_ARRIVAL = {"merge_new": "merged", "supersede_new": "superseded"}
"""The actions that store the new memory hidden behind its one target, and the status it takes."""


@dataclass(frozen=True)
class Decision:
    """One decision about a new memory against existing ones, with the evidence behind it."""

    action: Action
    new_id: str
    user_id: str
    targets: tuple[str, ...]
    judge: str
    rule: str
    scores: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def decision_id(self) -> str:
        """Derived from what was decided, so a replay yields the same id."""
        key = f"{self.action}|{self.new_id}|{','.join(sorted(self.targets))}"
        return "d-" + hashlib.sha1(key.encode()).hexdigest()[:16]

    def evidence(self) -> dict[str, Any]:
        return {"judge": self.judge, "rule": self.rule, "scores": dict(self.scores), **self.detail}
