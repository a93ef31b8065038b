#!/bin/sh
# test_mpi_probe.sh: issue 22's MPI classes, the members a second probe
# tried beyond the issue's examples (test_mpi_stop.sh has those): each case
# failed on main at 6cb7aa7. Two ranks on a tiny model.
#  4. a --resume file's batch must split over the ranks too (it trained 4
#     rows of a batch of 5 as "global batch 5");
# 10. the configuration digest compares paths by their canonical names
#     (data.txt and ./data.txt are one file) and what the files hold by
#     their contents (another node's file of the same name: different data,
#     a --resume file at another step, which crashed in MPI_Allreduce);
#     values that differ after the characters a message shows read apart;
#  1. every stop signal (QUIT, ALRM, PIPE, XCPU too) to a rank saves or says
#     it did not, also during the start-up.
# Skipped (0 passed) when remat was built without MPI or mpirun is missing.
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
if ! command -v mpirun >/dev/null 2>&1 || ! ldd "$R" 2>/dev/null | grep -q libmpi; then
    echo "test_mpi_probe: skipped (remat built without MPI, or no mpirun)"
    echo "test_mpi_probe: 0 passed, 0 failed"
    exit 0
fi
if nm "$R" 2>/dev/null | grep -q __asan_init; then # Open MPI's own allocations (see test_mpi.sh)
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    export ASAN_OPTIONS
fi
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"
cd "$T" || exit 1
awk 'BEGIN { for (i = 0; i < 400; i++) printf "line %d: remat trains a model under a memory budget, %d\n", i, (i * i) % 97 }' >data.txt
awk 'BEGIN { for (i = 0; i < 400; i++) printf "LINE %d: remat trains a model under a memory budget, %d\n", i, (i * i) % 97 }' >other.txt
G="--layers 2 --dim 32 --heads 4 --context 16 --batch 4 --threads 1 --quiet"
# differ WHAT FLAG CMD...: exit 2 at start-up, naming FLAG as what differs
differ() {
    what=$1 flag=$2; shift 2
    "$@" >/dev/null 2>err; rc=$?
    check '[ $rc -eq 2 ] && grep -q "configurations differ: $flag is .* on rank 0; .* on rank 1" err' \
        "$what: exit $rc, '$flag' not named: $(head -2 err)"
}

# class 4: a resumed file's batch of 5 on 2 ranks
"$R" train $G --batch 5 --steps 1 --data data.txt --save b5.st >/dev/null 2>&1
$MPI -np 2 "$R" train --resume b5.st --steps 3 --quiet >/dev/null 2>err; rc=$?
check '[ $rc -eq 2 ] && grep -q "batch 5 is the global batch: it must be a multiple of the 2 ranks" err' \
    "--resume of a batch-5 file on 2 ranks: exit $rc $(head -2 err)"

# class 10: one file by two names is one configuration
$MPI -np 1 "$R" train $G --steps 2 --data data.txt : -np 1 "$R" train $G --steps 2 --data ./data.txt >/dev/null 2>err
check '[ $? -eq 0 ]' "--data data.txt and ./data.txt (one file) refused: $(head -2 err)"
# values alike in their first 95 characters
long=$(printf 'x%.0s' $(seq 1 110))
differ "--save differing after 110 characters" "--save" \
    $MPI -np 1 "$R" train $G --steps 2 --data data.txt --save "${long}a.st" : -np 1 "$R" train $G --steps 2 \
    --data data.txt --save "${long}b.st"
check '! grep -q "on ranks 0,1" err' "two different --save values read as one: $(head -1 err)"
# another node's file of the same name: a private mount namespace gives rank 1 other bytes at the same path
mkdir -p n1 n2
if unshare -m sh -c "mount --bind n2 n1" 2>/dev/null; then
    cp data.txt n1/d.txt && cp other.txt n2/d.txt
    differ "--data of one name, other contents" "the data (its contents)" \
        $MPI -np 1 "$R" train $G --steps 2 --data n1/d.txt : -np 1 unshare -m sh -c \
        "mount --bind n2 n1 && exec '$R' train $G --steps 2 --data n1/d.txt"
    "$R" train $G --steps 2 --data data.txt --save n1/r.st >/dev/null 2>&1
    "$R" train --resume n1/r.st --steps 4 --quiet --save n2/r.st >/dev/null 2>&1
    differ "--resume of one name at another step" "the --resume file (its contents)" \
        $MPI -np 1 "$R" train --resume n1/r.st --steps 6 --threads 1 --quiet : -np 1 unshare -m sh -c \
        "mount --bind n2 n1 && exec '$R' train --resume n1/r.st --steps 6 --threads 1 --quiet"
    check '! grep -q "MPI_ERR\|An error occurred" err' "--resume at another step: an MPI error: $(head -3 err)"
else
    echo "test_mpi_probe: no private mount namespace here (unshare -m): the other-contents cases are skipped"
fi

# class 1: signals beyond INT/TERM/HUP/USR1/USR2, to one rank; and one during the start-up
rank_pid() {
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=$2$" && echo "$p"
    done
}
caught() { c=$(awk '/^SigCgt/ { print $2 }' /proc/"$1"/status 2>/dev/null); [ -n "$c" ] && [ $((0x$c >> 14 & 1)) -eq 1 ]; }
G2="--layers 2 --dim 32 --heads 4 --context 16 --batch 4 --threads 1 --data data.txt"
for sig_want in QUIT:131 ALRM:142; do
    sig=${sig_want%:*} want=${sig_want#*:}
    rm -f s.st
    mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$R" train $G2 --steps 200000 --save s.st \
        >out 2>err & mp=$!
    i=0; while [ $i -lt 1200 ] && ! grep -q "^step [2-9][0-9]/" out 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
    kill -$sig $(rank_pid $mp 1); wait $mp; rc=$?
    check '[ $rc -eq $want ] && grep -q "SIG$sig: stopped after step .*saved s.st" err && "$R" inspect s.st >/dev/null' \
        "SIG$sig to rank 1: exit $rc, $want wanted: $(grep -v "^---\|^$" err | head -3)"
done
# during the start-up: as soon as rank 1 catches the signals (before or in MPI_Init), not after a step
rm -f s.st
mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$R" train $G2 --steps 200000 --save s.st \
    >out 2>err & mp=$!
i=0; p1=; while [ $i -lt 1000 ] && { [ -z "$p1" ] || ! caught "$p1"; }; do p1=$(rank_pid $mp 1); sleep 0.005; i=$((i + 1)); done
kill -TERM "$p1"; wait $mp; rc=$?
check '[ $rc -eq 143 ] && grep -q "SIGTERM: stopped .*\(nothing was saved\|saved s.st\)" err && ! grep -q "exited on signal" err' \
    "SIGTERM to rank 1 during the start-up: exit $rc: $(grep -v "^---\|^$" err | head -3)"

echo "test_mpi_probe: $pass passed, $fail failed"
[ $fail -eq 0 ]
