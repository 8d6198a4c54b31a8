"""actorwire.actors.weights: trainer ranks to inference consumers, bit-exact.

A :class:`WeightSender` per trainer rank drives its :class:`WeightProducer`;
:class:`WeightConsumer` (or :class:`ModelConsumer`, which loads into a
module) pulls each group and frees it; docs/weight-transfer.md has the
protocol.
"""

from __future__ import annotations

from actorwire.actors.weights._consumer import ModelConsumer, WeightConsumer
from actorwire.actors.weights._plan import (
    ModuleSource,
    ParamMeta,
    WeightPlan,
    WeightSource,
    WeightSyncError,
    build_plan,
    state_digest,
)
from actorwire.actors.weights._producer import WeightProducer
from actorwire.actors.weights._sender import SyncReport, WeightSender
from actorwire.messages._public import publish as _publish

__all__ = [
    "WeightSender", "SyncReport", "WeightProducer", "WeightConsumer", "ModelConsumer", "ModuleSource",
    "WeightSource", "ParamMeta", "WeightPlan", "WeightSyncError", "build_plan", "state_digest",
]
_publish(globals(), __all__)
