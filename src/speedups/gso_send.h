/* purelink._speedups: a run of datagrams to the kernel in ONE sendmsg, with no
 * join (private to pack.c, which adds send_run to the module).
 *
 * Why: the link's transport put each GSO run on the wire as b"".join(run) (a
 * copy of every byte) through ctypes (a libffi call, argument conversion).
 * Here the run's datagrams go to the kernel as one iovec each, in place, with
 * UDP_SEGMENT saying where the kernel cuts them: the same datagrams on the
 * wire, no copy, no ctypes.  The references to the datagrams are held for the
 * call, so it may give the GIL up around sendmsg (`release`: see
 * link/nogil.py for why the link keeps it by default).  Errors are raised as
 * the socket module's are (OSError by errno: BlockingIOError for EAGAIN...);
 * what to do about them stays in transport.py.
 */
#ifndef PURELINK_GSO_SEND_H
#define PURELINK_GSO_SEND_H

/* Where the run of datagrams that goes to the kernel in one GSO call from
 * datagrams[i] (of `size` bytes; n in the list) ends (transport.py's run_end):
 * up to `limit` datagrams of its size, and one shorter last one; -1 with an
 * exception if a datagram has no length. */
static Py_ssize_t
run_end(PyObject *datagrams, Py_ssize_t i, Py_ssize_t n, Py_ssize_t size, Py_ssize_t limit)
{
    Py_ssize_t j = i + 1;
    Py_ssize_t len = -1;
    while (j < n && j - i < limit) {
        len = PyObject_Size(PyList_GetItem(datagrams, j));
        if (len < 0) {
            return -1;
        }
        if (len != size) {
            break;
        }
        j++;
        len = -1;
    }
    if (len >= 0 && len < size) {
        j++; /* a shorter last segment is allowed */
    }
    return j;
}

#if defined(__linux__)
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#define SEND_RUN_MAX 64 /* transport.py GSO_MAX_SEGMENTS */

static int
send_run_index(PyObject *o, Py_ssize_t *v)
{
    *v = PyLong_AsSsize_t(o);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* sendmsg of iov[0:count], with the segment size if more than one; GIL given up
 * around the call when release.  Returns the bytes sent or -1 with errno. */
static ssize_t
send_run_call(int fd, struct iovec *iov, Py_ssize_t count, uint16_t segment, int release)
{
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)count;
    if (count > 1) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        memcpy(CMSG_DATA(cm), &segment, sizeof segment);
    }
    ssize_t sent;
    int err;
    if (release) {
        PyThreadState *ts = PyEval_SaveThread();
        sent = sendmsg(fd, &msg, MSG_DONTWAIT);
        err = errno;
        PyEval_RestoreThread(ts);
    } else {
        sent = sendmsg(fd, &msg, MSG_DONTWAIT);
        err = errno;
    }
    errno = err;
    return sent;
}

/* datagrams[i:i+count] (bytes, at most 64; as send_run checks them) in one
 * sendmsg: the bytes sent, -1 with *err its errno, or -2 with an exception. */
static ssize_t
send_run_list(int fd, PyObject *datagrams, Py_ssize_t i, Py_ssize_t count, Py_ssize_t segment,
              int release, int *err)
{
    PyObject *held[SEND_RUN_MAX];
    struct iovec iov[SEND_RUN_MAX];
    Py_ssize_t k = 0;
    for (; k < count; k++) {
        PyObject *d = PyList_GetItem(datagrams, i + k);
        char *buf;
        Py_ssize_t len;
        if (d == NULL || !PyBytes_Check(d) || PyBytes_AsStringAndSize(d, &buf, &len) < 0) {
            if (d != NULL && !PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "send_run(): a datagram is bytes");
            }
            break;
        }
        if (count > 1 && (k < count - 1 ? len != segment : len > segment)) {
            /* the kernel cuts the bytes, not the iovecs: a run is equal datagrams
             * and a last one no longer */
            PyErr_SetString(PyExc_ValueError, "send_run(): not a run of segment-sized datagrams");
            break;
        }
        Py_INCREF(d); /* held while the GIL may be given up: the list may change */
        held[k] = d;
        iov[k].iov_base = buf;
        iov[k].iov_len = (size_t)len;
    }
    ssize_t sent = -2;
    if (k == count) {
        sent = send_run_call(fd, iov, count, (uint16_t)segment, release);
        *err = errno;
    }
    for (Py_ssize_t m = 0; m < k; m++) {
        Py_DECREF(held[m]);
    }
    return sent;
}

/* send_run(fd, datagrams, i, j, segment, release) -> int: datagrams[i:j] (bytes,
 * at most 64) in one sendmsg on the connected non-blocking socket fd: with
 * UDP_SEGMENT = segment when more than one (each but the last exactly segment
 * bytes, the last at most: checked, as the kernel cuts the bytes wherever the
 * iovecs end), a plain datagram otherwise. */
static PyObject *
send_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t fd, i, j, segment;
    if (nargs != 6 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "send_run(fd, datagrams: list, i, j, segment, release)");
        return NULL;
    }
    int release = PyObject_IsTrue(args[5]);
    if (release < 0 || send_run_index(args[0], &fd) < 0 || send_run_index(args[2], &i) < 0
        || send_run_index(args[3], &j) < 0 || send_run_index(args[4], &segment) < 0) {
        return NULL;
    }
    Py_ssize_t n = PyList_Size(args[1]);
    Py_ssize_t count = j - i;
    if (fd < 0 || fd > 0x7FFFFFFF || i < 0 || j > n || count < 1 || count > SEND_RUN_MAX
        || (count > 1 && (segment < 1 || segment > 0xFFFF))) {
        PyErr_SetString(PyExc_ValueError, "send_run(): no such fd, run or segment size");
        return NULL;
    }
    int err = 0;
    ssize_t sent = send_run_list((int)fd, args[1], i, count, segment, release, &err);
    if (sent == -2) {
        return NULL;
    }
    if (sent < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(sent);
}

/* send_runs(fd, datagrams, max_segments, max_bytes, release) -> (i, calls,
 * errno): every datagram of the list (exact bytes) to the kernel, each GSO run
 * (transport.py's: up to min(max_segments, max_bytes // its size) datagrams of
 * one size, and one shorter last one) in one sendmsg, until one fails: then
 * i is where that run starts and errno its error (0: all sent, i = the
 * list's length); calls counts the sendmsg calls that passed.  What to do
 * about an error stays in transport.py, which is handed the run's error as
 * if its own send of that run had raised it.  A list with anything but
 * non-empty exact bytes is left whole to that loop: (0, 0, 0). */
static PyObject *
send_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t fd, most, max_bytes;
    if (nargs != 5 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "send_runs(fd, datagrams: list, max_segments, max_bytes, release)");
        return NULL;
    }
    int release = PyObject_IsTrue(args[4]);
    if (release < 0 || send_run_index(args[0], &fd) < 0 || send_run_index(args[2], &most) < 0 ||
        send_run_index(args[3], &max_bytes) < 0) {
        return NULL;
    }
    if (fd < 0 || fd > 0x7FFFFFFF || most < 1 || most > SEND_RUN_MAX || max_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "send_runs(): no such fd, or limits out of range");
        return NULL;
    }
    PyObject *datagrams = args[1];
    Py_ssize_t n = PyList_Size(datagrams);
    for (Py_ssize_t k = 0; k < n; k++) { /* exact bytes only: no code runs below */
        PyObject *d = PyList_GetItem(datagrams, k);
        if (!PyBytes_CheckExact(d) || PyBytes_Size(d) == 0) {
            /* another type (a bytes subclass), or an empty datagram (no GSO
             * segment size): none sent here, transport.py's loop sends them all */
            return Py_BuildValue("(nni)", (Py_ssize_t)0, (Py_ssize_t)0, 0);
        }
    }
    Py_ssize_t i = 0, calls = 0;
    int err = 0;
    while (i < n) {
        Py_ssize_t size = PyBytes_Size(PyList_GetItem(datagrams, i));
        Py_ssize_t limit = size > 0 ? max_bytes / size : most;
        limit = limit < most ? limit : most;
        Py_ssize_t j = run_end(datagrams, i, n, size, limit); /* exact bytes: no error */
        ssize_t sent = send_run_list((int)fd, datagrams, i, j - i, size, release, &err);
        if (sent == -2) {
            return NULL;
        }
        if (sent < 0) {
            break;
        }
        calls++;
        i = j;
        n = PyList_Size(datagrams); /* the GIL may have been given up */
    }
    return Py_BuildValue("(nni)", i, calls, i < n ? err : 0);
}

#define SEND_RUN_METHOD                                                                       \
    {"send_run", (PyCFunction)(void (*)(void))send_run, METH_FASTCALL,                        \
     "send_run(fd, datagrams, i, j, segment, release) -> bytes sent: datagrams[i:j] in one "  \
     "sendmsg (UDP GSO when more than one), no join."},                                       \
    {"send_runs", (PyCFunction)(void (*)(void))send_runs, METH_FASTCALL,                      \
     "send_runs(fd, datagrams, max_segments, max_bytes, release) -> (i, calls, errno): "      \
     "every GSO run in one sendmsg each, up to the first that fails."},
#else
#define SEND_RUN_METHOD
#endif

#endif
