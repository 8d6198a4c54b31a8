"""Interop with msgpack-python: our bytes follow the documented layout, and theirs decode."""

from __future__ import annotations

import msgpack
import pytest
from _strategies import any_message
from hypothesis import given

from actorwire import messages as m


def test_body_is_a_map_with_a_type_key() -> None:
    raw = msgpack.unpackb(m.encode_message(m.Batch(rank=3, batch_ms=12.5, step_count=10, batch_loss=0.25)))
    # Defaults (data_ms=0.0, None optionals) are left out of the map.
    assert raw == {"type": "batch", "rank": 3, "batch_ms": 12.5, "step_count": 10, "batch_loss": 0.25}


def test_envelope_is_a_positional_array() -> None:
    env = m.Envelope(sender="user:main", target="worker/0", seq=9, correlation_id=4, is_reply=True,
                     mono_ns=11, wall_ns=22, trace_id="t-1")
    assert msgpack.unpackb(m.encode(env, m.Shutdown())[0]) == [1, "user:main", "worker/0", 9, 4, True, 11, 22, "t-1"]


def test_enums_are_strings_and_bytes_are_bin() -> None:
    raw = msgpack.unpackb(m.encode_message(m.ShutdownWithSave(reason=m.SaveReason.REDUCE_STALL)))
    assert raw == {"type": "shutdown_with_save", "reason": "reduce_stall"}
    raw = msgpack.unpackb(m.encode_message(m.NewNcclSession(uid=b"\x00\x01", new_rank=1, new_world_size=2)))
    assert raw["uid"] == b"\x00\x01" and isinstance(raw["uid"], bytes)


def test_nested_records_layout() -> None:
    ref = m.TensorRef(dtype="bfloat16", shape=[4, 8], stride=[8, 1], device="cuda:0", plane=m.Plane.CUDA_IPC,
                      handle=b"h", nbytes=64)
    raw = msgpack.unpackb(m.encode_message(m.PullReply(sync_id=1, consumer_id=2, seq=5, tensors={"w": ref})))
    assert raw["tensors"]["w"] == {"dtype": "bfloat16", "shape": [4, 8], "stride": [8, 1], "device": "cuda:0",
                                   "plane": "cuda_ipc", "handle": b"h", "nbytes": 64}
    raw = msgpack.unpackb(m.encode_message(m.MetricsMsg(
        rank=0, epoch=1, avg_loss=0.5, batches_processed=10, epoch_ms=100.0, samples_processed=320,
        scalars={"acc": m.ScalarSum(sum=9.0, count=10)})))
    assert raw["scalars"] == {"acc": [9.0, 10]}


def test_messages_built_by_msgpack_python_decode() -> None:
    env = msgpack.packb([1, "worker/1", "coordinator", 3, 0, False, 0, 0, None])
    body = msgpack.packb({"type": "intent", "rank": 1, "kind": "checkpoint_now"})
    assert m.decode([env, body]) == (
        m.Envelope(sender="worker/1", target="coordinator", seq=3),
        m.Intent(rank=1, kind=m.IntentKind.CHECKPOINT_NOW),
    )
    # The envelope may stop after `seq`: later fields take their defaults.
    short = msgpack.packb([1, "worker/1", "coordinator", 3])
    assert m.decode([short, body])[0].correlation_id == 0


def test_bad_enum_value_from_a_foreign_client() -> None:
    body = msgpack.packb({"type": "intent", "rank": 1, "kind": "reboot"})
    with pytest.raises(m.MalformedMessage, match=r"Invalid enum value 'reboot' - at `\$.kind`"):
        m.decode_message(body)


@given(any_message)
def test_msgpack_python_reencode_decodes_to_the_same_message(msg: m.Message) -> None:
    """Any message survives a trip through msgpack-python's plain maps and lists."""
    plain = msgpack.unpackb(m.encode_message(msg), strict_map_key=False)
    assert isinstance(plain, dict) and plain["type"] == type(msg).wire_tag()
    assert m.decode_message(msgpack.packb(plain, use_bin_type=True)) == msg
