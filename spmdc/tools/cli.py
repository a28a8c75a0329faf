"""``spmdc``: the user-facing command line.

    spmdc run [WORKLOAD] [options]         compile and run on ranks (spmdc.tools.run_cmd, docs/cli.md)
    spmdc capture WORKLOAD [--train] -o F  capture a model into spmdc IR (spmdc.tools.capture_cmd)
    spmdc show FILE                        summarise an IR file (spmdc.tools.show)
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spmdc", description="spmdc — sharding compiler for PyTorch")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="compile a workload and run it on ranks (default: gpt2-tiny training, 4 ranks)")
    from spmdc.tools.run_cmd import add_arguments

    add_arguments(run)
    cap = sub.add_parser("capture", help="capture a workload (forward or training step) into spmdc IR")
    cap.add_argument("workload", help="mlp | gpt2-tiny | llama-tiny | path/to/file.py:factory | module:factory")
    cap.add_argument("--train", action="store_true", help="capture forward + backward (loss and gradients)")
    cap.add_argument("-o", "--output", default=None, help="output .mlir file (default: stdout)")
    cap.add_argument("--debuginfo", action="store_true", help="print op locations (module path / aten op)")
    show = sub.add_parser("show", help="summarise an IR file: functions, parameters, op counts")
    show.add_argument("file")
    show.add_argument("--comm", action="store_true", help="also tabulate collectives per mesh axis")
    show.add_argument("--kernels", action="store_true",
                      help="also report kernels per step after fuse-kernels versus aten ops before fusion")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        from spmdc.tools.run_cmd import config_from_args, run_main

        return run_main(config_from_args(args))
    if args.cmd == "capture":
        from spmdc.tools.capture_cmd import capture_main

        return capture_main(args.workload, args.train, args.output, args.debuginfo)
    if args.cmd == "show":
        from spmdc.tools.show import show as show_file

        return show_file(args.file, comm=args.comm, kernels=args.kernels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
