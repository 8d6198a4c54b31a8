"""Actor-name schemes are built and parsed in one module."""

from __future__ import annotations

import re

from conftest import ROOT

from actorwire.actors import _names


def test_names_are_built_and_parsed_back() -> None:
    assert _names.worker(3) == "worker/3"
    assert _names.worker_heartbeat(3) == "worker/3/heartbeat"
    prefix = _names.rank_prefix("weights", 2)
    assert prefix == "weights/r2"
    assert _names.producer(prefix, 1) == "weights/r2/producer/1"
    assert _names.consumer(prefix, 0) == "weights/r2/consumer/0"
    assert _names.consumer_id(_names.consumer(prefix, 7), prefix) == 7
    for stranger in ("weights/r2/consumer/x", "weights/r3/consumer/0", "weights/r2/producer/0"):
        assert _names.consumer_id(stranger, prefix) is None
    assert _names.weight_sender(prefix, 0) == "weights/r2/sender/0"
    assert _names.consumer_prefix(_names.consumer(prefix, 7)) == prefix
    for stranger in ("weights/r2/consumer/x", "weights/r2/producer/0", "consumer/0"):
        assert _names.consumer_prefix(stranger) is None


def test_no_module_spells_a_name_scheme_itself() -> None:
    scheme = re.compile(r"""f["'][^"']*(/producer/|/consumer/|/sender/|worker/\{|/r\{)""")
    offenders = [str(p.relative_to(ROOT)) for folder in ("actors", "transport")
                 for p in (ROOT / folder).rglob("*.py")
                 if p.name != "_names.py" and any(scheme.search(line) for line in p.read_text().splitlines()
                                                  if not line.lstrip().startswith(("#", '"""')))]
    assert offenders == []
