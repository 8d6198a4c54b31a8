"""The gloo communicator's formation rules, in one process (CPU torch)."""

from __future__ import annotations

import pytest

from actorwire.transport.comm import CommError, GlooCommunicator

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def test_an_announced_store_outlives_a_later_announcement() -> None:
    """The generator used to replace (and so close) its store at every request, while ranks were
    still joining the attempt whose address they had been sent."""
    comm = GlooCommunicator(timeout_s=5, host="127.0.0.1")
    first = comm.new_unique_id()
    comm.new_unique_id()
    host, port = first.decode().rsplit(":", 1)
    client = dist.TCPStore(host, int(port), is_master=False, timeout=__import__("datetime").timedelta(seconds=5))
    client.set("joined", "yes")
    assert client.get("joined") == b"yes"


def test_a_store_that_cannot_be_reached_is_a_comm_error_not_a_crash() -> None:
    """The client store was built outside the error handling: the worker exited 1 instead of
    reporting SessionFailed."""
    comm = GlooCommunicator(timeout_s=1, host="127.0.0.1")
    probe = GlooCommunicator(timeout_s=1, host="127.0.0.1")
    uid = probe.new_unique_id()
    probe._hosted.clear()  # the store is gone: nothing listens at the announced address
    with pytest.raises(CommError, match="could not form the gloo group 127.0.0.1:"):
        comm.init(uid, 1, 2)


@pytest.mark.parametrize("uid", [b"no-port", b"\xff\xfe:1", b"127.0.0.1:notanumber"])
def test_a_malformed_id_is_a_comm_error(uid: bytes) -> None:
    with pytest.raises(CommError, match="could not form the gloo group"):
        GlooCommunicator(timeout_s=1).init(uid, 0, 2)
