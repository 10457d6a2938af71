"""ddl: libddl's collectives, requests, mapped memory and checkpoints from Python.

    import ddl, numpy as np
    ddl.init()                       # under ddlrun -n N or srun --ddl
    x = np.full(1000, ddl.rank(), dtype=np.float32)
    ddl.allreduce(x)                 # in place, sum over the ranks
    req = ddl.iallreduce(x, op="avg")
    ...                              # compute while it runs
    req.wait()
    ddl.finalize()

Buffers: any writable C-contiguous object with the buffer protocol (numpy
arrays, bytearray, memoryview, ddl.mem_alloc() memory) or a torch tensor
(CPU: its storage in place; CUDA: the device pointer, for libddl's GPU
paths).  The element type comes from the object (float32, float64, float16,
bfloat16, int32, int64, uint8); `dtype=` overrides it for untyped buffers.
Every call on the world communicator; blocking calls release the GIL.

Errors: ddl.Error (and its subclasses ddl.Aborted, ddl.Restart and
ddl.Timeout) carry libddl's message and its status code (`.status`).  Bad
arguments raise TypeError or ValueError before anything is sent.

Warm restart in place: after ddl.warm_enable(), a failure elsewhere does not
kill this process; its collectives raise ddl.Restart, the program calls
ddl.rejoin() (the new world: rank() and size() may change), reloads its last
committed checkpoint and goes on.  See docs/python.md.
"""

import sys as _sys

from ._ddl import (  # noqa: F401  (re-exported)
    Aborted,
    CheckpointWriter,
    EXIT_STOPPED,
    Error,
    Memory,
    Pointer,
    Restart,
    Timeout,
    VERSION_MAJOR,
    VERSION_MINOR,
    VERSION_PATCH,
    abort,
    dtype_size,
    finalize,
    gpu_count,
    heartbeat,
    init,
    initialized,
    local_rank,
    local_size,
    mem_alloc,
    node_rank,
    num_nodes,
    rank,
    rejoin,
    restart_pending,
    should_stop,
    size,
    warm_enable,
)
from . import _ddl

__version__ = "%d.%d.%d" % (VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH)

__all__ = [
    "Aborted", "Error", "Timeout", "Request", "Memory", "Pointer",
    "init", "finalize", "initialized", "rank", "size", "local_rank", "local_size",
    "node_rank", "num_nodes", "gpu_count", "heartbeat", "should_stop", "EXIT_STOPPED", "abort",
    "mem_alloc", "Restart", "warm_enable", "restart_pending", "rejoin",
    "allreduce", "iallreduce", "bcast", "ibcast", "allgather", "iallgather",
    "reduce_scatter", "ireduce_scatter", "barrier", "ibarrier", "as_buffer",
    "future", "set_checks",
]

_TORCH_DTYPES = None
_checks = False


def _torch_dtypes():
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch
        _TORCH_DTYPES = {
            torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
            torch.bfloat16: "bfloat16", torch.int32: "int32", torch.int64: "int64",
            torch.uint8: "uint8",
        }
    return _TORCH_DTYPES


def _is_tensor(x):
    t = _sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def as_buffer(x, what="ddl", writable=True):
    """What libddl gets for x: x itself (buffer protocol) or a ddl.Pointer
    to a torch tensor's memory.  Raises TypeError/ValueError with the reason
    when x cannot be used in place."""
    if not _is_tensor(x):
        return x
    dtypes = _torch_dtypes()
    if x.dtype not in dtypes:
        raise TypeError("%s: torch dtype %s is not supported by libddl (float32, float64, "
                        "float16, bfloat16, int32, int64, uint8)" % (what, x.dtype))
    if not x.is_contiguous():
        raise ValueError("%s: the tensor is not contiguous (shape %s, strides %s): pass "
                         "tensor.contiguous() and copy the result back"
                         % (what, tuple(x.shape), x.stride()))
    if x.is_sparse or x.layout != _sys.modules["torch"].strided:
        raise TypeError("%s: only dense (strided) tensors are supported, not %s" % (what, x.layout))
    if x.device.type == "cuda":
        device = 1
    elif x.device.type == "cpu":
        device = 0
    else:
        raise TypeError("%s: tensors on %s are not supported (CPU or CUDA)" % (what, x.device))
    if writable and x.requires_grad and x.is_leaf:
        # in-place writes to a leaf that requires grad are what autograd
        # forbids; the caller should pass x.data or use torch.no_grad()
        raise ValueError("%s: the tensor requires grad: pass tensor.data (or work under "
                         "torch.no_grad())" % what)
    return Pointer(x.data_ptr(), x.numel() * x.element_size(), dtypes[x.dtype], x,
                   not writable, device)


def set_checks(on=True):
    """Debug mode: before each collective, the ranks compare the call, the
    element count, the type and the op (one small allgather) and every rank
    raises ddl.Error if they differ, instead of a wrong result or a hang.
    Costs one extra collective per call; off by default.  Also on when the
    environment has DDL_PY_CHECKS=1."""
    global _checks
    _checks = bool(on)


def _check(kind, x, op=None, extra=0, count=None, dtype=None):
    import struct
    if not _checks:
        return
    n = size()
    if count is None:
        count = -1
    sig = struct.pack("<16s16sq16sq", kind.encode()[:16], (op or "").encode()[:16], count,
                      (dtype or "").encode()[:16], extra)
    out = bytearray(len(sig) * n)
    out[rank() * len(sig):(rank() + 1) * len(sig)] = sig
    _ddl.allgather(out, dtype="uint8")
    sigs = [bytes(out[i * len(sig):(i + 1) * len(sig)]) for i in range(n)]
    bad = [i for i in range(n) if sigs[i] != sigs[0]]
    if bad:
        def show(s):
            k, o, c, d, e = struct.unpack("<16s16sq16sq", s)
            return "%s(count=%d, dtype=%s, op=%s, %d)" % (
                k.rstrip(b"\0").decode(), c, d.rstrip(b"\0").decode(),
                o.rstrip(b"\0").decode() or "-", e)
        raise Error("ddl.%s: the ranks' calls differ: rank 0 %s, rank %d %s (every rank must "
                    "pass the same count, dtype and op)" % (kind, show(sigs[0]), bad[0],
                                                            show(sigs[bad[0]])))


def allreduce(x, op="sum", dtype=None):
    """Reduce x over every rank, in place (op: sum, prod, min, max, avg);
    returns x.  Collective and blocking (the GIL is released meanwhile)."""
    b = as_buffer(x, "ddl.allreduce")
    if _checks:
        _check("allreduce", b, op, 0, *_count_dtype(x, b, dtype))
    _ddl.allreduce(b, op, dtype)
    return x


def iallreduce(x, op="sum", dtype=None):
    """Non-blocking allreduce(): returns a ddl.Request; x must not be touched
    until it completes (the request keeps it alive)."""
    b = as_buffer(x, "ddl.iallreduce")
    if _checks:
        _check("allreduce", b, op, 0, *_count_dtype(x, b, dtype))
    return _wrap(_ddl.iallreduce(b, op, dtype), x)


def bcast(x, root=0, dtype=None):
    """Copy root's x to every rank, in place; returns x."""
    b = as_buffer(x, "ddl.bcast")
    if _checks:
        _check("bcast", b, None, root, *_count_dtype(x, b, dtype))
    _ddl.bcast(b, root, dtype)
    return x


def ibcast(x, root=0, dtype=None):
    """Non-blocking bcast(): returns a ddl.Request."""
    b = as_buffer(x, "ddl.ibcast")
    if _checks:
        _check("bcast", b, None, root, *_count_dtype(x, b, dtype))
    return _wrap(_ddl.ibcast(b, root, dtype), x)


def allgather(out, send=None, dtype=None):
    """out (size() blocks) receives every rank's block in rank order; this
    rank's block is send, or (send None) already at its place in out.
    Returns out."""
    bo = as_buffer(out, "ddl.allgather")
    bs = None if send is None else as_buffer(send, "ddl.allgather", writable=False)
    if _checks:
        _check("allgather", bo, None, 0, *_count_dtype(out, bo, dtype))
    _ddl.allgather(bo, bs, dtype)
    return out


def iallgather(out, send=None, dtype=None):
    """Non-blocking allgather(): returns a ddl.Request."""
    bo = as_buffer(out, "ddl.iallgather")
    bs = None if send is None else as_buffer(send, "ddl.iallgather", writable=False)
    if _checks:
        _check("allgather", bo, None, 0, *_count_dtype(out, bo, dtype))
    return _wrap(_ddl.iallgather(bo, bs, dtype), out)


def reduce_scatter(x, out=None, op="sum", dtype=None):
    """Reduce x (size() blocks) over every rank; this rank's block of the
    result goes to out, or (out None) to the start of x.  Returns out or x."""
    bi = as_buffer(x, "ddl.reduce_scatter", writable=out is None)
    bo = None if out is None else as_buffer(out, "ddl.reduce_scatter")
    if _checks:
        _check("reduce_scatter", bi, op, 0, *_count_dtype(x, bi, dtype))
    _ddl.reduce_scatter(bi, bo, op, dtype)
    return x if out is None else out


def ireduce_scatter(x, out=None, op="sum", dtype=None):
    """Non-blocking reduce_scatter(): returns a ddl.Request."""
    bi = as_buffer(x, "ddl.ireduce_scatter", writable=out is None)
    bo = None if out is None else as_buffer(out, "ddl.ireduce_scatter")
    if _checks:
        _check("reduce_scatter", bi, op, 0, *_count_dtype(x, bi, dtype))
    return _wrap(_ddl.ireduce_scatter(bi, bo, op, dtype), x if out is None else out)


def barrier():
    """Return once every rank has entered it."""
    _ddl.barrier()


def ibarrier():
    """Non-blocking barrier(): returns a ddl.Request."""
    return _Request(_ddl.ibarrier(), None)


def _count_dtype(x, b, dtype):
    if _is_tensor(x):
        name = dtype or _torch_dtypes()[x.dtype]
        return x.numel() * x.element_size() // dtype_size(name), name
    mv = memoryview(b)
    fmt = mv.format.lstrip("@=<")
    name = dtype or {"f": "float32", "d": "float64", "e": "float16", "B": "uint8",
                     "i": "int%d" % (8 * mv.itemsize), "l": "int%d" % (8 * mv.itemsize),
                     "q": "int64"}.get(fmt, fmt)
    try:
        return mv.nbytes // dtype_size(name), name
    except TypeError:
        return mv.nbytes, name


def _wrap(req, x):
    # the C request's wait() returns what libddl got (a Pointer for a
    # tensor); the wrapper returns the caller's own object
    return _Request(req, x)


class _Request:
    """A posted non-blocking collective.

    wait(timeout=None) blocks until it completes and returns the buffer (the
    object passed); raises ddl.Timeout if timeout seconds pass first (the
    request stays valid: wait again or ddl.abort()), ddl.Aborted or
    ddl.Error if the operation failed.  test() is True once complete, False
    while it runs (never blocks).  future() returns a torch.futures.Future
    completed with the buffer (or the error) by a background thread.
    The request keeps its buffers alive until the operation completes, even
    if the request object itself is dropped."""

    __slots__ = ("_req", "_obj", "__weakref__")

    def __init__(self, req, obj):
        self._req = req
        self._obj = obj

    def wait(self, timeout=None):
        self._req.wait(timeout)
        return self._obj

    def test(self):
        return self._req.test()

    @property
    def done(self):
        return self._req.done

    def future(self):
        """A torch.futures.Future that a background thread completes with
        the buffer once the request does (or with its exception)."""
        return future(self)

    def __repr__(self):
        return repr(self._req).replace("ddl.Request", "ddl.Request(%s)" % type(self._obj).__name__)


def future(req, then=None):
    """torch.futures.Future of a request (see _Request.future).  then (may be
    None) is called with the buffer in the completion thread before the
    future completes, and its result is the future's value."""
    from . import _futures
    return _futures.submit(req, then)


Request = _Request

import os as _os  # noqa: E402

if _os.environ.get("DDL_PY_CHECKS", "") == "1":
    _checks = True
