#!/usr/bin/env python3
"""torch-ddp-bench.py: PyTorch DDP step time with ddl's allreduce hook against
DDP on a torch backend (gloo, or nccl on GPUs), same run, same model; and
ddl.allreduce against torch.distributed.all_reduce on the same tensors.

    ddlrun -n 4 python3 bench/torch-ddp-bench.py [--params 1,10,50] [--steps 10]
    ddlrun -n 1 python3 bench/torch-ddp-bench.py --device cuda --backend nccl

For each model size (millions of parameters: an MLP of equal square layers)
the two variants alternate, --rounds times, --steps timed steps each after
--warmup steps; the table gives the median step time of each variant (the
slowest rank's mean per round, median over rounds) and gloo's time over
ddl's.  Input: a batch of --batch random samples per rank; SGD.  Then the
allreduce table: float32 tensors of the same sizes, --reps operations each,
median.  With --device cuda the model, the batch and the tensors are on
each rank's GPU (local rank modulo the GPUs; ranks may share one) and
every timing ends with torch.cuda.synchronize().  Rank 0 prints markdown
tables for docs/benchmarks.md.
"""

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import ddl
import ddl.torch


def sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def model_of(mparams, device):
    """An MLP of square layers with about mparams million parameters."""
    target = int(mparams * 1e6)
    width = 512 if mparams <= 2 else 1024 if mparams <= 16 else 2048
    layers = max(1, round(target / (width * width + width)))
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    torch.manual_seed(0)
    return torch.nn.Sequential(*mods).to(device), width


def slowest(seconds):
    """The largest value over the ranks (through ddl)."""
    v = np.array([seconds], np.float64)
    ddl.allreduce(v, op="max")
    return float(v[0])


def time_ddp(net, width, hook, args):
    ids = [torch.cuda.current_device()] if args.device == "cuda" else None
    model = torch.nn.parallel.DistributedDataParallel(net, device_ids=ids)
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(args.batch, width,
                    generator=torch.Generator().manual_seed(ddl.rank())).to(args.device)

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    for _ in range(args.warmup):
        step()
    sync(args)
    ddl.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(args)
    return slowest((time.perf_counter() - t0) / args.steps)


def time_allreduce(t, fn, args):
    ts = []
    for _ in range(args.reps):
        sync(args)
        ddl.barrier()
        t0 = time.perf_counter()
        fn(t)
        sync(args)
        ts.append(slowest(time.perf_counter() - t0))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="1,10,50", help="model sizes, millions of parameters")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--only", choices=("ddp", "allreduce"), help="one of the two tables")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                    help="torch.distributed's backend, the peer")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("torch-ddp-bench.py: --device cuda: torch %s sees no usable GPU"
                             % torch.__version__)
        ddl.init()
        torch.cuda.set_device(ddl.local_rank() % torch.cuda.device_count())
    rank, size = ddl.torch.init_process_group(backend=args.backend)
    peer = args.backend
    sizes = [float(s) for s in args.params.split(",")]
    rows = []
    for mp in sizes if args.only != "allreduce" else []:
        net, width = model_of(mp, args.device)
        nparams = sum(p.numel() for p in net.parameters())
        t_gloo, t_ddl = [], []
        for _ in range(args.rounds):
            t_gloo.append(time_ddp(net, width, None, args))
            t_ddl.append(time_ddp(net, width, ddl.torch.allreduce_hook, args))
        g, d = statistics.median(t_gloo), statistics.median(t_ddl)
        rows.append((nparams, g, d))
        if rank == 0:
            print("# %.1f M parameters on %s: %s %s ms, ddl %s ms" % (
                nparams / 1e6, args.device, peer, " ".join("%.1f" % (1e3 * v) for v in t_gloo),
                " ".join("%.1f" % (1e3 * v) for v in t_ddl)), flush=True)
        del net
    ar = []
    for mp in sizes if args.only != "ddp" else []:
        t = torch.ones(int(mp * 1e6), device=args.device)
        g = time_allreduce(t, lambda t: dist.all_reduce(t), args)
        d = time_allreduce(t, lambda t: ddl.allreduce(t), args)
        ar.append((t.numel(), g, d))
    if rank == 0 and rows:
        print()
        print("| ranks | device | parameters | DDP step, %s (ms) | DDP step, ddl hook (ms) | "
              "%s / ddl |" % (peer, peer))
        print("| ---: | --- | ---: | ---: | ---: | ---: |")
        for n, g, d in rows:
            print("| %d | %s | %.1f M | %.1f | %.1f | %.2fx |"
                  % (size, args.device, n / 1e6, g * 1e3, d * 1e3, g / d))
    if rank == 0 and ar:
        print()
        print("| ranks | device | float32 elements | MB | torch.distributed.all_reduce, %s (ms) | "
              "ddl.allreduce (ms) | %s / ddl |" % (peer, peer))
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for n, g, d in ar:
            print("| %d | %s | %.1f M | %.0f | %.2f | %.2f | %.2fx |"
                  % (size, args.device, n / 1e6, n * 4 / 1e6, g * 1e3, d * 1e3, g / d))
    dist.destroy_process_group()
    ddl.finalize()


if __name__ == "__main__":
    main()
