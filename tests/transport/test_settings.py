"""Every ACTORWIRE_* variable is a typed field of one settings object, documented in one table."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from actorwire.transport._errors import ConfigError
from actorwire.transport._settings import DOCS, Settings, table, variable


def test_the_docs_table_is_the_settings_table() -> None:
    assert table() in (ROOT / "docs" / "configuration.md").read_text()


def test_every_field_is_documented_and_nothing_else() -> None:
    assert set(DOCS) == set(Settings.__struct_fields__)


def test_no_module_reads_an_actorwire_variable_itself() -> None:
    reads = re.compile(r"""(environ\.get|env\.get|environ\[|getenv)\(?\s*["']ACTORWIRE_""")
    offenders = [str(p.relative_to(ROOT)) for folder in ("actors", "transport", "messages")
                 for p in (ROOT / folder).rglob("*.py") if reads.search(p.read_text())]
    assert offenders == []


def test_values_are_parsed_by_type() -> None:
    parsed = Settings.from_env({"ACTORWIRE_PREFER_TCP": "1", "ACTORWIRE_RANK": "3", "ACTORWIRE_TIMEOUT_SCALE": "2.5",
                                "ACTORWIRE_KEYS": "/k", "ACTORWIRE_PLANE": "", "OTHER": "x"})
    assert (parsed.prefer_tcp, parsed.rank, parsed.timeout_scale, parsed.keys, parsed.plane) == (True, 3, 2.5, "/k",
                                                                                                  None)
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize(("name", "value", "error"), [
    ("ACTORWIRE_PREFER_TCP", "yes", "ACTORWIRE_PREFER_TCP must be 0 or 1, got 'yes'"),
    ("ACTORWIRE_RANK", "two", "ACTORWIRE_RANK must be an integer, got 'two'"),
    ("ACTORWIRE_TIMEOUT_SCALE", "fast", "ACTORWIRE_TIMEOUT_SCALE must be a number, got 'fast'"),
    ("ACTORWIRE_TIMEOUT_SCALE", "-1", "ACTORWIRE_TIMEOUT_SCALE must be positive, got -1"),
    ("ACTORWIRE_PORT", "70000", "ACTORWIRE_PORT must be a port number, got 70000"),
    # Each of these ran on into a traceback in some process, or a run that gave up at once.
    ("ACTORWIRE_TIMEOUT_SCALE", "nan", "ACTORWIRE_TIMEOUT_SCALE must be a finite number, got 'nan'"),
    ("ACTORWIRE_JOIN_TIMEOUT", "inf", "ACTORWIRE_JOIN_TIMEOUT must be a finite number, got 'inf'"),
    ("ACTORWIRE_JOIN_TIMEOUT", "-5", "ACTORWIRE_JOIN_TIMEOUT must be positive, got -5"),
    ("ACTORWIRE_RANK", "-1", "ACTORWIRE_RANK must be 0 or more, got -1"),
    ("ACTORWIRE_WORLD_SIZE", "0", "ACTORWIRE_WORLD_SIZE must be 1 or more, got 0"),
    ("ACTORWIRE_PLANE", "bogus", "ACTORWIRE_PLANE must be one of local, shm, cuda_ipc, frames, got 'bogus'"),
    ("ACTORWIRE_LOG_LEVEL", "LOUD", "ACTORWIRE_LOG_LEVEL must be debug, info, warning or error, got 'LOUD'"),
])
def test_a_bad_value_is_one_line_naming_the_variable(name: str, value: str, error: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(error)}$"):
        Settings.from_env({name: value})


def test_variable_names_follow_the_fields() -> None:
    assert variable("timeout_scale") == "ACTORWIRE_TIMEOUT_SCALE"
