"""Train a small language model with spmdc, written the way an FSDP2 training loop is.

    torchrun --nproc-per-node 4 examples/train.py                  # llama-tiny, fsdp+tp on dp=2,tp=2
    python examples/train.py --nproc 4                             # the same ranks, started by spmdc's launcher
    torchrun --nproc-per-node 4 examples/train.py --steps 20 --save-every 10 --ckpt ckpt/
    torchrun --nproc-per-node 2 examples/train.py --steps 20 --mesh dp=2 --plan fsdp --resume ckpt/   # on 2 ranks
    python examples/train.py --plain                               # plain PyTorch: one process, the global batch
    torchrun --nproc-per-node 4 examples/train.py --fsdp2          # FSDP2's fully_shard, for comparison
    torchrun --nproc-per-node 4 examples/train.py --hf llama --bf16 --peak h100   # a HuggingFace Llama (a config)
    torchrun --nproc-per-node 4 examples/train.py --hf mixtral --mesh ep=4 --plan ep   # experts over 4 ranks

What spmdc changes in an FSDP2 loop (everything else is plain PyTorch):

* ``spmdc.compile(model, (x_piece,), mesh=..., plan=..., inputs="local")`` instead of ``fully_shard``
  per block: the plan decides every layout; the compiled module is an ``nn.Module`` whose
  parameters are DTensors, so ``torch.optim``, LR schedulers and ``clip_grad_norm_`` work on it.
* the ``DistributedSampler``'s ``num_replicas, rank`` are ``spmdc.sampler_args(mesh=, plan=)`` (the plan's
  data-parallel size and this rank's coordinate: tp ranks share a piece), not the world size.
* ``out = cm(x)`` returns this rank's piece of the logits; the loss is yours; ``loss.backward()``
  averages the gradients over the data-parallel pieces, as DDP and FSDP2 do.
* checkpoints: ``cm.save(dir, opt, extra=...)`` / ``cm.load(dir, opt)`` (torch.distributed.checkpoint,
  resharded on load: resume under another plan, mesh or rank count; the global batch stays
  ``--batch-size``, so the run goes on as if uninterrupted).

The batch size is the **global** one (every data-parallel piece together), so ``--plain`` trains on
the very same batches in one process and prints the same losses (tests/unit/test_example_train.py).
Each mode resumes its own checkpoints (spmdc's, or DCP's of ``--plain``/``--fsdp2``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import spmdc
from spmdc.api.metrics import StepMetrics, count_params, flops_per_token

warnings.filterwarnings("ignore", category=FutureWarning)   # torch's deprecation notices (collectives, pytree)


# -- data -------------------------------------------------------------------------------------------
class ToySequences(Dataset):
    """Token sequences that follow a hidden rule (next = 5·prev + 3 mod vocab, 10% of tokens random),
    so the loss goes down; ``(tokens[:-1], tokens[1:])`` per item."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        tokens = torch.empty(n, seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (n,), generator=g)
        for i in range(seq_len):
            noise = torch.randint(0, vocab, (n,), generator=g)
            keep = torch.rand(n, generator=g) >= 0.1
            tokens[:, i + 1] = torch.where(keep, (5 * tokens[:, i] + 3) % vocab, noise)
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[i, :-1], self.tokens[i, 1:]


def loader(ds: Dataset, batch: int, replicas: int, rank: int, shuffle: bool, seed: int) -> DataLoader:
    """This replica's piece of every global batch: ``batch / replicas`` rows (a DistributedSampler's)."""
    if batch % replicas:
        raise SystemExit(f"--batch-size {batch} does not split into {replicas} data-parallel pieces")
    sampler = DistributedSampler(ds, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=seed)
    return DataLoader(ds, batch_size=batch // replicas, sampler=sampler, drop_last=True)


def batches(dl: DataLoader, step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The loader's batches from training step ``step`` on (epochs reshuffled by ``set_epoch``)."""
    epoch, skip = divmod(step, len(dl))
    while True:
        dl.sampler.set_epoch(epoch)
        for i, batch in enumerate(dl):
            if i >= skip:
                yield batch
        epoch, skip = epoch + 1, 0


# -- model and loss ---------------------------------------------------------------------------------
def build_model(args: argparse.Namespace) -> torch.nn.Module:
    """Every rank builds the same model from the same seed (spmdc cuts each rank's shards from it)."""
    torch.manual_seed(args.seed)
    if args.hf:
        import transformers as T

        common = dict(vocab_size=args.vocab, hidden_size=args.dim, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, use_cache=False)
        configs = {"llama": lambda: T.LlamaConfig(**common, num_key_value_heads=max(1, args.heads // 2),
                                                  intermediate_size=2 * args.dim,
                                                  max_position_embeddings=args.seq_len),
                   "gpt2": lambda: T.GPT2Config(vocab_size=args.vocab, n_embd=args.dim, n_layer=args.layers,
                                                n_head=args.heads, n_positions=args.seq_len, use_cache=False),
                   # a mixture of experts: 4 experts, top-2 (with --mesh ep=4 --plan ep: expert parallelism)
                   "mixtral": lambda: T.MixtralConfig(**common, num_key_value_heads=max(1, args.heads // 2),
                                                      intermediate_size=2 * args.dim, num_local_experts=4,
                                                      num_experts_per_tok=2, max_position_embeddings=args.seq_len)}
        return T.AutoModelForCausalLM.from_config(configs[args.hf]())
    if args.model == "gpt2":
        from spmdc.examples.gpt2_tiny import GPT2

        return GPT2(args.vocab, args.seq_len, args.dim, args.heads, args.layers)
    from spmdc.examples.llama_tiny import Llama

    return Llama(args.vocab, args.dim, args.heads, max(1, args.heads // 2), 2 * args.dim, args.layers)


def logits_of(out: Any) -> torch.Tensor:
    """The logits of a model's output (a HuggingFace ModelOutput, a tuple or a tensor)."""
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


def lm_loss(out: Any, y: torch.Tensor) -> torch.Tensor:
    logits = logits_of(out)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def mean_over_ranks(loss: torch.Tensor, world: int) -> torch.Tensor:
    """The job's loss: every rank's own (its piece's) averaged; ranks sharing a piece (tp) agree."""
    if world == 1:
        return loss.detach()
    total = loss.detach().clone()
    dist.all_reduce(total)   # (gloo has no AVG)
    return total / world


def scheduler(opt: torch.optim.Optimizer, args: argparse.Namespace) -> Any:
    """Linear warm-up, then cosine decay to a tenth of the learning rate."""
    from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

    cosine = CosineAnnealingLR(opt, T_max=max(1, args.steps - args.warmup), eta_min=args.lr / 10)
    if not args.warmup:
        return cosine
    return SequentialLR(opt, [LinearLR(opt, start_factor=0.1, total_iters=args.warmup), cosine],
                        milestones=[args.warmup])


# -- the three ways to run the same loop ------------------------------------------------------------
def default_mesh(world: int) -> str:
    return f"dp=2,tp={world // 2}" if world >= 4 and world % 2 == 0 else f"dp={world}"


class Setup:
    """The model as the loop calls it, its optimizer, data pieces and checkpoints, per mode."""

    def __init__(self, args: argparse.Namespace, device: torch.device):
        self.args, self.device = args, device
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        model = build_model(args)
        self.n_params = count_params(model)   # (before sharding: the whole model's, embeddings left out)
        if args.plain:
            self.model, self.replicas, self.replica = model.to(device), 1, 0
        elif args.fsdp2:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.bf16 else \
                MixedPrecisionPolicy()
            model.to(device)
            blocks = getattr(model, "layers", None) or getattr(model, "h", None) or \
                getattr(getattr(model, "model", None), "layers", [])
            for block in blocks:
                fully_shard(block, mp_policy=mp)
            self.model = fully_shard(model, mp_policy=mp)
            self.replicas, self.replica = self.world, dist.get_rank()
        else:
            mesh = args.mesh or default_mesh(self.world)
            plan = args.plan or ("fsdp+tp" if "tp" in mesh else "fsdp")
            # this rank's piece of every batch: (the plan's data-parallel size, this rank's dp coordinate);
            # the two ranks of a tp pair read the same piece
            self.replicas, self.replica = spmdc.sampler_args(mesh=mesh, plan=plan)
            x0 = torch.zeros(args.batch_size // self.replicas, args.seq_len, dtype=torch.long)   # a piece's shape
            self.model = spmdc.compile(model, (x0,), mesh=mesh, plan=plan, inputs="local",   # was: fully_shard
                                       mixed_precision="bf16" if args.bf16 else None, device=device.type)
            assert spmdc.sampler_args(self.model) == (self.replicas, self.replica)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.sched = scheduler(self.opt, args)

    def forward(self, x: torch.Tensor) -> Any:
        if self.args.plain and self.args.bf16:   # plain PyTorch's usual bf16: autocast
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                return self.model(x)
        return self.model(x)

    def clip(self, max_norm: float) -> torch.Tensor:
        if self.args.plain or self.args.fsdp2:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return self.model.clip_grad_norm_(max_norm)   # the global norm over every rank's pieces

    def save(self, path: str, step: int) -> None:
        extra = {"step": step, "scheduler": self.sched.state_dict()}
        if not (self.args.plain or self.args.fsdp2):
            self.model.save(path, self.opt, extra=extra)   # DCP, each rank its shards; atomic
            return
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(self.model, self.opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        if self.world == 1 or dist.get_rank() == 0:
            torch.save(extra, os.path.join(path, "extra.pt"))

    def load(self, path: str) -> int:
        if not (self.args.plain or self.args.fsdp2):
            extra = self.model.load(path, self.opt)   # resharded to this run's plan, mesh and rank count
        else:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

            msd, osd = get_state_dict(self.model, self.opt)
            state = {"model": msd, "optim": osd}
            dcp.load(state, checkpoint_id=path)
            set_state_dict(self.model, self.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            extra = torch.load(os.path.join(path, "extra.pt"), weights_only=False)
        self.sched.load_state_dict(extra["scheduler"])
        return int(extra["step"])


def checkpoint_to_resume(path: str) -> str:
    """``path`` itself when it is a checkpoint, else its latest ``step-N`` checkpoint."""
    if os.path.exists(os.path.join(path, ".metadata")):
        return path
    steps = [(int(m.group(1)), d) for d in os.listdir(path) if (m := re.fullmatch(r"step-(\d+)", d))]
    if not steps:
        raise SystemExit(f"--resume {path}: no checkpoint there (a .metadata file, or step-N directories)")
    return os.path.join(path, max(steps)[1])


@torch.no_grad()
def evaluate(s: Setup, dl: DataLoader, n_batches: int) -> float:
    """The mean loss over the first ``n_batches`` global batches of the held-out set."""
    s.model.eval()
    total = 0.0
    for i, (x, y) in enumerate(dl):
        if i == n_batches:
            break
        x, y = x.to(s.device), y.to(s.device)
        total += float(mean_over_ranks(lm_loss(s.forward(x), y), s.world))
    s.model.train()
    return total / min(n_batches, len(dl))


def train(args: argparse.Namespace) -> dict[str, Any]:
    """The loop; returns the job's loss per step (and the evaluations) on every rank."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    s = Setup(args, device)
    rank = dist.get_rank() if dist.is_initialized() else 0
    say = print if rank == 0 else (lambda *a, **k: None)
    train_dl = loader(ToySequences(args.dataset_size, args.seq_len, args.vocab, seed=1), args.batch_size,
                      s.replicas, s.replica, shuffle=True, seed=args.seed)
    eval_dl = loader(ToySequences(args.batch_size * args.eval_batches, args.seq_len, args.vocab, seed=2),
                     args.batch_size, s.replicas, s.replica, shuffle=False, seed=0)
    start = s.load(checkpoint_to_resume(args.resume)) if args.resume else 0
    if args.resume:
        say(f"resumed from {args.resume} at step {start}")
    metrics = StepMetrics(flops_per_token=flops_per_token(s.n_params, n_layers=args.layers, n_heads=args.heads,
                                                          head_dim=args.dim // args.heads, seq_len=args.seq_len),
                          peak=args.peak, devices=s.world, log=say, log_every=args.log_every, step=start)
    if metrics.describe():
        say(metrics.describe())
    losses, evals = [], []
    data = batches(train_dl, start)
    for step in range(start + 1, args.steps + 1):
        x, y = next(data)
        x, y = x.to(device), y.to(device)
        metrics.start()
        loss = lm_loss(s.forward(x), y)   # this rank's piece: its own loss
        loss.backward()                    # gradients averaged over the pieces (DDP / FSDP2's)
        norm = s.clip(args.max_norm)
        s.opt.step()
        s.sched.step()
        s.opt.zero_grad(set_to_none=True)
        job_loss = mean_over_ranks(loss, s.world)
        metrics.stop(job_loss, tokens=args.batch_size * args.seq_len, grad_norm=norm)
        losses.append(float(job_loss))
        if args.ckpt and (step == args.steps or args.save_every and step % args.save_every == 0):
            s.save(os.path.join(args.ckpt, f"step-{step}"), step)
            say(f"saved {os.path.join(args.ckpt, f'step-{step}')}")
        if args.eval_every and step % args.eval_every == 0:
            evals.append((step, evaluate(s, eval_dl, args.eval_batches)))
            say(f"eval at step {step}: loss {evals[-1][1]:.4f}")
    return {"losses": losses, "evals": evals, "start": start,
            "tps": [r.per_device for r in metrics.history]}


# -- command line -----------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--plain", action="store_true", help="plain PyTorch in one process on the global batch")
    how.add_argument("--fsdp2", action="store_true", help="FSDP2's fully_shard per block on every rank")
    ap.add_argument("--nproc", type=int, default=0, help="start this many ranks with spmdc's launcher (no torchrun)")
    ap.add_argument("--mesh", default=None, help="spmdc's mesh, e.g. dp=2,tp=2 (default: dp=2,tp=N/2, or dp=N)")
    ap.add_argument("--plan", default=None, help="spmdc's plan (default: fsdp+tp with a tp axis, else fsdp)")
    ap.add_argument("--model", choices=("llama", "gpt2"), default="llama", help="spmdc's built-in tiny model")
    ap.add_argument("--hf", choices=("llama", "gpt2", "mixtral"), default=None,
                    help="a HuggingFace model built from a config (needs transformers; nothing downloaded)")
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=8, help="the global batch (every data-parallel piece)")
    ap.add_argument("--dataset-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20,
                    help="the last training step, and the schedule's length (a resumed run keeps the saved schedule)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--max-norm", type=float, default=1.0, help="clip the gradients to this global norm")
    ap.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters and updates in float32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ckpt", default=None, help="save checkpoints to DIR/step-N (the last step's, and --save-every's)")
    ap.add_argument("--save-every", type=int, default=0, help="a checkpoint every N steps")
    ap.add_argument("--resume", default=None, help="a checkpoint, or a --ckpt directory (its latest step-N)")
    ap.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: never)")
    ap.add_argument("--eval-batches", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument("--peak", default=None,
                    help="the device's peak FLOP/s for MFU: a number or a name (h100, a100, l4, mi300x, ...; "
                         "default $SPMDC_PEAK_FLOPS, else the GPU's own)")
    args = ap.parse_args(argv)
    if args.bf16 and args.model == "llama" and not (args.hf or args.plain):
        ap.error("--bf16: the built-in llama-tiny adds its float32 causal mask to bf16 scores, which then meet "
                 "bf16 values in one matmul (FSDP2's MixedPrecisionPolicy fails alike); use --model gpt2 or --hf llama")
    if args.plain and ("RANK" in os.environ or args.nproc):
        ap.error("--plain runs in one process: start it with python, not torchrun or --nproc")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """One rank's run (or the whole --plain run); the process group is made here unless it exists."""
    args = parse(argv)
    own = not args.plain and not dist.is_initialized()
    if own:
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        return train(args)
    finally:
        if own:
            dist.destroy_process_group()


if __name__ == "__main__":
    cli = parse(sys.argv[1:])
    if cli.nproc and "RANK" not in os.environ:   # spmdc's launcher starts the ranks (torchrun's machinery)
        from spmdc.runtime.launcher import launch

        launch(main, cli.nproc, (sys.argv[1:],))
    else:
        main(sys.argv[1:])
