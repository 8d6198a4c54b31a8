"""The catalog: stable tags, the public surface, old recordings still decode."""

from __future__ import annotations

import ast
import pathlib
import re

import msgspec
from conftest import ROOT, TESTS

from actorwire import messages, transport
from actorwire import messages as m

DATA = TESTS / "data"

# Tags are part of every recording: renaming one breaks old logs.  This list
# only ever grows.
PINNED_TAGS = {
    "StartEpoch": "start_epoch", "ExtendPartition": "extend_partition",
    "RequestParams": "request_params", "Update": "update", "SyncNow": "sync_now",
    "Throttle": "throttle", "SetGlobalStep": "set_global_step", "Checkpoint": "checkpoint",
    "ExecuteEval": "execute_eval", "SetEpochCallbackRole": "set_epoch_callback_role",
    "EpochAggregated": "epoch_aggregated", "EvalBroadcast": "eval_broadcast",
    "DeclareDead": "declare_dead", "RequestNewNcclId": "request_new_nccl_id",
    "NewNcclSession": "new_nccl_session", "SaveConsensusModel": "save_consensus_model",
    "StageAdvisory": "stage_advisory", "Shutdown": "shutdown",
    "ShutdownWithSave": "shutdown_with_save", "CoordHeartbeat": "coord_heartbeat",
    "JoinAccepted": "join_accepted", "JoinRejected": "join_rejected", "Batch": "batch",
    "SyncAck": "sync_ack", "Exiting": "exiting", "LrUpdate": "lr_update", "Intent": "intent",
    "Heartbeat": "heartbeat", "SnapshotReady": "snapshot_ready", "EvalResult": "eval_result",
    "CheckpointResult": "checkpoint_result", "NewNcclIdGenerated": "new_nccl_id_generated",
    "EpochFnElapsed": "epoch_fn_elapsed", "ResourceSample": "resource_sample",
    "JoinRequest": "join_request", "MetricsMsg": "metrics", "EpochMetrics": "epoch_metrics",
    "BeginSync": "begin_sync", "PublishGroup": "publish_group", "FreeGroup": "free_group",
    "GroupsFreed": "groups_freed", "EndSync": "end_sync", "SyncFailed": "sync_failed",
    "ReserveServeBuffer": "reserve_serve_buffer", "ServeBufferReserved": "serve_buffer_reserved",
    "PullRequest": "pull_request", "PullReply": "pull_reply",
    "RendezvousHello": "rendezvous_hello", "RendezvousAssign": "rendezvous_assign",
    "RendezvousUid": "rendezvous_uid", "Hello": "hello", "Welcome": "welcome",
    "Refused": "refused", "Register": "register", "Unregister": "unregister",
    "RegistryUpdate": "registry_update", "NodeHeartbeat": "node_heartbeat",
    "NodeExiting": "node_exiting", "Watch": "watch", "Unwatch": "unwatch", "Down": "down",
    "SessionFailed": "session_failed", "ErrorReply": "error_reply", "Ack": "ack", "AskFailed": "ask_failed", "TimerFired": "timer_fired",
}


# Kinds added after the v1 recording (tests/data/catalog-v1.msgpack) was written.
PINNED_SINCE = {"RankExited": "rank_exited", "RelayReport": "relay_report", "ReserveRing": "reserve_ring",
                "RingReserved": "ring_reserved", "PackPull": "pack_pull", "PullPacked": "pull_packed",
                "WritePull": "write_pull", "PullWritten": "pull_written", "DigestState": "digest_state",
                "StateDigest": "state_digest", "WriteMeta": "write_meta",
                "TrainBatch": "train_batch", "BatchTrained": "batch_trained", "AllReduceParams": "all_reduce_params",
                "ParamsReduced": "params_reduced", "JoinGroup": "join_group", "GroupJoined": "group_joined",
                "NewGroupId": "new_group_id", "GroupIdMade": "group_id_made", "AbortComm": "abort_comm",
                "Fanout": "fanout"}


def test_tags_are_pinned() -> None:
    current = {cls.__name__: cls.wire_tag() for cls in m.MESSAGE_TYPES}
    for name, tag in {**PINNED_TAGS, **PINNED_SINCE}.items():
        assert current.get(name) == tag, f"{name} lost or changed its tag {tag!r}"


def test_tags_are_unique_and_lowercase() -> None:
    tags = [cls.wire_tag() for cls in m.MESSAGE_TYPES]
    assert len(tags) == len(set(tags))
    assert all(t == t.lower() and " " not in t for t in tags)


def test_every_kind_is_frozen_and_exported_from_exactly_one_public_module() -> None:
    from actorwire.messages import kinds, reserved, runtime

    for cls in m.MESSAGE_TYPES:
        assert cls.__struct_config__.frozen, cls
        homes = [mod for mod in (messages, kinds, runtime, reserved) if cls.__name__ in mod.__all__]
        assert len(homes) == 1, (cls, homes)
        assert getattr(homes[0], cls.__name__) is cls


def test_family_unions_are_exported() -> None:
    from actorwire.messages import kinds, reserved, runtime

    assert set(m.FAMILIES) == {"control", "timing", "metrics", "weights", "rendezvous", "runtime", "status"}
    for name in ("ControlMsg", "TimingMsg", "WeightMsg", "StatusMsg"):
        assert name in kinds.__all__
    assert "RuntimeMsg" in runtime.__all__ and "RendezvousMsg" in reserved.__all__


def _imports(package: object) -> set[str]:
    """Every absolute module a package's files import."""
    found = set()
    for path in pathlib.Path(package.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
    return found


def test_dependencies_point_one_way() -> None:
    """actors -> transport -> messages; messages imports nothing of ours."""
    ours = ("actorwire.actors", "actorwire.transport", "actorwire._")
    assert not {i for i in _imports(messages) if i.startswith(ours) or i == "actorwire"}
    assert not {i for i in _imports(transport) if i.startswith(("actorwire.actors", "actorwire._"))}


def _imports_by_file(package: object) -> dict[str, set[str]]:
    """Each file of a package (relative path) -> the absolute modules it imports, ``from`` imports
    of a package counted with the names taken (``from actorwire.transport.planes import _local``
    takes a private module)."""
    root = pathlib.Path(package.__file__).parent
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        mods = found.setdefault(str(path.relative_to(root)), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module)
                mods.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_"))
    return found


def test_actors_use_the_transport_through_its_declared_interface() -> None:
    """actors imported 12 private transport modules at 56 places: what the runtime needs of the
    transport is declared in actorwire.transport.internal, and that (with the public packages) is all
    it imports."""
    allowed = {"actorwire.transport", "actorwire.transport.internal", "actorwire.transport.comm",
               "actorwire.transport.recording", "actorwire.transport.planes"}
    from actorwire import actors

    bad = {f"{f}: {mod}" for f, mods in _imports_by_file(actors).items() for mod in mods
           if mod.startswith("actorwire.transport") and mod not in allowed}
    assert not bad, sorted(bad)


def test_the_runtime_imports_nothing_above_it() -> None:
    """runtime/_replay imported control, weights and bench: built-in actors now register themselves."""
    from actorwire.actors import runtime

    above = ("actorwire.actors.control", "actorwire.actors.weights", "actorwire.actors.bench",
             "actorwire.actors.cli", "actorwire.actors._builtin")
    bad = {f"{f}: {mod}" for f, mods in _imports_by_file(runtime).items() for mod in mods if mod.startswith(above)}
    assert not bad, sorted(bad)


def test_enum_values_are_stable() -> None:
    assert [r.value for r in m.SaveReason] == [
        "graceful_shutdown", "max_failure_exceeded", "single_survivor",
        "all_ranks_lost", "reduce_stall", "checkpoint", "too_few_ranks",
    ]
    assert [k.value for k in m.IntentKind] == ["eval_now", "checkpoint_now"]
    assert [r.value for r in m.DownReason] == ["exited", "dead", "unreachable"]


def test_recordings_of_protocol_v1_still_decode() -> None:
    """tests/data/catalog-v1.msgpack holds one example of every v1 kind, written by 0.1.0."""
    frames = msgspec.msgpack.decode((DATA / "catalog-v1.msgpack").read_bytes())
    assert len(frames) >= 62
    decoded = [m.decode_message(frame) for frame in frames]
    kinds = {type(msg).wire_tag() for msg in decoded}
    assert set(PINNED_TAGS.values()) <= kinds
    # Fields added since keep their defaults; every field the old frame carries is read back.
    for frame, msg in zip(frames, decoded):
        raw = msgspec.msgpack.decode(frame)
        ours = msgspec.to_builtins(msg, builtin_types=(bytes,))
        assert ours == {**ours, **raw}


def test_describe_lists_every_kind() -> None:
    infos = m.describe()
    assert [i.name for i in infos] == [c.__name__ for c in m.MESSAGE_TYPES]
    batch = next(i for i in infos if i.name == "Batch")
    assert [(f.name, f.type, f.required) for f in batch.fields][:2] == [
        ("rank", "int >= 0", True), ("batch_ms", "float >= 0.0", True)
    ]


def test_json_schema_covers_every_kind() -> None:
    schema = m.json_schema()
    for cls in m.MESSAGE_TYPES:
        assert cls.__name__ in schema["$defs"]
    assert "Envelope" in schema["$defs"]


def test_wire_protocol_doc_lists_the_catalog() -> None:
    """docs/wire-protocol.md's kind table is regenerated from the code; it must not drift."""
    doc = (ROOT / "docs" / "wire-protocol.md").read_text()
    table = doc.split("<!-- kinds:begin -->")[1].split("<!-- kinds:end -->")[0]
    for info in m.describe():
        row = f"| `{info.kind}` | {info.name} | "
        assert row in table, f"docs/wire-protocol.md is missing {info.name}"
        for f in info.fields:
            assert f"`{f.name}`: {f.type}".replace("|", "&#124;") in table, (info.name, f.name)


def test_wire_protocol_doc_lists_the_reserved_kinds() -> None:
    from actorwire.messages import reserved

    doc = (ROOT / "docs" / "wire-protocol.md").read_text()
    listed = doc.split("<!-- reserved:begin -->")[1].split("<!-- reserved:end -->")[0]
    tags = {getattr(reserved, n).__struct_config__.tag for n in reserved.__all__
            if isinstance(getattr(reserved, n), type) and issubclass(getattr(reserved, n), msgspec.Struct)
            and getattr(reserved, n).__struct_config__.tag}
    assert set(re.findall(r"`([a-z_]+)`", listed)) == tags
