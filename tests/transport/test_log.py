"""The library configures nothing of its host's logging; our events reach what the host configured."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=50)


def test_importing_and_running_a_system_leaves_structlog_and_the_root_logger_alone() -> None:
    proc = _run("""
        import json, logging, structlog
        def snapshot():
            root = logging.getLogger()
            return {"structlog": repr(sorted(structlog.get_config().items(), key=str)),
                    "configured": structlog.is_configured(),
                    "root": [root.level, [repr(h) for h in root.handlers]]}
        before = snapshot()
        from actorwire import messages as m
        from actorwire.actors import ActorSystem
        from actorwire.actors.testing import ActorHarness  # noqa: F401
        with ActorSystem() as system:
            inbox = system.inbox("me")
            try:
                system.ask("nobody", m.SyncNow(cycle=1), timeout=0.2)
            except Exception:
                pass
            inbox.close()
        print(json.dumps(before == snapshot()))
    """)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) is True


def test_without_structlog_configured_events_go_through_the_stdlib_logger() -> None:
    proc = _run("""
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(name)s|%(levelname)s|%(message)s")
        from actorwire.transport._log import get_logger
        log = get_logger(actor="worker/3", rank=3)
        log.debug("hidden by the host's level")
        log.warning("rank lost", corr=7)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["actorwire|WARNING|event='rank lost' actor='worker/3' corr=7 rank=3"]


def test_a_host_that_configured_structlog_gets_our_events_through_its_processors() -> None:
    proc = _run("""
        import structlog
        seen = []
        def keep(logger, method, event):
            seen.append((method, event["event"], event.get("actor")))
            raise structlog.DropEvent
        structlog.configure(processors=[keep])
        from actorwire.transport._log import get_logger
        get_logger(actor="coordinator").info("epoch done")
        print(seen)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[('info', 'epoch done', 'coordinator')]"


def test_configure_logging_is_the_one_call_that_turns_on_our_format() -> None:
    proc = _run("""
        import structlog
        from actorwire.transport import configure_logging
        from actorwire.transport._log import get_logger
        assert not structlog.is_configured()
        configure_logging("info", json=True)
        get_logger(actor="coordinator").info("epoch done", epoch=2)
    """)
    assert proc.returncode == 0, proc.stderr
    event = json.loads(proc.stderr.strip().splitlines()[-1])
    assert (event["event"], event["actor"], event["epoch"], event["level"]) == ("epoch done", "coordinator", 2, "info")


def test_a_bad_level_is_one_line_naming_it() -> None:
    from actorwire.transport import configure_logging

    with pytest.raises(ValueError, match=r"^unknown log level 'loud' \(use debug, info, warning or error\)$"):
        configure_logging("loud")
