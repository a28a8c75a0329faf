"""Process groups over a subset of the job's ranks that only those ranks create.

    group = subgroup([2, 3])      # on ranks 2 and 3 only; the same group again for the same ranks

``torch.distributed.new_group(ranks, use_local_synchronization=True)`` names such a group by its
ranks, so a second one over the same ranks (a second module in one job: a test's cases, a
benchmark's, a user building two pipelines) would rendezvous under the first one's name and hang.
:func:`subgroup` keeps one per set of ranks and job, and makes a new one once the job's process
group was destroyed and another initialized.
"""

from __future__ import annotations

from typing import Any

__all__ = ["subgroup"]

_SUBGROUPS: dict[tuple[int, ...], Any] = {}


def subgroup(members: list[int]) -> Any:
    """The process group over ``members`` (see the module doc)."""
    import torch.distributed as dist

    key = tuple(members)
    group = _SUBGROUPS.get(key)
    try:
        alive = group is not None and dist.get_process_group_ranks(group) == list(members)
    except (ValueError, RuntimeError, KeyError):   # a group of an earlier, destroyed job
        alive = False
    if not alive:
        group = _SUBGROUPS[key] = dist.new_group(list(members), use_local_synchronization=True)
    return group
