"""py-check.py: the ddl Python package under `ddlrun -n N`, one scenario a run
(tests/integration/t0027-python.t):

  colls     every collective (allreduce with each op, bcast from each root,
            allgather and reduce_scatter, with a separate and an in-place
            buffer, barrier) on every dtype, on numpy arrays, torch CPU
            tensors (bfloat16 included), bytearray and memoryview, blocking
            and non-blocking (wait, test polling, torch futures), in place,
            against references every rank computes for itself
  errors    bad input: calls before ddl.init(), read-only and non-contiguous
            buffers, unsupported dtypes, an integer average, a bad op or root,
            sizes that do not divide, a CUDA buffer without a GPU, a leaf
            tensor that requires grad, ranks disagreeing on the count (with
            ddl.set_checks); a wait that times out; every rank still works
            afterwards
  abort     rank 0 never joins; the others' pending requests (wait and
            future) and a blocking call fail with ddl.Aborted within 1 s of
            ddl.abort() from another thread
  mem       ddl.mem_alloc memory as a numpy array and a torch tensor in
            collectives; free() refused while views exist
  ckpt      ddl.checkpoint: save and restore a dict of numpy arrays and torch
            tensors of every dtype plus metadata, bit for bit, sync and async;
            restore in place; latest

Prints "PASS rank R: ..." / "FAIL rank R: ..." lines and "SKIP ..." for parts
that need torch when it is missing; exits 1 on any failure.
"""

import os
import sys
import threading
import time

import numpy as np

import ddl
import ddl.checkpoint
import io

# One write(2) per line: the ranks share the launcher's stdout, and an
# unbuffered stdout (python3 -u, PYTHONUNBUFFERED) writes a line and its
# newline separately, so that two ranks' lines can run together.
sys.stdout = io.TextIOWrapper(open(sys.stdout.fileno(), "wb", buffering=1 << 16, closefd=False),
                              line_buffering=True)


try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    torch = None

failures = 0
R = 0


def check(cond, desc):
    global failures
    if cond:
        print("PASS rank %d: %s" % (R, desc), flush=True)
    else:
        failures += 1
        print("FAIL rank %d: %s" % (R, desc), flush=True)


def raises(exc, fn, desc, match=None):
    try:
        fn()
    except exc as e:
        ok = match is None or match in str(e)
        check(ok, "%s -> %s%s" % (desc, type(e).__name__, "" if ok else ": %s" % e))
        if ok:
            print("   message: %s" % e, flush=True)
        return e
    except Exception as e:  # noqa: BLE001
        check(False, "%s -> %s (wanted %s): %s" % (desc, type(e).__name__, exc.__name__, e))
        return e
    check(False, "%s -> no exception (wanted %s)" % (desc, exc.__name__))
    return None


NP_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
             "int32": np.int32, "int64": np.int64, "uint8": np.uint8}
FLOATS = ("float32", "float64", "float16", "bfloat16")


def values(op, count, r, n, dtype):
    """Rank r's input (float64) for op, and exact in every dtype."""
    i = np.arange(count)
    if op == "prod":
        return (1 + (i + r) % 2).astype(np.float64)
    if op == "avg":
        return (n * ((i * 7 + r * 3) % 5)).astype(np.float64)
    v = ((i * 7 + r * 3) % 5 + r).astype(np.float64)
    if dtype == "uint8" and op == "sum":
        v[::3] += 200  # the sum wraps modulo 256
    return v


def reference(op, count, n, dtype):
    ins = np.stack([values(op, count, r, n, dtype) for r in range(n)]) if count else \
        np.zeros((n, 0))
    if op == "sum":
        ref = ins.sum(0)
        if dtype == "uint8":
            ref = np.mod(ref, 256)
    elif op == "prod":
        ref = ins.prod(0)
    elif op == "min":
        ref = ins.min(0)
    elif op == "max":
        ref = ins.max(0)
    else:
        ref = ins.sum(0) / n
    return ref


def make(kind, dtype, v):
    """A buffer of kind ('numpy', 'torch', 'bytearray', 'memoryview') holding v."""
    if kind == "numpy":
        return np.ascontiguousarray(v.astype(NP_DTYPES[dtype]))
    if kind == "torch":
        return torch.from_numpy(v.astype(np.float64)).to(getattr(torch, dtype)).contiguous()
    if kind == "bytearray":
        return bytearray(v.astype(np.uint8).tobytes())
    if kind == "memoryview":
        return memoryview(np.ascontiguousarray(v.astype(NP_DTYPES[dtype])))
    raise ValueError(kind)


def as_f64(kind, dtype, x):
    if kind == "torch":
        return x.to(torch.float64).numpy()
    if kind == "bytearray":
        return np.frombuffer(bytes(x), dtype=np.uint8).astype(np.float64)
    if kind == "memoryview":
        return np.frombuffer(x, dtype=NP_DTYPES[dtype]).astype(np.float64)
    return x.astype(np.float64)


def kinds():
    """(kind, dtype) pairs: every dtype on numpy and torch, bytearray, memoryview."""
    out = [("numpy", d) for d in NP_DTYPES]
    if torch is not None:
        out += [("torch", d) for d in list(NP_DTYPES) + ["bfloat16"]]
    out += [("bytearray", "uint8"), ("memoryview", "float32"), ("memoryview", "int64")]
    return out


def ops_for(dtype):
    return ["sum", "prod", "min", "max"] + (["avg"] if dtype in FLOATS else [])


def colls(nb_mode):
    """nb_mode: None (blocking), 'wait', 'test', 'future'."""
    n, r = ddl.size(), ddl.rank()
    tag = nb_mode or "blocking"
    counts = (0, 1, 7, 1000, 40009) if nb_mode is None else (0, 7, 1000)
    pending = []  # (request, check function, description)

    def run(blocking_fn, nb_fn, args, verify, desc):
        if nb_mode is None:
            blocking_fn(*args)
            verify(desc)
            return
        req = nb_fn(*args)
        pending.append((req, verify, desc))

    def finish():
        # complete in reverse order of posting (libddl completes in order)
        for req, verify, desc in reversed(pending):
            if nb_mode == "wait":
                got = req.wait(timeout=60)
            elif nb_mode == "test":
                t0 = time.time()
                while not req.test():
                    if time.time() - t0 > 60:
                        break
                    time.sleep(0.0005)
                got = None
                check(req.done, "%s: test() became True" % desc)
            else:
                got = req.future().wait()
            if got is not None:
                check(got is req._obj, "%s: wait returns the buffer object" % desc)
            verify(desc)
        pending.clear()

    for kind, dtype in kinds():
        if kind == "torch" and torch is None:
            continue
        for count in counts if kind != "bytearray" else (0, 5, 1000):
            # allreduce, each op
            for op in ops_for(dtype):
                if kind == "bytearray" and op == "sum":
                    pass
                x = make(kind, dtype, values(op, count, r, n, dtype))
                ref = reference(op, count, n, dtype)

                def v_ar(desc, x=x, ref=ref, kind=kind, dtype=dtype):
                    check(np.array_equal(as_f64(kind, dtype, x), ref), desc)
                run(ddl.allreduce, ddl.iallreduce, (x, op), v_ar,
                    "%s allreduce %s %s[%d] %s" % (tag, op, kind, count, dtype))
            # bcast from each root
            for root in range(n):
                x = make(kind, dtype, values("sum", count, r, n, dtype))
                ref = values("sum", count, root, n, dtype).astype(NP_DTYPES.get(dtype, np.float32))
                if dtype == "bfloat16":
                    ref = values("sum", count, root, n, dtype)

                def v_b(desc, x=x, ref=ref, kind=kind, dtype=dtype):
                    check(np.array_equal(as_f64(kind, dtype, x), ref.astype(np.float64)), desc)
                run(ddl.bcast, ddl.ibcast, (x, root), v_b,
                    "%s bcast root %d %s[%d] %s" % (tag, root, kind, count, dtype))
            if kind in ("bytearray", "memoryview"):
                continue  # blocks of typed numpy/torch are enough for the rest
            # allgather: separate send buffer, and in place
            blocks = [values("min", count, q, n, dtype) for q in range(n)]
            ref = np.concatenate(blocks) if count else np.zeros(0)
            out = make(kind, dtype, np.zeros(n * count))
            send = make(kind, dtype, blocks[r])

            def v_ag(desc, out=out, ref=ref, kind=kind, dtype=dtype):
                check(np.array_equal(as_f64(kind, dtype, out), ref), desc)
            run(ddl.allgather, ddl.iallgather, (out, send), v_ag,
                "%s allgather %s[%d] %s" % (tag, kind, count, dtype))
            junk = np.full(n * count, 3.0)
            junk[r * count:(r + 1) * count] = blocks[r]
            out2 = make(kind, dtype, junk)
            run(ddl.allgather, ddl.iallgather, (out2,), lambda d, o=out2, ref=ref, k=kind,
                dt=dtype: check(np.array_equal(as_f64(k, dt, o), ref), d),
                "%s allgather in place %s[%d] %s" % (tag, kind, count, dtype))
            # reduce_scatter: each op, separate output and in place
            for op in ops_for(dtype):
                full = values(op, n * count, r, n, dtype)
                ref = reference(op, n * count, n, dtype)[r * count:(r + 1) * count]
                x = make(kind, dtype, full)
                o = make(kind, dtype, np.zeros(count))
                run(ddl.reduce_scatter, ddl.ireduce_scatter, (x, o, op),
                    lambda d, o=o, ref=ref, k=kind, dt=dtype:
                    check(np.array_equal(as_f64(k, dt, o), ref), d),
                    "%s reduce_scatter %s %s[%d] %s" % (tag, op, kind, count, dtype))
                x2 = make(kind, dtype, full)
                run(ddl.reduce_scatter, ddl.ireduce_scatter, (x2, None, op),
                    lambda d, x2=x2, ref=ref, k=kind, dt=dtype, c=count:
                    check(np.array_equal(as_f64(k, dt, x2)[:c], ref), d),
                    "%s reduce_scatter in place %s %s[%d] %s" % (tag, op, kind, count, dtype))
        if nb_mode is not None and len(pending) > 40:
            finish()
    if nb_mode is not None:
        req = ddl.ibarrier()
        pending.append((req, lambda d: check(True, d), "%s ibarrier" % tag))
        finish()
    else:
        ddl.barrier()
        check(True, "barrier")


def errors():
    n, r = ddl.size(), ddl.rank()
    a = np.ones(8, np.float32)
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    raises(ddl.Error, lambda: ddl.allreduce(a), "allreduce before init", "ddl.init()")
    raises(ddl.Error, lambda: ddl.iallreduce(a), "iallreduce before init", "ddl.init()")
    raises(ddl.Error, lambda: ddl.barrier(), "barrier before init", "ddl.init()")
    raises(ddl.Error, lambda: ddl.mem_alloc(64), "mem_alloc before init", "ddl.init()")
    raises(ddl.Error, ddl.warm_enable, "warm_enable before init", "ddl.init()")
    raises(ddl.Error, ddl.rejoin, "rejoin before init", "ddl.init()")
    check(ddl.restart_pending() is False, "restart_pending before init: False")
    ddl.init()
    n, r = ddl.size(), ddl.rank()
    global R
    R = r
    # warm restart: rejoin without warm_enable leaves ddl initialised
    check(issubclass(ddl.Restart, ddl.Aborted), "ddl.Restart is a ddl.Aborted")
    raises(ddl.Error, ddl.rejoin, "rejoin without warm_enable", "DDL_ERR_INVALID")
    check(ddl.initialized() and ddl.restart_pending() is False,
          "... ddl stays initialised, no restart pending")
    raises(ValueError, lambda: ddl.allreduce(ro), "read-only numpy array", "read-only")
    raises(ValueError, lambda: ddl.allreduce(b"abcd"), "bytes object", "read-only")
    raises(ValueError, lambda: ddl.iallreduce(memoryview(b"abcd")), "read-only memoryview",
           "read-only")
    raises(ValueError, lambda: ddl.allreduce(np.ones((4, 4), np.float32)[:, 1]),
           "non-contiguous numpy array", "contiguous")
    raises(TypeError, lambda: ddl.allreduce(np.ones(4, np.int8)), "int8 array", "not supported")
    raises(TypeError, lambda: ddl.allreduce(np.ones(4, np.complex64)), "complex64 array",
           "not supported")
    raises(TypeError, lambda: ddl.allreduce(np.ones(4, np.int16)), "int16 array", "not supported")
    raises(TypeError, lambda: ddl.allreduce([1.0, 2.0]), "a list", "buffer")
    raises(TypeError, lambda: ddl.allreduce(a, dtype="complex"), "dtype='complex'", "not supported")
    raises(ValueError, lambda: ddl.allreduce(a, op="mean"), "op='mean'", "not one of")
    e = raises(ddl.Error, lambda: ddl.allreduce(np.ones(4, np.int32), op="avg"),
               "average of int32", "DDL_ERR_UNSUPPORTED")
    check(e is not None and getattr(e, "status", None) == -5, "... with .status -5")
    raises(ValueError, lambda: ddl.bcast(a, root=n), "bcast root %d" % n, "not a rank")
    raises(ValueError, lambda: ddl.bcast(a, root=-1), "bcast root -1", "not a rank")
    if n > 1:
        raises(ValueError, lambda: ddl.allgather(np.ones(n * 2 + 1, np.float32)),
               "allgather output not a multiple of the size", "multiple")
        raises(ValueError, lambda: ddl.reduce_scatter(np.ones(n * 2 + 1, np.float32)),
               "reduce_scatter input not a multiple of the size", "multiple")
    raises(ValueError, lambda: ddl.allgather(np.ones(n * 2, np.float32), np.ones(3, np.float32)),
           "allgather send block of the wrong size", "send buffer")
    raises(ValueError, lambda: ddl.allgather(np.ones(n * 2, np.float32), np.ones(2, np.float64)),
           "allgather send block of another type", "send buffer")
    # a CUDA buffer without a GPU (the check in front of libddl's device path)
    keep = np.ones(4, np.float32)
    p = ddl.Pointer(keep.ctypes.data, keep.nbytes, "float32", keep, False, 1)
    if ddl.gpu_count() == 0:
        raises(ddl.Error, lambda: ddl.allreduce(p), "CUDA buffer without a GPU", "no GPU")
    else:
        print("SKIP rank %d: a GPU is present: no no-GPU error to check" % r)
    if torch is not None:
        t = torch.ones(4, 4)
        raises(ValueError, lambda: ddl.allreduce(t[:, 1]), "non-contiguous tensor", "contiguous")
        raises(TypeError, lambda: ddl.allreduce(torch.ones(4, dtype=torch.int16)), "int16 tensor",
               "not supported")
        raises(TypeError, lambda: ddl.allreduce(torch.ones(4, dtype=torch.complex64)),
               "complex tensor", "not supported")
        raises(TypeError, lambda: ddl.allreduce(torch.ones(4, dtype=torch.bool)), "bool tensor",
               "not supported")
        raises(ValueError, lambda: ddl.allreduce(torch.ones(4, requires_grad=True)),
               "leaf tensor that requires grad", "requires grad")
        if not torch.cuda.is_available():
            raises((RuntimeError, AssertionError), lambda: torch.ones(2, device="cuda"),
                   "no CUDA tensor can be made here (torch)")
    # ranks that disagree on the count: caught with ddl.set_checks(True)
    if n > 1:
        ddl.set_checks(True)
        raises(ddl.Error, lambda: ddl.allreduce(np.ones(10 + r, np.float32)),
               "mismatched counts between ranks (checks on)", "differ")
        raises(ddl.Error, lambda: ddl.allreduce(np.ones(10, np.float32), op="max" if r else "min"),
               "mismatched ops between ranks (checks on)", "differ")
        x = np.full(10, r + 1.0, np.float32)
        ddl.allreduce(x)
        check(np.all(x == n * (n + 1) / 2), "matching calls pass the checks")
        ddl.set_checks(False)
    # a wait that times out: rank 0 waits while the others join late
    x = np.full(1000, float(r), np.float64)
    if r == 0 and n > 1:
        req = ddl.iallreduce(x)
        t0 = time.time()
        e = raises(ddl.Timeout, lambda: req.wait(timeout=0.2), "wait(timeout=0.2) on a late peer",
                   "not complete")
        check(isinstance(e, TimeoutError), "... ddl.Timeout is a TimeoutError")
        check(0.15 < time.time() - t0 < 1.0, "... after about 0.2 s (%.2f s)" % (time.time() - t0))
        check(not req.test(), "... and the request is still running")
        req.wait(timeout=30)
        check(np.all(x == n * (n - 1) / 2), "... then completes with the right sum")
    else:
        time.sleep(1.0)
        ddl.allreduce(x)
        check(np.all(x == n * (n - 1) / 2), "late allreduce completes with the right sum")
    # everything still works after the errors
    y = np.arange(100, dtype=np.float32) * (r + 1)
    ddl.allreduce(y)
    check(np.array_equal(y, np.arange(100, dtype=np.float32) * (n * (n + 1) / 2)),
          "allreduce after the errors")
    # last: warm restarts (none happens here); a world of one has no agent
    if n == 1:
        raises(ddl.Error, ddl.warm_enable, "warm_enable in a world of one", "DDL_ERR_UNSUPPORTED")
    else:
        ddl.warm_enable()
        check(True, "warm_enable under ddlrun")
        raises(ddl.Error, ddl.rejoin, "rejoin with no new generation due", "no new generation")
    ddl.allreduce(y)
    check(ddl.initialized() and not ddl.restart_pending(), "... ddl goes on")


def abort():
    n, r = ddl.size(), ddl.rank()
    delay = 0.3
    if r == 0:
        # never joins: the others' operations stay pending until aborted
        time.sleep(delay)
        ddl.abort("rank 0 gives up")
        time.sleep(2.0)  # alive: exiting would be a peer failure, not an abort
    else:
        bufs = [np.zeros(1000, np.float64) for _ in range(3)]
        reqs = [ddl.iallreduce(b) for b in bufs]
        futs = [ddl.iallreduce(torch.zeros(100)).future()] if torch is not None else []
        check(not reqs[0].test(), "operations are pending")
        timer = threading.Timer(delay, ddl.abort, args=("test abort from a timer thread",))
        timer.start()
        t0 = time.time()
        for q in reqs:
            e = raises(ddl.Aborted, lambda q=q: q.wait(timeout=5), "pending request is aborted",
                       "test abort from a timer thread")
        for f in futs:
            raises(ddl.Aborted, f.wait, "its future raises ddl.Aborted")
        lat = (time.time() - t0 - delay) * 1000
        print("rank %d: abort latency %.1f ms" % (r, lat))
        check(lat < 1000, "every pending request failed within 1 s of the abort")
        check(isinstance(e, ddl.Error), "ddl.Aborted is a ddl.Error")
        timer.join()
    raises(ddl.Aborted, lambda: ddl.iallreduce(np.zeros(10)), "posting after the abort")
    raises(ddl.Aborted, lambda: ddl.allreduce(np.zeros(10)), "blocking call after the abort")
    time.sleep(1.0)


def mem():
    n, r = ddl.size(), ddl.rank()
    m = ddl.mem_alloc(1 << 20)
    check(len(m) == 1 << 20, "mem_alloc(1 MiB) gives 1 MiB")
    a = np.frombuffer(m, dtype=np.float32)
    check(np.all(a == 0), "zero-filled")
    a[:] = r + 1
    ddl.allreduce(a)
    check(np.all(a == n * (n + 1) / 2), "numpy view of mapped memory in allreduce")
    if torch is not None:
        t = torch.frombuffer(m, dtype=torch.float64)
        t.fill_(r)
        ddl.allreduce(t, op="max")
        check(bool(torch.all(t == n - 1)), "torch.frombuffer view in allreduce")
        del t
    raises(ddl.Error, m.free, "free() while a view exists", "still use")
    del a
    m.free()
    check(len(m) == 0, "freed")
    raises(BufferError, lambda: memoryview(m), "view of freed memory", "freed")


def ckpt(d):
    n, r = ddl.size(), ddl.rank()
    rng = np.random.default_rng(r)
    tensors = {}
    for name, dt in NP_DTYPES.items():
        tensors["np_" + name] = (rng.standard_normal((3, 5)) * 100).astype(dt)
    tensors["np_empty"] = np.zeros((0, 4), np.float32)
    tensors["raw"] = bytes(range(256)) * (r + 1)
    if torch is not None:
        g = torch.Generator().manual_seed(r)
        for dt in ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"):
            tensors["t_" + dt] = (torch.randn(4, 3, generator=g) * 50).to(getattr(torch, dt))
        tensors["t_scalar"] = torch.tensor(3.5)
        tensors["t_noncontig"] = torch.randn(6, 4, generator=g)[:, 1]
    meta = {"epoch": 3, "lr": 0.01, "rank": r, "note": "ckpt test"}
    check(ddl.checkpoint.latest(d) == -1, "latest of an empty dir is -1")
    ddl.checkpoint.save(d, 10, tensors, meta)
    check(ddl.checkpoint.latest(d) == 10, "latest is 10 after save")

    def same(a, b):
        if torch is not None and isinstance(a, torch.Tensor):
            return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and
                    a.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() ==
                    b.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        if isinstance(a, np.ndarray):
            return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and
                    a.tobytes() == b.tobytes())
        return bytes(a) == bytes(b)
    step, got, gmeta = ddl.checkpoint.restore(d)
    check(step == 10 and gmeta == meta, "restore: step and metadata")
    check(sorted(got) == sorted(tensors), "restore: every name")
    for k in tensors:
        check(same(tensors[k], got[k]), "restore %s bit for bit" % k)
    # async, then restore in place
    t2 = {k: v for k, v in tensors.items() if not isinstance(v, bytes)}
    ddl.checkpoint.save(d, 20, t2, {"step": 20}, async_=True)
    check(ddl.checkpoint.wait() == 20, "async save committed by wait()")
    check(ddl.checkpoint.latest(d) == 20, "latest is 20")
    into = {}
    for k, v in t2.items():
        if torch is not None and isinstance(v, torch.Tensor):
            into[k] = torch.zeros_like(v.contiguous())
        else:
            into[k] = np.zeros_like(v)
    step, got, gmeta = ddl.checkpoint.restore(d, into=into)
    check(step == 20 and gmeta == {"step": 20}, "restore into: step, meta")
    check(all(got[k] is into[k] for k in into), "restore into: the given objects")
    check(all(same(t2[k].contiguous() if torch is not None and isinstance(t2[k], torch.Tensor)
                   else t2[k], into[k]) for k in into), "restore into: bit for bit")
    # another rank's shard
    if n > 1:
        step, other, _ = ddl.checkpoint.restore(d, step=10, rank=(r + 1) % n)
        check(other["raw"] == bytes(range(256)) * ((r + 1) % n + 1), "another rank's shard")
    raises(ddl.Error, lambda: ddl.checkpoint.save(d, 5, t2), "save of a step before latest",
           "DDL_ERR_INVALID")
    raises(ddl.Error, lambda: ddl.checkpoint.restore(d, step=15), "restore of a missing step")
    if torch is not None:
        bad = dict(into)
        bad["t_float32"] = torch.zeros(2, 2)
        raises(ValueError, lambda: ddl.checkpoint.restore(d, into=bad),
               "restore into a tensor of another shape", "checkpoint")


def main():
    global R
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("colls", "errors", "abort", "mem", "ckpt"):
        print("usage: py-check.py colls|errors|abort|mem|ckpt [DIR]", file=sys.stderr)
        return 2
    if torch is None:
        print("SKIP: no torch: the torch parts are left out")
    if mode != "errors":
        ddl.init()
        R = ddl.rank()
    if mode == "colls":
        for nb in (None, "wait", "test", "future" if torch is not None else "wait"):
            colls(nb)
    elif mode == "errors":
        errors()
    elif mode == "abort":
        abort()
    elif mode == "mem":
        mem()
    elif mode == "ckpt":
        ckpt(sys.argv[2])
    ddl.finalize()
    print("rank %d: %d failures" % (R, failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
