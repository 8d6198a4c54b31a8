"""Replay every actor of a recording with effects sealed off: python tests/_replay_sealed.py DIR [ACTOR=CLASS...].

``ACTOR=module:Class`` names the class of an actor that is not built in (``--actor-class``).

An audit hook refuses every file opened for writing and every directory made or removed, and
shared memory and CUDA refuse to start; a replay that needed any of them fails instead of
touching them.  Prints one line per actor: ``<actor>: <summary>``.
"""

from __future__ import annotations

import os
import sys


class Sealed(RuntimeError):
    pass


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writes:
            raise Sealed(f"replay opened {path!r} for writing")
    elif event in ("os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.truncate", "os.symlink"):
        raise Sealed(f"replay called {event}{args}")


def main(directory: str, classes: dict[str, str]) -> int:
    import _posixshmem  # type: ignore[import-not-found]

    import torch

    def no_shm(*args: object, **kwargs: object) -> None:
        raise Sealed("replay opened shared memory")

    def no_cuda(*args: object, **kwargs: object) -> None:
        raise Sealed("replay initialised CUDA")

    _posixshmem.shm_open = no_shm
    torch.cuda._lazy_init = no_cuda
    import tempfile

    from actorwire.actors import replay
    from actorwire.transport._settings import settings
    from actorwire.transport.recording import Segment, actor_logs

    tempfile.gettempdir()  # probes the temp dir by writing a file: done before the seal
    settings()
    logs = actor_logs([directory])
    names = sorted(Segment(segments[0]).header.actor for segments in logs.values())
    sys.addaudithook(_hook)
    for name in names:
        report = replay(directory, actor=name, actor_class=classes.get(name))
        print(f"{name}: {report.summary().splitlines()[0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])))
