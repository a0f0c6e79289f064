"""Row-wise model calls (the UNet's, the VAE decoder's) replayed from CUDA graphs where launch-bound, per row bucket.

A tiny UNet on a GPU is launch-bound: its few hundred kernels take less device time than diffusers' Python takes to
launch them (H200: 6-7 ms of Python for 1.2-1.8 ms of kernels at 16x16, ``docs/benchmarks.md``); so is the VAE
decoder of a few small images. A graph launches them all at once. The running batch's row count changes as requests
join and leave, so a call's rows are padded up to a bucket (``bucket``: 1, 2, 4, 8, then multiples of 8 up to 32,
then of 16) and one graph serves each bucket; the padding rows compute on whatever their buffers hold and are
dropped (rows are independent: in the UNet as in the VAE decoder, no row reads another). A graph is captured on the
second call of its bucket, and only if the first call was launch-bound: its device time, read from events once they
completed, within ``LAUNCH_BOUND`` times the host time it took to launch (a call whose kernels outlast their
launching, at large images, gains nothing from a graph, and padding would cost it compute). A call that cannot be
captured runs eagerly. ``prepare`` measures and captures every bucket up to a batch size beforehand, as a server
does at start. Graphs share one memory pool; a replay's output stays valid until the next replay of that bucket.

The same kernels run as in the eager call of the same rows: a bucket the batch fills exactly gives the same bits;
a padded one may pick other convolution algorithms (cuDNN chooses by batch size), measured within 2.4e-6 of the
unpadded call on the H200 (``docs/benchmarks.md``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

LAUNCH_BOUND = 1.25  #: a call is launch-bound when its device time is within this factor of its host launch time


def bucket(rows: int) -> int:
    """Return the row count a call of ``rows`` rows is padded to: a power of two up to 8, a multiple of 8 up to 32,
    then a multiple of 16."""
    if rows <= 8:
        return 1 << (rows - 1).bit_length()
    step = 8 if rows <= 32 else 16
    return -(-rows // step) * step


class _Graph:
    """One captured call of ``rows`` rows: its input buffers, its graph, its output buffer."""

    __slots__ = ("graph", "inputs", "out")

    def __init__(self, call: Callable[..., Any], rows: int, inputs: Sequence[Any], pool: Any) -> None:
        self.inputs = [x.new_zeros((rows, *x.shape[1:])) for x in inputs]
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a warm-up call off the capturing stream, as torch.cuda.graphs asks
            call(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.out = call(*self.inputs)

    def __call__(self, *inputs: Any) -> Any:
        rows = inputs[0].shape[0]
        for buffer, x in zip(self.inputs, inputs, strict=True):
            buffer[:rows].copy_(x)
        self.graph.replay()
        return self.out[:rows]


class CallGraphs:
    """``graphs(*inputs)``: ``call(*inputs)`` (tensors whose first dimension is the rows; one tensor out, row by
    row), replayed from the graph of their bucket where it is kept, else the eager call (see the module's
    docstring)."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        self._graphs: dict[tuple[Any, ...], _Graph | None] = {}  #: key -> its graph, or None: eager for good
        self._measured: dict[tuple[Any, ...], tuple[Any, Any, float]] = {}  #: key -> (start, end event, host s)
        self._pool: Any = None

    @staticmethod
    def _key(inputs: Sequence[Any], rows: int | None = None) -> tuple[Any, ...]:
        rows = inputs[0].shape[0] if rows is None else rows
        return bucket(rows), *((tuple(x.shape[1:]), x.dtype) for x in inputs)

    def __call__(self, *inputs: Any) -> Any:
        key = self._key(inputs)
        if key in self._graphs:
            graph = self._graphs[key]
            return self.call(*inputs) if graph is None else graph(*inputs)
        measured = self._measured.pop(key, None)
        if measured is None:  # its first call: eager, timed
            return self._timed(key, inputs)
        start, end, host = measured
        launch_bound = end.query() and start.elapsed_time(end) / 1000 <= LAUNCH_BOUND * host
        if not launch_bound:  # its kernels outlast their launching (or have not run yet): a graph gains nothing
            self._graphs[key] = None
            return self.call(*inputs)
        try:
            graph = self._capture(key, inputs)
        except Exception:  # a call that cannot be captured runs eagerly for good
            self._graphs[key] = None
            return self.call(*inputs)
        return graph(*inputs)

    def prepare(self, inputs: Sequence[Any], max_rows: int) -> int:
        """Measure each bucket up to ``max_rows`` rows of these inputs' shapes (waiting for the device) and capture
        the launch-bound ones, smallest first (a bucket past one that is not launch-bound is not either); return the
        graphs kept."""
        sizes = sorted({bucket(rows) for rows in range(1, max_rows + 1)})
        for rows in sizes:
            key = self._key(inputs, rows)
            if key in self._graphs:
                continue
            zeros = [x.new_zeros((rows, *x.shape[1:])) for x in inputs]
            self.call(*zeros)  # the first call of a shape pays for its algorithm choices
            self._timed(key, zeros)
            torch.cuda.synchronize()
            self(*zeros)  # the second call: captured if the first was launch-bound
            if self._graphs.get(key) is None:
                for larger in sizes[sizes.index(rows):]:
                    self._graphs.setdefault(self._key(inputs, larger), None)
                break
        return len(self)

    def _timed(self, key: tuple[Any, ...], inputs: Sequence[Any]) -> Any:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        began = time.perf_counter()
        start.record()
        out = self.call(*inputs)
        end.record()
        self._measured[key] = (start, end, time.perf_counter() - began)
        return out

    def _capture(self, key: tuple[Any, ...], inputs: Sequence[Any]) -> _Graph:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = self._graphs[key] = _Graph(self.call, key[0], inputs, self._pool)
        return graph

    def __len__(self) -> int:
        """Return the graphs kept."""
        return sum(graph is not None for graph in self._graphs.values())
