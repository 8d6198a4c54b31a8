"""Choosing endpoints: ipc inside a host, tcp across hosts.

Each process binds one ROUTER socket, on an ipc endpoint (always, for peers
on the same host) and also on tcp when the system spans hosts.  A sender
picks the ipc endpoint of a peer on its own host and the tcp one otherwise.
Actors in the same process never touch a socket: delivery is a hand-off
between threads.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import secrets
import socket
import time
from typing import Any

from actorwire.transport._errors import ConfigError, InvalidArgument
from actorwire.transport._settings import settings

#: Unix socket paths are limited to 107 bytes; keep ours well under.
_MAX_IPC_PATH = 100


def new_node_id() -> str:
    host = socket.gethostname().split(".")[0][:20] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def private_dir(path: pathlib.Path) -> pathlib.Path:
    """``path`` as a directory only this user can enter: made 0700, or refused if it exists wider.

    Anyone who can reach an ipc socket can say hello on it, so the directory
    is the gate; one that is a symlink, another user's, or open to the group
    or others is refused rather than fixed (someone else may be using it).
    """
    try:
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)  # the umask may have taken bits the mode asked for; never adds any
    except FileExistsError:
        pass
    except OSError as exc:  # no parent, a file on the way, no write permission, a read-only file system
        raise ConfigError(f"cannot make {path} ({exc.strerror}); set ACTORWIRE_RUNTIME_DIR to a directory "
                          f"that exists and that this user can write") from None
    st = os.lstat(path)
    import stat

    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{path} is not a directory; remove it or set ACTORWIRE_RUNTIME_DIR elsewhere")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ConfigError(f"{path} must be private to this user (mode 0700), but it has mode "
                          f"{stat.S_IMODE(st.st_mode):04o} and owner uid {st.st_uid}: chmod 700 it, "
                          f"or set ACTORWIRE_RUNTIME_DIR elsewhere")
    return path


def user_dir(*, create: bool = True) -> pathlib.Path:
    """``$ACTORWIRE_RUNTIME_DIR/actorwire-<uid>``, private to this user (``create=False``: only its path)."""
    path = pathlib.Path(settings().runtime_dir) / f"actorwire-{os.getuid()}"
    return private_dir(path) if create else path


def run_dir(run_id: str, *, create: bool = True) -> pathlib.Path:
    """A private directory for this run's ipc sockets (``create=False``: only its path)."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return private_dir(user_dir() / digest) if create else user_dir(create=False) / digest


#: The file a root writes in its run's directory so that ``actorwire status`` finds the run.
RUN_FILE = "root.json"


def write_run_file(run_id: str, endpoint: str, ipc: str) -> pathlib.Path:
    """Say where this run's root listens, in its private run directory (0600, as its sockets)."""
    path = run_dir(run_id) / RUN_FILE
    record = {"run_id": run_id, "endpoint": endpoint, "ipc": ipc, "pid": os.getpid(),
              "host": socket.gethostname(), "started_ns": time.time_ns()}
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    os.replace(tmp, path)
    return path


def local_runs() -> list[dict[str, Any]]:
    """The runs of this user on this host whose root still runs, newest first (from their run files)."""
    from actorwire.transport._process import process_alive

    runs = []
    try:
        candidates = sorted(user_dir().glob(f"*/{RUN_FILE}"))
    except OSError:
        return []
    for path in candidates:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being written, or left half-written by a crash
        if isinstance(record, dict) and isinstance(record.get("pid"), int) and process_alive(record["pid"]):
            runs.append(record)
    return sorted(runs, key=lambda r: -int(r.get("started_ns", 0)))


def ipc_endpoint(run_id: str, node_id: str) -> str:
    path = run_dir(run_id) / f"{node_id}.sock"
    if len(str(path)) > _MAX_IPC_PATH:
        path = run_dir(run_id) / f"{hashlib.sha256(node_id.encode()).hexdigest()[:16]}.sock"
    if len(str(path)) > _MAX_IPC_PATH:
        raise InvalidArgument(
            f"ipc socket path {path} is too long; set ACTORWIRE_RUNTIME_DIR to a shorter directory"
        )
    return f"ipc://{path}"


def is_tcp(endpoint: str) -> bool:
    return endpoint.startswith("tcp://")


def tcp_host(endpoint: str) -> str:
    """``tcp://HOST:PORT`` -> ``HOST`` (brackets kept off IPv6 literals)."""
    hostport = endpoint[len("tcp://"):]
    host = hostport.rsplit(":", 1)[0]
    return host.strip("[]")


def check_tcp_port(endpoint: str, what: str) -> None:
    """Refuse a ``tcp://HOST:PORT`` whose port is not a number from 0 to 65535 (0: any free port).

    libzmq takes a larger number modulo 65536 (``:99999`` binds or reaches port 34463), so the
    mistake would show up later as a run listening, or a worker connecting, somewhere else.
    """
    port = endpoint[len("tcp://"):].rsplit(":", 1)[-1] if ":" in endpoint[len("tcp://"):] else ""
    if not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ConfigError(f"{what}: the port must be a number from 0 to 65535 (0: any free one), "
                          f"as in tcp://HOST:PORT; got {port!r}")


def pick_endpoint(endpoints: list[str], peer_host: str, my_host: str, *, prefer_tcp: bool = False) -> str:
    """The endpoint of a peer to connect to: ipc if it is on this host, else tcp.

    ``prefer_tcp`` (``$ACTORWIRE_PREFER_TCP=1``) takes tcp even on one host,
    for tests and benchmarks of the tcp path.
    """
    if not endpoints:
        raise InvalidArgument("peer advertised no endpoints")
    same_host = peer_host == my_host and not (prefer_tcp and any(is_tcp(e) for e in endpoints))
    for endpoint in endpoints:
        if same_host and endpoint.startswith("ipc://"):
            return endpoint
    for endpoint in endpoints:
        if is_tcp(endpoint):
            return endpoint
    return endpoints[0]


def local_address_towards(host: str) -> str:
    """The local address this host would use to reach ``host`` (no packet is sent)."""
    if host in ("127.0.0.1", "localhost", "::1", "*", "0.0.0.0"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))
            return probe.getsockname()[0]
        except OSError:
            return "0.0.0.0"


def listening(path: str) -> bool:
    """Whether a process listens on the unix socket ``path`` (a refused connection: nobody does,
    the file is a dead process's).  Anything else, a full backlog included, counts as listening."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True
    finally:
        probe.close()
    return True
