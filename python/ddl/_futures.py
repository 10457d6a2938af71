"""Completion of ddl requests as torch.futures.Future objects.

One daemon thread per process waits for submitted requests in the order
they were submitted (libddl completes the operations of a communicator in
posting order, so waiting in order costs nothing) and completes each
request's future with its buffer, or with the exception the request
raised (ddl.Aborted when the world was aborted).  The waiting happens in
libddl without the GIL, so training code keeps running meanwhile.
"""

import collections
import threading

_lock = threading.Lock()
_cond = threading.Condition(_lock)
_queue = collections.deque()
_thread = None


def _run():
    while True:
        with _cond:
            while not _queue:
                _cond.wait()
            req, then, fut = _queue[0]
        try:
            value = req.wait()
            if then is not None:
                value = then(value)
        except BaseException as e:  # noqa: B902  (handed to the future)
            with _cond:
                _queue.popleft()
            fut.set_exception(e)
            continue
        with _cond:
            _queue.popleft()
        fut.set_result(value)


def submit(req, then=None):
    """A torch.futures.Future completed with req.wait()'s value (passed
    through then(value) when given) or its exception."""
    import torch
    global _thread
    fut = torch.futures.Future()
    with _cond:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="ddl-futures", daemon=True)
            _thread.start()
        _queue.append((req, then, fut))
        _cond.notify()
    return fut


def pending():
    """Requests submitted and not yet completed."""
    with _cond:
        return len(_queue)
