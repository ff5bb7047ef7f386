"""Large frozen weights reordered once for oneDNN's CPU matmul, for multiplications with few rows.

``F.linear`` with a handful of rows (a decode step's 32 or fewer) runs far below the machine's matmul rate, and
unevenly with the row count: on one Xeon core a SmolLM2 MLP weight (1536 × 576) times 12 rows took 0.64 ms through
``F.linear`` and 0.30 ms through a weight reordered once (``torch.ops.mkldnn._reorder_linear_weight``, the layout
torch's own compiler prepacks for CPU inference), the 49,152-word output layer 34 ms against 11 ms; a whole SmolLM2
generation step took 8.1 s against 7.0 s on one thread, 4.4 against 4.2 s on two. Small weights lose (the reordered
call has a fixed cost of about 10 µs), so only weights of at least :data:`MIN_ELEMENTS` are reordered; the tiny
model's never are.

:class:`Prepacked` keeps the reordered copies of one model's weights and reorders a weight again when it changes (in
place: its version counter moves; or rebound: its storage moves), so it never multiplies by stale ones. The sampler
holds one for one :func:`skyrl_engine.sampler.sample` call (the weights change between calls anyway: a LoRA merge or a
weight sync after every step), so the copies (430 MB for SmolLM2) take memory only while it decodes. Values equal
``F.linear``'s to float rounding (another summation order). Gradients do not flow through it: it serves inference only.
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: weights with fewer elements multiply through ``F.linear`` (a SmolLM2 MLP weight has 884,736; a tiny model's 49,152)
MIN_ELEMENTS = 1 << 19
_ROWS_HINT = 32  # the row count oneDNN lays the weight out for; any row count multiplies by it


@functools.cache
def available() -> bool:
    """Whether this torch has oneDNN's reordered-weight linear (x86 and Arm CPU builds do)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ones(4, 4)
        out = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 4), torch.ops.mkldnn._reorder_linear_weight(w, 2), None,
                                                  "none", [], "")
        return bool((out == 4).all())
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def worth_it(weight: torch.Tensor) -> bool:
    """Whether ``weight`` multiplies through a reordered copy: a large float32 CPU matrix, outside autograd."""
    import torch

    return (weight.dim() == 2 and weight.numel() >= MIN_ELEMENTS and weight.dtype == torch.float32
            and weight.device.type == "cpu" and not (torch.is_grad_enabled() and weight.requires_grad) and available())


def stamp(weight: torch.Tensor, copy: Any) -> tuple[Any, int, Any, Any]:
    """``copy``, made from ``weight``, with what tells whether it is still current (:func:`current_copy`): a weak
    reference to the weight, its version counter, and its storage, kept referenced so that no later storage can take
    its address while the stamp lives."""
    return weakref.ref(weight), weight._version, weight.untyped_storage(), copy


def current_copy(stamped: tuple[Any, int, Any, Any] | None, weight: torch.Tensor) -> Any:
    """The copy :func:`stamp` kept, if ``weight`` is the weight it was made from and has not changed since (not
    written in place: its version counter; not rebound: its storage); else None."""
    if (stamped is not None and stamped[0]() is weight and stamped[1] == weight._version
            and stamped[2].data_ptr() == weight.untyped_storage().data_ptr()):
        return stamped[3]
    return None


class Prepacked:
    """``packs.linear(x, weight, bias=None)``: ``F.linear(x, weight, bias)``, through a reordered copy of ``weight``
    when :func:`worth_it` (made on first use, remade when the weight changes)."""

    def __init__(self) -> None:
        self._packs: dict[int, tuple[Any, int, Any, Any]] = {}  # id -> (weakref to the weight, version, storage, packed)

    def packed(self, weight: torch.Tensor) -> Any:
        """The reordered copy of ``weight``, current with its values."""
        import torch

        packed = current_copy(self._packs.get(id(weight)), weight)
        if packed is not None:
            return packed
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), _ROWS_HINT)
        self._packs = {k: v for k, v in self._packs.items() if v[0]() is not None}  # forget freed weights
        self._packs[id(weight)] = stamp(weight, packed)
        return packed

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        import torch

        if not worth_it(weight) or x.dtype != weight.dtype:
            return torch.nn.functional.linear(x, weight, bias)
        x_2d = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.ops.mkldnn._linear_pointwise(x_2d, self.packed(weight), bias, "none", [], "")
        return out.view(*x.shape[:-1], weight.shape[0])

    def module(self, linear: Any, x: torch.Tensor) -> torch.Tensor:
        """``linear(x)`` for a module: a plain ``torch.nn.Linear`` through :meth:`linear`, anything else as it is."""
        import torch

        if type(linear) is not torch.nn.Linear:
            return linear(x)
        return self.linear(x, linear.weight, linear.bias)

    @property
    def nbytes(self) -> int:
        """Bytes the reordered copies hold (about their weights' own)."""
        return sum(4 * v[0]().numel() for v in self._packs.values() if v[0]() is not None)

    def __repr__(self) -> str:
        return f"Prepacked({len(self._packs)} weights, {self.nbytes / 2**20:.0f} MiB)"

    def _repr_html_(self) -> str:
        return f"<code>{self!r}</code>"
