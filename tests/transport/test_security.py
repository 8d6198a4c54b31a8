"""tcp security: CURVE by default, an allow-list of keys, plain text on loopback only, runs never mixed."""

from __future__ import annotations

import os
import pathlib
import stat
from collections.abc import Callable

import pytest
import structlog.testing
from _actors import Echo

from actorwire import messages as m
from actorwire.actors import ActorSystem
from actorwire.transport import JoinRefused, RuntimeConfig
from actorwire.transport._security import Security, SecurityError, is_loopback, keygen

QUICK = RuntimeConfig(timeout_scale=0.3)


@pytest.fixture(autouse=True)
def _clean_env(setenv: Callable[[str, str | None], None]) -> None:
    for var in ("ACTORWIRE_KEYS", "ACTORWIRE_KEY_NAME", "ACTORWIRE_ROOT_KEY", "ACTORWIRE_INSECURE_TCP"):
        setenv(var, None)
    setenv("ACTORWIRE_PREFER_TCP", "1")  # same host: talk tcp, not ipc


def test_keygen_writes_a_private_secret_and_never_overwrites(tmp_path: pathlib.Path) -> None:
    public, secret = keygen(tmp_path / "keys", "hostA")
    assert public.name == "hostA.key" and secret.name == "hostA.key_secret"
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    with pytest.raises(FileExistsError, match="hostA.key"):
        keygen(tmp_path / "keys", "hostA")
    with pytest.raises(ValueError, match="bad key name"):
        keygen(tmp_path / "keys", "../x")


def test_plain_tcp_needs_an_explicit_flag_and_loopback() -> None:
    with pytest.raises(SecurityError, match="needs CURVE keys"):
        ActorSystem(bind="tcp://127.0.0.1:0")
    with pytest.raises(SecurityError, match="loopback only, not on 0.0.0.0"):
        ActorSystem(bind="tcp://0.0.0.0:0", security=Security(insecure_tcp=True))
    with ActorSystem(bind="tcp://127.0.0.1:0", security=Security(insecure_tcp=True)) as system:
        assert system.endpoint.startswith("tcp://127.0.0.1:")
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("10.0.0.1")


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "abc", ""])
def test_a_tcp_port_out_of_range_is_refused_not_wrapped(port: str) -> None:
    """libzmq binds or reaches ``:99999`` as port 34463 (modulo 65536): refused before it gets there."""
    from actorwire.transport import ConfigError

    with pytest.raises(ConfigError, match=f"the port must be a number from 0 to 65535.*got '{port}'"):
        ActorSystem(bind=f"tcp://127.0.0.1:{port}", security=Security(insecure_tcp=True))
    with pytest.raises(ConfigError, match=f"the root endpoint .*got '{port}'"):
        ActorSystem(join=f"tcp://127.0.0.1:{port}", run_id="r", security=Security(insecure_tcp=True))


def test_missing_keys_are_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SecurityError, match="actorwire keygen"):
        Security(keys=str(tmp_path))


def _root(tmp_path: pathlib.Path) -> ActorSystem:
    keygen(tmp_path / "cluster")
    system = ActorSystem(bind="tcp://127.0.0.1:0", config=QUICK, security=Security(keys=str(tmp_path / "cluster")))
    system.spawn(Echo(), "echo")
    return system


def test_a_member_with_an_allowed_key_joins_over_curve(tmp_path: pathlib.Path) -> None:
    with _root(tmp_path) as root:
        with ActorSystem(join=root.endpoint, run_id=root.run_id, config=QUICK,
                         security=Security(keys=str(tmp_path / "cluster"))) as member:
            assert member._node.info.curve_key  # it published its own key for peers
            assert member._node._wires.links["@root"].endpoint.startswith("tcp://")
            beat = m.Heartbeat(rank=0, step_count=2)
            assert member.ask("echo", beat, timeout=10) == beat


def test_a_key_not_on_the_allow_list_is_refused_and_named(tmp_path: pathlib.Path) -> None:
    with _root(tmp_path) as root:
        keygen(tmp_path / "stranger")
        stranger = Security(keys=str(tmp_path / "stranger"), root_key=str(tmp_path / "cluster" / "node.key"))
        # One line at the worker, at once (it used to wait out the join and say "no answer").
        with structlog.testing.capture_logs() as logs, pytest.raises(
                JoinRefused, match="^the root refused this process's CURVE key: its public key is not among"):
            ActorSystem(join=root.endpoint, run_id=root.run_id, config=QUICK, security=stranger)
        refused = [e for e in logs if e["event"] == "refused a peer: its key is not in the allow-list"]
        assert refused and refused[0]["key"] == stranger.public.decode()  # type: ignore[union-attr]
        assert refused[0]["address"] == "127.0.0.1"
        assert root.names() == ["echo"]  # nothing of it reached the system


def test_a_plain_text_peer_gets_nothing_through(tmp_path: pathlib.Path) -> None:
    with _root(tmp_path) as root:
        with structlog.testing.capture_logs() as logs, pytest.raises(
                JoinRefused, match="^the CURVE handshake with the root failed: .* or one side runs without CURVE"):
            ActorSystem(join=root.endpoint, run_id=root.run_id, config=QUICK, security=Security(insecure_tcp=True))
        assert any("failed the CURVE handshake" in e["event"] for e in logs)
        assert root.names() == ["echo"]


def test_a_wrong_root_key_is_one_clear_line_at_once(tmp_path: pathlib.Path) -> None:
    """The worker's copy of the root's public key is another one: it used to wait out the join."""
    with _root(tmp_path) as root:
        keygen(tmp_path / "other")
        wrong = Security(keys=str(tmp_path / "cluster"), root_key=str(tmp_path / "other" / "node.key"))
        with pytest.raises(JoinRefused, match=f"the root key this process has does not match the root's.*; "
                                              f"root {root.endpoint}$"):
            ActorSystem(join=root.endpoint, run_id=root.run_id, config=QUICK, security=wrong)
        assert root.names() == ["echo"]


def test_a_peer_of_another_run_is_refused_with_the_reason(tmp_path: pathlib.Path) -> None:
    with _root(tmp_path) as root:
        with pytest.raises(JoinRefused, match="wrong run id"):
            ActorSystem(join=root.endpoint, run_id="another-run", config=QUICK,
                        security=Security(keys=str(tmp_path / "cluster")))
        assert root.names() == ["echo"]
