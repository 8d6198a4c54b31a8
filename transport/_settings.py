"""Every ``ACTORWIRE_*`` environment variable, typed, documented and read in one place.

:func:`settings` reads the environment once per process and keeps the
result; code asks it instead of ``os.environ``.  A process that changes its
own environment after start (tests do) calls :func:`reload_settings`.
:meth:`Settings.from_env` parses any mapping (a child's environment, a
launcher's), so nothing else needs to know the variables' spelling.

docs/configuration.md holds the same table; a test keeps the two equal.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import msgspec

from actorwire.transport._errors import ConfigError

PREFIX = "ACTORWIRE_"

#: field -> (what it is for); the variable is PREFIX + the field's name in capitals.
DOCS: dict[str, str] = {
    "log_level": "Level of actorwire's own log format once `configure_logging()` turned it on.",
    "log_json": "`1`: one JSON object per log line; `0`: human-readable; unset: JSON unless stderr is a TTY.",
    "timeout_scale": "Multiplies every runtime deadline (slow machines, debuggers).",
    "runtime_dir": "Where private ipc sockets live (a 0700 directory per user is made inside).",
    "prefer_tcp": "`1`: nodes on one host talk tcp instead of ipc.",
    "keys": "Directory of CURVE keys made by `actorwire keygen` (tcp needs it).",
    "key_name": "Which key pair of that directory is this node's.",
    "root_key": "The root's public key (z85, or a path to it) a joining node checks.",
    "insecure_tcp": "`1`: plain tcp without CURVE, allowed on loopback only.",
    "join": "The root endpoint a process attaches to (set by `launch` and the demo).",
    "run_id": "The run a process attaches to.",
    "node_id": "This process's node id (set by `spawn_process` and `launch`).",
    "join_timeout": "Seconds `attach()` (so a Worker) waits for the root to answer, retrying, before it gives up.",
    "rank": "This process's rank (wins over torchrun's and SLURM's).",
    "world_size": "The number of ranks (wins over torchrun's and SLURM's).",
    "port": "The coordinator's port on the master host under torchrun or SLURM.",
    "host": "The address other ranks reach this one at (gloo's store and interface).",
    "plane": "Force one tensor plane: `local`, `shm`, `cuda_ipc` or `frames`.",
    "record": "Record every actor of the process into this directory.",
    "record_actors": "Comma-separated globs of the actor names to record.",
    "record_digests": "`1`: weight producers put a content digest in every served tensor ref.",
    "proctitle": "`0`: leave process titles alone.",
    "death_dir": "Where a Worker writes its final snapshot when the run dies.",
    "nccl_library": "Path of the libnccl to load (else the one torch loaded, else the system's).",
    "nccl_diagnostics": "`1`: the NCCL communicator logs its environment and timings at init.",
}


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """The parsed ``ACTORWIRE_*`` variables; None where a variable is unset and has no default."""

    log_level: str = "WARNING"
    log_json: bool | None = None
    timeout_scale: float = 1.0
    runtime_dir: str = msgspec.field(default_factory=tempfile.gettempdir)
    prefer_tcp: bool = False
    keys: str | None = None
    key_name: str = "node"
    root_key: str | None = None
    insecure_tcp: bool = False
    join: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    join_timeout: float = 120.0
    rank: int | None = None
    world_size: int | None = None
    port: int = 29555
    host: str | None = None
    plane: str | None = None
    record: str | None = None
    record_actors: str = "*"
    record_digests: bool = False
    proctitle: bool = True
    death_dir: str | None = None
    nccl_library: str | None = None
    nccl_diagnostics: bool | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Parse the variables of ``env`` (default: this process's environment).

        An empty value counts as unset.  A value of the wrong type raises
        :class:`ConfigError` naming the variable and the value.
        """
        env = os.environ if env is None else env
        hints = {f.name: f.type for f in msgspec.structs.fields(cls)}
        values: dict[str, Any] = {}
        for field, kind in hints.items():
            raw = env.get(variable(field), "").strip()
            if raw:
                values[field] = _parse(variable(field), raw, kind)
        settings = cls(**values)
        # Refused here, where the command line turns it into one line, rather than in whichever
        # process first reads it (a worker's traceback, or a run that waits -5 s).
        if settings.timeout_scale <= 0:
            raise ConfigError(f"{variable('timeout_scale')} must be positive, got {settings.timeout_scale:g}")
        if settings.join_timeout <= 0:
            raise ConfigError(f"{variable('join_timeout')} must be positive, got {settings.join_timeout:g}")
        if not 0 < settings.port < 65536:
            raise ConfigError(f"{variable('port')} must be a port number, got {settings.port}")
        if settings.rank is not None and settings.rank < 0:
            raise ConfigError(f"{variable('rank')} must be 0 or more, got {settings.rank}")
        if settings.world_size is not None and settings.world_size < 1:
            raise ConfigError(f"{variable('world_size')} must be 1 or more, got {settings.world_size}")
        if settings.plane and settings.plane not in _PLANES:
            raise ConfigError(f"{variable('plane')} must be one of {', '.join(_PLANES)}, got {settings.plane!r}")
        if not isinstance(logging.getLevelName(settings.log_level.upper()), int):
            raise ConfigError(f"{variable('log_level')} must be debug, info, warning or error, "
                              f"got {settings.log_level!r}")
        return settings


#: What ACTORWIRE_PLANE may force (docs/configuration.md).
_PLANES = ("local", "shm", "cuda_ipc", "frames")


def variable(field: str) -> str:
    """The environment variable of a settings field: ``timeout_scale`` -> ``ACTORWIRE_TIMEOUT_SCALE``."""
    return PREFIX + field.upper()


def type_name(kind: Any) -> str:
    """``bool``, ``int``, ``float`` or ``str``: what a variable's value is parsed as."""
    text = str(kind)
    return next(name for name in ("bool", "int", "float", "str") if name in text)


def table() -> str:
    """The markdown table of every variable, as docs/configuration.md holds it."""
    rows = ["| variable | type | default | what it does |", "|---|---|---|---|"]
    for field in msgspec.structs.fields(Settings):
        if field.name == "runtime_dir":
            default = "the temp dir"
        elif field.default is None:
            default = "unset"
        elif isinstance(field.default, bool):
            default = f"`{int(field.default)}`"
        else:
            default = f"`{field.default}`"
        rows.append(f"| `{variable(field.name)}` | {type_name(field.type)} | {default} | {DOCS[field.name]} |")
    return "\n".join(rows) + "\n"


def _parse(name: str, raw: str, kind: Any) -> Any:
    text = type_name(kind)
    if text == "bool":
        if raw not in ("0", "1"):
            raise ConfigError(f"{name} must be 0 or 1, got {raw!r}")
        return raw == "1"
    if text == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if text == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, got {raw!r}")
        return value
    return raw


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    """This process's settings, read from its environment on first use."""
    return Settings.from_env()


def reload_settings() -> Settings:
    """Read the environment again (after this process changed it)."""
    settings.cache_clear()
    return settings()
