"""A launch entry point whose rank 1 fails in user code while rank 0 waits in a collective."""


def fail_on_rank_one() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise RuntimeError("deliberate failure on rank 1 (user code)")
    dist.barrier()   # rank 0 waits for rank 1: the launcher must end it, not let it hang
