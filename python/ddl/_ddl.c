/* _ddl.c: the C extension module behind the `ddl` Python package.
 *
 * A thin layer over libddl (ddl.h) written against the CPython API: the
 * identity functions, blocking and non-blocking collectives on the world
 * communicator, requests, abort, heartbeats, mapped memory (ddl_mem_alloc)
 * and checkpoints (ddl_ckpt_*).  Buffers come either through the buffer
 * protocol (numpy arrays, bytearray, memoryview, ...) or as a Pointer object
 * (address, size, dtype, owner) that ddl/__init__.py builds for torch
 * tensors.  Every libddl status other than DDL_OK becomes ddl.Error,
 * ddl.Aborted, ddl.Restart or ddl.Timeout with libddl's text.  Warm restart
 * in place: warm_enable(), restart_pending(), rejoin().
 *
 * About 1450 lines, over the usual 1000: the CPython type objects (Pointer,
 * Request, Memory, Checkpoint) and their method tables are one module
 * initialisation; splitting them would export the shared lock and request
 * bookkeeping between files for no reader's benefit.
 *
 * Threads: libddl is not thread-safe apart from ddl_test, ddl_wait,
 * ddl_request_free and ddl_comm_abort, so every other libddl call holds
 * `ddl_lock` (taken after the GIL is released, so that a blocked
 * collective never holds the GIL).  Requests keep their buffers (Py_buffer
 * or the Pointer's owner) until they complete; a request dropped while still
 * running is moved to an orphan list and released once libddl is done with
 * it (checked on each call, waited for by finalize()).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h> /* environ */

#include "ddl.h"

/* ------------------------------------------------------------ errors */

static PyObject *DdlError, *DdlAborted, *DdlRestart, *DdlTimeout;

static pthread_mutex_t ddl_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized; /* between a successful init() and finalize() */
/* the world's incarnation: init() and rejoin() start a new one; memory
 * from mem_alloc() belongs to the one it was allocated in (under the GIL) */
static unsigned long epoch;

/* status_type: the exception class of a libddl status. */
static PyObject *status_type(ddl_status_t st)
{
    if (st == DDL_RESTART)
        return DdlRestart;
    if (st == DDL_ERR_ABORTED || st == DDL_ERR_PEER)
        return DdlAborted;
    return st == DDL_ERR_TIMEOUT ? DdlTimeout : DdlError;
}

/* raise_status: set the exception of a libddl failure of `what`. */
static PyObject *raise_status(const char *what, ddl_status_t st)
{
    PyObject *type = status_type(st);
    const char *detail = ddl_last_error();
    PyObject *msg;
    if (detail && detail[0])
        msg = PyUnicode_FromFormat("%s: %s: %s", what, ddl_status_str(st), detail);
    else
        msg = PyUnicode_FromFormat("%s: %s", what, ddl_status_str(st));
    if (!msg)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(type, msg);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    if (code) {
        PyObject_SetAttrString(exc, "status", code);
        Py_DECREF(code);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

static int need_init(const char *what)
{
    if (initialized)
        return 0;
    PyErr_Format(DdlError, "%s: ddl is not initialised: call ddl.init() first", what);
    return -1;
}

/* ------------------------------------------------------------ dtypes and ops */

static const struct {
    const char *name;
    ddl_dtype_t dtype;
} dtype_names[] = {
    {"float32", DDL_FLOAT32}, {"float64", DDL_FLOAT64}, {"int32", DDL_INT32},
    {"int64", DDL_INT64},     {"float16", DDL_FLOAT16}, {"bfloat16", DDL_BFLOAT16},
    {"uint8", DDL_UINT8},
};
#define NDTYPES ((int)(sizeof dtype_names / sizeof dtype_names[0]))

static const char *dtype_name(ddl_dtype_t dt)
{
    for (int i = 0; i < NDTYPES; i++)
        if (dtype_names[i].dtype == dt)
            return dtype_names[i].name;
    return "?";
}

static const struct {
    const char *name;
    ddl_op_t op;
} op_names[] = {
    {"sum", DDL_SUM}, {"prod", DDL_PROD}, {"min", DDL_MIN}, {"max", DDL_MAX}, {"avg", DDL_AVG},
};

static int parse_op(const char *what, const char *s, ddl_op_t *op)
{
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (strcmp(s, op_names[i].name) == 0) {
            *op = op_names[i].op;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "%s: op '%s' is not one of sum, prod, min, max, avg", what, s);
    return -1;
}

static int dtype_from_name(const char *what, const char *s, ddl_dtype_t *dt)
{
    for (int i = 0; i < NDTYPES; i++)
        if (strcmp(s, dtype_names[i].name) == 0) {
            *dt = dtype_names[i].dtype;
            return 0;
        }
    PyErr_Format(PyExc_TypeError,
                 "%s: dtype '%s' is not supported by libddl (float32, float64, float16, "
                 "bfloat16, int32, int64, uint8)",
                 what, s);
    return -1;
}

/* dtype_from_format: a struct-module format of a buffer, item size `size`. */
static int dtype_from_format(const char *what, const char *fmt, Py_ssize_t size, ddl_dtype_t *dt)
{
    const char *f = fmt ? fmt : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] && f[1] == '\0') {
        switch (f[0]) {
        case 'f': if (size == 4) { *dt = DDL_FLOAT32; return 0; } break;
        case 'd': if (size == 8) { *dt = DDL_FLOAT64; return 0; } break;
        case 'e': if (size == 2) { *dt = DDL_FLOAT16; return 0; } break;
        case 'B': if (size == 1) { *dt = DDL_UINT8; return 0; } break;
        case 'i': case 'l': case 'q':
            if (size == 4) { *dt = DDL_INT32; return 0; }
            if (size == 8) { *dt = DDL_INT64; return 0; }
            break;
        default: break;
        }
    }
    PyErr_Format(PyExc_TypeError,
                 "%s: buffer element format '%s' (%zd bytes) is not supported by libddl: use "
                 "float32, float64, float16, bfloat16 (torch), int32, int64 or uint8",
                 what, fmt ? fmt : "B", size);
    return -1;
}

/* ------------------------------------------------------------ Pointer */

/* A raw buffer described by its address: what ddl/__init__.py makes of a
 * torch tensor (CPU or CUDA).  `owner` is kept alive while in use. */
typedef struct {
    PyObject_HEAD
    uintptr_t addr;
    Py_ssize_t nbytes;
    int dtype;    /* ddl_dtype_t */
    int readonly;
    int device;   /* 0: host, 1: CUDA */
    PyObject *owner;
} PointerObject;

static int Pointer_init(PointerObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "nbytes", "dtype", "owner", "readonly", "device", NULL};
    unsigned long long addr;
    Py_ssize_t nbytes;
    const char *dtype;
    PyObject *owner = Py_None;
    int readonly = 0, device = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Kns|Opi", kwlist, &addr, &nbytes, &dtype, &owner,
                                     &readonly, &device))
        return -1;
    ddl_dtype_t dt;
    if (dtype_from_name("ddl.Pointer", dtype, &dt) < 0)
        return -1;
    if (nbytes < 0 || (addr == 0 && nbytes > 0)) {
        PyErr_Format(PyExc_ValueError, "ddl.Pointer: bad buffer (address 0x%llx, %zd bytes)", addr,
                     nbytes);
        return -1;
    }
    if (nbytes % (Py_ssize_t)ddl_dtype_size(dt) != 0) {
        PyErr_Format(PyExc_ValueError, "ddl.Pointer: %zd bytes is not a whole number of %s", nbytes,
                     dtype);
        return -1;
    }
    self->addr = (uintptr_t)addr;
    self->nbytes = nbytes;
    self->dtype = dt;
    self->readonly = readonly;
    self->device = device;
    Py_XSETREF(self->owner, Py_NewRef(owner));
    return 0;
}

static void Pointer_dealloc(PointerObject *self)
{
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PointerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ddl._ddl.Pointer",
    .tp_basicsize = sizeof(PointerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pointer(addr, nbytes, dtype, owner=None, readonly=False, device=0): a raw buffer "
              "(a torch tensor's storage); owner is kept alive while libddl uses it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pointer_init,
    .tp_dealloc = (destructor)Pointer_dealloc,
};

/* ------------------------------------------------------------ buffers */

/* A buffer held for libddl: the Py_buffer of a buffer-protocol object, or
 * a Pointer's owner. */
typedef struct {
    int held;       /* view is a Py_buffer to release */
    Py_buffer view;
    PyObject *ref;  /* a Pointer (kept alive) */
    void *ptr;
    size_t nbytes;
    size_t count;   /* elements */
    ddl_dtype_t dtype;
    int device;
} buf_t;

static void buf_release(buf_t *b)
{
    if (b->held) {
        PyBuffer_Release(&b->view);
        b->held = 0;
    }
    Py_CLEAR(b->ref);
}

/* buf_get: take obj for libddl.  writable: it is written to; dtype_name
 * (may be NULL) overrides the element type derived from the object. */
static int buf_get(const char *what, PyObject *obj, int writable, const char *dtype_name, buf_t *b)
{
    memset(b, 0, sizeof *b);
    ddl_dtype_t dt;
    if (PyObject_TypeCheck(obj, &PointerType)) {
        PointerObject *p = (PointerObject *)obj;
        if (writable && p->readonly) {
            PyErr_Format(PyExc_ValueError, "%s: the buffer is read-only: pass a writable one", what);
            return -1;
        }
        dt = (ddl_dtype_t)p->dtype;
        if (dtype_name && dtype_from_name(what, dtype_name, &dt) < 0)
            return -1;
        b->ref = Py_NewRef(obj);
        b->ptr = (void *)p->addr;
        b->nbytes = (size_t)p->nbytes;
        b->device = p->device;
    } else {
        if (!PyObject_CheckBuffer(obj)) {
            PyErr_Format(PyExc_TypeError,
                         "%s: %.100s does not offer a buffer: pass a numpy array, bytearray, "
                         "memoryview, torch tensor or ddl.mem_alloc() memory",
                         what, Py_TYPE(obj)->tp_name);
            return -1;
        }
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
        if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
            PyErr_Clear();
            if (PyObject_GetBuffer(obj, &b->view, PyBUF_FULL_RO) == 0) {
                PyBuffer_Release(&b->view);
                PyErr_Format(PyExc_ValueError,
                             "%s: the buffer is not C-contiguous: pass a contiguous copy "
                             "(numpy.ascontiguousarray, tensor.contiguous())",
                             what);
            } else {
                PyErr_Format(PyExc_TypeError, "%s: cannot get a buffer from %.100s", what,
                             Py_TYPE(obj)->tp_name);
            }
            return -1;
        }
        b->held = 1;
        if (writable && b->view.readonly) {
            buf_release(b);
            PyErr_Format(PyExc_ValueError,
                         "%s: the buffer is read-only (%.100s): pass a writable one, e.g. a copy",
                         what, Py_TYPE(obj)->tp_name);
            return -1;
        }
        if (dtype_name) {
            if (dtype_from_name(what, dtype_name, &dt) < 0) {
                buf_release(b);
                return -1;
            }
        } else if (dtype_from_format(what, b->view.format, b->view.itemsize, &dt) < 0) {
            buf_release(b);
            return -1;
        }
        b->ptr = b->view.buf;
        b->nbytes = (size_t)b->view.len;
    }
    size_t es = ddl_dtype_size(dt);
    if (b->nbytes % es != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zu bytes is not a whole number of %zu-byte elements",
                     what, b->nbytes, es);
        buf_release(b);
        return -1;
    }
    b->dtype = dt;
    b->count = b->nbytes / es;
    if (b->device && ddl_gpu_count() <= 0) {
        PyErr_Format(DdlError,
                     "%s: a CUDA buffer was passed but libddl sees no GPU (built without CUDA, "
                     "or no device or driver): move the tensor to the CPU (.cpu())",
                     what);
        buf_release(b);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ requests */

typedef struct orphan {
    struct orphan *next;
    ddl_request_t *req;
    buf_t bufs[2];
} orphan_t;

static orphan_t *orphans; /* under the GIL */

/* reap_orphans: release the dropped requests libddl is done with (all of
 * them, waiting, when `wait`). */
static void reap_orphans(int wait)
{
    orphan_t **pp = &orphans;
    while (*pp) {
        orphan_t *o = *pp;
        ddl_status_t st;
        if (wait) {
            Py_BEGIN_ALLOW_THREADS
            st = ddl_wait(o->req, -1);
            Py_END_ALLOW_THREADS
        } else {
            st = ddl_test(o->req);
        }
        if (st == DDL_INPROGRESS) {
            pp = &o->next;
            continue;
        }
        *pp = o->next;
        ddl_request_free(o->req);
        buf_release(&o->bufs[0]);
        buf_release(&o->bufs[1]);
        PyMem_Free(o);
    }
}

typedef struct {
    PyObject_HEAD
    ddl_request_t *req;
    buf_t bufs[2];
    int done;      /* the final status is known */
    int waiters;   /* threads inside ddl_wait on req (which stays allocated) */
    ddl_status_t status;
    PyObject *detail; /* libddl's text of a failure */
    PyObject *name;   /* the call, for messages */
    PyObject *result; /* what wait() returns */
} RequestObject;

static PyTypeObject RequestType;

/* request_done: record the final status (once) and, when no other thread
 * waits on it, release the libddl request and the buffers. */
static void request_done(RequestObject *r, ddl_status_t st)
{
    if (!r->done) {
        r->done = 1;
        r->status = st;
        if (st != DDL_OK && !r->detail)
            r->detail = PyUnicode_FromString(ddl_last_error());
        if (!r->detail)
            PyErr_Clear();
    }
    if (r->waiters == 0 && r->req) {
        ddl_request_free(r->req);
        r->req = NULL;
        buf_release(&r->bufs[0]);
        buf_release(&r->bufs[1]);
    }
}

static PyObject *request_outcome(RequestObject *r)
{
    if (r->status != DDL_OK) {
        PyObject *type = status_type(r->status);
        PyObject *msg;
        if (r->detail && PyUnicode_GetLength(r->detail) > 0)
            msg = PyUnicode_FromFormat("%U: %s: %U", r->name, ddl_status_str(r->status),
                                       r->detail);
        else
            msg = PyUnicode_FromFormat("%U: %s", r->name, ddl_status_str(r->status));
        if (!msg)
            return NULL;
        PyObject *exc = PyObject_CallOneArg(type, msg);
        Py_DECREF(msg);
        if (!exc)
            return NULL;
        PyObject *code = PyLong_FromLong((long)r->status);
        if (code) {
            PyObject_SetAttrString(exc, "status", code);
            Py_DECREF(code);
        }
        PyErr_SetObject(type, exc);
        Py_DECREF(exc);
        return NULL;
    }
    return Py_NewRef(r->result ? r->result : Py_None);
}

static PyObject *Request_wait(RequestObject *r, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &timeout))
        return NULL;
    if (r->done)
        return request_outcome(r);
    int ms = -1;
    if (timeout != Py_None) {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (t < 0) {
            PyErr_SetString(PyExc_ValueError, "Request.wait: timeout must be >= 0 seconds or None");
            return NULL;
        }
        ms = t * 1000.0 > 2e9 ? 2000000000 : (int)(t * 1000.0 + 0.5);
    }
    ddl_status_t st;
    ddl_request_t *req = r->req;
    r->waiters++;
    Py_BEGIN_ALLOW_THREADS
    st = ddl_wait(req, ms);
    Py_END_ALLOW_THREADS
    r->waiters--;
    if (st == DDL_ERR_TIMEOUT && !r->done) {
        if (r->waiters == 0 && r->req == NULL) /* cannot happen: done is set first */
            return NULL;
        PyErr_Format(DdlTimeout,
                     "%U: not complete after %d ms (the request is still running: wait again, "
                     "or ddl.abort())",
                     r->name, ms);
        return NULL;
    }
    if (st == DDL_ERR_TIMEOUT)
        st = r->status; /* another thread saw it finish */
    request_done(r, st);
    return request_outcome(r);
}

static PyObject *Request_test(RequestObject *r, PyObject *unused)
{
    if (!r->done) {
        ddl_status_t st = ddl_test(r->req);
        if (st == DDL_INPROGRESS)
            Py_RETURN_FALSE;
        request_done(r, st);
    }
    if (r->status != DDL_OK)
        return request_outcome(r);
    Py_RETURN_TRUE;
}

static PyObject *Request_get_done(RequestObject *r, void *closure)
{
    if (!r->done && ddl_test(r->req) != DDL_INPROGRESS)
        Py_RETURN_TRUE; /* finished; test()/wait() collect it */
    return PyBool_FromLong(r->done);
}

static PyObject *Request_repr(RequestObject *r)
{
    return PyUnicode_FromFormat("<ddl.Request %U %s>", r->name,
                                r->done ? (r->status == DDL_OK ? "done" : "failed") : "pending");
}

static void Request_dealloc(RequestObject *r)
{
    if (r->req && !r->done && ddl_test(r->req) == DDL_INPROGRESS) {
        orphan_t *o = PyMem_Calloc(1, sizeof *o);
        if (o) {
            o->req = r->req;
            o->bufs[0] = r->bufs[0];
            o->bufs[1] = r->bufs[1];
            o->next = orphans;
            orphans = o;
        } else {
            /* no memory for the list: the buffers are leaked, never freed early */
            ddl_request_free(r->req);
        }
        r->req = NULL;
    } else if (r->req) {
        ddl_request_free(r->req);
        r->req = NULL;
        buf_release(&r->bufs[0]);
        buf_release(&r->bufs[1]);
    }
    Py_XDECREF(r->detail);
    Py_XDECREF(r->name);
    Py_XDECREF(r->result);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef Request_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))Request_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): block (without the GIL) until the operation completes and return its "
     "result buffer; raise ddl.Timeout if it is still running after timeout seconds (the request "
     "stays valid), ddl.Aborted or ddl.Error if it failed."},
    {"test", (PyCFunction)Request_test, METH_NOARGS,
     "test(): True once complete (raises its error if it failed), False while running; never "
     "blocks."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Request_getset[] = {
    {"done", (getter)Request_get_done, NULL, "whether the operation has finished", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RequestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ddl._ddl.Request",
    .tp_basicsize = sizeof(RequestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A posted non-blocking collective: wait(timeout=None), test(), done.  It keeps its "
              "buffers alive until it completes.",
    .tp_dealloc = (destructor)Request_dealloc,
    .tp_repr = (reprfunc)Request_repr,
    .tp_methods = Request_methods,
    .tp_getset = Request_getset,
};

static PyObject *make_request(const char *name, ddl_request_t *req, buf_t *b0, buf_t *b1,
                              PyObject *result)
{
    RequestObject *r = PyObject_New(RequestObject, &RequestType);
    if (!r) {
        /* cannot track it: wait for it so that the buffers are not freed early */
        Py_BEGIN_ALLOW_THREADS
        ddl_wait(req, -1);
        Py_END_ALLOW_THREADS
        ddl_request_free(req);
        if (b0) buf_release(b0);
        if (b1) buf_release(b1);
        return NULL;
    }
    r->req = req;
    memset(r->bufs, 0, sizeof r->bufs);
    if (b0) r->bufs[0] = *b0;
    if (b1) r->bufs[1] = *b1;
    r->done = 0;
    r->waiters = 0;
    r->detail = NULL;
    r->status = DDL_OK;
    r->name = PyUnicode_FromString(name);
    r->result = Py_XNewRef(result);
    if (!r->name) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

/* ------------------------------------------------------------ init, identity */

static PyObject *m_init(PyObject *self, PyObject *unused)
{
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&ddl_lock);
    st = ddl_init();
    pthread_mutex_unlock(&ddl_lock);
    Py_END_ALLOW_THREADS
    if (st != DDL_OK)
        return raise_status("ddl.init", st);
    initialized = 1;
    epoch++;
    Py_RETURN_NONE;
}

static PyObject *m_finalize(PyObject *self, PyObject *unused)
{
    if (need_init("ddl.finalize") < 0)
        return NULL;
    reap_orphans(1);
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&ddl_lock);
    st = ddl_finalize();
    pthread_mutex_unlock(&ddl_lock);
    Py_END_ALLOW_THREADS
    initialized = 0;
    epoch++;
    if (st != DDL_OK)
        return raise_status("ddl.finalize", st);
    Py_RETURN_NONE;
}

/* warm_enable(): ddl_warm_enable (one round trip to the node's agent). */
static PyObject *m_warm_enable(PyObject *self, PyObject *unused)
{
    if (need_init("ddl.warm_enable") < 0)
        return NULL;
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&ddl_lock);
    st = ddl_warm_enable();
    pthread_mutex_unlock(&ddl_lock);
    Py_END_ALLOW_THREADS
    if (st != DDL_OK)
        return raise_status("ddl.warm_enable", st);
    Py_RETURN_NONE;
}

static PyObject *m_restart_pending(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(initialized && ddl_restart_pending());
}

/* sync_environ: os.environ takes every value of the process's environment
 * that it does not hold yet (ddl_rejoin sets DDL_*, RANK, WORLD_SIZE,
 * MASTER_ADDR and the like with setenv, which Python's copy of the
 * environment, made at start, does not see). */
static int sync_environ(void)
{
    PyObject *os = PyImport_ImportModule("os");
    PyObject *env = os ? PyObject_GetAttrString(os, "environ") : NULL;
    PyObject *pairs = env ? PyList_New(0) : NULL; /* collected first: setting changes environ */
    Py_XDECREF(os);
    int rc = pairs ? 0 : -1;
    for (char **e = environ; rc == 0 && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        PyObject *k = PyUnicode_DecodeFSDefaultAndSize(*e, eq - *e);
        PyObject *v = k ? PyUnicode_DecodeFSDefault(eq + 1) : NULL;
        PyObject *old = v ? PyObject_GetItem(env, k) : NULL;
        if (v && !old)
            PyErr_Clear(); /* absent (KeyError): set it */
        int same = old && PyObject_RichCompareBool(old, v, Py_EQ) == 1;
        PyObject *kv = v && !same ? PyTuple_Pack(2, k, v) : NULL;
        rc = !v ? -1 : kv ? PyList_Append(pairs, kv) : 0;
        Py_XDECREF(kv);
        Py_XDECREF(old);
        Py_XDECREF(v);
        Py_XDECREF(k);
    }
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(pairs); i++) {
        PyObject *kv = PyList_GET_ITEM(pairs, i);
        rc = PyObject_SetItem(env, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1));
    }
    Py_XDECREF(pairs);
    Py_XDECREF(env);
    return rc;
}

/* rejoin(): ddl_rejoin, without the GIL (it waits for the agents' decision
 * and the new generation's exchange).  Requests of the ended generation are
 * complete afterwards (ddl.Restart), dropped ones are released; memory
 * from mem_alloc() is gone, as after finalize(). */
static PyObject *m_rejoin(PyObject *self, PyObject *unused)
{
    if (need_init("ddl.rejoin") < 0)
        return NULL;
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&ddl_lock);
    st = ddl_rejoin(NULL);
    pthread_mutex_unlock(&ddl_lock);
    Py_END_ALLOW_THREADS
    epoch++;
    if (st != DDL_OK) {
        /* the warm path failed: libddl is uninitialised, this rank withdrew */
        initialized = ddl_comm_world() != NULL;
        return raise_status("ddl.rejoin", st);
    }
    reap_orphans(0);
    if (sync_environ() < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *m_initialized(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(initialized);
}

#define IDENTITY(pyname, fn)                                                                   \
    static PyObject *pyname(PyObject *self, PyObject *unused)                                  \
    {                                                                                          \
        return PyLong_FromLong(fn());                                                          \
    }
IDENTITY(m_rank, ddl_rank)
IDENTITY(m_size, ddl_size)
IDENTITY(m_local_rank, ddl_local_rank)
IDENTITY(m_local_size, ddl_local_size)
IDENTITY(m_node_rank, ddl_node_id)
IDENTITY(m_num_nodes, ddl_num_nodes)

static PyObject *m_gpu_count(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(initialized ? ddl_gpu_count() : 0);
}

static PyObject *m_heartbeat(PyObject *self, PyObject *args)
{
    long long step = -1;
    if (!PyArg_ParseTuple(args, "|L", &step))
        return NULL;
    ddl_status_t st = ddl_heartbeat((int64_t)step);
    if (st != DDL_OK)
        return raise_status("ddl.heartbeat", st);
    Py_RETURN_NONE;
}

/* should_stop(step): libddl's ddl_should_stop, without the GIL (it may
 * wait for the agents' decision). */
static PyObject *m_should_stop(PyObject *self, PyObject *args)
{
    long long step = -1;
    if (!PyArg_ParseTuple(args, "|L", &step))
        return NULL;
    if (need_init("ddl.should_stop") < 0)
        return NULL;
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&ddl_lock);
    st = ddl_should_stop((int64_t)step);
    pthread_mutex_unlock(&ddl_lock);
    Py_END_ALLOW_THREADS
    if (st == DDL_STOP)
        Py_RETURN_TRUE;
    if (st != DDL_OK)
        return raise_status("ddl.should_stop", st);
    Py_RETURN_FALSE;
}

static PyObject *m_abort(PyObject *self, PyObject *args)
{
    const char *reason = NULL;
    if (!PyArg_ParseTuple(args, "|z", &reason))
        return NULL;
    if (need_init("ddl.abort") < 0)
        return NULL;
    ddl_status_t st = ddl_comm_abort(ddl_comm_world(), reason);
    if (st != DDL_OK)
        return raise_status("ddl.abort", st);
    Py_RETURN_NONE;
}

static PyObject *m_dtype_size(PyObject *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    ddl_dtype_t dt;
    if (dtype_from_name("ddl.dtype_size", name, &dt) < 0)
        return NULL;
    return PyLong_FromSize_t(ddl_dtype_size(dt));
}

/* ------------------------------------------------------------ collectives */

/* run: a blocking call (req == NULL) or the non-blocking one; the libddl
 * call is made without the GIL and under ddl_lock. */
#define CALL_UNLOCKED(expr)                                                                    \
    do {                                                                                       \
        Py_BEGIN_ALLOW_THREADS                                                                 \
        pthread_mutex_lock(&ddl_lock);                                                         \
        st = (expr);                                                                           \
        pthread_mutex_unlock(&ddl_lock);                                                       \
        Py_END_ALLOW_THREADS                                                                   \
    } while (0)

/* finish: after the call; on success either the request or `result`. */
static PyObject *finish(const char *name, ddl_status_t st, int nb, ddl_request_t *req, buf_t *b0,
                        buf_t *b1, PyObject *result)
{
    if (st != DDL_OK) {
        if (b0) buf_release(b0);
        if (b1) buf_release(b1);
        return raise_status(name, st);
    }
    if (nb)
        return make_request(name, req, b0, b1, result);
    if (b0) buf_release(b0);
    if (b1) buf_release(b1);
    return Py_NewRef(result);
}

static PyObject *do_allreduce(PyObject *args, PyObject *kw, int nb)
{
    static char *kwlist[] = {"buf", "op", "dtype", NULL};
    const char *name = nb ? "ddl.iallreduce" : "ddl.allreduce";
    PyObject *obj;
    const char *ops = "sum", *dtype = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sz", kwlist, &obj, &ops, &dtype))
        return NULL;
    ddl_op_t op;
    if (need_init(name) < 0 || parse_op(name, ops, &op) < 0)
        return NULL;
    reap_orphans(0);
    buf_t b;
    if (buf_get(name, obj, 1, dtype, &b) < 0)
        return NULL;
    ddl_status_t st;
    ddl_request_t *req = NULL;
    ddl_comm_t *w = ddl_comm_world();
    if (nb)
        CALL_UNLOCKED(ddl_iallreduce(w, DDL_IN_PLACE, b.ptr, b.count, b.dtype, op, &req));
    else
        CALL_UNLOCKED(ddl_allreduce(w, DDL_IN_PLACE, b.ptr, b.count, b.dtype, op));
    return finish(name, st, nb, req, &b, NULL, obj);
}

static PyObject *m_allreduce(PyObject *s, PyObject *a, PyObject *k) { return do_allreduce(a, k, 0); }
static PyObject *m_iallreduce(PyObject *s, PyObject *a, PyObject *k) { return do_allreduce(a, k, 1); }

static int check_root(const char *name, int root)
{
    if (root >= 0 && root < ddl_size())
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: root %d is not a rank (0..%d)", name, root, ddl_size() - 1);
    return -1;
}

static PyObject *do_bcast(PyObject *args, PyObject *kw, int nb)
{
    static char *kwlist[] = {"buf", "root", "dtype", NULL};
    const char *name = nb ? "ddl.ibcast" : "ddl.bcast";
    PyObject *obj;
    int root = 0;
    const char *dtype = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iz", kwlist, &obj, &root, &dtype))
        return NULL;
    if (need_init(name) < 0 || check_root(name, root) < 0)
        return NULL;
    reap_orphans(0);
    buf_t b;
    if (buf_get(name, obj, 1, dtype, &b) < 0)
        return NULL;
    ddl_status_t st;
    ddl_request_t *req = NULL;
    ddl_comm_t *w = ddl_comm_world();
    if (nb)
        CALL_UNLOCKED(ddl_ibcast(w, b.ptr, b.count, b.dtype, root, &req));
    else
        CALL_UNLOCKED(ddl_bcast(w, b.ptr, b.count, b.dtype, root));
    return finish(name, st, nb, req, &b, NULL, obj);
}

static PyObject *m_bcast(PyObject *s, PyObject *a, PyObject *k) { return do_bcast(a, k, 0); }
static PyObject *m_ibcast(PyObject *s, PyObject *a, PyObject *k) { return do_bcast(a, k, 1); }

/* allgather(out, send=None): out holds size blocks; send (if given) is this
 * rank's block, else it is taken from its place in out. */
static PyObject *do_allgather(PyObject *args, PyObject *kw, int nb)
{
    static char *kwlist[] = {"out", "send", "dtype", NULL};
    const char *name = nb ? "ddl.iallgather" : "ddl.allgather";
    PyObject *out, *send = Py_None;
    const char *dtype = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Oz", kwlist, &out, &send, &dtype))
        return NULL;
    if (need_init(name) < 0)
        return NULL;
    reap_orphans(0);
    buf_t bo, bs;
    memset(&bs, 0, sizeof bs);
    if (buf_get(name, out, 1, dtype, &bo) < 0)
        return NULL;
    size_t n = (size_t)ddl_size();
    if (bo.count % n != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the output holds %zu elements, not a multiple of the world size %zu",
                     name, bo.count, n);
        buf_release(&bo);
        return NULL;
    }
    size_t block = bo.count / n;
    const void *sp = DDL_IN_PLACE;
    int have_send = send != Py_None;
    if (have_send) {
        if (buf_get(name, send, 0, dtype, &bs) < 0) {
            buf_release(&bo);
            return NULL;
        }
        if (bs.dtype != bo.dtype || bs.count != block) {
            PyErr_Format(PyExc_ValueError,
                         "%s: the send buffer holds %zu %s elements, the output needs %zu "
                         "(output size / world size %zu) %s elements",
                         name, bs.count, dtype_name(bs.dtype), block, n, dtype_name(bo.dtype));
            buf_release(&bo);
            buf_release(&bs);
            return NULL;
        }
        sp = bs.ptr;
    }
    ddl_status_t st;
    ddl_request_t *req = NULL;
    ddl_comm_t *w = ddl_comm_world();
    if (nb)
        CALL_UNLOCKED(ddl_iallgather(w, sp, bo.ptr, block, bo.dtype, &req));
    else
        CALL_UNLOCKED(ddl_allgather(w, sp, bo.ptr, block, bo.dtype));
    return finish(name, st, nb, req, &bo, have_send ? &bs : NULL, out);
}

static PyObject *m_allgather(PyObject *s, PyObject *a, PyObject *k) { return do_allgather(a, k, 0); }
static PyObject *m_iallgather(PyObject *s, PyObject *a, PyObject *k) { return do_allgather(a, k, 1); }

/* reduce_scatter(buf, out=None, op="sum"): buf holds size blocks; this
 * rank's reduced block goes to out, or (out None) to the start of buf. */
static PyObject *do_reduce_scatter(PyObject *args, PyObject *kw, int nb)
{
    static char *kwlist[] = {"buf", "out", "op", "dtype", NULL};
    const char *name = nb ? "ddl.ireduce_scatter" : "ddl.reduce_scatter";
    PyObject *in, *out = Py_None;
    const char *ops = "sum", *dtype = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Osz", kwlist, &in, &out, &ops, &dtype))
        return NULL;
    ddl_op_t op;
    if (need_init(name) < 0 || parse_op(name, ops, &op) < 0)
        return NULL;
    reap_orphans(0);
    int in_place = out == Py_None;
    buf_t bi, bo;
    memset(&bo, 0, sizeof bo);
    if (buf_get(name, in, in_place, dtype, &bi) < 0)
        return NULL;
    size_t n = (size_t)ddl_size();
    if (bi.count % n != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the input holds %zu elements, not a multiple of the world size %zu",
                     name, bi.count, n);
        buf_release(&bi);
        return NULL;
    }
    size_t block = bi.count / n;
    if (!in_place) {
        if (buf_get(name, out, 1, dtype, &bo) < 0) {
            buf_release(&bi);
            return NULL;
        }
        if (bo.dtype != bi.dtype || bo.count != block) {
            PyErr_Format(PyExc_ValueError,
                         "%s: the output holds %zu %s elements, it needs %zu (input size / "
                         "world size %zu) %s elements",
                         name, bo.count, dtype_name(bo.dtype), block, n, dtype_name(bi.dtype));
            buf_release(&bi);
            buf_release(&bo);
            return NULL;
        }
    }
    ddl_status_t st;
    ddl_request_t *req = NULL;
    ddl_comm_t *w = ddl_comm_world();
    const void *sp = in_place ? DDL_IN_PLACE : bi.ptr;
    void *rp = in_place ? bi.ptr : bo.ptr;
    if (nb)
        CALL_UNLOCKED(ddl_ireduce_scatter(w, sp, rp, block, bi.dtype, op, &req));
    else
        CALL_UNLOCKED(ddl_reduce_scatter(w, sp, rp, block, bi.dtype, op));
    return finish(name, st, nb, req, &bi, in_place ? NULL : &bo, in_place ? in : out);
}

static PyObject *m_reduce_scatter(PyObject *s, PyObject *a, PyObject *k) { return do_reduce_scatter(a, k, 0); }
static PyObject *m_ireduce_scatter(PyObject *s, PyObject *a, PyObject *k) { return do_reduce_scatter(a, k, 1); }

static PyObject *do_barrier(int nb)
{
    const char *name = nb ? "ddl.ibarrier" : "ddl.barrier";
    if (need_init(name) < 0)
        return NULL;
    reap_orphans(0);
    ddl_status_t st;
    ddl_request_t *req = NULL;
    ddl_comm_t *w = ddl_comm_world();
    if (nb)
        CALL_UNLOCKED(ddl_ibarrier(w, &req));
    else
        CALL_UNLOCKED(ddl_barrier(w));
    return finish(name, st, nb, req, NULL, NULL, Py_None);
}

static PyObject *m_barrier(PyObject *s, PyObject *u) { return do_barrier(0); }
static PyObject *m_ibarrier(PyObject *s, PyObject *u) { return do_barrier(1); }

/* ------------------------------------------------------------ mapped memory */

typedef struct {
    PyObject_HEAD
    unsigned long epoch; /* the world it was allocated in */
    void *ptr;
    Py_ssize_t len;
    ddl_mem_t *mem;
    Py_ssize_t exports;
} MemObject;

static int Mem_getbuffer(MemObject *m, Py_buffer *view, int flags)
{
    if (m->mem && m->epoch != epoch)
        m->mem = NULL, m->ptr = NULL; /* released by finalize() or rejoin() */
    if (!m->mem) {
        PyErr_SetString(PyExc_BufferError, "ddl.Memory: the memory was freed (Memory.free(), "
                        "ddl.finalize() or ddl.rejoin())");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)m, m->ptr, m->len, 0, flags) < 0)
        return -1;
    m->exports++;
    return 0;
}

static void Mem_releasebuffer(MemObject *m, Py_buffer *view)
{
    m->exports--;
}

static PyBufferProcs Mem_as_buffer = {
    (getbufferproc)Mem_getbuffer,
    (releasebufferproc)Mem_releasebuffer,
};

static PyObject *Mem_free(MemObject *m, PyObject *unused)
{
    if (!m->mem || m->epoch != epoch)
        Py_RETURN_NONE; /* freed, or released by finalize() or rejoin() */
    if (m->exports > 0) {
        PyErr_Format(DdlError,
                     "ddl.Memory.free: %zd views (numpy arrays, tensors, memoryviews) still use "
                     "the memory: delete them first",
                     m->exports);
        return NULL;
    }
    if (need_init("ddl.Memory.free") < 0)
        return NULL;
    ddl_status_t st;
    ddl_mem_t *mem = m->mem;
    m->mem = NULL;
    m->ptr = NULL;
    CALL_UNLOCKED(ddl_mem_free(mem));
    if (st != DDL_OK)
        return raise_status("ddl.Memory.free", st);
    Py_RETURN_NONE;
}

static Py_ssize_t Mem_length(MemObject *m)
{
    return m->mem ? m->len : 0;
}

static PyObject *Mem_get_address(MemObject *m, void *closure)
{
    return PyLong_FromVoidPtr(m->ptr);
}

static void Mem_dealloc(MemObject *m)
{
    /* ddl_mem_free is collective: memory not freed explicitly is released
     * by ddl.finalize() */
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyMethodDef Mem_methods[] = {
    {"free", (PyCFunction)Mem_free, METH_NOARGS,
     "free(): collective over the world (same order on every rank): release the memory; no view "
     "of it may remain.  Memory not freed is released by ddl.finalize()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Mem_getset[] = {
    {"address", (getter)Mem_get_address, NULL, "the address of the memory", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Mem_as_sequence = {.sq_length = (lenfunc)Mem_length};

static PyTypeObject MemType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ddl._ddl.Memory",
    .tp_basicsize = sizeof(MemObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory from ddl.mem_alloc(): a writable bytes buffer (numpy.frombuffer, "
              "torch.frombuffer, memoryview) that the node's other ranks read in place during "
              "collectives.",
    .tp_dealloc = (destructor)Mem_dealloc,
    .tp_as_buffer = &Mem_as_buffer,
    .tp_as_sequence = &Mem_as_sequence,
    .tp_methods = Mem_methods,
    .tp_getset = Mem_getset,
};

static PyObject *m_mem_alloc(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n))
        return NULL;
    if (need_init("ddl.mem_alloc") < 0)
        return NULL;
    if (n <= 0) {
        PyErr_Format(PyExc_ValueError, "ddl.mem_alloc: %zd bytes: the size must be positive", n);
        return NULL;
    }
    void *ptr = NULL;
    ddl_mem_t *mem = NULL;
    ddl_status_t st;
    CALL_UNLOCKED(ddl_mem_alloc((size_t)n, &ptr, &mem));
    if (st != DDL_OK)
        return raise_status("ddl.mem_alloc", st);
    MemObject *m = PyObject_New(MemObject, &MemType);
    if (!m)
        return NULL; /* released by finalize */
    m->epoch = epoch;
    m->ptr = ptr;
    m->len = n;
    m->mem = mem;
    m->exports = 0;
    return (PyObject *)m;
}

/* ------------------------------------------------------------ checkpoints */

typedef struct {
    PyObject_HEAD
    ddl_ckpt_t *ck;
    long long step;
} CkptObject;

static PyObject *Ckpt_write(CkptObject *c, PyObject *args)
{
    const char *name;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "sO", &name, &obj))
        return NULL;
    if (!c->ck) {
        PyErr_SetString(DdlError, "ddl checkpoint: write after commit() or abort()");
        return NULL;
    }
    buf_t b;
    if (buf_get("ddl checkpoint write", obj, 0, "uint8", &b) < 0)
        return NULL;
    ddl_status_t st;
    CALL_UNLOCKED(ddl_ckpt_write(c->ck, name, b.ptr, b.nbytes));
    buf_release(&b);
    if (st != DDL_OK)
        return raise_status("ddl checkpoint write", st);
    Py_RETURN_NONE;
}

static PyObject *Ckpt_commit(CkptObject *c, PyObject *unused)
{
    if (!c->ck) {
        PyErr_SetString(DdlError, "ddl checkpoint: commit after commit() or abort()");
        return NULL;
    }
    ddl_ckpt_t *ck = c->ck;
    c->ck = NULL;
    ddl_status_t st;
    CALL_UNLOCKED(ddl_ckpt_commit(ck));
    if (st != DDL_OK)
        return raise_status("ddl checkpoint commit", st);
    Py_RETURN_NONE;
}

static PyObject *Ckpt_abort(CkptObject *c, PyObject *unused)
{
    if (c->ck) {
        ddl_ckpt_t *ck = c->ck;
        c->ck = NULL;
        ddl_status_t st = DDL_OK;
        CALL_UNLOCKED((ddl_ckpt_abort(ck), DDL_OK));
        (void)st;
    }
    Py_RETURN_NONE;
}

static void Ckpt_dealloc(CkptObject *c)
{
    if (c->ck)
        ddl_ckpt_abort(c->ck); /* never committed: discarded on this rank */
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Ckpt_methods[] = {
    {"write", (PyCFunction)Ckpt_write, METH_VARARGS,
     "write(name, buf): add the bytes of buf (any C-contiguous buffer) to this rank's shard."},
    {"commit", (PyCFunction)Ckpt_commit, METH_NOARGS,
     "commit(): collective; the checkpoint becomes the latest once every rank's shard is on disk "
     "(async mode: at the next begin/wait/finalize)."},
    {"abort", (PyCFunction)Ckpt_abort, METH_NOARGS, "abort(): discard on this rank."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CkptType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ddl._ddl.CheckpointWriter",
    .tp_basicsize = sizeof(CkptObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A checkpoint being written (ckpt_begin): write(name, buf), commit(), abort().",
    .tp_dealloc = (destructor)Ckpt_dealloc,
    .tp_methods = Ckpt_methods,
};

static PyObject *m_ckpt_begin(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dir", "step", "keep", "async_", NULL};
    const char *dir;
    long long step;
    int keep = 0, async = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sL|ip", kwlist, &dir, &step, &keep, &async))
        return NULL;
    if (need_init("ddl.ckpt_begin") < 0)
        return NULL;
    ddl_ckpt_t *ck = NULL;
    ddl_status_t st;
    CALL_UNLOCKED(ddl_ckpt_begin(ddl_comm_world(), dir, (int64_t)step, keep,
                                 async ? DDL_CKPT_ASYNC : 0u, &ck));
    if (st != DDL_OK)
        return raise_status("ddl.ckpt_begin", st);
    CkptObject *c = PyObject_New(CkptObject, &CkptType);
    if (!c) {
        ddl_ckpt_abort(ck);
        return NULL;
    }
    c->ck = ck;
    c->step = step;
    return (PyObject *)c;
}

static PyObject *m_ckpt_wait(PyObject *self, PyObject *unused)
{
    if (need_init("ddl.ckpt_wait") < 0)
        return NULL;
    int64_t step = -1;
    ddl_status_t st;
    CALL_UNLOCKED(ddl_ckpt_wait(&step));
    if (st != DDL_OK)
        return raise_status("ddl.ckpt_wait", st);
    return PyLong_FromLongLong((long long)step);
}

static PyObject *m_ckpt_latest(PyObject *self, PyObject *args)
{
    const char *dir;
    if (!PyArg_ParseTuple(args, "s", &dir))
        return NULL;
    int64_t step = -1;
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ddl_ckpt_latest(dir, &step);
    Py_END_ALLOW_THREADS
    if (st != DDL_OK)
        return raise_status("ddl.ckpt_latest", st);
    return PyLong_FromLongLong((long long)step);
}

/* ckpt_read(dir, step, rank, name, buf=None): with buf, fill it (its size
 * must equal the stored one) and return it; without, return the stored size. */
static PyObject *m_ckpt_read(PyObject *self, PyObject *args)
{
    const char *dir, *name;
    long long step;
    int rank;
    PyObject *obj = Py_None;
    if (!PyArg_ParseTuple(args, "sLis|O", &dir, &step, &rank, &name, &obj))
        return NULL;
    ddl_status_t st;
    size_t got = 0;
    if (obj == Py_None) {
        Py_BEGIN_ALLOW_THREADS
        st = ddl_ckpt_read(dir, (int64_t)step, rank, name, NULL, 0, &got);
        Py_END_ALLOW_THREADS
        if (st != DDL_OK)
            return raise_status("ddl.ckpt_read", st);
        return PyLong_FromSize_t(got);
    }
    buf_t b;
    if (buf_get("ddl.ckpt_read", obj, 1, "uint8", &b) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = ddl_ckpt_read(dir, (int64_t)step, rank, name, b.ptr, b.nbytes, NULL);
    Py_END_ALLOW_THREADS
    buf_release(&b);
    if (st != DDL_OK)
        return raise_status("ddl.ckpt_read", st);
    return Py_NewRef(obj);
}

static PyObject *m_ckpt_cleanup(PyObject *self, PyObject *args)
{
    const char *dir;
    int keep = 0;
    if (!PyArg_ParseTuple(args, "s|i", &dir, &keep))
        return NULL;
    ddl_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ddl_ckpt_cleanup(dir, keep);
    Py_END_ALLOW_THREADS
    if (st != DDL_OK)
        return raise_status("ddl.ckpt_cleanup", st);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ module */

#define KW (METH_VARARGS | METH_KEYWORDS)
#define KWF(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef module_methods[] = {
    {"init", m_init, METH_NOARGS, "init(): join the job (ddl_init); blocks until every rank has."},
    {"finalize", m_finalize, METH_NOARGS, "finalize(): leave the job (collective)."},
    {"initialized", m_initialized, METH_NOARGS, "initialized(): between init() and finalize()."},
    {"warm_enable", m_warm_enable, METH_NOARGS,
     "warm_enable(): opt in to warm restart in place: after a failure elsewhere this process is "
     "kept, its collectives raise ddl.Restart and it calls rejoin().  Raises ddl.Error when "
     "restarts stay cold here (the program may go on)."},
    {"restart_pending", m_restart_pending, METH_NOARGS,
     "restart_pending(): True when the agents ended this generation and rejoin() is due."},
    {"rejoin", m_rejoin, METH_NOARGS,
     "rejoin(): leave the ended generation, join the new one (blocks without the GIL); rank(), "
     "size() and the environment then give the new place.  Reload the last committed checkpoint "
     "afterwards.  Raises ddl.Error if the warm path failed: exit non-zero (restarted cold)."},
    {"rank", m_rank, METH_NOARGS, "rank(): this process's rank in the world."},
    {"size", m_size, METH_NOARGS, "size(): ranks in the world."},
    {"local_rank", m_local_rank, METH_NOARGS, "local_rank(): rank among this node's ranks."},
    {"local_size", m_local_size, METH_NOARGS, "local_size(): ranks on this node."},
    {"node_rank", m_node_rank, METH_NOARGS, "node_rank(): this node's index."},
    {"num_nodes", m_num_nodes, METH_NOARGS, "num_nodes(): nodes in the world."},
    {"gpu_count", m_gpu_count, METH_NOARGS, "gpu_count(): CUDA devices libddl can use."},
    {"heartbeat", m_heartbeat, METH_VARARGS, "heartbeat(step=-1): tell the supervisor we progress."},
    {"should_stop", m_should_stop, METH_VARARGS,
     "should_stop(step=-1): True when the job is being stopped (time limit, preemption):\n"
     "checkpoint, finalize and exit with EXIT_STOPPED."},
    {"abort", m_abort, METH_VARARGS,
     "abort(reason=None): abort the world on this rank: pending and future operations fail with "
     "ddl.Aborted.  Callable from any thread."},
    {"dtype_size", m_dtype_size, METH_VARARGS, "dtype_size(name): bytes per element."},
    {"allreduce", KWF(m_allreduce), KW, "allreduce(buf, op='sum', dtype=None): in place."},
    {"iallreduce", KWF(m_iallreduce), KW, "iallreduce(buf, op='sum', dtype=None) -> Request."},
    {"bcast", KWF(m_bcast), KW, "bcast(buf, root=0, dtype=None): in place."},
    {"ibcast", KWF(m_ibcast), KW, "ibcast(buf, root=0, dtype=None) -> Request."},
    {"allgather", KWF(m_allgather), KW, "allgather(out, send=None, dtype=None)."},
    {"iallgather", KWF(m_iallgather), KW, "iallgather(out, send=None, dtype=None) -> Request."},
    {"reduce_scatter", KWF(m_reduce_scatter), KW, "reduce_scatter(buf, out=None, op='sum')."},
    {"ireduce_scatter", KWF(m_ireduce_scatter), KW,
     "ireduce_scatter(buf, out=None, op='sum') -> Request."},
    {"barrier", m_barrier, METH_NOARGS, "barrier()."},
    {"ibarrier", m_ibarrier, METH_NOARGS, "ibarrier() -> Request."},
    {"mem_alloc", m_mem_alloc, METH_VARARGS, "mem_alloc(nbytes) -> Memory (collective)."},
    {"ckpt_begin", KWF(m_ckpt_begin), KW,
     "ckpt_begin(dir, step, keep=0, async_=False) -> CheckpointWriter (collective)."},
    {"ckpt_wait", m_ckpt_wait, METH_NOARGS, "ckpt_wait() -> step committed, or -1 (collective)."},
    {"ckpt_latest", m_ckpt_latest, METH_VARARGS, "ckpt_latest(dir) -> newest step or -1."},
    {"ckpt_read", m_ckpt_read, METH_VARARGS,
     "ckpt_read(dir, step, rank, name, buf=None): fill buf, or return the stored size."},
    {"ckpt_cleanup", m_ckpt_cleanup, METH_VARARGS, "ckpt_cleanup(dir, keep=0)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ddl._ddl",
    .m_doc = "libddl's collectives, requests, mapped memory and checkpoints (see the ddl package).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__ddl(void);
PyMODINIT_FUNC PyInit__ddl(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    DdlError = PyErr_NewExceptionWithDoc(
        "ddl.Error",
        "A libddl call failed: the message is libddl's; .status is its ddl_status_t code (negative), "
        "or absent for errors found before libddl was called.",
        PyExc_RuntimeError, NULL);
    if (!DdlError)
        goto fail;
    DdlAborted = PyErr_NewExceptionWithDoc(
        "ddl.Aborted",
        "The world was aborted (ddl.abort(), or the agents ended the job after a failure "
        "elsewhere), or a peer failed: finalize and exit or restart.",
        DdlError, NULL);
    DdlRestart = DdlAborted ? PyErr_NewExceptionWithDoc(
                                  "ddl.Restart",
                                  "After ddl.warm_enable(): the agents ended this generation "
                                  "after a failure elsewhere; call ddl.rejoin() and reload the "
                                  "last committed checkpoint (a ddl.Aborted: a program that does "
                                  "not catch it exits and is restarted cold).",
                                  DdlAborted, NULL)
                            : NULL;
    PyObject *bases = DdlRestart ? Py_BuildValue("(OO)", DdlError, PyExc_TimeoutError) : NULL;
    DdlTimeout = bases ? PyErr_NewExceptionWithDoc(
                             "ddl.Timeout", "A bounded wait expired; the request is still valid.",
                             bases, NULL)
                       : NULL;
    Py_XDECREF(bases);
    if (!DdlTimeout)
        goto fail;
    if (PyModule_AddObject(m, "Error", Py_NewRef(DdlError)) < 0 ||
        PyModule_AddObject(m, "Aborted", Py_NewRef(DdlAborted)) < 0 ||
        PyModule_AddObject(m, "Restart", Py_NewRef(DdlRestart)) < 0 ||
        PyModule_AddObject(m, "Timeout", Py_NewRef(DdlTimeout)) < 0)
        goto fail;
    if (add_type(m, &PointerType, "Pointer") < 0 || add_type(m, &RequestType, "Request") < 0 ||
        add_type(m, &MemType, "Memory") < 0 || add_type(m, &CkptType, "CheckpointWriter") < 0)
        goto fail;
    if (PyModule_AddIntConstant(m, "VERSION_MAJOR", DDL_VERSION_MAJOR) < 0 ||
        PyModule_AddIntConstant(m, "VERSION_MINOR", DDL_VERSION_MINOR) < 0 ||
        PyModule_AddIntConstant(m, "VERSION_PATCH", DDL_VERSION_PATCH) < 0 ||
        PyModule_AddIntConstant(m, "EXIT_STOPPED", DDL_EXIT_STOPPED) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
