"""actorwire.messages.reserved: kinds that keep their tags but that no built-in actor sends or handles.

A kind's tag is a wire promise: recordings and peers of earlier versions
hold these, so they stay in the catalog and decode.  Nothing in actorwire
sends or handles them (decision 0009); a future protocol may give one a job,
and must then move it back to :mod:`actorwire.messages` with its protocol
documented.  They are not part of the public message surface.
"""

from __future__ import annotations

from actorwire.messages._public import publish as _publish
from actorwire.messages.kinds._control import (
    EpochPlan,
    RequestParams,
    SaveConsensusModel,
    StageAdvisory,
    StageEpoch,
    StageSegment,
    Update,
)
from actorwire.messages.kinds._enums import RendezvousRole
from actorwire.messages.kinds._rendezvous import (
    RendezvousAssign,
    RendezvousHello,
    RendezvousMsg,
    RendezvousUid,
)
from actorwire.messages.kinds._runtime import Unwatch, Watch
from actorwire.messages.kinds._timing import ResourceSample, SnapshotReady

__all__ = [
    "Watch", "Unwatch", "RendezvousHello", "RendezvousAssign", "RendezvousUid", "RendezvousMsg", "RendezvousRole",
    "RequestParams", "Update", "EpochPlan", "SaveConsensusModel", "StageSegment", "StageEpoch", "StageAdvisory",
    "SnapshotReady", "ResourceSample",
]
_publish(globals(), __all__)
