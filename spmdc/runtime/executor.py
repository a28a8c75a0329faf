"""Running one rank's program: the one place that cuts arguments into this rank's pieces,
calls the program, and puts results back together.

    prog = spmdc.compiler.compile_rank(step, rank)       # what to run
    run = RankRunner(prog, Collectives(device_mesh))
    outs = run(run.local_arguments(step.arguments))       # local pieces in, local pieces out
    full = run.full_results(outs)                         # every rank gets the global values

Pieces follow the layouts: ``S(d)`` is this rank's ``torch.chunk`` piece, ``R`` the whole
tensor, ``P(op)`` the whole value on coordinate 0 of the axis and the identity of the
reduction elsewhere (zero for sums), so that reducing the pieces gives the value back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.shard import Partial, Replicate, Shard, StridedShard, chunk_size
from spmdc.runtime.collectives import CountingComm
from spmdc.runtime.suspended import Paused, run_whole, suspend_results
from spmdc.sharding.mesh import Mesh, local_blocks, local_offset, local_shape
from spmdc.sharding.planner import plan_redistribution

Layout = tuple   # a value's placements, one per mesh axis
RankProgram = Any   # spmdc.compiler.program.RankProgram: the runtime reads its fields, never compiles

EXECUTORS = ("codegen", "interpret")


def mesh_coords(mesh: Mesh, rank: int) -> tuple[int, ...]:
    c = mesh.coords(rank)
    return tuple(c[a] for a in mesh.axis_names)


def local_piece(full: Any, layout: Sequence[Any], mesh: Mesh, rank: int) -> Any:
    """This rank's piece of a single-device tensor (Partial: coordinate 0 of the axis holds it)."""
    coords = mesh_coords(mesh, rank)
    shape = tuple(full.shape)
    blocks = local_blocks(shape, tuple(layout), mesh.shape, coords)
    if blocks:   # SS(d, k): this rank's chunk of each part, then the other axes' plain shards
        import torch

        full = torch.cat([full.narrow(d, s, n) for d, s, n in blocks], dim=blocks[0][0])
        layout = [Replicate() if isinstance(p, StridedShard) else p for p in layout]
        shape = tuple(full.shape)
    off = local_offset(shape, tuple(layout), mesh.shape, coords)
    size = local_shape(shape, tuple(layout), mesh.shape, coords)
    t = full
    for d, (o, s) in enumerate(zip(off, size)):
        if s != shape[d]:
            t = t.narrow(d, o, s)
    for p, c in zip(layout, coords):
        if isinstance(p, Partial) and c != 0:
            t = t * 0
    return t.contiguous()


def to_full(local: Any, global_shape: tuple[int, ...], layout: Sequence[Any], comm: Any) -> Any:
    """Reassemble a global tensor on every rank from the local pieces (reducing partials)."""
    names = comm.mesh.mesh_dim_names
    target = tuple(Replicate() for _ in layout)
    steps = plan_redistribution(tuple(layout), target, len(global_shape), 1.0, comm.mesh.mesh.shape)
    cur, lay = local, list(layout)
    for st in steps:
        axis = names[st.axes[0]]
        if st.kind == "all_reduce":
            cur = comm.all_reduce(cur, [names[a] for a in st.axes], st.op)
        elif st.kind == "all_gather" and st.parts > 1:   # SS(d, k): gather each part
            d, k = st.dim, st.parts
            view = cur.reshape(*cur.shape[:d], k, cur.shape[d] // k, *cur.shape[d + 1:])
            out_shape = list(view.shape)
            out_shape[d + 1] = global_shape[d] // k
            cur = comm.all_gather(view, axis, d + 1, tuple(out_shape))
            cur = cur.reshape(*cur.shape[:d], global_shape[d], *cur.shape[d + 2:])
        elif st.kind == "all_gather":
            out_shape = list(cur.shape)
            out_shape[st.dim] = _size_before(global_shape, lay, st.axes[0], st.dim, comm)
            cur = comm.all_gather(cur, axis, st.dim, tuple(out_shape), list(st.sizes) if st.sizes else None)
        else:
            raise RuntimeError(f"unexpected step {st.kind} while gathering a result")
        lay = list(st.after)
    return cur


def _size_before(global_shape: tuple[int, ...], layout: list[Any], axis: int, dim: int, comm: Any) -> int:
    """Size of ``dim`` on this rank once ``axis`` no longer shards it (earlier axes still do)."""
    size = global_shape[dim]
    for a, p in enumerate(layout[:axis]):
        if isinstance(p, Shard) and p.dim == dim:
            n = comm.mesh.mesh.shape[a]
            size = chunk_size(size, n, comm.coord(comm.mesh.mesh_dim_names[a]))
    return size


class RankRunner:
    """Calls one rank's program with this rank's collectives; counts what it issues.

    ``executor``: ``"codegen"`` runs the generated module, ``"interpret"`` the reference
    interpreter op by op on the same IR (one semantics, a second execution path for tests).
    """

    def __init__(self, program: RankProgram, comm: Any, executor: str = "codegen", device: Any = None):
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r} (choices: {', '.join(EXECUTORS)})")
        self.program, self.comm, self.executor, self.device = program, comm, executor, device

    def __call__(self, local_args: Sequence[Any]) -> list[Any]:
        import contextlib

        import torch

        counting = CountingComm(self.comm)
        # factories in the program (constants, random draws) create tensors on the rank's device
        # and random draws use that device's generator, as eager PyTorch on that device would
        # (a TorchFunctionMode: not entered on CPU, the default device, where it would only cost time)
        dev = torch.device(self.device) if self.device is not None else None
        on_device = dev if dev is not None and dev.type != "cpu" else contextlib.nullcontext()
        with torch.no_grad(), on_device:
            if self.executor == "codegen":
                return run_whole(self.program.fn(list(local_args), counting))
            from spmdc.runtime.interpreter import interpret

            return interpret(self.program.module, list(local_args), comm=counting)

    def start(self, local_args: Sequence[Any]) -> Paused:
        """Run a suspending program's forward half (:mod:`spmdc.runtime.suspended`): ``None`` where
        an input is given at ``resume``."""
        import contextlib

        import torch

        counting = CountingComm(self.comm)
        dev = torch.device(self.device) if self.device is not None else None

        def context() -> Any:
            stack = contextlib.ExitStack()
            stack.enter_context(torch.no_grad())
            if dev is not None and dev.type != "cpu":
                stack.enter_context(dev)
            return stack

        indices = suspend_results(self.program.module)
        if indices is None:
            raise RuntimeError("this program does not suspend (no func.suspend): call it whole")
        if self.executor == "codegen":
            gen = self.program.fn(list(local_args), counting)
        else:
            from spmdc.runtime.interpreter import Interpreter, bind_inputs

            gen = Interpreter(counting).steps(self.program.module, "main",
                                              bind_inputs(self.program.module, "main", list(local_args)))
        return Paused.start(gen, indices, context)

    def local_arguments(self, full_args: Sequence[Any]) -> list[Any]:
        """Every argument cut to this rank's piece of its layout."""
        return [self.piece(a, lay) for a, lay in zip(full_args, self.program.arg_layouts)]

    def piece(self, full: Any, layout: Layout) -> Any:
        return local_piece(full, layout, self.program.step.mesh, self.program.rank)

    def full_results(self, outs: Sequence[Any]) -> list[Any]:
        """Every result as the global value, on every rank (a collective)."""
        import torch

        shapes, layouts = self.program.step.res_shapes, self.program.res_layouts
        if len(outs) != len(shapes):
            raise RuntimeError(f"the program returned {len(outs)} values, its signature has {len(shapes)}")
        with torch.no_grad():
            return [out if all(isinstance(p, Replicate) for p in lay) else to_full(out, shape, lay, self.comm)
                    for out, shape, lay in zip(outs, shapes, layouts)]
