"""The two "hosts" of the cross-host weight-transfer test (tests/integration/test_netns.py).

``python _weight_hosts.py root OUT BIND``: on the trainer's host.  Starts the root bound on ``BIND``
(tcp, CURVE from ACTORWIRE_KEYS), prints ``ENDPOINT RUN_ID``, launches one trainer rank
(tests/_weight_trainer.py) and consumer 0 beside it, waits for consumer 1 to join from the other
host, lets the trainer run one sync, then prints one JSON line: the trainer's report and the plane
each consumer was served on (read through the consumers' introspectors).

``python _weight_hosts.py consumer OUT ENDPOINT RUN_ID``: on the other host.  Joins and runs
consumer 1 until the root leaves.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import msgspec

HERE = pathlib.Path(__file__).parent
FACTORY = "_weight_trainer:tiny_model"


def _plan(out: pathlib.Path) -> object:
    deadline = time.monotonic() + 90
    while not (out / "plan.json").exists():
        if time.monotonic() > deadline:
            sys.exit("no plan.json from the trainer")
        time.sleep(0.05)
    return msgspec.json.decode((out / "plan.json").read_bytes())


def root(out: pathlib.Path, bind: str) -> None:
    from actorwire import messages as m
    from actorwire.actors import ActorSystem

    env = {"PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ActorSystem(bind=bind) as system:
        print(system.endpoint, system.run_id, flush=True)
        trainer = system.launch([sys.executable, str(HERE / "_weight_trainer.py"), str(out), "0", "1",
                                 "--consumers", "2", "--syncs", "1"], rank=0, env=env)
        try:
            plan = _plan(out)
            name = "weights/consumer/0"
            system.spawn_process({name: "actorwire.actors.weights:ModelConsumer"}, env=env, timeout=60,
                                 config={name: {"consumer_id": 0, "plan": plan, "factory": FACTORY}})
            code = trainer.stop(timeout=120)
            planes = {}
            for node in (n for n in system._node.names(runtime=True) if n.startswith(".introspect/")):
                status = system.ask(node, m.StatusRequest(), timeout=10, expect=m.NodeStatus)
                for actor in status.actors:
                    if actor.name.startswith("weights/consumer/") and actor.detail is not None:
                        planes[actor.name] = actor.detail.notes.get("plane from rank 0")
            lines = (out / "rank0.jsonl").read_text().splitlines()
            print(json.dumps({"trainer": code, "report": json.loads(lines[-1]) if lines else None,
                              "planes": planes}), flush=True)
        finally:
            trainer.kill()


def consumer(out: pathlib.Path, endpoint: str, run_id: str) -> None:
    from actorwire.actors import ActorSystem
    from actorwire.actors.weights import ModelConsumer

    plan = _plan(out)
    with ActorSystem(join=endpoint, run_id=run_id, join_timeout=60) as system:
        system.spawn(ModelConsumer(1, plan, factory=FACTORY), "weights/consumer/1")
        system.wait()  # until the root leaves


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    if sys.argv[1] == "root":
        root(pathlib.Path(sys.argv[2]), sys.argv[3])
    else:
        consumer(pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4])
