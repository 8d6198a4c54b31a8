"""The codec: round trips, and nothing but DecodeError out of any bytes."""

from __future__ import annotations

import msgspec
import pytest
from _strategies import any_message, struct_of
from hypothesis import example, given
from hypothesis import strategies as st

from actorwire import messages as m

ENV = m.Envelope(sender="worker/3", target="coordinator", seq=7)


@pytest.mark.parametrize("cls", m.MESSAGE_TYPES, ids=lambda c: c.__name__)
def test_every_kind_round_trips(cls: type[m.Message]) -> None:
    @given(struct_of(cls))
    def check(msg: m.Message) -> None:
        assert m.decode_message(m.encode_message(msg)) == msg
        assert m.decode(m.encode(ENV, msg)) == (ENV, msg)

    check()


@given(st.binary(max_size=512))
@example(b"")
@example(b"\xc1")
@example(b"\x81\xa4type\xc0")
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        m.decode_message(data)
    except m.DecodeError:
        pass
    try:
        m.decode([data, data])
    except m.DecodeError:
        pass


@given(any_message, st.data())
def test_truncated_frames_raise_decode_error(msg: m.Message, data: st.DataObject) -> None:
    raw = m.encode_message(msg)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(m.DecodeError):
        m.decode_message(raw[:cut])


@given(any_message, st.data())
def test_bit_flipped_frames_never_escape(msg: m.Message, data: st.DataObject) -> None:
    raw = bytearray(m.encode_message(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    try:
        out = m.decode_message(bytes(raw))
    except m.DecodeError:
        return
    assert isinstance(out, m.Message)  # a flip may still land on a valid message


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(st.sampled_from([c.wire_tag() for c in m.MESSAGE_TYPES]),
       st.dictionaries(st.text(max_size=16).filter(lambda k: k != "type"), _json_like, max_size=6))
def test_valid_msgpack_of_wrong_shape(kind: str, fields: dict) -> None:
    data = msgspec.msgpack.encode({"type": kind, **fields})
    try:
        m.decode_message(data)
    except m.MalformedMessage as exc:
        assert exc.kind == kind


@given(_json_like)
def test_any_msgpack_value_raises_only_decode_error(value: object) -> None:
    data = msgspec.msgpack.encode(value)
    with pytest.raises(m.DecodeError):
        m.decode_message(data)
    try:
        m.decode([data, m.encode_message(m.Shutdown())])
    except m.DecodeError:
        pass


def test_deep_nesting_is_refused_cleanly() -> None:
    data = b"\x91" * 100_000 + b"\xc0"
    with pytest.raises(m.DecodeError):
        m.decode_message(data)
    with pytest.raises(m.DecodeError):
        m.decode([data, data])


def test_type_error_names_kind_and_field_path() -> None:
    data = msgspec.msgpack.encode({"type": "batch", "rank": "three", "batch_ms": 1.0, "step_count": 1, "batch_loss": 0.0})
    with pytest.raises(m.MalformedMessage) as info:
        m.decode_message(data)
    assert str(info.value) == "invalid `batch`: Expected `int`, got `str` - at `$.rank`"
    assert (info.value.kind, info.value.path) == ("batch", "$.rank")
    assert isinstance(info.value, ValueError)


def test_nested_field_path_is_reported() -> None:
    ref = {"dtype": "float32", "shape": [2, -1], "stride": [1, 1]}
    data = msgspec.msgpack.encode({"type": "pull_reply", "sync_id": 0, "consumer_id": 0, "seq": 0, "tensors": {"w": ref}})
    with pytest.raises(m.MalformedMessage) as info:
        m.decode_message(data)
    assert info.value.path == "$.tensors[...].shape[1]"
    assert str(info.value) == "invalid `pull_reply`: Expected `int` >= 0 - at `$.tensors[...].shape[1]`"


def test_negative_rank_is_refused() -> None:
    data = msgspec.msgpack.encode({"type": "exiting", "rank": -1})
    with pytest.raises(m.MalformedMessage, match=r"`exiting`: Expected `int` >= 0 - at `\$.rank`"):
        m.decode_message(data)


def test_missing_field_is_named() -> None:
    data = msgspec.msgpack.encode({"type": "begin_sync", "sync_id": 1})
    with pytest.raises(m.MalformedMessage, match="missing required field `live_consumer_ids`"):
        m.decode_message(data)


def test_tensor_ref_dims_must_agree() -> None:
    ref = {"dtype": "float32", "shape": [2, 3], "stride": [1]}
    data = msgspec.msgpack.encode({"type": "pull_reply", "sync_id": 0, "consumer_id": 0, "seq": 0, "tensors": {"w": ref}})
    with pytest.raises(m.MalformedMessage, match="stride has 1 dims but shape has 2"):
        m.decode_message(data)


def test_unknown_tag() -> None:
    with pytest.raises(m.UnknownMessage, match="unknown message kind 'teleport'") as info:
        m.decode_message(msgspec.msgpack.encode({"type": "teleport", "rank": 1}))
    assert info.value.kind == "teleport"
    with pytest.raises(m.UnknownMessage):
        m.decode_message(msgspec.msgpack.encode({"type": 17}))


def test_missing_tag_is_malformed() -> None:
    with pytest.raises(m.MalformedMessage, match="missing required field `type`"):
        m.decode_message(msgspec.msgpack.encode({"rank": 1}))


def test_too_large_is_refused_before_decoding() -> None:
    codec = m.Codec(max_message_size=64)
    small = codec.encode_message(m.Shutdown())
    assert codec.decode_message(small) == m.Shutdown()
    huge = codec.encode_message(m.JoinRejected(reason="x" * 100))
    with pytest.raises(m.MessageTooLarge, match="message of 129 bytes is over the 64-byte limit"):
        codec.decode_message(huge)
    with pytest.raises(m.MessageTooLarge):
        codec.decode([codec.encode_envelope(ENV), small + b"\x00" * 40])
    # A header claiming a 4 GiB binary is rejected by the cap, not by allocating.
    claim = b"\xc6\xff\xff\xff\xff"
    with pytest.raises(m.DecodeError):
        m.decode_message(claim)


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_message_size must be positive, got 0"):
        m.Codec(max_message_size=0)


def test_protocol_version_mismatch() -> None:
    future = msgspec.msgpack.encode([2, "a", "b", 1])
    with pytest.raises(m.ProtocolVersionMismatch, match=r"protocol version 2 is not supported \(this build speaks 1\)"):
        m.decode([future, m.encode_message(m.Shutdown())])
    # A newer envelope that also changed shape still reports the version.
    weird = msgspec.msgpack.encode([9, {"new": "layout"}])
    with pytest.raises(m.ProtocolVersionMismatch):
        m.decode([weird, m.encode_message(m.Shutdown())])


def test_envelope_ignores_appended_fields() -> None:
    newer = msgspec.msgpack.encode([1, "a", "b", 5, 0, False, 10, 20, None, "field-from-the-future"])
    env, msg = m.decode([newer, m.encode_message(m.Shutdown())])
    assert (env.sender, env.target, env.seq, env.wall_ns) == ("a", "b", 5, 20)


def test_body_ignores_unknown_fields() -> None:
    data = msgspec.msgpack.encode({"type": "exiting", "rank": 2, "added_in_v1_5": [1, 2]})
    assert m.decode_message(data) == m.Exiting(rank=2)


def test_wrong_frame_count() -> None:
    with pytest.raises(m.DecodeError, match=r"expected 2 frames \(envelope, body\), got 3"):
        m.decode([b"", b"", b""])


def test_encode_refuses_non_messages() -> None:
    with pytest.raises(TypeError, match="expected an actorwire message, got dict"):
        m.encode_message({"type": "shutdown"})  # type: ignore[arg-type]


def test_decode_accepts_memoryview_frames() -> None:
    frames = [memoryview(f) for f in m.encode(ENV, m.SyncNow(cycle=4))]
    assert m.decode(frames) == (ENV, m.SyncNow(cycle=4))


def test_batch_frames_round_trip_and_isolate_bad_members() -> None:
    codec = m.Codec()
    good = [codec.encode_record(ENV, m.Heartbeat(rank=i)) for i in range(20)]
    pairs, errors = codec.decode_batch(codec.join_records(good))
    assert errors == [] and [msg.rank for _, msg in pairs] == list(range(20))  # type: ignore[attr-defined]
    bad = b"\x92" + codec.encode_envelope(ENV) + msgspec.msgpack.encode({"type": "heartbeat", "rank": "x"})
    pairs, errors = codec.decode_batch(codec.join_records([good[0], bad, good[1]]))
    assert [msg.rank for _, msg in pairs] == [0, 1]  # type: ignore[attr-defined]
    assert len(errors) == 1 and isinstance(errors[0], m.MalformedMessage)
    future = b"\x92" + msgspec.msgpack.encode([2, "a", "b", 1]) + codec.encode_message(m.Shutdown())
    pairs, errors = codec.decode_batch(codec.join_records([future, good[2]]))
    assert len(pairs) == 1 and isinstance(errors[0], m.ProtocolVersionMismatch)


def test_a_node_s_codec_does_not_decode_the_kinds_only_the_runtime_makes() -> None:
    """A peer sent ``Down{name: "worker/1"}`` to the coordinator, and its handler counted a live rank
    dead (any proven member could; ``TimerFired`` and ``AskFailed`` lied the same way)."""
    forged = [m.Down(name="worker/1", reason=m.DownReason.DEAD, detail="forged"), m.TimerFired(key="tick"),
              m.AskFailed(correlation_id=1, target="t", request_kind="sync_now", reason="forged")]
    from actorwire.messages._codec import RUNTIME_ONLY

    assert {type(f).wire_tag() for f in forged} == RUNTIME_ONLY
    plain, node = m.Codec(), m.Codec(from_peers=True)
    for message in forged:
        frames = plain.encode(ENV, message)
        assert plain.decode(frames) == (ENV, message)  # recordings and tools still read them
        with pytest.raises(m.MalformedMessage, match="made only by the runtime") as caught:
            node.decode(frames)
        assert caught.value.kind == type(message).wire_tag()
    good = [node.encode_record(ENV, m.Heartbeat(rank=i)) for i in range(2)]
    records = [good[0], *(node.encode_record(ENV, f) for f in forged), good[1]]
    pairs, errors = node.decode_batch(node.join_records(records))
    assert [msg for _, msg in pairs] == [m.Heartbeat(rank=0), m.Heartbeat(rank=1)]
    assert len(errors) == 3 and all("made only by the runtime" in str(e) for e in errors)
    pairs, errors = plain.decode_batch(plain.join_records(records))
    assert len(pairs) == 5 and errors == []


@given(st.binary(max_size=256))
def test_batch_decode_never_raises(data: bytes) -> None:
    pairs, errors = m.Codec(max_message_size=128).decode_batch(data)
    assert all(isinstance(e, m.DecodeError) for e in errors)


def test_large_batch_headers() -> None:
    codec = m.Codec()
    for n in (15, 16, 70_000):
        records = [codec.encode_record(ENV, m.Shutdown())] * n
        pairs, errors = codec.decode_batch(codec.join_records(records))
        assert len(pairs) == n and not errors


def test_record_from_fields_is_byte_identical() -> None:
    codec = m.Codec()
    env = m.Envelope(sender="a", target="b", seq=3, correlation_id=9, is_reply=True, mono_ns=5, wall_ns=6,
                     trace_id="t")
    msg = m.Heartbeat(rank=1, step_count=2)
    assert codec.encode_record_fields("a", "b", 3, 9, True, 5, 6, "t", msg) == codec.encode_record(env, msg)
    with pytest.raises(TypeError, match="expected an actorwire message, got tuple"):
        codec.encode_record_fields("a", "b", 3, 9, True, 5, 6, "t", ())  # type: ignore[arg-type]
