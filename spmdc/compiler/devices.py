"""Device profiles: what the dry run (``spmdc plan``) predicts a step's time from.

A profile gives one device's dense bf16 peak (the same figures as MFU's
:data:`~spmdc.api.metrics.DEVICE_PEAKS`), its memory bandwidth and capacity, and the links
collectives run over: ``intra`` inside a node of ``node_size`` devices (NVLink, xGMI), ``inter``
between nodes (the per-device share of the network, e.g. one 400 Gb/s NIC per GPU = 50 GB/s).
A mesh axis whose ranks all sit in one node (the product of its size and the sizes of the axes
after it is at most ``node_size``: ranks are numbered row-major, the last axis innermost) uses
``intra``, any other ``inter``::

    p = device_profile("h100")                           # the table's entry
    p = device_profile("h100", "inter_gbps=25,node_size=4")   # with overrides
    p.axis_bandwidth(mesh, "dp")                         # GB/s the dp collectives get

The figures are data-sheet numbers (bandwidths per direction); ``cpu`` is a rough guess for the
gloo ranks of a test machine, marked as such. ``scatter_staging``: memory the collective backend
holds of its own while the runtime's reduce-scatter runs, per operand byte: none for NCCL, none for
gloo either since the runtime exchanges its packed buffer's pieces pair by pair there (gloo's
``reduce_scatter_tensor`` would copy its input: 1); ``spmdc.tools.calibrate`` measures it.

Profiles measured on the machine at hand (``spmdc calibrate``, :mod:`spmdc.tools.calibrate`) are
stored as JSON in :func:`profile_dir` (``$SPMDC_DEVICE_DIR``, default ``~/.cache/spmdc/devices``)
and found by name like the table's entries, or given as a path::

    save_profile(p)                          # profile_dir()/<p.name>.json
    device_profile("local")                  # a stored profile, by name
    device_profile("prof/cluster.json")      # or by path
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEVICES", "DeviceProfile", "device_profile", "load_profile", "profile_dir", "save_profile",
           "stored_profiles"]

PROFILE_DIR_ENV = "SPMDC_DEVICE_DIR"


@dataclass(frozen=True)
class DeviceProfile:
    """One device and its links (see the module doc); every figure can be overridden by name."""

    name: str
    flops: float              # dense bf16 FLOP/s (float32 for cpu)
    hbm_gbps: float           # memory bandwidth, GB/s
    memory_gib: float         # memory per device
    intra_gbps: float         # link bandwidth per device inside a node, GB/s per direction
    inter_gbps: float         # network bandwidth per device between nodes, GB/s per direction
    node_size: int = 8        # devices per node
    latency_us: float = 5.0   # per hop of a collective (ring step)
    launch_us: float = 4.0    # per kernel launch / op dispatch
    overlap: float = 1.0      # the share of a collective's time hidden behind compute when scheduled so
    dtensor_op_us: float = 30.0   # host time of one op on a DTensor (the optimizer's update on the parameters)
    scatter_staging: float = 0.0  # the backend's own buffer while a reduce-scatter runs, per operand byte
    idle_speedup: float = 1.0     # how much faster a rank computes while half the ranks wait (ranks sharing
    # cores: a pipeline's fill and drain run faster; 1 for a device per rank)
    sync_us: float = 0.0          # a wait on peers that arrive from their own work (predict.sync_points): on
    # ranks sharing cores, a descheduled peer's time slice; 0 for a device per rank (its skew is in the compute)
    rough: bool = False       # a guess, not data-sheet figures
    collectives: tuple[tuple[str, int, float, float], ...] = ()
    """Measured calls (``spmdc calibrate``): ``(kind, group size, α µs per call, payload GB/s)`` for
    ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` (an expert dispatch or combine is
    one ``all_to_all``); a call of a kind listed is priced as
    α + payload / bandwidth (:meth:`call_us`), others by the ring model over the links."""
    bucket_members: tuple[tuple[str, int, float], ...] = ()
    """Measured host time of a bucketed call's members (``spmdc calibrate``): ``(kind, group size, µs
    per member)`` for ``all_gather``, ``reduce_scatter``, ``all_reduce``: the runtime packs each member
    into the bucket and unpacks it after (per rank's piece: views, splits, a copy each), a bucket of
    ``k`` members costs ``k`` times this on top of its call (:meth:`member_us`); none on the
    data-sheet profiles."""

    def call_us(self, kind: str, n: int, nbytes: float) -> float | None:
        """A measured call's µs (the entry of ``kind`` with the nearest group size), or None."""
        rows = [c for c in self.collectives if c[0] == kind]
        if not rows:
            return None
        _, _, alpha, gbps = min(rows, key=lambda c: (abs(c[1] - n), c[1]))
        return alpha + nbytes / (gbps * 1e3)

    def member_us(self, kind: str, n: int) -> float:
        """µs a member of a bucketed ``kind`` call adds (the entry with the nearest group size), 0 if
        none was measured."""
        rows = [c for c in self.bucket_members if c[0] == kind]
        return min(rows, key=lambda c: (abs(c[1] - n), c[1]))[2] if rows else 0.0

    def axis_bandwidth(self, mesh: Any, axes: tuple[str, ...] | list[str] | str) -> float:
        """GB/s of a collective over ``axes`` of ``mesh``: ``intra`` when every rank of the group is
        in one node, else ``inter``."""
        names = [axes] if isinstance(axes, str) else list(axes)
        names = [a for a in names if a in mesh.axis_names]
        if not names:
            return self.intra_gbps
        first = min(mesh.axis_names.index(a) for a in names)
        span = 1
        for size in mesh.shape[first:]:
            span *= size
        return self.intra_gbps if span <= self.node_size else self.inter_gbps

    def describe(self) -> str:
        return (f"{self.name}: {self.flops / 1e12:g} TFLOP/s, HBM {self.hbm_gbps:g} GB/s, {self.memory_gib:g} GiB, "
                f"links {self.intra_gbps:g} GB/s in a node of {self.node_size}, {self.inter_gbps:g} GB/s between "
                f"nodes" + (" (a rough guess)" if self.rough else ""))


DEVICES: dict[str, DeviceProfile] = {p.name: p for p in (
    DeviceProfile("h100", 989e12, 3350, 80, 450, 50),
    DeviceProfile("h200", 989e12, 4800, 141, 450, 50),
    DeviceProfile("b200", 2250e12, 8000, 180, 900, 100),
    DeviceProfile("a100", 312e12, 2039, 80, 300, 25),
    DeviceProfile("a100-40gb", 312e12, 1555, 40, 300, 25),
    DeviceProfile("mi300x", 1307e12, 5300, 192, 448, 50),
    DeviceProfile("l4", 121e12, 300, 24, 32, 12.5),
    DeviceProfile("cpu", 5e10, 10, 24, 2, 1, node_size=4, latency_us=300.0, launch_us=100.0, scatter_staging=0.0,
                  rough=True),
)}
ALIASES = {"h100-sxm": "h100", "a100-80gb": "a100"}
_FIELDS = {f.name for f in dataclasses.fields(DeviceProfile)} - {"name", "rough", "collectives", "bucket_members"}
_MAY_BE_ZERO = {"scatter_staging", "overlap", "sync_us"}   # (gloo ranks sharing cores may hide none)


def profile_dir() -> Path:
    """Where measured profiles are stored: ``$SPMDC_DEVICE_DIR``, else ``~/.cache/spmdc/devices``."""
    return Path(os.environ.get(PROFILE_DIR_ENV) or Path.home() / ".cache" / "spmdc" / "devices")


def stored_profiles() -> list[str]:
    """Names of the profiles stored in :func:`profile_dir`."""
    d = profile_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def save_profile(profile: DeviceProfile, path: str | os.PathLike | None = None) -> Path:
    """Write ``profile`` as JSON to ``path`` (default ``profile_dir()/<name>.json``), whole or not at
    all (a temporary file renamed over the old one); returns the path."""
    out = Path(path) if path is not None else profile_dir() / f"{profile.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(dataclasses.asdict(profile), indent=1) + "\n")
    os.replace(tmp, out)
    return out


COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")   # a profile's measured calls
BUCKETED_KINDS = ("all_reduce", "all_gather", "reduce_scatter")   # the kinds the runtime also issues as buckets
_TABLES = {   # a measured table's rows: the kinds a row may name, what a row holds, the check of its numbers
    "collectives": (COLLECTIVE_KINDS, "(kind, group size >= 2, alpha us >= 0, GB/s > 0)",
                    lambda r: r[2] >= 0 and r[3] > 0, 4),
    "bucket_members": (BUCKETED_KINDS, "(kind, group size >= 2, us per member >= 0)", lambda r: r[2] >= 0, 3),
}


def _table_rows(path: Any, table: str, rows: Any) -> tuple[tuple[Any, ...], ...]:
    """``rows`` of measured table ``table`` as tuples; a malformed row raises ValueError naming the
    file, the table, the row and what a row holds."""
    kinds, shape, ok, width = _TABLES[table]
    if not isinstance(rows, list):
        raise ValueError(f"device profile '{path}': '{table}' must be a list of rows {shape}, got {rows!r}")
    out = []
    for i, row in enumerate(rows):
        good = (isinstance(row, list) and len(row) == width and row[0] in kinds and isinstance(row[1], int)
                and row[1] >= 2 and all(isinstance(v, (int, float)) for v in row[2:]) and ok(row))
        if not good:
            raise ValueError(f"device profile '{path}': '{table}' row {i} is {row!r}; expected {shape} with the "
                             f"kind one of {', '.join(kinds)}")
        out.append(tuple(row))
    return tuple(out)


def load_profile(path: str | os.PathLike) -> DeviceProfile:
    """A profile from its JSON file (:func:`save_profile`); a missing or unknown field, a malformed
    row of a measured table (``collectives``, ``bucket_members``), or a file that is not such a
    profile, raises ValueError naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"device profile '{path}': {e}") from None
    names = {f.name for f in dataclasses.fields(DeviceProfile)}
    if not isinstance(data, dict):
        raise ValueError(f"device profile '{path}': expected an object of profile fields, got {type(data).__name__}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"device profile '{path}': unknown field '{unknown[0]}' (fields: {', '.join(sorted(names))})")
    for table in _TABLES:
        if table in data:
            data[table] = _table_rows(path, table, data[table])
    try:
        return DeviceProfile(**data)
    except TypeError as e:
        raise ValueError(f"device profile '{path}': {e}") from None


def device_profile(name: str, overrides: str | dict[str, float] | None = None) -> DeviceProfile:
    """The table's profile ``name`` (or a stored one: :func:`stored_profiles`, or a ``.json`` path)
    with ``overrides`` (``"hbm_gbps=3000,node_size=4"`` or a dict) replaced; an unknown name or
    field raises ValueError naming the near matches."""
    key = ALIASES.get(name.lower(), name.lower())
    if name.endswith(".json"):
        profile = load_profile(name)
    elif key in DEVICES:
        profile = DEVICES[key]
    elif (profile_dir() / f"{name}.json").is_file():
        profile = load_profile(profile_dir() / f"{name}.json")
    else:
        known = list(DEVICES) + stored_profiles()
        near = difflib.get_close_matches(key, known + list(ALIASES), n=3)
        raise ValueError(f"unknown device '{name}'" + (f" (did you mean {', '.join(near)}?)" if near else "")
                         + f"; known: {', '.join(known)} (measure this machine's: spmdc calibrate)")
    if not overrides:
        return profile
    if isinstance(overrides, str):
        items: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in overrides.split(","))):
            field_name, eq, value = part.partition("=")
            if not eq:
                raise ValueError(f"device override '{part}': expected FIELD=NUMBER "
                                 f"(fields: {', '.join(sorted(_FIELDS))})")
            try:
                items[field_name.strip()] = float(value)
            except ValueError:
                raise ValueError(f"device override '{part}': '{value}' is not a number") from None
        overrides = items
    for k, v in overrides.items():
        if k not in _FIELDS:
            near = difflib.get_close_matches(k, sorted(_FIELDS), n=3)
            raise ValueError(f"unknown device field '{k}'" + (f" (did you mean {', '.join(near)}?)" if near else "")
                             + f"; fields: {', '.join(sorted(_FIELDS))}")
        if not (v >= 0 if k in _MAY_BE_ZERO else v > 0):
            raise ValueError(f"device field '{k}' must be {'>=' if k in _MAY_BE_ZERO else '>'} 0, got {v:g}")
    fixed = {k: int(v) if k == "node_size" else float(v) for k, v in overrides.items()}
    return dataclasses.replace(profile, **fixed)
