#!/bin/sh
# tools/pack_gpu.sh [DIR]: everything a GPU machine without this project's
# build dependencies needs to run bench/torch_plan.py, in one folder (default
# out/gpu, which git ignores; name it in the run's carry list):
#   libremat.so    built in DIR/build with portable flags (ARCH, default
#                  -march=x86-64-v3; MPI=0; no liburing: a planner needs neither)
#   lib*.so.*      the shared libraries it links that are not the C runtime
#                  or OpenMP's (ldd: libcjson, libnettle), which the other
#                  machine may lack
#   rematplan/     python/rematplan
#   bench/, tests/ bench/torch_plan.py and the models it imports
# On that machine (docs/PYTORCH.md, "Measured"):
#   cd DIR && REMAT_LIBRARY=$PWD/libremat.so LD_LIBRARY_PATH=$PWD PYTHONPATH=$PWD python3 bench/torch_plan.py ...
set -eu
DIR=${1:-out/gpu}
ARCH=${ARCH:--march=x86-64-v3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DIR/build" "$DIR/bench" "$DIR/tests"
DIR=$(cd "$DIR" && pwd)
make -s -C "$ROOT" BUILD="$DIR/build" MPI=0 URING_LIBS= ARCH="$ARCH" "$DIR/build/libremat.so"
cp -L "$DIR/build/libremat.so" "$DIR/libremat.so"
ldd "$DIR/libremat.so" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgomp.so*|libgcc_s.so*|libstdc++.so*) ;;
        *) cp -L "$lib" "$DIR/" ;;
    esac
done
rm -rf "$DIR/rematplan" "$DIR/build"
cp -r "$ROOT/python/rematplan" "$DIR/rematplan"
rm -rf "$DIR/rematplan/__pycache__" "$DIR/rematplan/_native"
cp "$ROOT/bench/torch_plan.py" "$DIR/bench/"
cp "$ROOT/tests/rematplan_models.py" "$DIR/tests/"
echo "pack_gpu: $DIR ($(du -sh "$DIR" | cut -f1)): $(cd "$DIR" && ls | tr '\n' ' ')"
