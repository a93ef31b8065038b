"""The library file checked before dlopen: a regular, complete, readable ELF
shared object of this process's class, byte order and machine.

dlopen maps the file and runs its relocations: a FIFO blocks it forever, and
a file shorter than its headers say (an interrupted copy or build) is mapped
past its end, which is SIGBUS at the first page touched. So the file is
opened non-blocking, fstat'ed (regular files only), and its ELF header,
program headers and section headers are read and every extent they name
checked against the file's size; the size and modification time are checked
again after reading (a file written while it is checked is refused). Only
the standard library: `import rematplan` does not import torch.
"""
import os
import stat
import struct
import sys

ET_DYN, PT_DYNAMIC, SHT_NOBITS = 3, 2, 8
TABLE_MAX = 16 << 20  # a header table larger than this is a corrupt header, not a library
MACHINES = {3: "x86", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "S/390", 40: "ARM", 62: "x86-64",
            183: "AArch64", 243: "RISC-V", 258: "LoongArch"}
KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class BadFile(Exception):
    """The file is not a loadable library; the message is the reason (a phrase after the path)."""


def _ident(head):
    """(class, byte order, machine) of an ELF header's first 20 bytes, or None."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    order = "<" if head[5] == 1 else ">"
    return head[4], order, struct.unpack(order + "H", head[18:20])[0]


def _this_process():
    """(class, byte order, machine) of the running interpreter, from its own ELF header; None where it
    cannot be read (then only the class and byte order are compared)."""
    for exe in ("/proc/self/exe", sys.executable):
        try:
            with open(exe, "rb") as f:
                got = _ident(f.read(20))
            if got:
                return got
        except OSError:
            continue
    return (2 if struct.calcsize("P") == 8 else 1, "<" if sys.byteorder == "little" else ">", None)


def _read(fd, off, n, size, what):
    if n > TABLE_MAX:
        raise BadFile("claims a %s of %d bytes: not a library (a corrupt header?)" % (what, n))
    if off + n > size:
        raise BadFile("is truncated: its %s ends at byte %d but the file has %d bytes (an interrupted copy or "
                      "build?)" % (what, off + n, size))
    b = os.pread(fd, n, off)
    if len(b) != n:
        raise BadFile("was truncated while it was read (%s: %d of %d bytes at %d)" % (what, len(b), n, off))
    return b


def _name(machine):
    return "%s (ELF machine %d)" % (MACHINES.get(machine, "unknown"), machine)


def _header(fd, size):
    """The ELF header's fields, checked against this process: (order, fmt fields)."""
    if size == 0:
        raise BadFile("is empty (0 bytes)")
    head = os.pread(fd, 64, 0)
    got = _ident(head)
    if got is None:
        raise BadFile("is not an ELF file (it starts with %r)" % head[:8])
    cls, order, machine = got
    want = _this_process()
    if cls != want[0]:
        raise BadFile("is a %d-bit ELF file; this Python is %d-bit" % (32 * cls, 32 * want[0]))
    if order != want[1]:
        raise BadFile("is a %s-endian ELF file; this machine is %s-endian" % (
            "little" if order == "<" else "big", "little" if want[1] == "<" else "big"))
    if want[2] is not None and machine != want[2]:
        raise BadFile("is built for %s, but this Python runs on %s" % (_name(machine), _name(want[2])))
    fmt = order + ("HHIQQQIHHHHHH" if cls == 2 else "HHIIIIIHHHHHH")
    n = struct.calcsize(fmt)
    fields = struct.unpack(fmt, _read(fd, 16, n, size, "ELF header"))
    if fields[0] != ET_DYN:
        raise BadFile("is an ELF file of type %d, not a shared library (type %d)" % (fields[0], ET_DYN))
    return order, cls, fields


def _segments(fd, size, order, cls, phoff, phentsize, phnum):
    fmt = order + ("IIQQQQQQ" if cls == 2 else "IIIIIIII")
    if phnum == 0 or phentsize < struct.calcsize(fmt):
        raise BadFile("has no program headers: not a shared library")
    table = _read(fd, phoff, phnum * phentsize, size, "program header table")
    dynamic = False
    for i in range(phnum):
        h = struct.unpack_from(fmt, table, i * phentsize)
        ptype, off, filesz = (h[0], h[2], h[5]) if cls == 2 else (h[0], h[1], h[4])
        dynamic |= ptype == PT_DYNAMIC
        if off + filesz > size:
            raise BadFile("is truncated: its segment %d ends at byte %d but the file has %d bytes (an interrupted "
                          "copy or build?)" % (i, off + filesz, size))
    if not dynamic:
        raise BadFile("has no dynamic segment: not a shared library")


def _sections(fd, size, order, cls, shoff, shentsize, shnum):
    if shoff == 0:
        return  # no section headers (a stripped-down file): the segments are what is mapped
    fmt = order + ("IIQQQQIIQQ" if cls == 2 else "IIIIIIIIII")
    if shentsize < struct.calcsize(fmt):
        raise BadFile("has section headers of %d bytes, fewer than ELF's %d" % (shentsize, struct.calcsize(fmt)))
    if shnum == 0:  # more than 0xff00 sections: the count is section 0's size
        shnum = struct.unpack_from(fmt, _read(fd, shoff, shentsize, size, "section header table"))[5]
    table = _read(fd, shoff, shnum * shentsize, size, "section header table")
    for i in range(shnum):
        h = struct.unpack_from(fmt, table, i * shentsize)
        stype, off, sz = h[1], h[4], h[5]
        if stype != SHT_NOBITS and off + sz > size:
            raise BadFile("is truncated: its section %d ends at byte %d but the file has %d bytes (an interrupted "
                          "copy or build?)" % (i, off + sz, size))


def check(path):
    """Opens and checks path; returns its os.stat_result (to compare after loading). Raises BadFile."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise BadFile("cannot be opened (%s)" % (e.strerror or e)) from None
    try:
        st = os.fstat(fd)
        for test, kind in KINDS:
            if test(st.st_mode):
                raise BadFile("is %s, not a library file" % kind)
        if not stat.S_ISREG(st.st_mode):
            raise BadFile("is not a regular file")
        try:
            order, cls, f = _header(fd, st.st_size)
            _segments(fd, st.st_size, order, cls, f[4], f[8], f[9])
            _sections(fd, st.st_size, order, cls, f[5], f[10], f[11])
        except OSError as e:
            raise BadFile("cannot be read (%s)" % (e.strerror or e)) from None
        if changed(st, os.fstat(fd)):
            raise BadFile("changed while it was checked (its size or modification time moved): load it once it is "
                          "written")
        return st
    finally:
        os.close(fd)


def changed(a, b):
    """Whether two stats of a path are not the same unchanged file."""
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) != \
        (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)
