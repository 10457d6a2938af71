"""ddl.torch: libddl under PyTorch's DistributedDataParallel.

    import torch, ddl, ddl.torch
    ddl.torch.init_process_group()          # ddl.init() + a gloo group for DDP's setup
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(None, ddl.torch.allreduce_hook)
    ... train as usual: each gradient bucket is averaged by libddl's
    non-blocking allreduce as soon as backward has filled it, while
    backward goes on computing the next buckets.

The hooks post the bucket with ddl.iallreduce(op="avg") and return a
torch.futures.Future that a background thread completes (ddl/_futures.py)
when libddl is done; DDP waits for the futures at the end of backward.  A
failure (the world aborted by ddl.abort() or by the agents after a failure
elsewhere, a transport error) completes the future with ddl.Aborted or
ddl.Error, which DDP raises from loss.backward(): the training loop sees an
exception instead of hanging.

The compressed variants (fp16_compress_hook, bf16_compress_hook) send the
bucket as 16-bit floats (half the bytes) and write the average back into the
bucket in its own type.

Warm restart in place (after ddl.warm_enable()): DDP raises the failure of
the ended generation from loss.backward() (as a RuntimeError that carries
ddl.Restart's text); ddl.restart_pending() tells it apart.  Drop the DDP
model, call ddl.torch.rejoin() (the new world and a new process group),
reload the last committed checkpoint into the module and wrap it in DDP
again.  A fresh worker, too, must load the checkpoint before it builds its
DDP: DDP's constructor sends rank 0's weights to every rank, and a fresh
rank 0 among kept ranks would otherwise send its initial ones.
examples/torch/fmnist_ddp.py --warm-restart does so.
"""

import datetime
import gc
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist

from . import _ddl, future, iallreduce, initialized, init as _ddl_init, rank, size
from . import rejoin as _ddl_rejoin

__all__ = ["init_process_group", "rejoin", "allreduce_hook", "fp16_compress_hook",
           "bf16_compress_hook", "hook_stats"]

_stats = {"buckets": 0, "bytes": 0}


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(backend="gloo", timeout=None, init_ddl=True):
    """Set up torch.distributed's default process group (which DDP uses for
    its own setup: broadcasting the initial parameters and buffers) from
    the environment ddlrun and srun --ddl set (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT), calling ddl.init() first unless init_ddl is
    False or it was already called.  Without a launcher (no RANK), a world
    of one on 127.0.0.1.  Checks that torch's and ddl's ranks agree.
    timeout: seconds (or a timedelta) for the group's operations.  Returns
    (rank, world size)."""
    if init_ddl and not initialized():
        _ddl_init()
    env_rank = os.environ.get("RANK")
    if env_rank is None:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        r, n = (rank(), size()) if initialized() else (0, 1)
    else:
        try:
            r, n = int(env_rank), int(os.environ["WORLD_SIZE"])
        except (KeyError, ValueError):
            raise RuntimeError("ddl.torch.init_process_group: RANK=%r WORLD_SIZE=%r: both must be "
                               "numbers (start the job with ddlrun or srun --ddl)"
                               % (env_rank, os.environ.get("WORLD_SIZE"))) from None
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                raise RuntimeError("ddl.torch.init_process_group: %s is not set (ddlrun and srun "
                                   "--ddl set it)" % var)
    if initialized() and (r, n) != (rank(), size()):
        raise RuntimeError("ddl.torch.init_process_group: torch's rank %d of %d differs from ddl's "
                           "%d of %d (RANK and WORLD_SIZE do not come from ddl's launcher?)"
                           % (r, n, rank(), size()))
    kw = {}
    if timeout is not None:
        kw["timeout"] = timeout if isinstance(timeout, datetime.timedelta) else \
            datetime.timedelta(seconds=timeout)
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=r, world_size=n, **kw)
    return r, n


def rejoin(timeout=None):
    """Warm restart in place: torch.distributed's default process group
    (the ended generation's) is destroyed, ddl.rejoin() joins the new
    generation, and a new group is set up for the new world as
    init_process_group() does (MASTER_ADDR then names rank 0's node in the
    new world).  Drop every DDP model built on the old group first: the
    group, and on rank 0 the rendezvous store listening on MASTER_PORT, only
    go with the last reference.  The group goes before ddl.rejoin(), so that
    a fresh worker (the restarted rank's) never meets the old store: it
    cannot pass its ddl.init() before every kept rank has rejoined.  Raises
    ddl.Error if the warm path failed (exit non-zero: the rank is restarted
    cold).  Returns (rank, world size).

    It may be called inside the except clause that caught the failure: the
    exception being handled holds its traceback's frames, and a frame of
    DDP's forward holds the module (and so the old group and its store,
    which would make the new group's setup hang on rank 0's port); the
    locals of those finished frames are cleared first."""
    _release_frames()
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()  # the old group's last references, and with them its store
    _ddl_rejoin()
    return init_process_group(timeout=timeout, init_ddl=False)


def _release_frames():
    """Clear the locals of the finished frames in the tracebacks of the
    exception being handled (sys.exc_info(), and the exceptions chained to
    it), so that what they referenced can go: a DDP module whose forward
    raised, its process group.  The frames still running (the caller's)
    are left as they are.  Nothing happens outside an except clause."""
    chain, seen = [sys.exc_info()[1]], set()
    while chain:
        exc = chain.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
        chain += [exc.__cause__, exc.__context__]


def _sync_stream(t):
    # libddl orders device buffers after the legacy default stream; work
    # on another stream must be finished first
    if t.is_cuda:
        s = torch.cuda.current_stream(t.device)
        if s != torch.cuda.default_stream(t.device):
            s.synchronize()


def allreduce_hook(state, bucket):
    """DDP communication hook: average the bucket over every rank with
    libddl's non-blocking allreduce, in place.  state is unused (pass
    None)."""
    buf = bucket.buffer()
    _sync_stream(buf)
    _stats["buckets"] += 1
    _stats["bytes"] += buf.numel() * buf.element_size()
    return future(iallreduce(buf, op="avg"))


def _compress_hook(dtype):
    def hook(state, bucket):
        buf = bucket.buffer()
        small = buf.to(dtype)
        _sync_stream(small)
        _stats["buckets"] += 1
        _stats["bytes"] += small.numel() * small.element_size()

        def decompress(value):
            buf.copy_(value)
            return buf
        return future(iallreduce(small, op="avg"), then=decompress)
    return hook


fp16_compress_hook = _compress_hook(torch.float16)
fp16_compress_hook.__name__ = "ddl_fp16_compress_hook"
fp16_compress_hook.__doc__ = """DDP communication hook: like allreduce_hook, but the bucket
travels as float16 (half the bytes; averaged in float, rounded to nearest even) and the
result is written back into the bucket."""

bf16_compress_hook = _compress_hook(torch.bfloat16)
# (not "bf16_compress_hook": DDP refuses a hook of that name without CUDA and NCCL)
bf16_compress_hook.__name__ = "ddl_bf16_compress_hook"
bf16_compress_hook.__doc__ = """DDP communication hook: like fp16_compress_hook with
bfloat16 (float32's range, 8 bits of mantissa)."""


def hook_stats():
    """{'buckets': buckets posted by the hooks, 'bytes': bytes sent}."""
    return dict(_stats)


del _ddl
