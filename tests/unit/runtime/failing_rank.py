"""Launch entry points: rank 1 failing in user code while rank 0 waits in a collective; ranks writing to
stderr at interpreter exit."""

import os


def fail_on_rank_one() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise RuntimeError("deliberate failure on rank 1 (user code)")
    dist.barrier()   # rank 0 waits for rank 1: the launcher must end it, not let it hang



class _Noisy:
    """Writes to the process's stderr (fd 2) when the interpreter's exit destroys it (after the atexit
    handlers), as a backend's destructor aborting with "terminate called without an active exception" does."""

    def __del__(self, write=os.write) -> None:
        write(2, b"teardown noise at exit\n")


_KEEP: list[_Noisy] = []


def noisy_at_exit(fail: bool) -> int:
    """Leaves an object that writes to stderr at interpreter exit; raises on rank 1 when ``fail``."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    _KEEP.append(_Noisy())
    if fail and dist.get_rank() == 1:
        raise RuntimeError("deliberate failure on rank 1 (user code)")
    return dist.get_rank()


def environment(names: list[str]) -> dict:
    """What this rank's environment holds of ``names``, and the process that started it."""
    return {"env": {n: os.environ.get(n) for n in names}, "parent": os.getppid(), "pid": os.getpid()}


def leaves_a_file_at_exit(directory: str) -> int:
    """Registers an atexit handler that writes ``directory/rank<r>``."""
    import atexit

    rank = int(os.environ["RANK"])
    path = os.path.join(directory, f"rank{rank}")
    atexit.register(lambda: open(path, "w").write("exited\n"))
    return rank


_LOG: list = []


def writes_to_a_file_it_leaves_open(directory: str) -> int:
    """Writes a line to a file it keeps open (buffered) and returns without closing it."""
    rank = int(os.environ["RANK"])
    _LOG.append(open(os.path.join(directory, f"log{rank}"), "w", buffering=1 << 16))
    _LOG[-1].write(f"rank {rank} trained\n")
    return rank


def sums_and_scales(tensors: list) -> float:
    """The sum of ``tensors``, each then scaled in place (in this rank's copy)."""
    total = float(sum(t.sum() for t in tensors))
    for t in tensors:
        t.mul_(10)
    return total


def puts_its_rank(queue) -> None:
    """Puts this rank's number on ``queue`` (a multiprocessing queue, sent through inheritance)."""
    queue.put(int(os.environ["RANK"]))


def run_steps_reporting_hash_seed(steps: list, queue) -> list:
    """``spmdc.api.worker.run_steps``, after putting (rank, this interpreter's hash of a string) on
    ``queue`` (which only inheritance can send: the launch spawns its ranks)."""
    from spmdc.api.worker import run_steps

    queue.put((int(os.environ["RANK"]), hash("spmdc")))
    return run_steps(steps)
