"""Starting actors in child processes, and attaching processes started by others.

A child is ``python -m actorwire.actors.runtime._child SPEC`` where SPEC is a JSON
document (never a pickle): the root endpoint, the run id, the node id the
parent chose for it, and the actors to build (``module:Class`` plus a JSON
config passed as keyword arguments).  The parent watches the child's exit
status, so a crash is reported as ``dead`` at once instead of after the
staleness timeout; a child that leaves cleanly says so first (``exited``).
"""

from __future__ import annotations

import importlib
import os
import pathlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from actorwire.actors.runtime._actor import Actor
from actorwire.transport.internal import (
    ConfigError,
    InvalidArgument,
    JoinRefused,
    Settings,
    WrongType,
    get_logger,
    ipc_endpoint,
    new_node_id,
    settings,
)


class ActorSpec(msgspec.Struct, frozen=True):
    """How to build one actor in a child process."""

    name: str
    #: ``"package.module:ClassName"``.
    target: str
    #: Keyword arguments for the class, JSON-able.
    config: dict[str, Any] = {}


class ChildSpec(msgspec.Struct, frozen=True):
    join: str
    run_id: str
    node_id: str
    actors: list[ActorSpec]
    rank: int | None = None
    takeover: bool = False


def load_actor(spec: ActorSpec) -> Actor:
    """Import ``spec.target`` and build it with ``spec.config``; errors name the spec."""
    module_name, sep, qualname = spec.target.partition(":")
    if not sep or not module_name or not qualname:
        raise InvalidArgument(f"actor target must look like 'package.module:Class', got {spec.target!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Actor)):
        raise WrongType(f"{spec.target} is not an Actor subclass")
    return obj(**spec.config)


def settle_heap() -> int:
    """Collect, then freeze what survives (``gc.freeze``): the objects alive now leave the garbage
    collector's passes for good.  For a process that owns its interpreter, once its long-lived
    state exists: ``actorwire coordinator`` calls it at the run's first epoch, when the rank
    table, the registry and a watch per rank are built.  At 20,000 ranks the full collections that
    walked them took about a fifth of the time from an epoch's last report to its aggregate
    (``actorwire bench scale --workers 20000``; docs/architecture.md).  Not for a library to do in
    a process it does not own: an object frozen here that later becomes part of a reference cycle
    is never freed.  Returns how many objects were frozen."""
    import gc

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def set_process_title(names: list[str]) -> None:
    """``ps`` shows ``actorwire <actor names>`` for this process."""
    if not settings().proctitle:
        return
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a declared dependency
        return
    setproctitle.setproctitle("actorwire " + " ".join(names) if names else "actorwire")


class ChildProcess:
    """A process started by :meth:`ActorSystem.spawn_process`."""

    def __init__(self, system: Any, actors: list[ActorSpec], *, rank: int | None, env: Mapping[str, str] | None,
                 takeover: bool = False, node_id: str | None = None, argv: list[str] | None = None,
                 on_exit: Callable[[str, int], None] | None = None) -> None:
        self.node_id = node_id or new_node_id()
        self.names = [a.name for a in actors]
        child_env = dict(os.environ)
        # Everything attach() needs, so a launched script joins with no flags.
        child_env.update({"ACTORWIRE_JOIN": system.endpoint, "ACTORWIRE_RUN_ID": system.run_id,
                          "ACTORWIRE_NODE_ID": self.node_id})
        if rank is not None:
            child_env["ACTORWIRE_RANK"] = str(rank)
        child_env.update(env or {})
        if argv is None:
            spec = ChildSpec(join=system.endpoint, run_id=system.run_id, node_id=self.node_id, actors=actors,
                             rank=rank, takeover=takeover)
            argv = [sys.executable, "-m", "actorwire.actors.runtime._child", msgspec.json.encode(spec).decode()]
        self._log = get_logger(child=self.node_id, actors=self.names or argv[-1])
        # Where the child's node will listen (the id is new: no other incarnation shares the path).
        # Read now, while the run's directory exists: reading it later would make it again.
        self._socket_path = ipc_endpoint(system.run_id, self.node_id)[len("ipc://"):]
        # A process group of its own: a Ctrl-C at the terminal reaches the parent, which ends its
        # children itself (quietly), instead of every child printing its own KeyboardInterrupt.
        self.process = subprocess.Popen(argv, env=child_env, stdin=subprocess.DEVNULL, start_new_session=True)
        self._quiet = False
        self._system = system
        #: Told ``(node id, status)`` the moment the process exits (the system reports its actors down).
        self._on_exit = on_exit
        self._watcher = threading.Thread(target=self._watch, name=f"watch {self.node_id}", daemon=True)
        self._watcher.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def _watch(self) -> None:
        code = self.process.wait()
        if code != 0:
            if not self._quiet:
                self._log.warning("child process exited", status=code)
            from actorwire.transport.internal import sweep

            swept = sweep(self.process.pid)  # it died before unlinking its segments
            if swept:
                self._log.info("unlinked the shared memory a dead child left", segments=len(swept))
            self.forget_socket()
        if self._on_exit is None or self._quiet:
            return
        try:
            self._on_exit(self.node_id, code)
        except Exception:  # the system may be closing
            pass

    def forget_socket(self) -> None:
        """Remove the ipc socket file a child that is no longer running left (a killed child cannot:
        test runs left hundreds in the runtime directory).  Only once the process has exited."""
        if self.process.poll() is None:
            return
        pathlib.Path(self._socket_path).unlink(missing_ok=True)

    def freeze(self) -> None:
        """SIGSTOP the child, and report nothing of its end from now on (see ``interrupt``)."""
        self._quiet = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def interrupt(self) -> None:
        """End the child now, as a Ctrl-C of the whole run would (SIGTERM, then SIGCONT should it
        be frozen), and say nothing of it: neither a warning nor a death reported to watchers;
        its shared memory is swept."""
        self._quiet = True
        if self.process.poll() is None:
            self.process.terminate()
            self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the child (for tests and fault injection)."""
        if self.process.poll() is None:
            self.process.kill()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def stop(self, timeout: float = 10.0) -> int:
        """Wait for a clean exit, then terminate, then kill; returns the exit status."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._log.warning("child did not exit in time; terminating it")
            self.process.terminate()
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()



def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[03-05,9],cpu1`` -> ``gpu03``,
    ``rack[1-2]-node[01-04]`` -> ``rack1-node01``.

    Parsed by python-hostlist, which follows SLURM's syntax (suffixes after a range, several
    ranges in one name, zero padding); the hand parser it replaced read both of those wrong.
    """
    import hostlist  # only where SLURM launched us

    nodelist = nodelist.strip()
    if not nodelist:
        raise InvalidArgument("empty SLURM node list")
    try:
        hosts = hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise InvalidArgument(f"bad SLURM node list {nodelist!r}: {exc}") from None
    if not hosts:
        raise InvalidArgument(f"SLURM node list {nodelist!r} names no host")
    return str(hosts[0])


class LaunchEnv(msgspec.Struct, frozen=True):
    """Where to join and who we are, as the launcher said."""

    join: str | None
    run_id: str | None
    rank: int | None
    world_size: int | None
    local_rank: int | None
    #: "actorwire", "torchrun", "slurm" or "none".
    source: str


def launch_env(env: Mapping[str, str] | None = None) -> LaunchEnv:
    """Read the launcher's environment: ours (``ACTORWIRE_*``), else torchrun's, else SLURM's.

    torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, run id
    ``TORCHELASTIC_RUN_ID``.  SLURM: ``SLURM_PROCID``, ``SLURM_NTASKS``,
    ``SLURM_LOCALID``, the first host of ``SLURM_NODELIST`` (or
    ``SLURM_JOB_NODELIST``), run id ``SLURM_JOB_ID``.  The coordinator listens on
    ``$ACTORWIRE_PORT`` (default 29555) of that host.  ``ACTORWIRE_*`` values
    win over both.
    """
    ours = settings() if env is None else Settings.from_env(env)
    env = os.environ if env is None else env
    port = ours.port

    def num(*names: str) -> int | None:
        for name in names:
            if env.get(name, "").strip():
                try:
                    return int(env[name])
                except ValueError:
                    raise ConfigError(f"{name} must be an integer, got {env[name]!r}") from None
        return None

    source, join, run_id = "none", None, None
    if "SLURM_PROCID" in env and ("SLURM_NODELIST" in env or "SLURM_JOB_NODELIST" in env):
        source = "slurm"
        join = f"tcp://{first_host(env.get('SLURM_NODELIST') or env['SLURM_JOB_NODELIST'])}:{port}"
        run_id = env.get("SLURM_JOB_ID")
    if "MASTER_ADDR" in env and "RANK" in env:  # torchrun inside an allocation wins over SLURM's own
        source = "torchrun"
        join = f"tcp://{env['MASTER_ADDR']}:{port}"
        run_id = env.get("TORCHELASTIC_RUN_ID") or run_id
    if ours.join:
        source, join = "actorwire", ours.join
    run_id = ours.run_id or run_id
    if source == "torchrun":
        rank, world, local = num("RANK"), num("WORLD_SIZE"), num("LOCAL_RANK")
    else:
        rank, world, local = num("RANK", "SLURM_PROCID"), num("WORLD_SIZE", "SLURM_NTASKS"), \
            num("LOCAL_RANK", "SLURM_LOCALID")
    rank = ours.rank if ours.rank is not None else rank
    world = ours.world_size if ours.world_size is not None else world
    return LaunchEnv(join=join, run_id=run_id, rank=rank, world_size=world, local_rank=local, source=source)


def attach(**overrides: Any) -> Any:
    """Join the running system described by the environment.

    Reads ``ACTORWIRE_JOIN`` (the root endpoint), ``ACTORWIRE_RUN_ID`` and
    ``ACTORWIRE_RANK``, or a torchrun or SLURM environment (see
    :func:`launch_env`); keyword arguments override them.
    """
    from actorwire.actors.runtime._system import ActorSystem

    found = launch_env()
    join = overrides.pop("join", None) or found.join
    run_id = overrides.pop("run_id", None) or found.run_id
    missing = [n for n, v in (("ACTORWIRE_JOIN (or MASTER_ADDR, or SLURM_NODELIST)", join),
                              ("ACTORWIRE_RUN_ID (or TORCHELASTIC_RUN_ID, or SLURM_JOB_ID)", run_id)) if not v]
    if missing:
        raise ConfigError(f"attach(): {' and '.join(missing)} not set in the environment")
    rank = overrides.pop("rank", None)
    if rank is None:
        rank = found.rank
    node_id = overrides.pop("node_id", None) or settings().node_id
    # A worker may start before its coordinator: it keeps trying (libzmq reconnects with backoff)
    # until ACTORWIRE_JOIN_TIMEOUT, saying so every 10 s; a refused key or run id ends it at once.
    overrides.setdefault("join_timeout", settings().join_timeout)
    try:
        return ActorSystem(run_id=run_id, join=join, rank=rank, proctitle=True, node_id=node_id, **overrides)
    except JoinRefused as exc:
        if "wrong run id" not in str(exc):
            raise
        # The root never names its id (it is a secret); this process can say which it used and how to
        # pass the right one (torchrun's default, 'none', was refused with no hint).
        origin = ("the run_id argument" if run_id != found.run_id else
                  "ACTORWIRE_RUN_ID" if settings().run_id else
                  "TORCHELASTIC_RUN_ID" + (", torchrun's default without --rdzv-id" if run_id == "none" else "")
                  if found.source == "torchrun" else "SLURM_JOB_ID" if found.source == "slurm" else "the environment")
        raise JoinRefused(f"{exc}: this process used run id {run_id!r} (from {origin}); pass the id the coordinator "
                          f"printed ('run ID: coordinator listening ...') as ACTORWIRE_RUN_ID=ID, or to torchrun as "
                          f"--rdzv-id ID") from None
