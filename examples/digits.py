"""The examples' model and data: an MLP 64-128-10 on scikit-learn's digits.

The digits ship inside scikit-learn's wheel (no download): 1,797 8x8 images of handwritten digits,
split here once, the same way in every process, into 1,400 for training and 397 for testing.
``pip install -e '.[examples]'`` brings scikit-learn.
"""

from __future__ import annotations

import hashlib

import torch

TRAIN = 1400
EPOCHS, BATCH, LR, MOMENTUM = 20, 32, 0.05, 0.9
SHUFFLE_SEED = 7


def load() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_train, y_train, x_test, y_test)``: pixels scaled to [0, 1], labels 0-9."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.RandomState(0).permutation(len(digits.target))
    x = torch.tensor(digits.data[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target[order], dtype=torch.long)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def model(seed: int) -> torch.nn.Module:
    """The MLP, initialised from ``seed`` (ranks may differ: the run's first sync gives them one model)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def optimizer(net: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)


def step(net: torch.nn.Module, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor) -> float:
    """One training step; the batch's loss."""
    loss = torch.nn.functional.cross_entropy(net(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def accuracy(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(dim=1) == y).float().mean())


def checksum(net: torch.nn.Module) -> str:
    """The parameters' bytes, hashed: equal on two ranks only if every parameter is bit-identical."""
    h = hashlib.sha256()
    for p in net.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def save(path: str, net: torch.nn.Module, opt: torch.optim.Optimizer) -> str:
    """A checkpoint: the model and the optimizer state (SGD's momentum), written whole or not at all."""
    import os

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, path + ".part")
    os.replace(path + ".part", path)
    return path


def restore(path: str, net: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Load what :func:`save` wrote into ``net`` and ``opt``."""
    state = torch.load(path, weights_only=True)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])


def single_process(epochs: int = EPOCHS) -> float:
    """The same loop in one process, no actorwire: the test accuracy the data-parallel runs are held to."""
    x, y, x_test, y_test = load()
    net, g = model(0), torch.Generator().manual_seed(SHUFFLE_SEED)
    opt = optimizer(net)
    for _ in range(epochs):
        order = torch.randperm(TRAIN, generator=g)
        for start in range(0, TRAIN, BATCH):
            idx = order[start:start + BATCH]
            step(net, opt, x[idx], y[idx])
    return accuracy(net, x_test, y_test)


if __name__ == "__main__":
    print(f"single process: test accuracy {single_process():.4f}")
