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


_MEMBER = """
import sys, torch
from actorwire.transport.comm import CommError, GlooCommunicator
rank, timeout, uids = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
comm = GlooCommunicator(timeout_s=timeout, host="127.0.0.1")
for uid in uids[:-1]:  # attempts its peer never comes to: each fails
    try:
        comm.init(uid.encode(), rank, 2)
    except CommError:
        print("failed", flush=True)
comm.init(uids[-1].encode(), rank, 2)
t = torch.tensor([float(rank + 1)])
comm.all_reduce_sum(t)
print("sum", t.item(), flush=True)
comm.abort()
"""


def test_a_rank_whose_earlier_formations_failed_forms_the_next_group_with_one_that_tried_none() -> None:
    """torch names the default group after a count of ``init_process_group`` calls that only a
    successful group's destruction resets: a rank that failed a formation its peer skipped (it
    found the session stale in its inbox, or served only the newest) waited for keys named one
    higher than its peer's, and every later formation of the run failed for both (the fault
    matrix's ``join-hang``: attempts 2 to 12 all "wait timeout", keys ``/1/`` ... ``/11/``)."""
    import subprocess
    import sys

    host = GlooCommunicator(timeout_s=30, host="127.0.0.1")
    stale, fresh = host.new_unique_id().decode(), host.new_unique_id().decode()
    procs = [subprocess.Popen([sys.executable, "-c", _MEMBER, "0", "2", stale, fresh], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, "-c", _MEMBER, "1", "20", fresh], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert outs[0][0].split() == ["failed", "sum", "3.0"], outs[0][1][-800:]
    assert outs[1][0].split() == ["sum", "3.0"], outs[1][1][-800:]
