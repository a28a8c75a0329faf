"""A pipeline schedule as a time grid: each rank's ``@rank<r>`` program simulated with unit costs.

    print(simulate(module))
    rank  stage  t=0   1     2     3     4     5     6 ...
    0     0      F0    F1    .     B0    B0    F2 ...

A forward takes 1 time unit, a backward 2 (it recomputes the forward: 2 is the backward proper's
usual cost, the recomputation is counted in it), the last stage's forward+backward 3; a message
takes none but a receive waits until its sender has run the op before the matching send. Idle
slots (``.``) are the pipeline's bubbles. The grid is derived from the same IR the runtime runs.
A rank holding several stages (interleaved 1F1B) labels each op with its stage (``F0/2``: stage
2's forward of micro-batch 0); each op is then ``1/v`` of a one-stage-per-rank op's work, so
compare schedules by :func:`bubble_fraction` (idle over ranks × makespan), not by slot counts.
"""

from __future__ import annotations

from typing import Any

from spmdc.dialects.attrs import RANK_ATTR, STAGE_ATTR, STAGES_ATTR

COST = {"pipe.forward": 1, "pipe.backward": 2, "pipe.forward_backward": 3}
LABEL = {"pipe.forward": "F", "pipe.backward": "B", "pipe.forward_backward": "FB"}


def schedule_times(module: Any) -> dict[int, list[tuple[str, int, int]]]:
    """Per rank: ``(label, start, end)`` of each compute op, in program order."""
    from spmdc.dialects.func import FuncOp
    from spmdc.dialects.pipe import RecvOp, SendOp

    progs = {int(f.attributes[RANK_ATTR].value): list(f.body.ops)  # type: ignore[attr-defined]
             for f in module.body.ops if isinstance(f, FuncOp) and RANK_ATTR in f.attributes}
    multi = {int(f.attributes[RANK_ATTR].value) for f in module.body.ops  # type: ignore[attr-defined]
             if isinstance(f, FuncOp) and STAGES_ATTR in f.attributes}
    pc = {r: 0 for r in progs}
    clock = {r: 0 for r in progs}
    sent: dict[tuple[int, int, int, bool], int] = {}   # (src, dst, value/mb/grad key) -> time available
    out: dict[int, list[tuple[str, int, int]]] = {r: [] for r in progs}
    progress = True
    while progress:
        progress = False
        for r, ops in progs.items():
            while pc[r] < len(ops):
                op = ops[pc[r]]
                if isinstance(op, RecvOp):
                    keys = [(s, r, op.value, op.mb, op.grad) for s in op.peers]
                    if not all(k in sent for k in keys):
                        break
                    clock[r] = max([clock[r]] + [sent[k] for k in keys])
                elif isinstance(op, SendOp):
                    for d in op.peers:
                        sent[(r, d, op.value, op.mb, op.grad)] = clock[r]
                elif op.name in COST:
                    start = clock[r]
                    clock[r] += COST[op.name]
                    label = f"{LABEL[op.name]}{op.attributes['mb'].value}"
                    out[r].append((label + (f"/{op.attributes['stage'].value}" if r in multi else ""),
                                   start, clock[r]))
                pc[r] += 1
                progress = True
    stuck = [r for r, ops in progs.items() if pc[r] < len(ops)]
    if stuck:
        raise ValueError(f"the schedule deadlocks: rank {stuck[0]} waits at op #{pc[stuck[0]]} "
                         f"({progs[stuck[0]][pc[stuck[0]]].name}) for a message no rank sends")
    return out


def simulate(module: Any, width: int = 5) -> str:
    """The grid (see the module doc) as text, one row per rank."""
    from spmdc.dialects.func import FuncOp

    times = schedule_times(module)
    stage = {int(f.attributes[RANK_ATTR].value): (",".join(str(a.value) for a in f.attributes[STAGES_ATTR])
                                                  if STAGES_ATTR in f.attributes
                                                  else str(f.attributes[STAGE_ATTR].value))  # type: ignore
             for f in module.body.ops if isinstance(f, FuncOp) and RANK_ATTR in f.attributes}
    end = max((e for ts in times.values() for _, _, e in ts), default=0)
    head = "rank  stage  " + "".join(f"{t:<{width}}" for t in range(end))
    rows = [head]
    for r in sorted(times):
        cells = ["."] * end
        for label, s, e in times[r]:
            for t in range(s, e):
                cells[t] = label
        busy = sum(e - s for _, s, e in times[r])
        rows.append(f"{r:<6}{stage[r]:<7}" + "".join(f"{c:<{width}}" for c in cells)
                    + f"  busy {busy}/{end}")
    return "\n".join(rows)


def bubbles(module: Any) -> tuple[int, int]:
    """``(idle slots summed over the ranks, makespan)`` of the simulated schedule."""
    times = schedule_times(module)
    end = max((e for ts in times.values() for _, _, e in ts), default=0)
    return sum(end - sum(e - s for _, s, e in ts) for ts in times.values()), end


def bubble_fraction(module: Any) -> float:
    """The share of the ranks' time that is bubble: idle slots over ranks × makespan (a schedule
    whose ops each do ``1/v`` of the work is compared fairly with one whose ops do all of it)."""
    idle, end = bubbles(module)
    return idle / (end * len(schedule_times(module))) if end else 0.0


__all__ = ["COST", "bubble_fraction", "bubbles", "schedule_times", "simulate"]
