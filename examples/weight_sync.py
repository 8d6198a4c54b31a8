"""Weight sync: a trainer pushes its model to two inference-side consumers, bit-exact, after each step.

    python examples/weight_sync.py

The trainer (this process) holds the model and runs the gather loop; each
consumer is an actor in its own process that builds the same architecture
and receives every weight through shared memory.  Each sync returns the
digest of what every consumer now holds; we check it against our own.
"""

from __future__ import annotations

import os
import pathlib
import sys

import torch

from actorwire.actors import ActorSystem
from actorwire.actors.weights import ModuleSource, WeightSender, state_digest

HERE = pathlib.Path(__file__).resolve().parent


def build_model() -> torch.nn.Module:
    """The architecture both sides build (consumers import it by "weight_sync:build_model")."""
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def main() -> int:
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    env = {"PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with ActorSystem() as system:
        sender = WeightSender(system, ModuleSource(model), consumer_ids=[0, 1])
        for cid in (0, 1):
            name = f"weights/consumer/{cid}"
            system.spawn_process({name: "actorwire.actors.weights:ModelConsumer"}, env=env, config={
                name: {"consumer_id": cid, "plan": sender.plan, "factory": "weight_sync:build_model"}})
        for step in range(3):
            loss = model(torch.randn(16, 32)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            report = sender.send_weights()
            exact = set(report.consumer_digests.values()) == {state_digest(model.state_dict())}
            print(f"step {step}: loss {loss.item():.4f}; synced {report.bytes} bytes in {report.groups} groups "
                  f"to consumers {report.consumers_done} in {report.seconds * 1000:.1f} ms, bit-exact: {exact}")
            if not exact:
                return 1
        sender.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
