"""Recording live runs and replaying actors from them, including against changed code."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from _actors import Echo, Roller
from conftest import TESTS

from actorwire import messages as m
from actorwire.actors import ActorSystem, Context, handler, replay
from actorwire.actors.cli._log_export import perfetto_trace
from actorwire.actors.cli._log_stats import collect_stats
from actorwire.actors.cli._where import Where, WhereError
from actorwire.actors.runtime._replay import load_records
from actorwire.transport.recording import In, Out

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
TESTS_DIR = str(TESTS)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """A live run: Roller (timers, clock, randomness, asks, broadcast) against two Echo actors."""
    directory = tmp_path_factory.mktemp("rec")
    with ActorSystem(record=str(directory)) as system:
        inbox = system.inbox("main")
        system.spawn(Echo(), "echo")
        system.spawn(Echo(), "echo/b")
        system.spawn(Roller(rounds=5), "roller")
        for _ in range(5):
            assert inbox.get(timeout=10) is not None
        system.stop("roller")
    yield directory


def test_every_actor_was_recorded_whole(recording: pathlib.Path) -> None:
    header, records = load_records(recording, "roller")
    assert header.actor_class == "_actors:Roller" and header.config == {"rounds": 5}
    inbox = [r for r in records if isinstance(r, In)]
    kinds = [type(r.message).__name__ for r in inbox]
    assert kinds.count("TimerFired") == 5 and kinds.count("LrUpdate") == 5
    outs = [r for r in records if isinstance(r, Out)]
    assert [o.how for o in outs].count("ask") == 5
    assert {o.target for o in outs if type(o.message).__name__ == "EvalBroadcast"} == {"echo", "echo/b"}
    _, echo = load_records(recording, "echo")
    assert sum(isinstance(r, In) for r in echo) >= 5


def only_run(directory: pathlib.Path) -> pathlib.Path:
    """The run directory a recording into ``directory`` made."""
    (run,) = directory.iterdir()
    return run


def test_a_recording_is_one_run_per_directory(recording: pathlib.Path) -> None:
    run = only_run(recording)
    assert sorted(p.name for p in run.iterdir()) == ["echo", "echo_b", "roller"]
    assert load_records(recording, "roller")[0].run_id == run.name


def test_exact_replay(recording: pathlib.Path) -> None:
    for actor in ("roller", "echo", "echo/b"):
        cls = "_actors:Roller" if actor == "roller" else "_actors:Echo"
        report = replay(recording, actor=actor, actor_class=cls)
        assert report.ok, report.summary()
        assert report.summary() == f"{report.messages} messages replayed, 0 divergences"
    assert replay(recording, actor="roller", actor_class="_actors:Roller").messages == 10


def test_replay_finds_the_changed_message_and_field(recording: pathlib.Path) -> None:
    class Changed(Roller):
        @handler
        def on_reply(self, msg: m.LrUpdate, ctx: Context) -> None:  # the "new code": off by one
            ctx.tell("main", m.Heartbeat(rank=msg.rank, step_count=int(msg.lr) + 1))

    report = replay(recording, actor="roller", actor_factory=lambda header: Changed(**header.config))
    assert not report.ok
    first = report.divergences[0]
    assert first.kind == "lr_update"
    (line,) = first.diff
    expected, got = line.removeprefix("step_count: expected ").split(", got ")
    assert int(got) == int(expected) + 1
    _, records = load_records(recording, "roller")
    first_reply = next(r for r in records if isinstance(r, In) and isinstance(r.message, m.LrUpdate))
    assert first.index == first_reply.index
    assert "1 divergences" in report.summary() and "divergence at message" in report.summary()


def test_replay_reports_extra_random_draws(recording: pathlib.Path) -> None:
    class Greedy(Roller):
        @handler
        def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
            ctx.random.random()
            super().on_timer(msg, ctx)

    report = replay(recording, actor="roller", actor_factory=lambda header: Greedy(**header.config))
    assert not report.ok
    assert report.divergences[0].index >= 1


def test_replay_cli(recording: pathlib.Path) -> None:
    env = {**os.environ, "PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ok = subprocess.run([sys.executable, "-m", "actorwire", "replay", str(recording), "--actor", "roller",
                         "--actor-class", "_actors:Roller"], capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "10 messages replayed, 0 divergences"
    many = subprocess.run([sys.executable, "-m", "actorwire", "replay", str(recording)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert many.returncode == 1 and "name the one to replay (--actor NAME)" in many.stderr


def test_log_show_is_merged_in_time_order_and_filters(recording: pathlib.Path) -> None:
    env = {**os.environ, "PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "actorwire", "log", "show", str(recording), "--json"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert {r["actor"] for r in rows} == {"roller", "echo", "echo/b"}
    times = [r["wall_ns"] for r in rows]
    assert times == sorted(times)
    filtered = subprocess.run([sys.executable, "-m", "actorwire", "log", "show", str(recording), "--json",
                               "--actor", "echo", "--kind", "lr_update", "--where", "rank >= 3 and lr > 0"],
                              capture_output=True, text=True, env=env, timeout=60)
    rows = [json.loads(line) for line in filtered.stdout.splitlines()]
    assert rows and all(r["actor"] == "echo" and r["kind"] == "lr_update" and r["message"]["rank"] >= 3
                        for r in rows)
    corr = rows[0]["correlation_id"]
    by_corr = subprocess.run([sys.executable, "-m", "actorwire", "log", "show", str(recording), "--json",
                              "--corr", str(corr)], capture_output=True, text=True, env=env, timeout=60)
    linked = [json.loads(line) for line in by_corr.stdout.splitlines()]
    assert {r["dir"] for r in linked} >= {"in", "reply"}  # the ask and its reply share the id


def test_log_stats(recording: pathlib.Path) -> None:
    stats = collect_stats([str(recording)])
    assert stats["kinds"]["timer_fired"]["count"] == 5
    assert stats["kinds"]["lr_update"]["count"] >= 10
    assert any(p["sender"] == "roller" and p["target"] == "echo" for p in stats["pairs"])
    assert len(stats["slowest_handlers"]) == 10
    assert all(h["ms"] >= 0 for h in stats["slowest_handlers"])


def test_perfetto_export_is_valid_trace_event_json(recording: pathlib.Path) -> None:
    trace = perfetto_trace([str(recording)])
    events = trace["traceEvents"]
    for event in events:
        assert {"ph", "pid", "name"} <= set(event)
        if event["ph"] in ("X", "s", "f"):
            assert {"ts", "tid"} <= set(event) and event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] > 0
    starts = {e["id"] for e in events if e["ph"] == "s"}
    finishes = {e["id"] for e in events if e["ph"] == "f"}
    assert starts and starts == finishes
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"roller", "echo", "echo/b"}


def test_recording_switched_on_by_environment(tmp_path: pathlib.Path,
                                              setenv: Callable[[str, str | None], None]) -> None:
    setenv("ACTORWIRE_RECORD", str(tmp_path))
    setenv("ACTORWIRE_RECORD_ACTORS", "kept*")
    with ActorSystem() as system:
        system.spawn(Echo(), "kept")
        system.spawn(Echo(), "skipped")
        system.ask("kept", m.SyncNow(), timeout=10)
        system.ask("skipped", m.SyncNow(), timeout=10)
    assert sorted(p.name for p in only_run(tmp_path).iterdir()) == ["kept"]


def test_corrupt_log_is_one_clear_line(recording: pathlib.Path, tmp_path: pathlib.Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(recording, copy)
    seg = next((only_run(copy) / "echo").glob("seg-*.awlog"))
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    env = {**os.environ, "PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    bad = subprocess.run([sys.executable, "-m", "actorwire", "log", "stats", str(copy)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    assert f"{seg}: corrupt record at byte" in bad.stderr and "--skip-corrupt" in bad.stderr
    skipped = subprocess.run([sys.executable, "-m", "actorwire", "log", "stats", str(copy), "--skip-corrupt"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert skipped.returncode == 0


def test_where_is_safe() -> None:
    where = Where("rank == 3 and batch_ms > 50")
    assert where({"rank": 3, "batch_ms": 51.0})
    assert not where({"rank": 3, "batch_ms": 49.0})
    assert not where({"rank": 3})  # a missing field is simply false
    assert Where("kind in ['batch', 'sync_ack'] and not (rank % 2)")({"kind": "batch", "rank": 2})
    for evil in ("__import__('os').system('true')", "rank.__class__", "[x for x in rank]", "lambda: 1"):
        with pytest.raises(WhereError):
            Where(evil)
    with pytest.raises(WhereError, match="--where: invalid syntax"):
        Where("rank ==")


def test_log_tail_prints_and_follows(recording: pathlib.Path) -> None:
    env = {**os.environ, "PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    once = subprocess.run([sys.executable, "-m", "actorwire", "log", "tail", str(only_run(recording) / "echo"), "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert once.returncode == 0
    rows = [json.loads(line) for line in once.stdout.splitlines()]
    assert rows and all(r["actor"] == "echo" for r in rows)
    follow = subprocess.run([sys.executable, "-m", "actorwire", "log", "tail", str(only_run(recording) / "echo"), "-f",
                             "--for", "0.3"], capture_output=True, text=True, env=env, timeout=60)
    assert follow.returncode == 0
    # The lines and the header are `log show`'s (tail had a format of its own).
    from actorwire.actors.cli._log import HEADER

    lines = follow.stdout.splitlines()
    assert lines[0] == HEADER
    assert sum(" echo             <- " in line for line in lines) == sum(r["dir"] == "in" for r in rows)
    shown = subprocess.run([sys.executable, "-m", "actorwire", "log", "show", str(only_run(recording) / "echo")],
                           capture_output=True, text=True, env=env, timeout=60)
    assert shown.stdout.splitlines()[0] == HEADER
    # The same records (time aside: each counts from the first record it read), in either order at ties.
    assert sorted(x[12:] for x in shown.stdout.splitlines()[1:]) == sorted(x[12:] for x in lines[1:])


def test_a_tell_that_found_its_target_dead_replays_as_it_ran(tmp_path: pathlib.Path) -> None:
    """Whether a target was already down is a race replay cannot recompute: it is recorded."""
    from _actors import Notifier

    with ActorSystem(record=str(tmp_path)) as system:
        system.spawn(Echo(), "gone")
        system.spawn(Notifier(), "notifier")
        assert system.ask("notifier", m.SyncNow(cycle=1), timeout=10) == m.SyncAck(rank=0, step_count=0)
        system.stop("gone")
        assert system.ask("notifier", m.SyncNow(cycle=2), timeout=10) == m.SyncAck(rank=0, step_count=1)
    report = replay(tmp_path, actor="notifier", actor_class="_actors:Notifier")
    assert (report.messages, report.divergences) == (2, [])


def test_a_stop_with_a_failure_is_recorded_and_replayed(tmp_path: pathlib.Path) -> None:
    """``ctx.stop(failure)`` is an effect like any other: the failure is in the recording, the system
    keeps it, and the replay matches it (a replay that stopped without one would diverge)."""
    from _actors import Quitter

    with ActorSystem(record=str(tmp_path)) as system:
        watcher = system.inbox("watcher")
        system.spawn(Quitter(), "q")
        watcher.watch("q")
        system.tell("q", m.Evicted(detail="counted dead"))
        assert watcher.get(timeout=10) is not None
        assert system.failures == {"q": "evicted: counted dead"}
    report = replay(tmp_path, actor="q", actor_class="_actors:Quitter")
    assert (report.messages, report.divergences) == (1, [])


def test_corr_names_an_ask_with_its_asker(tmp_path: pathlib.Path) -> None:
    """Correlation ids are numbered per process: ``--corr N`` alone matched asks of two askers."""
    env = {**os.environ, "PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ActorSystem(record=str(tmp_path)) as system:
        inbox = system.inbox("main")
        system.spawn(Echo(), "echo")
        # Each process numbers its asks from 1, the node's own requests first (the root's roller
        # started at 5, the child's at 3), and the heartbeats counted below may all come before the
        # child's last asks (a run under load logged the root's 5-8 and the child's 3-4: none
        # shared). 12 rounds each overlap whatever the order.
        system.spawn(Roller(rounds=12), "roller")
        system.spawn_process({"roller2": "_actors:Roller"}, config={"roller2": {"rounds": 12}}, env=env)
        for _ in range(24):
            assert inbox.get(timeout=20) is not None

    def show(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "actorwire", "log", "show", str(tmp_path), "--json", *args],
                              capture_output=True, text=True, env=env, timeout=60)

    rows = [json.loads(line) for line in show("--kind", "lr_update").stdout.splitlines()]
    ids = {a: {r["correlation_id"] for r in rows if r["asker"] == a} for a in ("roller", "roller2")}
    shared = min(ids["roller"] & ids["roller2"])
    both = show("--corr", str(shared))
    assert f"correlation id {shared} was used by 2 askers (roller, roller2)" in both.stderr
    one = show("--corr", f"roller2:{shared}")
    picked = [json.loads(line) for line in one.stdout.splitlines()]
    assert one.returncode == 0 and {r["asker"] for r in picked} == {"roller2"}
    assert {r["dir"] for r in picked} == {"ask", "in", "reply"}
    none = show("--corr", f"nobody:{shared}")
    assert none.returncode == 1 and "no record matched the filters" in none.stderr


def test_replay_state_on_stdout_is_json_alone(recording: pathlib.Path) -> None:
    """`replay --until N --state > state.json`, as docs/recording.md shows, wrote a summary line first."""
    env = {**os.environ, "PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "actorwire", "replay", str(recording), "--actor", "roller",
                          "--actor-class", "_actors:Roller", "--until", "3", "--state"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    state = json.loads(out.stdout)
    assert isinstance(state, dict) and state
    assert "3 messages replayed, 0 divergences" in out.stderr


def test_a_coordinator_s_state_shows_its_ranks_field_by_field() -> None:
    """Its ranks appeared as `<RankState object at 0x...>`."""
    from actorwire import messages as m
    from actorwire.actors.control._coordinator import Coordinator
    from actorwire.actors.runtime._replay import actor_state
    from actorwire.actors.testing import ActorHarness

    h = ActorHarness(Coordinator(world_size=2, run_id="r", num_epochs=1, dataset_size=4), name="coordinator")
    h.start()
    h.ask(m.JoinRequest(rank=0, world_size=2, run_id="r"), sender="worker/0")
    state = json.loads(json.dumps(actor_state(h.actor)))
    assert state["ranks"]["0"]["name"] == "worker/0" and state["ranks"]["0"]["alive"] is True
    assert "object at 0x" not in json.dumps(state["ranks"])
    assert state["settings"]["world_size"] == 2
