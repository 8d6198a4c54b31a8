"""Who may talk to a node over tcp: ZeroMQ CURVE, an allow-list of keys, loopback-only plain text.

Every tcp endpoint is encrypted and authenticated with CURVE unless the run
says otherwise, and plain tcp is allowed on loopback addresses only.  ipc
endpoints are protected by the file system (a private run directory, mode
0700) and inproc never leaves the process, so neither uses CURVE.

Keys live in a directory written by ``actorwire keygen DIR [--name NAME]``
(pyzmq's certificate files: ``NAME.key`` public, ``NAME.key_secret`` secret):

* a node's own pair is ``$ACTORWIRE_KEYS/$ACTORWIRE_KEY_NAME`` (name
  ``node`` by default);
* the allow-list is every public key (``*.key``) in the directory: remove a
  file to revoke a host;
* a joining node checks the root with ``$ACTORWIRE_ROOT_KEY`` (a z85 key or a
  ``.key`` file), by default its own public key (all nodes share one pair);
  other peers' keys come from the registry, which the root filled over CURVE.

The check runs in a ZAP handler served by the node's I/O thread: a peer whose
key is not allowed is refused during the handshake, with a log line naming
its address and key, and nothing it sends reaches the node.
"""

from __future__ import annotations

import ipaddress
import os
import pathlib
import socket
from typing import Any

import zmq
import zmq.utils.z85

from actorwire.messages import UsageError
from actorwire.transport._errors import AlreadyExists, InvalidArgument
from actorwire.transport._settings import settings

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = "actorwire"


class SecurityError(UsageError, RuntimeError):
    """tcp asked for without keys (or plain text off loopback), or unreadable keys."""


def keygen(directory: str | os.PathLike[str], name: str = "node") -> tuple[pathlib.Path, pathlib.Path]:
    """Write a CURVE key pair as ``DIR/NAME.key`` and ``DIR/NAME.key_secret`` (0600); refuses to overwrite."""
    import zmq.auth

    if not name or any(c in name for c in "/\\\0") or name.startswith("."):
        raise InvalidArgument(f"bad key name {name!r}")
    path = pathlib.Path(directory)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    public, secret = path / f"{name}.key", path / f"{name}.key_secret"
    for existing in (public, secret):
        if existing.exists():
            raise AlreadyExists(f"{existing} exists; pick another --name or remove it first")
    made_public, made_secret = zmq.auth.create_certificates(str(path), name)
    os.chmod(made_secret, 0o600)
    return pathlib.Path(made_public), pathlib.Path(made_secret)


def _load_public(source: str) -> bytes:
    import zmq.auth

    if os.path.exists(source):
        public, _ = zmq.auth.load_certificate(source)
        return public
    if len(source) == 40:
        return source.encode()
    raise SecurityError(f"root key {source!r} is neither a key file nor a 40-character z85 key")


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


class Security:
    """The tcp security of one node, from arguments or the environment."""

    def __init__(self, *, keys: str | None = None, key_name: str | None = None, root_key: str | None = None,
                 insecure_tcp: bool | None = None) -> None:
        import zmq.auth

        env = settings()
        self.keys = keys or env.keys
        self.key_name = key_name or env.key_name
        self.insecure_tcp = insecure_tcp if insecure_tcp is not None else env.insecure_tcp
        self.public: bytes | None = None
        self.secret: bytes | None = None
        self.allowed: set[bytes] = set()
        self.root_key: bytes | None = None
        self._allowed_raw: set[bytes] = set()
        if self.keys is None:
            return
        directory = pathlib.Path(self.keys)
        secret_file = directory / f"{self.key_name}.key_secret"
        if not secret_file.exists():
            raise SecurityError(f"no key pair {secret_file} (make one with `actorwire keygen {directory} "
                                f"--name {self.key_name}`)")
        self.public, self.secret = zmq.auth.load_certificate(str(secret_file))
        for public_file in sorted(directory.glob("*.key")):
            key, _ = zmq.auth.load_certificate(str(public_file))
            self.allowed.add(key)
        self._allowed_raw = {zmq.utils.z85.decode(k) for k in self.allowed}
        root = root_key or env.root_key
        self.root_key = _load_public(root) if root else self.public

    @property
    def curve(self) -> bool:
        return self.secret is not None

    def check_tcp(self, host: str, what: str) -> None:
        """Refuse plain tcp unless asked for explicitly, and then only on loopback."""
        if self.curve:
            return
        if not self.insecure_tcp:
            raise SecurityError(f"{what} is tcp, which needs CURVE keys: set ACTORWIRE_KEYS to a directory made by "
                                f"`actorwire keygen DIR` (or, on loopback only, ACTORWIRE_INSECURE_TCP=1)")
        if not is_loopback(host):
            raise SecurityError(f"{what}: plain-text tcp is allowed on loopback only, not on {host}; "
                                f"use CURVE keys (ACTORWIRE_KEYS)")

    def serve(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (a ROUTER bound on tcp) a CURVE server checked by the ZAP handler."""
        if self.secret is None or self.public is None:
            return
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())

    def client(self, sock: zmq.Socket, server_key: bytes | str | None, peer: str) -> None:
        """Make ``sock`` (a DEALER about to connect over tcp) a CURVE client of ``server_key``."""
        if self.secret is None or self.public is None:
            return
        if not server_key:
            raise SecurityError(f"peer {peer} published no CURVE key; it cannot be reached over tcp")
        sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode() if isinstance(server_key, str) else server_key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)

    def answer_zap(self, frames: list[bytes], log: Any) -> list[bytes]:
        """The ZAP reply to one request (RFC 27): 200 for an allowed CURVE key, 400 otherwise."""
        version, request_id, domain, address, _identity, mechanism, *credentials = frames + [b""] * 6
        key = credentials[0] if credentials else b""
        if mechanism == b"CURVE" and key in self._allowed_raw:
            return [version, request_id, b"200", b"OK", zmq.utils.z85.encode(key), b""]
        shown = zmq.utils.z85.encode(key).decode() if len(key) == 32 else "none"
        log.warning("refused a peer: its key is not in the allow-list", address=address.decode(errors="replace"),
                    mechanism=mechanism.decode(errors="replace"), key=shown, domain=domain.decode(errors="replace"))
        return [version, request_id, b"400", b"key not allowed", b"", b""]
