"""``spmdc``: the user-facing command line.

    spmdc run            compile and run the built-in demo (see docs/cli.md)
    spmdc show FILE      summarise an IR file
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spmdc", description="spmdc — sharding compiler for PyTorch")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run", help="compile and run the built-in demo")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        from spmdc.tools.demo import run_demo

        return run_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
