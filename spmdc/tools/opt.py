"""``spmdc-opt``: parse, verify, run a pass pipeline and print spmdc IR (mlir-opt's habits).

    spmdc-opt input.mlir -p 'canonicalize,cse' -o out.mlir
    spmdc-opt invalid.mlir --split-input-file --verify-diagnostics
    spmdc-opt input.mlir --print-op-generic
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from spmdc.compiler.pass_pipeline import named_pipelines
from spmdc.ir.core import Operation
from spmdc.ir.diagnostics import Diagnostic, DiagnosticError, SourceManager
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.verifier import verify
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import PipelineError, available_passes, option_fields, parse_pipeline
from spmdc.tools import diagnostics_check
from spmdc.tools.errors import guard, read_text, write_text

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)


@dataclass
class Chunk:
    text: str
    first_line: int


def split_input(text: str, split: bool) -> list[Chunk]:
    if not split:
        return [Chunk(text, 1)]
    chunks, line, start = [], 1, 0
    for m in SPLIT_MARKER.finditer(text):
        piece = text[start:m.start()]
        chunks.append(Chunk(piece, line))
        line += piece.count("\n") + m.group(0).count("\n")
        start = m.end()
    chunks.append(Chunk(text[start:], line))
    return chunks


def build_arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="spmdc-opt", description="Parse, verify, transform and print spmdc IR.")
    ap.add_argument("input", nargs="?", default="-", help="input file ('-' for stdin)")
    ap.add_argument("-o", "--output", default="-", help="output file ('-' for stdout)")
    ap.add_argument("-p", "--pass-pipeline", default="", help="passes to run, e.g. 'canonicalize,cse'")
    ap.add_argument("--split-input-file", action="store_true", help="split the input on '// -----' lines")
    ap.add_argument("--verify-diagnostics", action="store_true",
                    help="check diagnostics against expected-error comments")
    ap.add_argument("--print-op-generic", action="store_true", help="print every op in generic form")
    ap.add_argument("--mlir-print-debuginfo", "--print-debuginfo", dest="debuginfo", action="store_true",
                    help="print op locations")
    ap.add_argument("--print-ir-after-all", action="store_true", help="dump the IR after every pass (stderr)")
    ap.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                    help="dump the IR after the named pass (repeatable, or comma-separated)")
    ap.add_argument("--print-ir-before", action="append", default=[], metavar="PASS")
    ap.add_argument("--no-verify-each", dest="verify_each", action="store_false",
                    help="do not verify the IR after each pass")
    ap.add_argument("--time-passes", action="store_true", help="print a pass timing report (stderr)")
    ap.add_argument("--allow-unregistered-dialect", action="store_true")
    ap.add_argument("--verify-roundtrip", action="store_true",
                    help="check print(parse(print(m))) == print(m) in custom and generic form")
    ap.add_argument("--list-passes", action="store_true", help="list registered passes and exit")
    ap.add_argument("--verbose", action="store_true", help="show Python tracebacks of internal errors")
    ap.add_argument("--version", action="version", version=_version())
    return ap


def _version() -> str:
    from spmdc import __version__

    return f"spmdc-opt {__version__}"


def check_pass_names(names: set[str], option: str) -> None:
    """``--print-ir-after=NAME``: every NAME must be a pass (a typo would silently print nothing)."""
    import difflib

    from spmdc.passes.registry import PASS_MODULES

    for name in sorted(names):
        if name.replace("_", "-") not in PASS_MODULES:
            near = difflib.get_close_matches(name, list(PASS_MODULES), n=1)
            hint = f"; did you mean '{near[0]}'?" if near else f" (passes: {', '.join(sorted(PASS_MODULES))})"
            raise PipelineError(f"unknown pass '{name}' in {option}{hint}")


def _names(values: list[str]) -> set[str]:
    return {n.strip() for v in values for n in v.split(",") if n.strip()}


def list_passes() -> str:
    lines = ["Passes:"]
    for cls in available_passes():
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        opts = " ".join(f"{f.name.replace('_', '-')}={f.default}" for f in cls.option_fields())
        lines.append(f"  {cls.name:24s} {doc}" + (f"  [{opts}]" if opts else ""))
    for name, named in sorted(named_pipelines().items()):
        opts = " ".join(f"{f.name.replace('_', '-')}={f.default}" for f in option_fields(named.options))
        lines.append(f"  {name:24s} pipeline: {named.summary}  [{opts}]")
        lines.append(f"  {'':24s}   = {named.expand(named.options())}")
    return "\n".join(lines) + "\n"


def roundtrip_problem(module: Operation, filename: str, allow_unregistered: bool = False) -> str | None:
    """Custom and generic form each re-print identically, and the generic form reads back to the
    same IR as the custom form, up to the names of values an isolated region renames in it."""
    first = print_module(module)
    second = print_module(parse_module(first, filename + " (reprinted)", 1, allow_unregistered))
    if first != second:
        return "custom form does not round-trip:\n" + _first_difference(first, second)
    generic = print_module(module, generic=True)
    reread = parse_module(generic, filename + " (generic)", 1, allow_unregistered)
    again = print_module(reread, generic=True)
    if again != generic:
        return "generic form does not round-trip:\n" + _first_difference(generic, again)
    unnamed = _unnamed_print(parse_module(first, filename, 1, allow_unregistered))
    reread_unnamed = _unnamed_print(reread)
    if reread_unnamed != unnamed:
        return "generic form does not read back to the custom form's IR:\n" + \
            _first_difference(unnamed, reread_unnamed)
    return None


def _unnamed_print(module: Operation) -> str:
    """The custom form with every value numbered (name hints dropped): the IR without its names."""
    for op in module.walk():
        for r in op.results:
            r.name_hint = None
        for region in op.regions:
            for block in region.blocks:
                for a in block.args:
                    a.name_hint = None
    return print_module(module)


def _first_difference(a: str, b: str) -> str:
    for i, (x, y) in enumerate(zip(a.split("\n"), b.split("\n"))):
        if x != y:
            return f"  line {i + 1}:\n    first:  {x}\n    second: {y}"
    return "  (lengths differ)"


def process_chunk(chunk: Chunk, filename: str, args: argparse.Namespace, sources: SourceManager,
                  out: list[str]) -> list[Diagnostic]:
    """Parse, verify, run passes and print one chunk; returns the diagnostics raised."""
    try:
        module = parse_module(chunk.text, filename, chunk.first_line, args.allow_unregistered_dialect)
        verify(module)
        pm = PassManager(parse_pipeline(args.pass_pipeline, named_pipelines()), verify_each=args.verify_each,
                         print_ir_after_all=args.print_ir_after_all,
                         print_ir_after=_names(args.print_ir_after),
                         print_ir_before=_names(args.print_ir_before),
                         time_passes=args.time_passes, generic=args.print_op_generic,
                         debuginfo=args.debuginfo)
        pm.run(module)
        if args.time_passes:
            sys.stderr.write(pm.timing_report())
        if args.verify_roundtrip:
            problem = roundtrip_problem(module, filename, args.allow_unregistered_dialect)
            if problem:
                raise DiagnosticError(problem, module.location)
        out.append(print_module(module, generic=args.print_op_generic, debuginfo=args.debuginfo))
        return []
    except DiagnosticError as e:
        return [e.diagnostic]


def main(argv: list[str] | None = None) -> int:
    args = build_arg_parser().parse_args(argv)
    if args.list_passes:
        sys.stdout.write(list_passes())
        return 0
    return guard("spmdc-opt", lambda: run(args), verbose=args.verbose)


def run(args: argparse.Namespace) -> int:
    if args.pass_pipeline:
        parse_pipeline(args.pass_pipeline, named_pipelines())  # report pipeline errors before reading input
    check_pass_names(_names(args.print_ir_after), "--print-ir-after")
    check_pass_names(_names(args.print_ir_before), "--print-ir-before")
    text = read_text(args.input)
    filename = "<stdin>" if args.input == "-" else args.input
    sources = SourceManager()
    sources.add(filename, text)
    outputs: list[str] = []
    failed = False
    for chunk in split_input(text, args.split_input_file):
        diags = process_chunk(chunk, filename, args, sources, outputs)
        if args.verify_diagnostics:
            expected = diagnostics_check.collect_expectations(chunk.text, chunk.first_line)
            problems = diagnostics_check.check(diags, expected, filename)
            for p in problems:
                sys.stderr.write(p + "\n")
            failed |= bool(problems)
        else:
            for d in diags:
                sys.stderr.write(sources.render(d) + "\n")
            failed |= bool(diags)
    text_out = "// -----\n".join(outputs)
    if args.output == "-":
        sys.stdout.write(text_out)
    elif not failed:
        write_text(args.output, text_out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
