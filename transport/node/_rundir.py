"""The run's directory of ipc sockets, as one node uses it.

Every node of a run on a host binds its ipc ROUTER in the run's private directory
(:func:`actorwire.transport._endpoints.run_dir`).  libzmq leaves a bound ipc socket's file behind,
so a node removes its own when it closes; the root also removes the sockets of members that died
(a killed process cannot unlink its own), and the directory goes with the last node out.
"""

from __future__ import annotations

import errno
import os
import pathlib

import zmq

from actorwire.transport._endpoints import ipc_endpoint, listening, private_dir


class RunDir:
    def __init__(self, run_id: str, node_id: str) -> None:
        self.endpoint = ipc_endpoint(run_id, node_id)
        self.path = self.endpoint[len("ipc://"):]

    def bind(self, router: zmq.Socket) -> None:
        """Bind ``router`` to this node's socket in the run's directory."""
        try:
            router.bind(self.endpoint)
        except zmq.ZMQError as exc:
            if exc.errno != errno.ENOENT:
                raise
            # A member leaving removed the run's directory, empty, between its making and this bind.
            private_dir(pathlib.Path(self.path).parent)
            router.bind(self.endpoint)

    def unlink_own(self) -> None:
        """Remove this node's socket file."""
        pathlib.Path(self.path).unlink(missing_ok=True)

    def remove(self, *, is_root: bool) -> None:
        """Remove the run's socket directory unless a live node's socket keeps it.

        The root also removes the sockets of members that died (no one listens on them); the system
        calls this again once the children it launched have exited.  A member only removes the
        directory when it is empty: members often leave after the root (attached workers, refused
        joins), and the last one out takes it.  A node that binds just after such a removal makes
        the directory again (see :meth:`bind`)."""
        directory = os.path.dirname(self.path)
        if is_root:
            try:
                entries = [e.path for e in os.scandir(directory) if e.name.endswith(".sock")]
            except OSError:
                return
            for path in entries:
                if not listening(path):
                    pathlib.Path(path).unlink(missing_ok=True)
        try:
            os.rmdir(directory)
        except OSError:
            pass
