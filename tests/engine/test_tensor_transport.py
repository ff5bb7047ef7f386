"""Torch tensors through Ray as NumPy buffers (skyrl_engine.ray_runtime.tensor_to_wire / tensor_from_wire):
every tensor arrives bit-for-bit with its dtype, shape and requires_grad, writable and owning its memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skyrl_engine.ray_runtime import tensor_from_wire, tensor_to_wire


def _samples() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    return {
        "fp32": base.clone(),
        "bf16": base.to(torch.bfloat16),
        "fp16": base.to(torch.float16),
        "int64": torch.arange(12).reshape(3, 4),
        "bool": base > 0,
        "transposed": base.t(),  # not contiguous
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 7),
        "grad": torch.ones(3, requires_grad=True),
        "sparse": base.to_sparse(),
    }


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_sparse:
        return b.is_sparse and torch.equal(a.to_dense(), b.to_dense())
    return (a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
            and torch.equal(a.detach(), b.detach()))


def test_every_kind_of_tensor_comes_back_exactly() -> None:
    for name, tensor in _samples().items():
        wire = tensor_to_wire(tensor)
        assert wire[0] == ("pickle" if name == "sparse" else "numpy"), name
        if wire[0] == "numpy":  # a NumPy buffer Ray moves out of band, never a torch pickle
            assert isinstance(wire[1], np.ndarray), name
        assert _same(tensor, tensor_from_wire(wire)), name


def test_a_read_only_buffer_arrives_as_a_writable_tensor_of_its_own() -> None:
    source = torch.arange(6, dtype=torch.float32)
    _, array, view_of, grad = tensor_to_wire(source)
    frozen = array.copy()
    frozen.setflags(write=False)  # what a buffer from the object store is
    got = tensor_from_wire(("numpy", frozen, view_of, grad))
    got.add_(1.0)
    assert got.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and frozen.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.usefixtures("engine_ray")
def test_tensors_cross_between_actors_and_the_driver_unchanged() -> None:
    import sys

    import ray
    from ray import cloudpickle

    from skyrl_engine.ray_runtime import connect

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor's workers cannot import this file
    connection = connect()  # the session's cluster: registers the transport in this process
    assert connection.mode == "existing"

    @ray.remote(num_cpus=0)
    class Holder:
        def __init__(self) -> None:
            from skyrl_engine.policy import prepare_worker

            prepare_worker(1)  # what every worker does first: registers the transport in the actor too

        def tensors(self) -> dict[str, torch.Tensor]:
            return _samples()

        def checksum(self, received: dict[str, torch.Tensor]) -> dict[str, float]:
            return {k: float(v.to_dense().double().sum()) if v.is_sparse else float(v.detach().double().sum())
                    for k, v in received.items()}

    holder = Holder.remote()
    try:
        received = ray.get(holder.tensors.remote())
        expected = _samples()
        assert set(received) == set(expected)
        for name in expected:
            assert _same(expected[name], received[name]), name
        received["fp32"].mul_(2.0)  # ours to write
        sums = ray.get(holder.checksum.remote(received))
        assert sums["fp32"] == pytest.approx(2 * float(expected["fp32"].double().sum()))
        assert sums["bf16"] == float(expected["bf16"].double().sum())
    finally:
        ray.kill(holder)
