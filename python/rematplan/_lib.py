"""The installed libremat, through ctypes: the planners are libremat's C code.

Where the library is looked for, in order:
  1. $REMAT_LIBRARY (a path to libremat.so),
  2. pkg-config's libdir of `remat` (what `make install` writes),
  3. the dynamic loader's search (ctypes.util.find_library),
  4. /usr/local/lib, ~/.local/lib and /usr/lib.
"""
import ctypes
import ctypes.util
import json
import os
import subprocess

_lib = None


class RematError(RuntimeError):
    """An error libremat reported (its status name and message)."""


class LibraryNotFound(RematError):
    pass


def _candidates():
    env = os.environ.get("REMAT_LIBRARY")
    if env:
        yield env
        return
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "remat"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            yield os.path.join(out.stdout.strip(), "libremat.so")
    except (OSError, subprocess.SubprocessError):
        pass
    found = ctypes.util.find_library("remat")
    if found:
        yield found
    for d in ("/usr/local/lib", os.path.expanduser("~/.local/lib"), "/usr/lib"):
        yield os.path.join(d, "libremat.so")


def lib():
    """The loaded libremat (loaded once)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        tried.append(path)
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            L = ctypes.CDLL(path)
        except OSError as e:
            tried[-1] += " (%s)" % e
            continue
        _declare(L)
        L.path = path
        _lib = L
        return L
    raise LibraryNotFound("libremat.so not found (tried: %s); run `make install` in remat's repository "
                          "(PREFIX=... for another prefix) or set REMAT_LIBRARY=/path/to/libremat.so"
                          % ", ".join(tried or ["nothing"]))


def _declare(L):
    c = ctypes
    out = c.POINTER(c.c_void_p)
    L.rm_version.restype = c.c_char_p
    L.rm_version.argtypes = []
    L.rm_status_name.restype = c.c_char_p
    L.rm_status_name.argtypes = [c.c_int]
    L.rm_parse_size.restype = c.c_int
    L.rm_parse_size.argtypes = [c.c_char_p, c.POINTER(c.c_int64), c.POINTER(c.c_double), c.c_char_p, c.c_size_t]
    for name in ("rm_plan_graph", "rm_plan_chain"):
        f = getattr(L, name)
        f.restype = c.c_int
        f.argtypes = [c.c_char_p, c.c_int64, out, c.c_char_p, c.c_size_t]
    if hasattr(L, "rm_price_graph"):
        L.rm_price_graph.restype = c.c_int
        L.rm_price_graph.argtypes = [c.c_char_p, c.c_char_p, out, c.c_char_p, c.c_size_t]
    # the answers are malloc()ed by libremat: free() them with the C library's free
    libc = c.CDLL(None)
    L.c_free = libc.free
    L.c_free.restype = None
    L.c_free.argtypes = [c.c_void_p]


def version():
    return lib().rm_version().decode()


def parse_size(text):
    """'3GiB', '500MB', '123456' -> (bytes, 0.0); '50%' -> (0, 0.5). libremat's own parser."""
    L = lib()
    b, f = ctypes.c_int64(0), ctypes.c_double(0)
    err = ctypes.create_string_buffer(256)
    rc = L.rm_parse_size(str(text).encode(), ctypes.byref(b), ctypes.byref(f), err, len(err))
    if rc != 0:
        raise ValueError("budget %r: %s" % (text, err.value.decode()))
    return b.value, f.value


RM_OK, RM_ERR_BUDGET = 0, 5


def _call_json(fn, *args):
    """Calls a libremat planner that answers JSON; returns (status, answer or None, message)."""
    L = lib()
    res = ctypes.c_void_p()
    err = ctypes.create_string_buffer(1024)
    rc = fn(*args, ctypes.byref(res), err, len(err))
    answer = None
    if res.value:
        answer = json.loads(ctypes.string_at(res.value).decode())
        L.c_free(res)
    return rc, answer, err.value.decode()


def plan_graph(graph, budget):
    """rm_plan_graph on a graph dict; budget < 0 plans at store-all. Returns (status, answer, message)."""
    L = lib()
    return _call_json(L.rm_plan_graph, json.dumps(graph).encode(), int(budget))


def plan_chain(chain, budget):
    L = lib()
    return _call_json(L.rm_plan_chain, json.dumps(chain).encode(), int(budget))


def price_graph(graph, plan):
    """rm_price_graph: the peak and recomputation time of a given plan (modes, blocks) on graph."""
    L = lib()
    if not hasattr(L, "rm_price_graph"):
        raise RematError("this libremat (%s) has no rm_price_graph: install libremat %s or newer"
                         % (version(), "0.1.0"))
    return _call_json(L.rm_price_graph, json.dumps(graph).encode(), json.dumps(plan).encode())
