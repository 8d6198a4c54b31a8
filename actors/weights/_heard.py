"""Who may say what to the weight actors (decision 0024): a message is taken only from the actor
whose word it is; anything else is counted by sender and ignored, the first from each logged."""

from __future__ import annotations

from typing import Any

from actorwire.messages import Message


def heard(ignored: dict[str, int], sender: str | None, msg: Message, allowed: bool, log: Any, **expected: Any) -> bool:
    """``allowed``, after counting a refusal in ``ignored`` (by sender) and logging the first from
    each sender at warning level with what was ``expected``."""
    if allowed:
        return True
    who = sender or "?"
    count = ignored[who] = ignored.get(who, 0) + 1
    if count == 1:
        log.warning("weights.wrong_sender", kind=type(msg).wire_tag(), sender=who, **expected,
                    note="ignored; further ones from this sender are counted")
    return False
