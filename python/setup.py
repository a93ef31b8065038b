"""pip install ./python: the package, and libremat built from this repository
with portable CPU flags and bundled with it (rematplan/_native/libremat.so).

Where the sources are: the folder above this one (a checkout of remat), or
$REMAT_SOURCE. $REMAT_PREBUILT=/path/to/libremat.so bundles that library
instead of building one (the ASan build in the tests). $REMAT_ARCH sets the
compiler's target (default: -march=x86-64-v2 on x86-64, the compiler's own
default elsewhere). The library is built without MPI and liburing, which a
planner does not need."""
import os
import platform
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


def source_root():
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.environ.get("REMAT_SOURCE"), os.path.dirname(here)):
        if root and os.path.exists(os.path.join(root, "include", "remat.h")) and \
                os.path.exists(os.path.join(root, "Makefile")):
            return root
    raise SystemExit("rematplan: libremat's sources were not found above %s; set REMAT_SOURCE to a checkout of "
                     "remat (or REMAT_PREBUILT to a built libremat.so)" % here)


def portable_arch():
    if "REMAT_ARCH" in os.environ:
        return os.environ["REMAT_ARCH"]
    return "-march=x86-64-v2" if platform.machine() in ("x86_64", "AMD64") else ""


def build_library(build_temp):
    """libremat.so built in build_temp: its path."""
    root = source_root()
    build = os.path.abspath(os.path.join(build_temp, "libremat"))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    cmd = ["make", "-C", root, "-j%d" % max(1, min(os.cpu_count() or 1, 8)), "BUILD=" + build, "MPI=0",
           "URING_LIBS=", "ARCH=" + portable_arch(), os.path.join(build, "libremat.so")]
    subprocess.check_call(cmd, env=env)
    return os.path.join(build, "libremat.so")


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("REMAT_PREBUILT") or build_library(self.get_finalized_command("build").build_temp)
        target = os.path.join(self.build_lib, "rematplan", "_native")
        os.makedirs(target, exist_ok=True)
        shutil.copyfile(os.path.realpath(lib), os.path.join(target, "libremat.so"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel holds a shared library: it is for this platform
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
