#!/usr/bin/env python3
"""ddp_check.py: a plain PyTorch DistributedDataParallel job whose ranks
must end with bit-identical weights.

Nothing here is specific to ddl: the process group comes from the standard
variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) through
init_method="env://", as under torchrun.  A 2-layer MLP, the same on every
rank, trains for a few SGD steps on synthetic data that each rank draws with
its own seed, so the ranks see different batches and only DDP's gradient
averaging keeps their replicas equal.  Each rank then prints

    rank R/W local L node N weights-sha256 HEX

where HEX is the SHA-256 of the parameters' bytes, and exits 0.  Rank 0
also prints the loss before and after training.

--no-sync trains inside DDP's no_sync() context (no gradient averaging): the
replicas drift apart and the hashes differ, which shows that a comparison of
the hashes detects disagreeing ranks.
"""

import argparse
import datetime
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

IN, HIDDEN, OUT = 16, 32, 4


def batch(gen, size):
    """A batch of inputs and labels from a fixed rule, drawn with gen."""
    x = torch.randn(size, IN, generator=gen)
    y = (x[:, :OUT] + 0.5 * x[:, OUT:2 * OUT]).argmax(dim=1)
    return x, y


def say(line):
    """Print line in one write: the ranks often share one stdout, and
    print() writes the text and its newline separately when unbuffered
    (PYTHONUNBUFFERED), so lines of different ranks could interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="SGD steps (default 30)")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank and step (default 64)")
    ap.add_argument("--no-sync", action="store_true",
                    help="train without gradient averaging (replicas diverge)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds for the process group to form and for each collective (default 60)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = os.environ.get("LOCAL_RANK", "?")
    node = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "?"))

    # The same initial weights on every rank (DDP would broadcast rank 0's
    # anyway); the data differ per rank.
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1000 + rank)
    x_eval, y_eval = batch(torch.Generator().manual_seed(99), 512)

    with torch.no_grad():
        loss0 = loss_fn(model(x_eval), y_eval).item()
    for _ in range(args.steps):
        x, y = batch(gen, args.batch)
        opt.zero_grad()
        if args.no_sync:
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        else:
            loss_fn(ddp(x), y).backward()
        opt.step()
    with torch.no_grad():
        loss1 = loss_fn(model(x_eval), y_eval).item()

    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    say(f"rank {rank}/{world} local {local} node {node} weights-sha256 {h.hexdigest()}")
    if rank == 0:
        say(f"loss {loss0:.4f} -> {loss1:.4f} after {args.steps} steps on {world} ranks")

    # Nobody leaves before everyone has printed (a late rank would otherwise
    # see its peers' connections close during its last collective).
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
