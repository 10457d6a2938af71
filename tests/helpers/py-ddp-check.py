"""py-ddp-check.py: ddl.torch's DDP hooks under `ddlrun -n N`
(tests/integration/t0028-python-ddp.t).  One scenario a run:

  hooks   an MLP in DistributedDataParallel (small buckets) trains 20 steps on
          different data per rank, once with DDP's own allreduce (gloo), once
          with each ddl hook (allreduce_hook, fp16_compress_hook,
          bf16_compress_hook): every rank ends with the same weights (SHA-256
          compared through ddl.allgather), the ddl hook's weights are close to
          gloo's, the loss goes down, the hooks posted one request per bucket
          and at least one bucket's allreduce was posted while backward was
          still computing earlier layers' gradients (overlap)
  abort   training with the ddl hook; in generation 0 the last rank SIGKILLs
          itself at step 5; the other ranks (which ignore SIGTERM) must get an
          exception from loss.backward() (the agents abort the world) and
          print it; in later generations the run completes
  warm    ddl.warm_enable(); a ddl.mem_alloc() buffer; the last rank SIGKILLs
          itself at step 5 in generation 0; the others catch DDP's error
          (ddl.restart_pending()), ddl.torch.rejoin() keeps their rank, the
          old generation's Memory is refused (BufferError), a new one works,
          and every rank (the restarted one too) trains 10 steps to the same
          weights in generation 1
  frames  a module whose forward raises, in DDP: inside the except clause the
          exception's traceback keeps the DDP module (and its process group)
          alive, and ddl.torch._release_frames(), which ddl.torch.rejoin()
          calls first, lets it go

Prints PASS/FAIL lines; exits 1 on any failure.
"""

import gc
import hashlib
import os
import signal
import sys
import time
import weakref

import numpy as np
import torch
import torch.distributed as dist

import ddl
import ddl.torch
import io

# One write(2) per line: the ranks share the launcher's stdout, and an
# unbuffered stdout (python3 -u, PYTHONUNBUFFERED) writes a line and its
# newline separately, so that two ranks' lines can run together.
sys.stdout = io.TextIOWrapper(open(sys.stdout.fileno(), "wb", buffering=1 << 16, closefd=False),
                              line_buffering=True)


torch.set_num_threads(1)
failures = 0


def check(cond, desc):
    global failures
    if not cond:
        failures += 1
    print("%s rank %d: %s" % ("PASS" if cond else "FAIL", ddl.rank(), desc), flush=True)


def make_model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 512), torch.nn.Tanh(),
        torch.nn.Linear(512, 512), torch.nn.Tanh(),
        torch.nn.Linear(512, 512), torch.nn.Tanh(),
        torch.nn.Linear(512, 8))


def weights_hash(net):
    h = hashlib.sha256()
    for k, v in net.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.digest()


def all_same(digest):
    out = np.zeros(32 * ddl.size(), np.uint8)
    ddl.allgather(out, np.frombuffer(digest, np.uint8).copy())
    return all(out[i * 32:(i + 1) * 32].tobytes() == digest for i in range(ddl.size()))


def train(hook, steps=20, die_at=None):
    net = make_model()
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.25)
    events = []
    if hook is not None:
        def traced(state, bucket, h=hook):
            events.append(("hook", time.monotonic()))
            return h(state, bucket)
        model.register_comm_hook(None, traced)
    # the first layer's weight gradient is among the last computed by backward
    net[0].weight.register_hook(lambda g: events.append(("first", time.monotonic())))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + ddl.rank())
    xe = torch.randn(256, 32, generator=torch.Generator().manual_seed(7))
    ye = (xe[:, :8] * 3).argmax(1)
    with torch.no_grad():
        loss0 = torch.nn.functional.cross_entropy(net(xe), ye).item()
    overlapped = 0
    for step in range(steps):
        if die_at is not None and step == die_at:
            print("rank %d: killing myself at step %d" % (ddl.rank(), step), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(64, 32, generator=g)
        y = (x[:, :8] * 3).argmax(1)
        events.clear()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = [t for e, t in events if e == "first"]
        hooks = [t for e, t in events if e == "hook"]
        if step >= 2 and first and hooks and min(hooks) < first[0]:
            overlapped += 1
    with torch.no_grad():
        loss1 = torch.nn.functional.cross_entropy(net(xe), ye).item()
    return net, loss0, loss1, overlapped


def hooks():
    ref, l0, l1, _ = train(None)
    check(all_same(weights_hash(ref)), "gloo DDP: every rank holds the same weights")
    check(l1 < l0, "gloo DDP: the loss went down (%.4f -> %.4f)" % (l0, l1))
    tol = {"allreduce_hook": 1e-4, "fp16_compress_hook": 2e-2, "bf16_compress_hook": 1e-1}
    for name in ("allreduce_hook", "fp16_compress_hook", "bf16_compress_hook"):
        before = ddl.torch.hook_stats()["buckets"]
        net, l0, l1, overlapped = train(getattr(ddl.torch, name))
        posted = ddl.torch.hook_stats()["buckets"] - before
        check(all_same(weights_hash(net)), "%s: every rank holds the same weights" % name)
        check(l1 < l0, "%s: the loss went down (%.4f -> %.4f)" % (name, l0, l1))
        diff = max((a - b).abs().max().item() for a, b in zip(net.parameters(), ref.parameters()))
        check(diff < tol[name], "%s: weights within %g of gloo's (max difference %.3g)"
              % (name, tol[name], diff))
        check(posted >= 20 * 2, "%s: %d buckets posted in 20 steps (several per step)"
              % (name, posted))
        if ddl.size() > 1:
            check(overlapped > 0, "%s: in %d of 18 steps a bucket was posted before backward "
                  "reached the first layer (overlap)" % (name, overlapped))


def abort():
    gen = int(os.environ.get("DDL_GENERATION", "0"))
    signal.signal(signal.SIGTERM, lambda s, f: print("rank %d: SIGTERM ignored" % ddl.rank(),
                                                     flush=True))
    victim = ddl.size() - 1
    die_at = 5 if gen == 0 and ddl.rank() == victim else None
    t0 = time.monotonic()
    try:
        net, l0, l1, _ = train(ddl.torch.allreduce_hook, steps=40 if gen == 0 else 10,
                               die_at=die_at)
    except Exception as e:  # noqa: BLE001
        print("rank %d: generation %d: training raised %s after %.1f s: %s"
              % (ddl.rank(), gen, type(e).__name__, time.monotonic() - t0,
                 str(e).splitlines()[0][:300]), flush=True)
        os._exit(3)
    check(all_same(weights_hash(net)), "generation %d: every rank holds the same weights" % gen)
    print("rank %d: generation %d completed" % (ddl.rank(), gen), flush=True)


def warm():
    gen = int(os.environ.get("DDL_GENERATION", "0"))
    victim = ddl.size() - 1
    if gen == 0:
        ddl.warm_enable()
        mem = ddl.mem_alloc(4096)
        np.frombuffer(mem, np.uint8)[:] = 7
        try:
            train(ddl.torch.allreduce_hook, steps=40, die_at=5 if ddl.rank() == victim else None)
            check(False, "generation 0 raised when rank %d died" % victim)
            return
        except Exception:  # noqa: BLE001 (DDP raises the hook's ddl.Restart as RuntimeError)
            check(ddl.restart_pending(), "generation 0 ended: ddl.restart_pending() is true")
        old, size = ddl.rank(), ddl.size()
        r, n = ddl.torch.rejoin()
        check((r, n) == (old, size), "ddl.torch.rejoin(): rank %d of %d again (%d of %d)"
              % (old, size, r, n))
        check(int(os.environ.get("DDL_GENERATION", "0")) == 1, "... in generation 1")
        try:
            memoryview(mem)
            refused = False
        except BufferError:
            refused = True
        check(refused, "the Memory of generation 0 is refused after the rejoin (BufferError)")
        mem.free()  # released already: nothing happens
        gen = 1
    mem = ddl.mem_alloc(4096)  # collective: the restarted rank's worker too
    check(len(memoryview(mem)) == 4096, "ddl.mem_alloc() works in generation %d" % gen)
    mem.free()
    net, _, _, _ = train(ddl.torch.allreduce_hook, steps=10)
    check(all_same(weights_hash(net)), "generation %d: every rank holds the same weights" % gen)
    print("rank %d: generation %d completed" % (ddl.rank(), gen), flush=True)


class Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        raise RuntimeError("forward failed")


def frames():
    for release in (False, True):
        model = torch.nn.parallel.DistributedDataParallel(Raises())
        ref = weakref.ref(model)
        try:
            model(torch.zeros(1, 2))
        except RuntimeError:
            model = None
            if release:
                ddl.torch._release_frames()
            gc.collect()
            alive = ref() is not None
        if release:
            check(not alive, "inside the except clause, _release_frames() lets the DDP module go")
        else:
            check(alive, "inside the except clause, the traceback keeps the DDP module alive "
                  "(what _release_frames() is for)")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("hooks", "abort", "frames", "warm"):
        print("usage: py-ddp-check.py hooks|abort|frames|warm", file=sys.stderr)
        return 2
    ddl.torch.init_process_group()
    check(dist.get_rank() == ddl.rank() and dist.get_world_size() == ddl.size(),
          "torch.distributed and ddl agree on rank %d of %d" % (ddl.rank(), ddl.size()))
    if mode == "hooks":
        hooks()
    elif mode == "frames":
        frames()
    elif mode == "warm":
        warm()
    else:
        abort()
    r = ddl.rank()
    dist.destroy_process_group()
    ddl.finalize()
    print("rank %d: %d failures" % (r, failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
