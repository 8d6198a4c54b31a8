"""Serve rings: one ring per consumer, each on the plane its consumer's host allows, in one producer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from actorwire.messages import Plane
from actorwire.transport.planes._serve import ServeRing, TensorImporter

TENSORS = {"w": torch.randn(16, 8), "b": torch.arange(5, dtype=torch.int32)}


def test_consumers_here_and_elsewhere_are_served_on_their_planes_from_one_ring_set(
        setenv: Callable[[str, str | None], None]) -> None:
    setenv("ACTORWIRE_INSECURE_TCP", "1")  # loopback stands in for the other host: plain tcp is allowed there
    ring = ServeRing("shm")
    importer = TensorImporter()
    try:
        ring.reserve(0, 2, 4096)  # this host's consumer: the ring's own plane
        ring.reserve(1, 2, 4096, plane=Plane.FRAMES, toward="127.0.0.1")  # a consumer elsewhere
        assert (ring.plane_of(0), ring.plane_of(1)) == (Plane.SHM, Plane.FRAMES)
        for consumer in (0, 1):
            refs = ring.pack(consumer, 0, TENSORS)
            assert {r.plane for r in refs.values()} == {ring.plane_of(consumer)}
            for name, tensor in TENSORS.items():
                assert torch.equal(importer.open(refs[name]), tensor), (consumer, name)
        handles = {r.handle for r in ring.pack(1, 1, TENSORS).values()}
        assert len(handles) == 2  # a CPU producer serves each tensor in place: a key each, no slot copy
        assert all(b"tcp://127.0.0.1:" in h for h in handles)  # towards the consumer's host, not a private ipc path
    finally:
        importer.drop()
        ring.close()


def test_a_plane_the_producer_cannot_serve_is_refused() -> None:
    ring = ServeRing("shm")
    try:
        with pytest.raises(ValueError, match="a cuda_ipc serve ring needs a CUDA device, not cpu"):
            ring.reserve(0, 2, 64, plane=Plane.CUDA_IPC)
        with pytest.raises(ValueError, match="plane local cannot serve pulls"):
            ring.reserve(0, 2, 64, plane=Plane.LOCAL)
    finally:
        ring.close()


def test_a_cpu_frames_ring_serves_the_tensors_themselves_and_forgets_them_k_pulls_later() -> None:
    ring = ServeRing("frames")
    importer = TensorImporter()
    try:
        ring.reserve(0, 2, 4096)
        live = {"w": torch.zeros(4)}
        refs = ring.pack(0, 0, live)
        live["w"][0] = 7.0  # served in place: the fetch reads the producer's tensor, no copy was made
        assert importer.open(refs["w"])[0].item() == 7.0
        for seq in range(1, 6):
            ring.pack(0, seq, TENSORS)
        (server,) = ring._servers.values()
        assert len(server._buffers) == 2 * len(TENSORS)  # only the K newest pulls stay registered
        ring.drop(0)
        assert not server._buffers
    finally:
        importer.drop()
        ring.close()
