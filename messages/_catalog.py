"""Every message kind in one tagged union, and look-ups over it."""

from __future__ import annotations

import typing
from typing import Union

from ._base import Message
from ._errors import NotFound
from .kinds import _control, _metrics, _rendezvous, _runtime, _status, _timing, _weights


def _members(union: object) -> tuple[type[Message], ...]:
    return tuple(typing.get_args(union))


#: Families in the order the docs list them.
FAMILIES: dict[str, tuple[type[Message], ...]] = {
    "control": (*_members(_control.ControlMsg), _control.Fanout),
    "timing": _members(_timing.TimingMsg),
    "metrics": (_metrics.MetricsMsg, _metrics.EpochMetrics),
    "weights": _members(_weights.WeightMsg),
    "rendezvous": _members(_rendezvous.RendezvousMsg),
    "runtime": _members(_runtime.RuntimeMsg),
    "status": _members(_status.StatusMsg),
}

MESSAGE_TYPES: tuple[type[Message], ...] = tuple(
    cls for family in FAMILIES.values() for cls in family
)

#: The union a receiver decodes against: any message of the catalog.
AnyMessage = Union[MESSAGE_TYPES]  # type: ignore[valid-type]

BY_KIND: dict[str, type[Message]] = {cls.wire_tag(): cls for cls in MESSAGE_TYPES}
assert len(BY_KIND) == len(MESSAGE_TYPES), "two message kinds share a tag"


def message_type(kind: str) -> type[Message]:
    """The class for wire tag ``kind``; ``KeyError`` naming it if there is none."""
    try:
        return BY_KIND[kind]
    except KeyError:
        raise NotFound(f"no message kind is tagged {kind!r}") from None
