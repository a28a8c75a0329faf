"""``spmdc calibrate``: measure this machine's device profile on ranks and store it for reuse.

    spmdc calibrate                       # 4 gloo ranks, stored as 'local' (~/.cache/spmdc/devices/local.json)
    spmdc calibrate --nproc 8 --name cpu8 --base cpu
    spmdc plan gpt2-tiny --search --device local          # the search prices candidates with it

Runs :func:`spmdc.tools.calibrate.measure_device` on ``--nproc`` ranks at once (a few seconds of
small ops, DTensor ops, all-reduces, matmuls and copies) in ``--launches`` separate launches
(:func:`~spmdc.tools.calibrate.calibrate`), puts the medians into the device table's
``--base`` entry (:func:`~spmdc.tools.calibrate.calibrated_profile`) and writes it as JSON
(:func:`~spmdc.compiler.devices.save_profile`: whole or not at all) under ``--name`` in
:func:`~spmdc.compiler.devices.profile_dir` (``$SPMDC_DEVICE_DIR``) or to ``--out``. Every command
taking ``--device NAME`` finds it by that name.
"""

from __future__ import annotations

import argparse
import re

from spmdc.tools.errors import UserError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    from spmdc.compiler.devices import DEVICES
    from spmdc.compiler.options import positive
    from spmdc.tools.calibrate import LAUNCHES

    ap.add_argument("--nproc", type=positive(int), default=4, help="ranks to measure on at once (default 4)")
    ap.add_argument("--name", default="local", help="the stored profile's name (default local)")
    ap.add_argument("--base", default="cpu", choices=sorted(DEVICES),
                    help="the device table's entry whose unmeasured figures (memory) are kept (default cpu)")
    ap.add_argument("--out", default=None, metavar="FILE", help="write the profile to FILE (.json) instead")
    ap.add_argument("--reps", type=positive(int), default=20, help="repetitions per figure (default 20)")
    ap.add_argument("--launches", type=positive(int), default=LAUNCHES,
                    help=f"separate launches to measure in, each figure their median (default {LAUNCHES}: from one "
                         "launch to the next, ranks sharing cores measure figures up to 3x apart)")
    ap.add_argument("--verbose", action="store_true", help="show Python tracebacks of errors")


def calibrate_main(args: argparse.Namespace) -> int:
    import dataclasses

    from spmdc.compiler.devices import DEVICES, save_profile
    from spmdc.tools.calibrate import calibrate, calibrated_profile
    from spmdc.tools.show import plain_console

    if not _NAME.match(args.name) or args.name.lower() in DEVICES:
        raise UserError(f"--name '{args.name}': " + ("names a built-in profile; choose another name"
                                                      if args.name.lower() in DEVICES else
                                                      "letters, digits, '.', '-' and '_' only"))
    if args.out is not None and not args.out.endswith(".json"):
        raise UserError(f"--out '{args.out}': expected a .json file")
    console = plain_console()
    console.print(f"spmdc calibrate: measuring on {args.nproc} ranks, {args.launches} launches ...")
    figures = calibrate(args.nproc, args.reps, args.launches)
    profile = dataclasses.replace(calibrated_profile(args.base, figures), name=args.name)
    try:
        path = save_profile(profile, args.out)
    except OSError as e:
        raise UserError(f"cannot write the profile: {e}") from None
    from rich.table import Table

    table = Table(title=f"device profile '{args.name}' ({args.nproc} ranks)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in sorted(figures.items()):
        if k not in ("collectives", "bucket_members"):
            table.add_row(k, f"{v:.4g}")
    console.print(table)
    if profile.collectives:
        calls = Table(title="one collective call: α + payload / bandwidth (spmdc's runtime, every group at once)")
        for col in ("collective", "group size", "α µs", "GB/s", "16 KiB µs", "1 MiB µs", "µs per bucket member"):
            calls.add_column(col, justify="left" if col == "collective" else "right")
        for kind, k, alpha, gbps in profile.collectives:
            calls.add_row(kind, str(k), f"{alpha:,.0f}", f"{gbps:.3g}", f"{profile.call_us(kind, k, 16 << 10):,.0f}",
                          f"{profile.call_us(kind, k, 1 << 20):,.0f}",
                          f"{profile.member_us(kind, k):,.0f}" if kind != "all_to_all" else "")
        console.print(calls)
    console.print(f"wrote {path} (use it with --device {args.name if args.out is None else path})")
    return 0
