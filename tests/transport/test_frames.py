"""The frames plane: tensors fetched over a socket, and what happens when that goes wrong."""

from __future__ import annotations

import pathlib

import msgspec
import pytest
import torch

from actorwire.messages import Plane, TensorRef
from actorwire.transport.planes._frames import (
    FramesExporter,
    FramesImporter,
    handle_for,
)


@pytest.fixture
def exporter():
    ex = FramesExporter()
    yield ex
    ex.close()


@pytest.fixture
def importer():
    imp = FramesImporter(timeout=2.0)
    yield imp
    imp.drop()


def test_a_group_round_trips_bit_exact_and_aligned(exporter: FramesExporter, importer: FramesImporter) -> None:
    tensors = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int16), "big": torch.randn(256, 256),
               "empty": torch.empty(0, 4), "bf": torch.randn(9).to(torch.bfloat16)}
    _, refs = exporter.export(tensors)
    assert all(r.plane is Plane.FRAMES and r.offset % 16 == 0 for r in refs.values())
    for name, t in tensors.items():
        got = importer.open(refs[name])
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t), name


def test_a_non_contiguous_view_arrives_as_its_values(exporter: FramesExporter, importer: FramesImporter) -> None:
    t = torch.arange(20.0).reshape(4, 5).t()
    _, refs = exporter.export({"t": t})
    assert torch.equal(importer.open(refs["t"]), t)


def test_a_released_group_is_an_error_not_a_hang(exporter: FramesExporter, importer: FramesImporter) -> None:
    key, refs = exporter.export({"x": torch.ones(4)})
    exporter.release(key)
    with pytest.raises(LookupError, match="not exported"):
        importer.open(refs["x"])


def test_a_fetch_beyond_the_buffer_is_refused(exporter: FramesExporter, importer: FramesImporter) -> None:
    _, refs = exporter.export({"x": torch.ones(4)})
    bad = msgspec.structs.replace(refs["x"], nbytes=1 << 20)
    with pytest.raises(LookupError, match="beyond the buffer"):
        importer.open(bad)


def test_no_server_times_out_with_the_endpoint_named() -> None:
    imp = FramesImporter(timeout=0.3)
    ref = TensorRef(dtype="float32", shape=[2], stride=[1], plane=Plane.FRAMES,
                    handle=handle_for("tcp://127.0.0.1:9", bytes(16)), nbytes=8)
    try:
        with pytest.raises(TimeoutError, match="tcp://127.0.0.1:9"):
            imp.open(ref)
    finally:
        imp.drop()


def test_bad_handles_and_planes_are_refused(importer: FramesImporter) -> None:
    ref = TensorRef(dtype="float32", shape=[2], stride=[1], plane=Plane.FRAMES, handle=b"\xc1", nbytes=8)
    with pytest.raises(ValueError, match="malformed frames handle"):
        importer.open(ref)
    with pytest.raises(ValueError, match="not a frames tensor"):
        importer.open(msgspec.structs.replace(ref, plane=Plane.SHM))


def test_tcp_follows_the_bus_rules(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from actorwire.transport._security import Security, SecurityError, keygen

    for var in ("ACTORWIRE_KEYS", "ACTORWIRE_INSECURE_TCP"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SecurityError, match="needs CURVE keys"):
        FramesExporter("tcp://127.0.0.1:0")
    keygen(tmp_path)
    secure = Security(keys=str(tmp_path))
    ex = FramesExporter("tcp://127.0.0.1:0", security=secure)
    try:
        _, refs = ex.export({"w": torch.arange(5.0)})
        assert ex.server.curve_key is not None
        imp = FramesImporter(timeout=5, security=secure)
        assert torch.equal(imp.open(refs["w"]), torch.arange(5.0))  # over CURVE
        imp.drop()
        stranger = FramesImporter(timeout=1, security=Security())
        with pytest.raises(SecurityError, match="uses CURVE; this process has no keys"):
            stranger.open(refs["w"])
        stranger.drop()
    finally:
        ex.close()


def test_over_curve_a_key_outside_the_allow_list_reads_nothing(tmp_path) -> None:
    from actorwire.transport._security import Security, keygen

    keygen(tmp_path / "cluster")
    keygen(tmp_path / "elsewhere")  # a valid key pair the cluster never listed
    ex = FramesExporter("tcp://127.0.0.1:0", security=Security(keys=str(tmp_path / "cluster")))
    try:
        _, refs = ex.export({"w": torch.arange(5.0)})
        outsider = FramesImporter(timeout=1, security=Security(keys=str(tmp_path / "elsewhere")))
        try:
            with pytest.raises(TimeoutError, match="no answer from the frames server"):
                outsider.open(refs["w"])  # the handshake is refused: no byte comes back
        finally:
            outsider.drop()
    finally:
        ex.close()


def test_buffer_keys_are_random_and_a_guessed_one_reads_nothing(exporter: FramesExporter,
                                                                 importer: FramesImporter) -> None:
    first, refs = exporter.export({"x": torch.ones(4)})
    second, _ = exporter.export({"y": torch.ones(4)})
    assert len(first) == len(second) == 16 and first != second
    endpoint = msgspec.msgpack.decode(refs["x"].handle)[0]
    for guess in (bytes(16), (1).to_bytes(16, "little"), first[:-1] + bytes([first[-1] ^ 1])):
        forged = msgspec.structs.replace(refs["x"], handle=handle_for(endpoint, guess))
        with pytest.raises(LookupError, match="not exported"):
            importer.open(forged)
    old_style = msgspec.structs.replace(refs["x"], handle=msgspec.msgpack.encode([endpoint, 1]))
    with pytest.raises(ValueError, match="malformed frames handle"):
        importer.open(old_style)  # counting keys are not accepted at all
    with pytest.raises(ValueError, match="malformed frames handle"):
        importer.open(msgspec.structs.replace(refs["x"], handle=msgspec.msgpack.encode([endpoint])))


def test_closing_an_exporter_removes_its_socket_file() -> None:
    ex = FramesExporter()
    path = pathlib.Path(ex.server.endpoint[len("ipc://"):])
    assert path.exists()
    ex.close()
    assert not path.exists()
