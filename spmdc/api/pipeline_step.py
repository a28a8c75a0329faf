"""One pipeline step's live values on this rank, as its schedule runs (:mod:`spmdc.api.pipeline_executor`).

    st = StepState(pm, grads)      # for one round of this rank's schedule
    st.recv(op); st.forward(op, micro, backward=False); st.send(op); st.backward(op, micro); st.finish()

It executes the ``pipe`` ops of this rank's function in order: receives boundary pieces (a partial
source's terms summed on arrival; a value with several consumers' gradients summed), runs the
stage's forward program (stashing its inputs for the backward, which recomputes the forward),
its backward program (parameter gradients scaled and accumulated — those the program leaves
unreduced, ``P(sum)`` over replicated storage, summed as they are and reduced once per step —
input gradients sent back),
and sends asynchronously; it tracks the bytes live (stash, inbox, outbox) for the memory report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from spmdc.api.pipeline_executor import PipelineExecutor


class StepState:
    """One step's live values on this rank: stashed inputs, outputs waiting to go, gradients."""

    def __init__(self, pm: PipelineExecutor, grads: dict[str, Any]):
        self.pm = pm
        self.inbox: dict[tuple[int, int, bool], Any] = {}     # received: (value, mb, grad) -> local piece
        self.outbox: dict[tuple[int, int, bool], Any] = {}    # to send
        self.stash: dict[tuple[int, int], list[Any]] = {}     # (stage, mb) -> the forward's inputs (for the backward)
        self.grads = grads                                     # the step's, summed over its rounds
        self.sends: list[Any] = []
        self.loss: Any = None
        self.peak = 0
        self.messages = 0
        self.bytes_sent = 0

    def _account(self) -> None:
        live = sum(t.numel() * t.element_size() for ts in self.stash.values() for t in ts)
        live += sum(t.numel() * t.element_size() for t in self.inbox.values())
        live += sum(t.numel() * t.element_size() for t in self.outbox.values())
        self.peak = max(self.peak, live)

    def _moves(self, value: int, grad: bool) -> list[Any]:
        """The tables ``value`` (or its gradient) moves by, one per consumer stage: a producer
        sends to every consumer and sums their gradients; a consumer uses its own table."""
        return self.pm._layout.moves(value, grad)

    def _keep(self, value: int, grad: bool) -> bool:
        """Whether this rank sends any of ``value`` (or its gradient): another rank's copy goes otherwise."""
        return any(s == self.pm.rank and d != s for plan in self._moves(value, grad) for (s, d) in plan.sends)

    def _piece(self, value: int, grad: bool) -> Any:
        """This rank's box of ``value`` (or of its gradient) as it receives it."""
        return next(p.box for plan in self._moves(value, grad) for p in plan.dst if p.device == self.pm.rank)

    def _taken(self, value: int, grad: bool) -> tuple[Any, Any]:
        """(dtype sent, dtype taken) of what this rank receives: a value from its producer, a
        gradient from any consumer (they leave in one dtype)."""
        return self.pm._wire_dtype(value, grad, None if grad else self.pm.stage)

    def _tag(self, value: int, mb: int, grad: bool) -> int:
        return 1 + (mb * 2 + int(grad)) * max(1, len(self.pm.split.values)) + value

    def send(self, op: Any) -> None:
        import torch.distributed as dist

        from spmdc.sharding.slices import box_view

        local = self.outbox.pop((op.value, op.mb, op.grad))
        sends = sorted((kv for plan in self._moves(op.value, op.grad) for kv in plan.sends.items()),
                       key=lambda kv: kv[0])
        for (s, d), cells in sends:   # (each destination rank is in one consumer's table)
            if s != self.pm.rank:
                continue
            buf = torch.cat([box_view(local, cell, sbox).reshape(-1) for cell, sbox, _ in cells]).contiguous()
            self.sends.append((dist.isend(buf, d, tag=self._tag(op.value, op.mb, op.grad)), buf))
            self.messages += 1
            self.bytes_sent += buf.numel() * buf.element_size()
            self.pm.comm.stats.add("send", buf.numel() * buf.element_size())

    def recv(self, op: Any) -> None:
        import torch.distributed as dist

        from spmdc.runtime.bsr import unpack_add
        from spmdc.runtime.collectives import _timed
        from spmdc.sharding.slices import box_numel

        sent, taken = self._taken(op.value, op.grad)
        out = torch.zeros(tuple(e - s for s, e in self._piece(op.value, op.grad)), dtype=sent, device=self.pm.device)
        # (a gradient from several consumers: every consumer's pieces summed into ``out``)
        sends = sorted((kv for plan in self._moves(op.value, op.grad) for kv in plan.sends.items()),
                       key=lambda kv: kv[0])
        for (s, d), cells in sends:
            if d != self.pm.rank:
                continue
            buf = torch.empty(sum(box_numel(c) for c, _, _ in cells), dtype=sent, device=self.pm.device)
            work = dist.irecv(buf, s, tag=self._tag(op.value, op.mb, op.grad))
            _timed(self.pm.comm.stats, "recv", work.wait)   # (the wait for the peer stage, when timed)
            self.pm.comm.stats.add("recv", buf.numel() * buf.element_size())
            unpack_add(buf, cells, out)
        self.inbox[(op.value, op.mb, op.grad)] = out if taken == sent else out.to(taken)
        self._account()

    def _received(self, value: int, mb: int, grad: bool) -> Any:
        """What :meth:`recv` left of ``value`` (or its gradient) for micro-batch ``mb``; a rank whose
        piece is empty (a dim of size 1 cut over two ranks: a mask broadcast over the batch) is sent
        nothing and takes its empty piece."""
        from spmdc.sharding.slices import box_numel

        key = (value, mb, grad)
        if key in self.inbox:
            return self.inbox.pop(key)
        box = self._piece(value, grad)
        if box_numel(box):
            raise RuntimeError(f"rank {self.pm.rank}: value {value} of micro-batch {mb} was not received")
        return torch.zeros(tuple(e - s for s, e in box), dtype=self._taken(value, grad)[1], device=self.pm.device)

    def _inputs(self, run: Any, mb: int, micro: list[Any], stage_is: str) -> list[Any]:
        """The stage's inputs for ``run`` (user inputs cut from the micro-batch, received values)."""
        pm = self.pm
        prog = run.program
        pos = [i for i, k in enumerate(prog.step.arg_kinds) if k.startswith("input:")]
        out = []
        for k, (kind, i) in enumerate(pm.mine.inputs):
            lay = prog.arg_layouts[pos[k]]
            if kind == "input":
                out.append(pm._cut(micro[i], lay))
            else:
                out.append(self._received(i, mb, False))
        return out

    def forward(self, op: Any, micro: list[Any], backward: bool) -> None:
        pm = self.pm
        pm._rng.enter(pm._mb_offset + op.mb)   # this micro-batch's masks (and the backward's recomputed ones)
        if backward:   # the last stage: loss, gradients, input gradients at once
            run = pm._programs.backward
            ins = self._inputs(run, op.mb, micro, "B")
            self._account()
            self._run_backward(run, ins, [], op.mb, scale=1.0 / (pm.micro * pm.accum))
            return
        run = pm._programs.forward
        ins = self._inputs(run, op.mb, micro, "F")
        self.stash[(op.stage, op.mb)] = ins
        outs = pm._apply_buffer_updates(run, run(pm._args(run, ins)))   # (BatchNorm statistics: once per micro-batch)
        for v, out in zip(pm.mine.outputs, outs):
            if self._keep(v, False):
                self.outbox[(v, op.mb, False)] = out
        self._account()

    def backward(self, op: Any, micro: list[Any]) -> None:
        pm = self.pm
        run, fwd = pm._programs.backward, pm._programs.forward
        ins = self.stash.pop((op.stage, op.mb))
        fpos = [i for i, k in enumerate(fwd.program.step.arg_kinds) if k.startswith("input:")]
        bpos = [i for i, k in enumerate(run.program.step.arg_kinds) if k.startswith("input:")]
        moved = []
        for k, x in enumerate(ins):
            src, dst = fwd.program.arg_layouts[fpos[k]], run.program.arg_layouts[bpos[k]]
            moved.append(pm._relayout(x, src, dst, fwd.program.step.arg_shapes[fpos[k]]))
        gs = [self._received(v, op.mb, True) for v in pm._diff_outputs(pm.mine)]
        pm._rng.enter(pm._mb_offset + op.mb)   # the recomputed forward draws the forward's masks
        self._run_backward(run, moved, gs, op.mb, scale=1.0)

    def _run_backward(self, run: Any, ins: list[Any], gs: list[Any], mb: int, scale: float) -> None:
        pm = self.pm
        outs = run(pm._args(run, ins + gs))
        if pm.stage == pm.n_stages - 1:   # forward+backward in one program: its buffer updates, once
            pm._apply_buffer_updates(run, outs)   # (a recomputed forward's are dropped)
        prog = run.program
        for i, (kind, out) in enumerate(zip(prog.step.result_kinds, outs)):
            if kind == "loss" and pm.stage == pm.n_stages - 1:   # (summed in float32 under mixed precision)
                part = out.float() * scale
                self.loss = part if self.loss is None else self.loss + part
            elif kind.startswith("grad:"):
                g = out * scale if scale != 1.0 else out
                name = kind[5:]
                if tuple(prog.res_layouts[i]) != tuple(pm._storage[name]) and \
                        not pm._sum_later(name, tuple(prog.res_layouts[i])):
                    g = pm._relayout(g, prog.res_layouts[i], pm._storage[name], prog.step.res_shapes[i])
                self.grads[name] = g if name not in self.grads else self.grads[name] + g
            elif kind.startswith("grad_input:"):
                k = int(kind.split(":", 1)[1])
                what, v = pm.mine.inputs[k]
                if what == "value" and pm.split.values[v].differentiable and self._keep(v, True):
                    self.outbox[(v, mb, True)] = out * scale if scale != 1.0 else out
        self._account()

    def finish(self) -> None:
        """The round's end (``pipe.step``): wait for its sends (the step's gradients are set after
        its last round, :meth:`PipelineExecutor._set_grads`)."""
        for work, _ in self.sends:
            work.wait()
