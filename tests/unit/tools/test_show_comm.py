"""``spmdc show --comm``: the collectives of a partitioned program, with totals."""

import subprocess
import sys
from pathlib import Path

from spmdc.compiler import named_pipelines
from spmdc.ir.parser import parse_module
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import parse_pipeline
from spmdc.tools.show import comm_table

MLP = Path(__file__).parents[2] / "lit" / "pipelines" / "spmd-pipeline.mlir"


def test_comm_table_counts_and_bytes_of_partitioned_program():
    module = parse_module(MLP.read_text(), str(MLP))
    PassManager(parse_pipeline("spmd-pipeline", named_pipelines())).run(module)
    rows = comm_table(module)
    assert [(r["op"], r["axes"], r["count"], r["bytes"]) for r in rows] == [("comm.all_reduce", "tp", 1, 8 * 16 * 4)]


def test_show_comm_cli_prints_total(tmp_path):
    out = tmp_path / "p.mlir"
    opt = [sys.executable, "-m", "spmdc.tools.opt", str(MLP), "-p", "spmd-pipeline", "-o", str(out)]
    subprocess.run(opt, check=True)
    res = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "show", str(out), "--comm"],
                         capture_output=True, text=True, check=True)
    assert "comm.all_reduce" in res.stdout
    total = [line for line in res.stdout.splitlines() if "total" in line]
    assert total and "512" in total[-1]


def test_show_kernels_reports_fused_launches(tmp_path):
    from spmdc.tools.show import kernel_summary

    module = parse_module(MLP.read_text(), str(MLP))
    text = kernel_summary(module)
    # matmul, relu, matmul: the relu is one elementwise region, the matmuls stay aten calls
    assert text.startswith("3 kernels launched per step for 3 aten ops")


SCHEDULE = Path(__file__).parents[2] / "lit" / "passes" / "schedule-collectives.mlir"


def test_comm_table_counts_an_async_start_as_its_collective_and_not_the_wait():
    module = parse_module(SCHEDULE.read_text(), str(SCHEDULE))
    PassManager(parse_pipeline("schedule-collectives")).run(module)
    rows = {r["op"]: r["count"] for r in comm_table(module)}
    assert "comm.wait" not in rows and not any(k.endswith("_start") for k in rows)
    # @prefetch 2, @capped 2, @capped_uneven 2, @dependency 1, the two Inductor shapes 4 each; one
    # function of 2 scatters and @pack_held's; @view_rises's all-reduce
    assert rows["comm.all_gather"] == 2 + 2 + 2 + 1 + 4 + 4 and rows["comm.reduce_scatter"] == 2 + 1
    assert rows["comm.all_reduce"] == 1


def test_show_memory_names_the_peak_and_what_is_alive_there(tmp_path):
    from spmdc.tools.show import memory_rows

    out = tmp_path / "s.mlir"
    subprocess.run([sys.executable, "-m", "spmdc.tools.opt", str(SCHEDULE), "-p", "schedule-collectives", "-o",
                    str(out)], check=True)
    module = parse_module(out.read_text(), str(out))
    rows = {r["name"]: r for r in memory_rows(module)}
    capped = rows["capped"]
    # the 16 KiB temporary and the prefetched gather's 256-byte buffer (in flight) at the peak
    assert capped["peak"] >= 64 * 64 * 4 + 8 * 8 * 4
    assert capped["largest"][0][2] == 64 * 64 * 4 and capped["in_flight"] >= 1
    res = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "show", str(out), "--memory"],
                         capture_output=True, text=True, check=True)
    assert "memory of @capped" in res.stdout and "in flight" in res.stdout
