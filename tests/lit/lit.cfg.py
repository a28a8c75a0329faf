"""lit configuration: spmdc's FileCheck tests (PyPI `lit` + `filecheck`).

Substitutions:
  %spmdc-opt   the spmdc-opt of this environment
  %roundtrip   spmdc-opt --verify-roundtrip (custom and generic form must re-print identically,
               and the generic form read back must be the same IR, values numbered)
  FileCheck    the PyPI filecheck
"""

import os
import sys

import lit.formats

config.name = "spmdc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)

bindir = os.path.dirname(sys.executable)


def tool(name: str) -> str:
    path = os.path.join(bindir, name)
    return path if os.path.exists(path) else name


config.substitutions.append(("%spmdc-opt", tool("spmdc-opt")))
config.substitutions.append(("%roundtrip", tool("spmdc-opt") + " --verify-roundtrip"))
config.substitutions.append(("FileCheck", tool("filecheck")))
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"
