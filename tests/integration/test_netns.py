"""Hosts as network namespaces on one machine: a coordinator and workers with their own addresses.

Each test builds namespaces joined by veth pairs to a bridge in a namespace
of its own (nothing touches the machine's own network; only addresses
inside 10.231.0.0/16 and loopback are used) and removes them afterwards.
They need root and ``ip netns``; elsewhere they skip, saying why.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import ROOT, stop_process

from actorwire.transport._endpoints import run_dir

TRAIN = ROOT / "examples" / "multinode" / "train.py"

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    probe = f"awprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot create a network namespace here: {getattr(exc, 'stderr', b'') or exc}"
    _ip("netns", "del", probe)
    return None


class Net:
    """A switch namespace with a bridge, and one namespace per host on 10.231.<net>.0/24."""

    def __init__(self, hosts: list[str]) -> None:
        tag = secrets.token_hex(2)
        self.net = int(tag, 16) % 200 + 20
        self.switch = f"aw{tag}sw"
        self.ns = {h: f"aw{tag}{h}" for h in hosts}
        self.addr = {h: f"10.231.{self.net}.{i + 1}" for i, h in enumerate(hosts)}
        self.dev = {h: f"v{tag}{i}" for i, h in enumerate(hosts)}
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, h in enumerate(hosts):
            ns = self.ns[h]
            _ip("netns", "add", ns)
            _ip("link", "add", self.dev[h], "netns", ns, "type", "veth", "peer", "name", f"s{tag}{i}",
                "netns", self.switch)
            _ip("-n", ns, "addr", "add", f"{self.addr[h]}/24", "dev", self.dev[h])
            _ip("-n", ns, "link", "set", self.dev[h], "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "set", f"s{tag}{i}", "master", "br0")
            _ip("-n", self.switch, "link", "set", f"s{tag}{i}", "up")

    def cut(self, host: str) -> None:
        _ip("-n", self.ns[host], "link", "set", self.dev[host], "down")

    def popen(self, host: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns[host], *argv], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def close(self) -> None:
        for ns in [*self.ns.values(), self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


@pytest.fixture
def net(request: pytest.FixtureRequest) -> Iterator[Net]:
    why = _why_not()
    if why:
        pytest.skip(why)
    n = Net(request.param)
    try:
        yield n
    finally:
        n.close()


class Lines:
    """Reads a process's output on a thread, so a test can wait for a line with a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.q, self.seen = proc, queue.Queue(), []  # type: ignore[var-annotated]
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.q.put(line)
        self.q.put(None)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} within {timeout} s; output:\n" + "".join(self.seen[-40:]))


def _env(keys: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORWIRE_", "SLURM_", "RANK", "MASTER_")) or k == "ACTORWIRE_DEATH_DIR"}
    env.update(ACTORWIRE_KEYS=str(keys), ACTORWIRE_PREFER_TCP="1", **extra)
    return env


@pytest.mark.parametrize("net", [["c", "w0", "w1", "w2"]], indirect=True)
def test_a_host_cut_off_is_declared_dead_its_share_redistributed_and_the_run_ends_cleanly(
        net: Net, tmp_path: pathlib.Path) -> None:
    from actorwire.transport._security import keygen

    keygen(tmp_path / "keys")
    port = 29555
    coordinator = f"tcp://{net.addr['c']}:{port}"
    procs: list[subprocess.Popen] = []
    try:
        coord = net.popen("c", [sys.executable, "-m", "actorwire", "coordinator", "--bind", coordinator,
                                "--world-size", "3", "--dataset-size", "1400", "--epochs", "3", "--run-id", "ns-run",
                                "--staleness-timeout", "4", "--join-timeout", "60"],
                          _env(tmp_path / "keys", ACTORWIRE_LOG_LEVEL="WARNING"))
        procs.append(coord)
        out = Lines(coord)
        out.wait_for("listening on", 30)
        for rank in range(3):
            procs.append(net.popen(f"w{rank}", [sys.executable, str(TRAIN)], _env(
                tmp_path / "keys", ACTORWIRE_JOIN=coordinator, ACTORWIRE_RUN_ID="ns-run", ACTORWIRE_RANK=str(rank),
                ACTORWIRE_WORLD_SIZE="3", TRAIN_SAMPLES="1400")))
        out.wait_for("epoch 0:", 90)
        net.cut("w2")  # link down: no exit to detect, only silence
        out.wait_for("run ended", 150)
        assert coord.wait(30) == 0, "".join(out.seen[-40:])
        text = "".join(out.seen)
        last = [line for line in out.seen if line.startswith("epoch 2:")]
        assert last and ", 0]" in last[0], text  # the cut host did no work in the last epoch
        for p in procs[1:3]:
            assert p.wait(60) == 0  # the survivors finished
    finally:
        stop_process(*procs)


@pytest.mark.parametrize("net", [["c", "x"]], indirect=True)
def test_a_host_without_the_key_gets_nothing_through(net: Net, tmp_path: pathlib.Path) -> None:
    from actorwire.transport._security import keygen

    keygen(tmp_path / "keys")
    keygen(tmp_path / "other")
    coordinator = f"tcp://{net.addr['c']}:29555"
    procs: list[subprocess.Popen] = []
    try:
        coord = net.popen("c", [sys.executable, "-m", "actorwire", "coordinator", "--bind", coordinator,
                                "--world-size", "1", "--dataset-size", "64", "--run-id", "ns-run",
                                "--join-timeout", "20"], _env(tmp_path / "keys"))
        procs.append(coord)
        out = Lines(coord)
        out.wait_for("listening on", 30)
        stranger = net.popen("x", [sys.executable, str(TRAIN)], _env(
            tmp_path / "other", ACTORWIRE_JOIN=coordinator, ACTORWIRE_RUN_ID="ns-run", ACTORWIRE_RANK="0",
            ACTORWIRE_WORLD_SIZE="1", ACTORWIRE_ROOT_KEY=str(tmp_path / "keys" / "node.key")))
        procs.append(stranger)
        line = out.wait_for("refused a peer: its key is not in the allow-list", 60)
        assert net.addr["x"] in line
        stranger_out, _ = stranger.communicate(timeout=60)
        assert stranger.returncode != 0 and "joined" not in stranger_out
    finally:
        stop_process(*procs)
        shutil.rmtree(run_dir("ns-run"), ignore_errors=True)  # the killed coordinator's socket and run file


@pytest.mark.parametrize("net", [["t", "r"]], indirect=True)
def test_a_producer_serves_its_hosts_consumer_on_shm_and_the_other_hosts_on_frames_over_curve(
        net: Net, tmp_path: pathlib.Path) -> None:
    """Weight transfer across two hosts: the trainer's producer learns each consumer's host at its
    reservation and serves consumer 0 (its own host) on shared memory and consumer 1 (the other
    namespace) on frames over tcp with CURVE, in one sync, both bit-exact."""
    from actorwire.transport._security import keygen

    keygen(tmp_path / "keys")
    script = str(ROOT / "tests" / "_weight_hosts.py")
    out = tmp_path / "run"
    out.mkdir()
    procs: list[subprocess.Popen] = []
    try:
        root = net.popen("t", [sys.executable, script, "root", str(out), f"tcp://{net.addr['t']}:29556"],
                         _env(tmp_path / "keys", ACTORWIRE_HOST=net.addr["t"]))
        procs.append(root)
        lines = Lines(root)
        endpoint, run_id = lines.wait_for("tcp://", 60).split()
        procs.append(net.popen("r", [sys.executable, script, "consumer", str(out), endpoint, run_id],
                               _env(tmp_path / "keys", ACTORWIRE_HOST=net.addr["r"])))
        result = json.loads(lines.wait_for('"planes"', 180))
        assert result["trainer"] == 0, result
        report = result["report"]
        assert "error" not in report, report
        assert report["digests"] == {"0": report["expected"], "1": report["expected"]}  # both bit-exact
        assert result["planes"] == {"weights/consumer/0": "shm", "weights/consumer/1": "frames"}
        assert root.wait(60) == 0
    finally:
        stop_process(*procs)
