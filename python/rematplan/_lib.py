"""libremat, through ctypes: the planners are libremat's C code.

Where the library is looked for, in order:
  1. $REMAT_LIBRARY (a path to libremat.so; nothing else is tried),
  2. the copy `pip install ./python` built and bundled (rematplan/_native),
  3. pkg-config's libdir of `remat` (what `make install` writes),
  4. the dynamic loader's search (ctypes.util.find_library),
  5. /usr/local/lib, ~/.local/lib and /usr/lib.
Before dlopen the file is checked (_elf.py): a regular, complete, readable
ELF shared object of this process's machine, else a LibraryError with the
reason (a FIFO blocked dlopen forever; a truncated file was SIGBUS). On load
the library must have every function rematplan calls and say the package's
version (rm_version); a file that is not libremat, an older or a partial one
is a LibraryError that names the file and what is wrong.
"""
import ctypes
import ctypes.util
import json
import os
import re
import subprocess

from . import _elf
from ._version import __version__

_lib = None
NEEDED = ("rm_version", "rm_status_name", "rm_parse_size", "rm_plan_graph", "rm_plan_chain", "rm_price_graph")


class RematError(RuntimeError):
    """An error libremat reported (its status name and message)."""


class LibraryError(RematError):
    """libremat could not be loaded, or the file loaded is not the libremat this package needs."""


class LibraryNotFound(LibraryError):
    pass


def bundled():
    """The library `pip install` bundled with the package, if any."""
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "libremat.so")
    return p if os.path.exists(p) else None


def _candidates():
    b = bundled()
    if b:
        yield b
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "remat"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            yield os.path.join(out.stdout.strip(), "libremat.so")
    except (OSError, subprocess.SubprocessError):
        pass
    found = ctypes.util.find_library("remat")
    if found:
        yield from _loader_paths(found)
    for d in ("/usr/local/lib", os.path.expanduser("~/.local/lib"), "/usr/lib"):
        yield os.path.join(d, "libremat.so")


def _loader_paths(name):
    """The files the dynamic loader would open for a bare name (find_library's answer), so that the
    file loaded is the file checked: $LD_LIBRARY_PATH's, then its cache's (ldconfig -p)."""
    if os.path.sep in name:
        yield name
        return
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.exists(os.path.join(d, name)):
            yield os.path.join(d, name)
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10,
                             env=dict(os.environ, PATH=os.environ.get("PATH", "") + ":/sbin:/usr/sbin")).stdout
    except (OSError, subprocess.SubprocessError):
        return
    for line in out.splitlines():  # "\tlibremat.so.0 (libc6,x86-64) => /usr/local/lib/libremat.so.0"
        left, _, right = line.strip().partition(" => ")
        if right and left.split(" ")[0] == name:
            yield right


def load(path):
    """Loads and checks one file: the library, or LibraryError saying what is wrong with it."""
    try:
        st = _elf.check(path)
    except _elf.BadFile as e:
        raise LibraryError("%s %s; point REMAT_LIBRARY at libremat.so, or rebuild it (`pip install ./python`)"
                           % (path, e)) from None
    try:
        L = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryError("%s cannot be loaded as a shared library (%s); rebuild libremat (`pip install "
                           "./python`, or `make install`)" % (path, e)) from None
    try:
        moved = _elf.changed(st, os.stat(path))
    except OSError:
        moved = True
    if moved:
        raise LibraryError("%s changed while it was loaded (replaced or rewritten): load it once it is written "
                           "(install a library by renaming a complete file over it)" % path)
    missing = [f for f in NEEDED if not hasattr(L, f)]
    if "rm_version" in missing:
        raise LibraryError("%s is not libremat (it has no rm_version); point REMAT_LIBRARY at libremat.so"
                           % path)
    L.rm_version.restype = ctypes.c_char_p
    L.rm_version.argtypes = []
    v = (L.rm_version() or b"").decode(errors="replace")
    if missing:
        raise LibraryError("%s (libremat %s) lacks %s, which rematplan %s calls: install libremat %s (`pip "
                           "install ./python` builds and bundles it)" % (path, v, ", ".join(missing), __version__,
                                                                          __version__))
    if v != __version__:
        raise LibraryError("%s is libremat %s, but rematplan %s needs libremat %s: reinstall both from the same "
                           "tree (`pip install ./python`)" % (path, v, __version__, __version__))
    _declare(L)
    L.path = path
    return L


def lib():
    """The loaded libremat (loaded once)."""
    global _lib
    if _lib is not None:
        return _lib
    env = os.environ.get("REMAT_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise LibraryNotFound("REMAT_LIBRARY=%s: no such file" % env)
        _lib = load(env)
        return _lib
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            _lib = load(path)
            return _lib
        except LibraryError as e:
            tried.append(str(e))
    raise LibraryNotFound("libremat.so not found (tried: %s); `pip install ./python` in remat's repository builds "
                          "and bundles it, or set REMAT_LIBRARY=/path/to/libremat.so" % "; ".join(tried or ["nothing"]))


def _declare(L):
    c = ctypes
    out = c.POINTER(c.c_void_p)
    L.rm_status_name.restype = c.c_char_p
    L.rm_status_name.argtypes = [c.c_int]
    L.rm_parse_size.restype = c.c_int
    L.rm_parse_size.argtypes = [c.c_char_p, c.POINTER(c.c_int64), c.POINTER(c.c_double), c.c_char_p, c.c_size_t]
    for name in ("rm_plan_graph", "rm_plan_chain"):
        f = getattr(L, name)
        f.restype = c.c_int
        f.argtypes = [c.c_char_p, c.c_int64, out, c.c_char_p, c.c_size_t]
    L.rm_price_graph.restype = c.c_int
    L.rm_price_graph.argtypes = [c.c_char_p, c.c_char_p, out, c.c_char_p, c.c_size_t]
    # the answers are malloc()ed by libremat: free() them with the C library's free
    libc = c.CDLL(None)
    L.c_free = libc.free
    L.c_free.restype = None
    L.c_free.argtypes = [c.c_void_p]


def version():
    return lib().rm_version().decode()


MAX_BYTES = 1 << 60  # libremat's RM_MAX_BUDGET_BYTES
_WHOLE = re.compile(r"\+?([0-9]+) *B?")  # a whole number of bytes, as rm_parse_bytes reads one


def parse_size(text):
    """'3GiB', '500MB', '123456' -> (bytes, 0.0); '50%' -> (0, 0.5). libremat's own parser and words,
    after two checks it cannot make: a control character (a NUL would end the C string there: "64\\0MiB"
    was 64 bytes; a newline split the message), and a whole number of bytes above 2^60 (its parser
    reads a double: 2^60 + 1 became 2^60, and a number below 2^60 was rounded)."""
    text = str(text)
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        raise ValueError("budget %r holds a control character (%r at index %d): give the size alone, on one line, "
                         "e.g. 64MiB, 1.5GiB, 500MB, 123456 (bytes) or 50%% (of store-all)"
                         % (text, bad, text.index(bad)))
    whole = _whole_bytes(text)
    if whole is not None and whole > MAX_BYTES:
        raise ValueError("budget %r: size %r is too large: at most 2^60 bytes (1EiB, 1073741824GiB)"
                         % (text, text[:40]))
    L = lib()
    b, f = ctypes.c_int64(0), ctypes.c_double(0)
    err = ctypes.create_string_buffer(256)
    rc = L.rm_parse_size(text.encode(), ctypes.byref(b), ctypes.byref(f), err, len(err))
    if rc != 0:
        raise ValueError("budget %r: %s" % (text, err.value.decode(errors="replace")))
    return (whole if whole is not None else b.value), f.value


def _whole_bytes(text):
    """The bytes a whole number of bytes says ('123456', '+5', '64 B'), exactly; None for any other text
    (more than 20 digits: above 2^60 whatever they are, and past what int() reads)."""
    m = _WHOLE.fullmatch(text)
    if m is None:
        return None
    digits = m.group(1).lstrip("0") or "0"
    return int(digits) if len(digits) <= 20 else MAX_BYTES + 1


RM_OK, RM_ERR_BUDGET = 0, 6  # rm_status (include/remat.h)


def _json(obj, what):
    try:
        return json.dumps(obj, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as e:  # (RecursionError: nested deeper than Python's stack)
        raise RematError("rematplan: the %s is not JSON (%s): give dicts, lists, strings, numbers and booleans"
                         % (what, e)) from None


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


def _c_budget(budget):
    """A budget as the int64 libremat takes: ctypes wraps a larger int silently (2^63 became -2^63,
    store-all; 10^30 some 5e18), so one above 2^60 is 2^60: libremat's graphs hold at most 2^60 bytes,
    so any larger budget is store-all, as it says (and any negative one is -1: store-all)."""
    return max(min(int(budget), MAX_BYTES), -1)


def plan_graph(graph, budget):
    """rm_plan_graph on a graph dict; budget < 0 plans at store-all. Returns (status, answer, message)."""
    L = lib()
    return _call_json(L.rm_plan_graph, _json(graph, "graph"), _c_budget(budget))


def plan_chain(chain, budget):
    L = lib()
    return _call_json(L.rm_plan_chain, _json(chain, "chain"), _c_budget(budget))


def price_graph(graph, plan):
    """rm_price_graph: the peak and recomputation time of a given plan (modes, blocks) on graph."""
    L = lib()
    return _call_json(L.rm_price_graph, _json(graph, "graph"), _json(plan, "plan"))
