"""``spmdc run``: compile a workload for a mesh and plan, run it on ranks, report.

    spmdc run                                   # gpt2-tiny training, 4 ranks, dp=2,tp=2, fsdp+tp
    spmdc run mlp --plan megatron --mesh tp=2 --nproc 2 --steps 3 --check
    torchrun --nproc-per-node 4 -m spmdc.tools.cli run ...    # multi-node: torchrun starts the ranks

Ranks are started with torch's elastic launcher (what torchrun uses), or, when this
process already is a rank (RANK/WORLD_SIZE set by torchrun), it runs as that rank.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

DEFAULT_WORKLOAD = "gpt2-tiny"


@dataclass
class RunConfig:
    workload: str = DEFAULT_WORKLOAD
    nproc: int = 4
    mesh: str = ""
    plan: str = ""
    steps: int = 3
    train: bool = True
    check: bool = False
    optimizer: str = "sgd"
    lr: float = 0.05
    dump_ir: str | None = None
    dump_codegen: str | None = None
    timeout: float = 300.0
    executor: str = "codegen"
    extra: dict[str, Any] = field(default_factory=dict)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("workload", nargs="?", default=DEFAULT_WORKLOAD,
                    help="mlp | gpt2-tiny | llama-tiny | path/to/file.py:factory | module:factory")
    ap.add_argument("--nproc", type=int, default=None, help="ranks to start (default: the mesh size, or 4)")
    ap.add_argument("--mesh", default="", help="mesh axes, e.g. dp=2,tp=2 (default: dp=2,tp=2 for 4 ranks, "
                                               "else dp=N)")
    ap.add_argument("--plan", default="", help="preset (dp, fsdp, megatron, sp, fsdp+tp) or a .json/.yaml plan")
    ap.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    ap.add_argument("--train", dest="train", action="store_true", default=True,
                    help="run training steps (forward, backward, optimizer) — the default")
    ap.add_argument("--forward", dest="train", action="store_false", help="run the forward only")
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--check", action="store_true",
                    help="also run one device in eager PyTorch and compare; exit 1 when over tolerance")
    ap.add_argument("--dump-ir", default=None, metavar="DIR", help="write the IR after every pass")
    ap.add_argument("--dump-codegen", default=None, metavar="DIR", help="write each rank's generated Python")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds before a stuck collective or rendezvous fails the run (default 300)")
    ap.add_argument("--executor", choices=("codegen", "interpret"), default="codegen")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(args.workload, args.nproc or 0, args.mesh, args.plan, args.steps, args.train, args.check,
                     args.optimizer, args.lr, args.dump_ir, args.dump_codegen, args.timeout, args.executor)


def resolve_mesh_and_plan(cfg: RunConfig) -> tuple[Any, Any]:
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.plan import Plan

    if cfg.mesh:
        mesh = Mesh.parse(cfg.mesh)
    else:
        n = cfg.nproc or 4
        mesh = Mesh({"dp": 2, "tp": n // 2}) if n % 2 == 0 and n >= 4 else Mesh({"dp": n})
    if not cfg.nproc:
        cfg.nproc = mesh.size
    if mesh.size != cfg.nproc:
        raise SystemExit(f"spmdc run: error: mesh {mesh} has {mesh.size} devices but --nproc is {cfg.nproc}")
    plan: Any = cfg.plan or ("fsdp+tp" if set(mesh.axis_names) == {"dp", "tp"}
                             else "megatron" if mesh.axis_names == ("tp",) else "fsdp")
    if isinstance(plan, str) and plan.endswith((".json", ".yaml", ".yml")):
        plan = Plan.load(plan)
    return mesh, plan
