"""py-gpu-check.py: the ddl Python package on CUDA tensors, under
`ddlrun -n N` (tests/integration/t0041-python-gpu.t).  One scenario a run:

  colls     allreduce (each op), bcast (from each root), allgather and
            reduce_scatter (separate output and in place) on CUDA tensors of
            every dtype libddl takes, blocking and through torch futures,
            from 1 element to 1 M + 3, each checked element for element
            against a reference every rank computes on the CPU; and a
            tensor written by a kernel on torch's stream just before the
            call (libddl must see the kernel's result)
  ddp       DistributedDataParallel on a CUDA model: the same SGD steps with
            ddl.torch.allreduce_hook (and the fp16/bf16 compressing hooks)
            and with DDP's own allreduce on the torch backend BACKEND
            (gloo or nccl); the weights agree within float rounding, and
            every rank ends with the same weights

Prints "PASS rank R: ..." / "FAIL rank R: ..." lines; exits 1 on any
failure, 77 (with the reason) when torch sees no usable GPU.
"""

import hashlib
import io
import sys

import numpy as np

import ddl
import ddl.torch
import torch
import torch.distributed as dist

sys.stdout = io.TextIOWrapper(open(sys.stdout.fileno(), "wb", buffering=1 << 16, closefd=False),
                              line_buffering=True)
failures = 0
R = 0
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8")


def check(cond, desc):
    global failures
    if not cond:
        failures += 1
    print("%s rank %d: %s" % ("PASS" if cond else "FAIL", R, desc), flush=True)


def rank_values(count, r, op):
    """Rank r's input as float64: small integers, exact in every dtype and
    in every reduction of up to 8 ranks."""
    i = np.arange(count, dtype=np.float64)
    if op == "prod":
        return 1 + (i + r) % 2
    return (i * 7 + r * 3) % 5 + r


def reduced(count, n, op):
    ins = np.stack([rank_values(count, r, op) for r in range(n)])
    return {"sum": ins.sum(0), "prod": ins.prod(0), "min": ins.min(0), "max": ins.max(0),
            "avg": ins.sum(0) / n}[op]


def on_gpu(v, dtype):
    return torch.from_numpy(v).to(getattr(torch, dtype)).cuda()


def same(x, ref):
    got = x.cpu().to(torch.float64).numpy()
    return got.shape == ref.shape and bool(np.array_equal(got, ref))


def colls():
    n, r = ddl.size(), ddl.rank()
    for dtype in DTYPES:
        for count in (1, 1000, (1 << 20) + 3):
            ops = ["sum", "prod", "min", "max"] + (["avg"] if dtype.startswith(("float", "bf"))
                                                   else [])
            for op in ops:
                if op == "prod" and count > 1000:
                    continue  # 2^n stays exact; the long vectors test sum/min/max
                x = on_gpu(rank_values(count, r, op), dtype)
                ddl.allreduce(x, op=op)
                check(same(x, reduced(count, n, op)), "allreduce %s %s x %d on cuda:%d"
                      % (op, dtype, count, x.device.index))
                y = on_gpu(rank_values(count, r, op), dtype)
                got = ddl.iallreduce(y, op=op).future().wait()
                check(got is y and same(y, reduced(count, n, op)),
                      "iallreduce %s %s x %d, future" % (op, dtype, count))
            for root in range(n):
                x = on_gpu(rank_values(count, r, "sum"), dtype)
                ddl.bcast(x, root=root)
                check(same(x, rank_values(count, root, "sum")),
                      "bcast %s x %d from %d" % (dtype, count, root))
            blocks = np.concatenate([rank_values(count, q, "sum") for q in range(n)])
            out = torch.zeros(n * count, dtype=getattr(torch, dtype), device="cuda")
            ddl.allgather(out, on_gpu(rank_values(count, r, "sum"), dtype))
            check(same(out, blocks), "allgather %s x %d" % (dtype, count))
            inplace = on_gpu(np.zeros(n * count), dtype)
            inplace[r * count:(r + 1) * count] = on_gpu(rank_values(count, r, "sum"), dtype)
            ddl.iallgather(inplace).wait(timeout=60)
            check(same(inplace, blocks), "iallgather in place %s x %d" % (dtype, count))
            full = np.concatenate([rank_values(count, r + q, "sum") for q in range(n)])
            want = sum(np.concatenate([rank_values(count, p + q, "sum") for q in range(n)])
                       for p in range(n))[r * count:(r + 1) * count]
            x = on_gpu(full, dtype)
            o = torch.zeros(count, dtype=getattr(torch, dtype), device="cuda")
            ddl.reduce_scatter(x, o)
            check(same(o, want), "reduce_scatter %s x %d" % (dtype, count))
            x = on_gpu(full, dtype)
            ddl.reduce_scatter(x)
            check(same(x[:count], want), "reduce_scatter in place %s x %d" % (dtype, count))
    # a kernel queued on torch's stream right before the call: libddl
    # orders its device work after it (the legacy default stream)
    x = torch.full((1 << 22,), float(r + 1), device="cuda")
    x.mul_(2.0)
    ddl.allreduce(x)
    check(bool((x == float(n * (n + 1))).all()), "allreduce sees the result of the kernel "
          "queued just before it")
    ddl.barrier()


def model(width, depth, seed):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers).cuda()


def train(net, hook, steps, width):
    m = torch.nn.parallel.DistributedDataParallel(net, device_ids=[torch.cuda.current_device()],
                                                  bucket_cap_mb=1)
    if hook is not None:
        m.register_comm_hook(None, hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    g = torch.Generator(device="cpu").manual_seed(100 + ddl.rank())
    for _ in range(steps):
        x = torch.randn(32, width, generator=g).cuda()
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def ddp(backend):
    width, depth, steps = 256, 6, 20
    ref = train(model(width, depth, 1), None, steps, width)
    for name, hook, tol in (("allreduce_hook", ddl.torch.allreduce_hook, 1e-5),
                            ("fp16_compress_hook", ddl.torch.fp16_compress_hook, 1e-2),
                            ("bf16_compress_hook", ddl.torch.bf16_compress_hook, 5e-2)):
        w = train(model(width, depth, 1), hook, steps, width)
        err = float((w - ref).abs().max() / ref.abs().max())
        check(err <= tol, "DDP on cuda, %d steps: ddl %s against %s's own allreduce: largest "
              "difference %.2e of the largest weight (allowed %.0e)"
              % (steps, name, backend, err, tol))
        h = hashlib.sha256(w.cpu().numpy().tobytes()).hexdigest()
        hs = torch.zeros(ddl.size() * 32, dtype=torch.uint8)
        ddl.allgather(hs, torch.frombuffer(bytearray(bytes.fromhex(h)), dtype=torch.uint8))
        check(len({bytes(hs[q * 32:(q + 1) * 32].tolist()) for q in range(ddl.size())}) == 1,
              "DDP with %s: every rank has the same weights (sha256 %s)" % (name, h[:16]))
    s = ddl.torch.hook_stats()
    check(s["buckets"] > 0, "the hooks posted %d buckets, %d bytes" % (s["buckets"], s["bytes"]))


def main():
    global R
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("colls", "ddp"):
        print("usage: py-gpu-check.py colls|ddp [gloo|nccl]", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("SKIP no usable GPU: torch.cuda.is_available() is False (torch %s)"
              % torch.__version__, flush=True)
        return 77
    ddl.init()
    R = ddl.rank()
    torch.cuda.set_device(ddl.local_rank() % torch.cuda.device_count())
    if mode == "colls":
        colls()
    else:
        ddl.torch.init_process_group(backend=sys.argv[2] if len(sys.argv) > 2 else "gloo")
        ddp(dist.get_backend())
        dist.destroy_process_group()
    ddl.finalize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
