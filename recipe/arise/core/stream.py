"""Streaming the summary rollout O_{G+1} into the generation wave (framework free).

With ``arise.summary.stream`` the reward manager posts each training trajectory's reward and
trace here (through the skill pool); the trajectory that completes its query group's G rewards
learns at once whether the group has tau+ and whether the sampled batch's summary budget still
has room. If so the group is *claimed*: its summary rollout starts while the other groups are
still generating, instead of in a second wave after all of them (docs/performance.md). The
trainer collects the delivered summaries after the wave and runs library maintenance once per
step, in the paper's order, as without streaming.

A group is claimed when its last reward arrives, so the choice cannot wait for every group:
streaming takes the first groups to complete with tau+ (``arise.summary.choose: first``).
"""

from __future__ import annotations

from typing import Any

from recipe.arise.core.groups import positive_advantage_sessions

__all__ = ["SummaryStream"]


class SummaryStream:
    """Per sampled batch: group buffers, claims within the budget, delivered summaries.

    ``begin`` opens a batch (a fresh ``key``); ``add`` buffers one trajectory and returns the
    claimed group when it completes one; ``deliver`` stores a claimed group's summary output;
    ``collect`` tells the trainer how many were claimed and hands over what was delivered;
    ``end`` closes the batch, so a late delivery is dropped instead of leaking into the next.
    """

    def __init__(self):
        self.key: Any = None
        self.budget = 0
        self.group_size = 0
        self.claimed = 0
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._delivered: list[dict[str, Any]] = []

    @property
    def active(self) -> bool:
        return self.key is not None

    def begin(self, key: Any, budget: int, group_size: int) -> None:
        """budget: summaries this batch may start (-1 = every group with tau+, 0 = none)."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if budget < -1:
            raise ValueError(f"budget must be -1 (no cap) or >= 0, got {budget}")
        self.key, self.budget, self.group_size = key, int(budget), int(group_size)
        self.claimed = 0
        self._buffers = {}
        self._delivered = []

    def add(self, uid: str, reward: float, text: str, question: str, messages: list | None = None, env: bool = False):
        """Buffer one trajectory of group ``uid`` (``env``: ``text`` is an environment episode's
        transcript). Returns the claimed group (the trainer's summary layout: uid, question, messages,
        success_rate, traces best reward first) when this trajectory completes a group with tau+ and
        the budget has room; otherwise None."""
        if not self.active:
            return None
        members = self._buffers.setdefault(str(uid), [])
        members.append(
            {"reward": float(reward), "text": str(text), "question": question, "messages": messages, "env": bool(env)}
        )
        if len(members) < self.group_size:
            return None
        del self._buffers[str(uid)]
        rewards = [m["reward"] for m in members]
        positive = positive_advantage_sessions(rewards)
        if not positive or (self.budget >= 0 and self.claimed >= self.budget):
            return None
        self.claimed += 1
        positive.sort(key=lambda j: -rewards[j])  # best rewards first, ties in arrival order
        first = members[0]
        return {
            "uid": str(uid),
            "question": first["question"],
            "messages": list(first["messages"] or []),
            "success_rate": sum(r > 0 for r in rewards) / len(rewards),
            "traces": [{"text": members[j]["text"], "reward": rewards[j], "env": members[j]["env"]} for j in positive],
            "key": self.key,
        }

    def deliver(self, result: dict[str, Any]) -> bool:
        """A claimed group's summary output: the group (as ``add`` returned it) plus ``token_ids``
        (None on failure), ``error``, ``prompt_tokens``. False (dropped) if its batch is closed."""
        if not self.active or result.get("group", {}).get("key") != self.key:
            return False
        self._delivered.append(result)
        return True

    def collect(self) -> tuple[int, list[dict[str, Any]]]:
        """(groups claimed this batch, the summaries delivered so far); the list is handed over."""
        out, self._delivered = self._delivered, []
        return self.claimed, out

    def end(self) -> None:
        self.key = None
        self._buffers = {}
        self._delivered = []
