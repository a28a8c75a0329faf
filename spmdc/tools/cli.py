"""``spmdc``: the user-facing command line.

    spmdc run [WORKLOAD] [options]         compile and run on ranks (spmdc.tools.run_cmd, docs/cli.md)
    spmdc plan [WORKLOAD] [options]        compile for the whole world without ranks, predict each rank role
                                           (memory, collectives, step time: spmdc.tools.plan_cmd)
    spmdc calibrate [--nproc N]            measure this machine's device profile, stored for --device
                                           (spmdc.tools.calibrate_cmd)
    spmdc capture WORKLOAD [--train] -o F  capture a model into spmdc IR (spmdc.tools.capture_cmd)
    spmdc show FILE                        summarise an IR file (spmdc.tools.show)
    spmdc --version

A mistake in the input prints one line (``spmdc <command>: error: ...``, or a located
diagnostic) and exits 1; a bug in spmdc prints an internal-error line and exits 2
(``--verbose`` shows tracebacks). See spmdc.tools.errors.
"""

from __future__ import annotations

import argparse
import os
import sys

from spmdc.tools.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, guard, sigterm_interrupts


def version_text(prog: str) -> str:
    from spmdc import __version__

    return f"{prog} {__version__}"


def main(argv: list[str] | None = None) -> int:
    undo = sigterm_interrupts()   # SIGTERM, even before ranks exist: cleaned up, "interrupted", exit 143
    try:
        return _main(argv)
    except KeyboardInterrupt as e:   # while the options are parsed, before a command's guard
        from spmdc.runtime.launcher import Terminated

        sys.stderr.write("spmdc: interrupted\n")
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    finally:
        undo()


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="spmdc", description="spmdc — sharding compiler for PyTorch")
    ap.add_argument("--version", action="version", version=version_text("spmdc"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="compile a workload and run it on ranks (default: gpt2-tiny training, 4 ranks)")
    from spmdc.tools.run_cmd import add_arguments

    add_arguments(run)
    dry = sub.add_parser("plan", help="compile a job for its whole world without launching it; predict memory, "
                                      "collectives and step time per rank role")
    from spmdc.tools.plan_cmd import add_arguments as add_plan_arguments

    add_plan_arguments(dry)
    cal = sub.add_parser("calibrate", help="measure this machine's device profile (collectives, kernels) on "
                                           "ranks and store it for --device")
    from spmdc.tools.calibrate_cmd import add_arguments as add_calibrate_arguments

    add_calibrate_arguments(cal)
    cap = sub.add_parser("capture", help="capture a workload (forward or training step) into spmdc IR")
    cap.add_argument("workload", help="mlp | gpt2-tiny | llama-tiny | path/to/file.py:factory | module:factory")
    cap.add_argument("--train", action="store_true", help="capture forward + backward (loss and gradients)")
    cap.add_argument("-o", "--output", default=None, help="output .mlir file (default: stdout)")
    cap.add_argument("--debuginfo", action="store_true", help="print op locations (module path / aten op)")
    show = sub.add_parser("show", help="summarise an IR file: functions, parameters, op counts")
    show.add_argument("file")
    show.add_argument("--comm", action="store_true", help="also tabulate collectives per mesh axis")
    show.add_argument("--memory", action="store_true",
                      help="also estimate each function's peak memory beyond its arguments (static liveness)")
    show.add_argument("--kernels", action="store_true",
                      help="also report kernels per step after fuse-kernels versus aten ops before fusion")
    for p in (cap, show):
        p.add_argument("--verbose", action="store_true", help="show Python tracebacks of errors")
    args = ap.parse_args(argv)
    prog = f"spmdc {args.cmd}"
    if args.cmd == "run":
        from spmdc.tools.run_cmd import config_from_args, run_main

        rc = guard(prog, lambda: run_main(config_from_args(args)), verbose=args.verbose)
        if rc in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            # torch's rendezvous store may still run a thread in this process, which a normal
            # interpreter exit would destroy mid-run (std::terminate, "Fatal Python error"). The
            # ranks are gone and the launcher has removed its files: leave now, with the code, once
            # multiprocessing has done its exit work (its temporary directory, where the ranks' fork
            # server listened, removed; the server leaves when this process has).
            from multiprocessing import util

            util._exit_function()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
        return rc
    if args.cmd == "plan":
        from spmdc.tools.plan_cmd import plan_main

        return guard(prog, lambda: plan_main(args), verbose=args.verbose)
    if args.cmd == "calibrate":
        from spmdc.tools.calibrate_cmd import calibrate_main

        return guard(prog, lambda: calibrate_main(args), verbose=args.verbose)
    if args.cmd == "capture":
        from spmdc.tools.capture_cmd import capture_main

        return guard(prog, lambda: capture_main(args.workload, args.train, args.output, args.debuginfo),
                     verbose=args.verbose)
    from spmdc.tools.show import show as show_file

    return guard(prog, lambda: show_file(args.file, comm=args.comm, kernels=args.kernels, memory=args.memory),
                 verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
