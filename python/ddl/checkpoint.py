"""ddl.checkpoint: crash-safe checkpoints of named arrays and tensors.

Over libddl's ddl_ckpt_* API: each rank writes its own shard of step N
under DIR/step-NNNNNNNN/, and the step becomes DIR/latest only once every
rank's shard is on disk (MANIFEST and latest are renamed into place, so a
process killed at any moment leaves the previous checkpoint readable).

    ddl.checkpoint.save(dir, step, {"w": w, "opt": o}, meta={"epoch": 3})
    step, tensors, meta = ddl.checkpoint.restore(dir)          # latest
    ddl.checkpoint.restore(dir, into={"w": w, "opt": o})       # in place

Values: numpy arrays, torch tensors (CPU or CUDA: saved from a CPU copy),
bytes, bytearray or anything else with the buffer protocol.  Each is saved
as its raw bytes plus a description (kind, dtype, shape) in a JSON record,
together with `meta` (anything json.dumps accepts), so restore() gives the
same kind of object with the same bits back.  save() and begin() are
collective over the world (every rank, same dir and step); restore() and
latest() are local.  Async mode (async_=True) copies the buffers and writes
the shard in a background thread; the checkpoint is committed by the next
save(), wait() or ddl.finalize().
"""

import json
import sys

from . import _ddl

__all__ = ["save", "restore", "latest", "wait", "cleanup", "META"]

# The shard entry that holds the JSON description of a checkpoint.
META = "__ddl_meta__"
_FORMAT = 1


def _describe(name, value):
    """(bytes-like buffer, record) of one value."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        rec = {"kind": "torch", "dtype": str(t.dtype).replace("torch.", ""),
               "shape": list(t.shape)}
        flat = t.reshape(-1)
        if flat.numel() == 0:
            return b"", rec
        # any dtype (bfloat16 included) as its bytes
        return _as_bytes_tensor(flat), rec
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        if a.dtype.hasobject:
            raise TypeError("ddl.checkpoint.save: '%s' is an object array: only plain numeric "
                            "arrays can be saved" % name)
        return a.reshape(-1).view(np.uint8), {"kind": "numpy", "dtype": a.dtype.str,
                                              "shape": list(a.shape)}
    if isinstance(value, (bytes, bytearray)):
        return value, {"kind": type(value).__name__}
    try:
        mv = memoryview(value)
    except TypeError:
        raise TypeError("ddl.checkpoint.save: '%s' is a %s: save numpy arrays, torch tensors, "
                        "bytes or buffers (put small values into meta)"
                        % (name, type(value).__name__)) from None
    if not mv.c_contiguous:
        raise ValueError("ddl.checkpoint.save: '%s' is not C-contiguous" % name)
    return mv.cast("B"), {"kind": "bytes"}


def _as_bytes_tensor(flat):
    import torch
    from . import as_buffer
    return as_buffer(flat.view(torch.uint8), "ddl.checkpoint.save", writable=False)


def begin(dir, step, keep=0, async_=False):
    """The low-level writer (collective): w.write(name, buf) for each buffer,
    then w.commit() (collective).  save() does this for a dict."""
    return _ddl.ckpt_begin(str(dir), int(step), keep, bool(async_))


def save(dir, step, tensors, meta=None, keep=0, async_=False):
    """Save the dict `tensors` (name -> array/tensor/bytes) and `meta` (a
    JSON-able dict) as checkpoint `step` of dir, on every rank (collective).
    step must be greater than the latest saved step.  keep: committed
    checkpoints kept (0: 3, negative: all).  Raises ddl.Error (DDL_ERR_IO
    with the file and errno when some rank failed: the previous checkpoint
    stays the latest)."""
    if not isinstance(tensors, dict):
        raise TypeError("ddl.checkpoint.save: tensors must be a dict of name -> value")
    if META in tensors:
        raise ValueError("ddl.checkpoint.save: the name %r is reserved" % META)
    records = {}
    bufs = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name or len(name.encode()) > 255:
            raise ValueError("ddl.checkpoint.save: bad name %r (1-255 bytes of text)" % (name,))
        buf, rec = _describe(name, value)
        records[name] = rec
        bufs.append((name, buf))
    doc = json.dumps({"format": _FORMAT, "step": int(step), "entries": records,
                      "meta": meta if meta is not None else {}}, sort_keys=True).encode()
    w = begin(dir, step, keep, async_)
    try:
        for name, buf in bufs:
            w.write(name, buf)
        w.write(META, doc)
    except BaseException:
        # keep the ranks in step: libddl remembers the failure and the
        # commit fails on every rank
        w.commit()
        raise
    w.commit()


def wait():
    """Complete the pending async checkpoint (collective); its step or -1."""
    return _ddl.ckpt_wait()


def latest(dir):
    """The newest committed step in dir, or -1 (local; no ddl.init() needed)."""
    return _ddl.ckpt_latest(str(dir))


def cleanup(dir, keep=0):
    """Remove partial and old checkpoints of dir (local; one process)."""
    _ddl.ckpt_cleanup(str(dir), keep)


def _read(dir, step, rank, name):
    n = _ddl.ckpt_read(dir, step, rank, name)
    buf = bytearray(n)
    if n:
        _ddl.ckpt_read(dir, step, rank, name, buf)
    return buf


def _rebuild(name, rec, raw):
    kind = rec.get("kind")
    if kind == "torch":
        import torch
        dtype = getattr(torch, rec["dtype"])
        if len(raw) == 0:
            return torch.empty(rec["shape"], dtype=dtype)
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
        return t.reshape(rec["shape"])
    if kind == "numpy":
        import numpy as np
        return np.frombuffer(raw, dtype=np.dtype(rec["dtype"])).reshape(rec["shape"])
    if kind == "bytes":
        return bytes(raw)
    if kind == "bytearray":
        return raw
    raise ValueError("ddl.checkpoint.restore: entry '%s' has unknown kind %r" % (name, kind))


def _copy_into(name, target, value):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(target, torch.Tensor):
        if tuple(target.shape) != tuple(value.shape) or target.dtype != value.dtype:
            raise ValueError("ddl.checkpoint.restore: '%s' is %s %s in the checkpoint, the "
                             "target is %s %s" % (name, value.dtype, tuple(value.shape),
                                                  target.dtype, tuple(target.shape)))
        with torch.no_grad():
            target.copy_(value)
        return
    np = sys.modules.get("numpy")
    if np is not None and isinstance(target, np.ndarray):
        if target.shape != value.shape or target.dtype != value.dtype:
            raise ValueError("ddl.checkpoint.restore: '%s' is %s %s in the checkpoint, the "
                             "target is %s %s" % (name, value.dtype, value.shape,
                                                  target.dtype, target.shape))
        target[...] = value
        return
    mv = memoryview(target).cast("B")
    src = memoryview(value).cast("B") if not isinstance(value, (bytes, bytearray)) else value
    if len(mv) != len(src):
        raise ValueError("ddl.checkpoint.restore: '%s' holds %d bytes, the target %d"
                         % (name, len(src), len(mv)))
    mv[:] = src


def restore(dir, step=None, rank=None, into=None):
    """Read a checkpoint of dir (local).  step: None for the latest; rank:
    whose shard (default: this rank, ddl.rank()).  Returns (step, tensors,
    meta) with tensors a dict of new objects of the saved kinds, bit for bit;
    with `into` (a dict of name -> array/tensor/buffer) those are filled in
    place instead (names, dtypes and shapes must match) and returned.
    Returns (-1, {}, None) when dir holds no checkpoint."""
    dir = str(dir)
    if step is None:
        step = latest(dir)
        if step < 0:
            return -1, {}, None
    if rank is None:
        rank = _ddl.rank()
    doc = json.loads(bytes(_read(dir, step, rank, META)).decode())
    if doc.get("format") != _FORMAT:
        raise ValueError("ddl.checkpoint.restore: %s step %d has format %r, this ddl reads %d"
                         % (dir, step, doc.get("format"), _FORMAT))
    out = {}
    for name, rec in doc["entries"].items():
        value = _rebuild(name, rec, _read(dir, step, rank, name))
        if into is not None and name in into:
            _copy_into(name, into[name], value)
            out[name] = into[name]
        else:
            out[name] = value
    if into is not None:
        missing = [k for k in into if k not in out]
        if missing:
            raise KeyError("ddl.checkpoint.restore: %s step %d has no entry %s"
                           % (dir, step, ", ".join(repr(m) for m in missing)))
    return step, out, doc["meta"]
