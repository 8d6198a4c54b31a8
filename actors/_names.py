"""Actor names: the one place their schemes are built and parsed.

A name is a path of ``/``-separated parts; the built-in actors use:

* ``coordinator``: the training coordinator (one per run);
* ``worker/{rank}``: a rank of the control plane, and ``worker/{rank}/heartbeat``
  the inbox its heartbeat thread sends from (FIFO is per sender);
* ``{prefix}/producer/{rank}``: trainer rank ``rank``'s weight producer;
* ``{prefix}/consumer/{id}``: weight consumer ``id`` of a deployment;
* ``{prefix}/sender/{rank}``: the inbox trainer rank ``rank``'s thread sends its weights from
  (rank 0's also starts each sync at the consumers);
* ``weights/r{rank}`` and ``snapshot/r{rank}``: the prefixes the demo and
  the final snapshot give one rank's weight transfer.
"""

from __future__ import annotations

COORDINATOR = "coordinator"


def worker(rank: int) -> str:
    return f"worker/{rank}"


def worker_heartbeat(rank: int) -> str:
    return f"{worker(rank)}/heartbeat"


def rank_prefix(base: str, rank: int) -> str:
    """The prefix of one rank's own transfer: ``weights/r3``, ``snapshot/r3``."""
    return f"{base}/r{rank}"


def producer(prefix: str, rank: int) -> str:
    return f"{prefix}/producer/{rank}"


def consumer(prefix: str, consumer_id: int) -> str:
    return f"{prefix}/consumer/{consumer_id}"


def weight_sender(prefix: str, rank: int) -> str:
    return f"{prefix}/sender/{rank}"


def consumer_prefix(name: str) -> str | None:
    """The prefix of consumer ``name`` (``weights/r0`` of ``weights/r0/consumer/3``), or None."""
    head, sep, tail = name.rpartition("/consumer/")
    return head if sep and tail.isdigit() else None


def consumer_id(name: str, prefix: str) -> int | None:
    """The id of consumer ``name`` under ``prefix``, or None if it is not one."""
    head = f"{prefix}/consumer/"
    tail = name[len(head):]
    if name.startswith(head) and tail.isdigit():
        return int(tail)
    return None

