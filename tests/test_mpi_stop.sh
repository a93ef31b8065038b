#!/bin/sh
# test_mpi_stop.sh: issue 22 under mpirun, two ranks on a tiny model:
#  1. every stop by a signal saves a file that verifies, or says it did not:
#     SIGTERM to both ranks (exit 143), SIGINT to rank 1 alone (exit 130),
#     SIGINT to mpirun (Open MPI forwards SIGTERM; mpirun exits 1 itself),
#     SIGUSR1 to mpirun (forwarded: the job exits 138);
#     the --save file is replaced by the new state (it used to keep the old
#     one while "saved" was printed), rank 0 alone says so, once;
#  4. a global batch that does not split over ranks x micro-batches is
#     refused (it used to train on fewer rows);
# 10. ranks that run different configurations stop at start-up, naming the
#     flag and the ranks (another --steps or --shard-optimizer used to spin
#     forever; another --lr or --save passed silently).
# Skipped (0 passed) when remat was built without MPI or mpirun is missing.
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
if ! command -v mpirun >/dev/null 2>&1 || ! ldd "$R" 2>/dev/null | grep -q libmpi; then
    echo "test_mpi_stop: skipped (remat built without MPI, or no mpirun)"
    echo "test_mpi_stop: 0 passed, 0 failed"
    exit 0
fi
if nm "$R" 2>/dev/null | grep -q __asan_init; then # Open MPI's own allocations (see test_mpi.sh)
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    export ASAN_OPTIONS
fi
MPI="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"
cd "$T" || exit 1
awk 'BEGIN { for (i = 0; i < 400; i++) printf "line %d: remat trains a model under a memory budget, %d\n", i, (i * i) % 97 }' >data.txt
G="--layers 2 --dim 32 --heads 4 --context 16 --batch 4 --threads 1 --data data.txt"
meta() { "$R" inspect "$1" 2>/dev/null | sed -n "s/^  $2 = //p"; }

# the pid of rank $2 among the children of mpirun $1
rank_pid() {
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=$2$" && echo "$p"
    done
}
# stop WHO SIG WANT: trains on 2 ranks past step 25, sends SIG to
# WHO (both, rank1 or mpirun), then checks the exit, the message, the file
stop() {
    who=$1 sig=$2 want=$3
    "$R" train $G --steps 1 --quiet --save old.st >/dev/null 2>&1 && cp old.st s.st # an older file in its place
    rm -f s.step*.st
    timeout 120 $MPI -np 2 "$R" train $G --steps 1000000 --save s.st --save-every 25 --keep 1 >out 2>err &
    to=$!
    # the first step file says the run is under way (stdout is buffered)
    i=0; while [ $i -lt 1200 ] && ! ls s.step*.st >/dev/null 2>&1; do sleep 0.05; i=$((i + 1)); done
    mp=$(pgrep -P $to mpirun)
    case $who in
    both) kill -"$sig" $(rank_pid $mp 0) $(rank_pid $mp 1) ;;
    rank1) kill -"$sig" $(rank_pid $mp 1) ;;
    mpirun) kill -"$sig" $mp ;;
    esac
    wait $to; rc=$?
    step=$(meta s.st step)
    check '[ "$want" = any ] || [ $rc -eq "$want" ]' "SIG$sig to $who: exit $rc, want $want: $(head -3 err)"
    if [ "$want" = any ] && ! grep -q "saved s.st" err; then
        # mpirun SIGKILLs the ranks 1 s after its SIGTERM: on a loaded machine
        # before the save ends; then nothing may claim a save, and the old file stays whole
        check '"$R" inspect s.st >/dev/null 2>&1 && [ "$step" = 1 ]' "SIG$sig to $who, killed: s.st damaged ('$step')"
        return
    fi
    check '"$R" inspect s.st >/dev/null 2>&1 && [ -n "$step" ] && [ "$step" -ge 25 ]' \
        "SIG$sig to $who: s.st does not verify or is the old file (step '$step'): $(head -3 err)"
    check '[ $(grep -c "saved s.st" err) -eq 1 ] && grep -q "stopped after step $step of" err' \
        "SIG$sig to $who: 'saved' once, for the step in the file ($step): $(grep remat err)"
    check '! grep -q "NOT saved\|MPI_ABORT" err' "SIG$sig to $who: $(grep -i "not saved\|abort" err | head -2)"
}
stop both TERM 143
stop rank1 INT 130
stop mpirun INT any
check '! grep -q "saving s.st" err || grep -q "mpirun.*exits 1.*SIGUSR1" err' \
    "SIGINT to mpirun: no word about mpirun's own exit status: $(head -2 err)"
# SIGUSR1 to mpirun: forwarded without ending the job, so the ranks' status is the job's
stop mpirun USR1 138

# class 4: every row trains, or the batch is refused
$MPI -np 2 "$R" train $G --steps 1 --batch 6 --micro-batches 2 >/dev/null 2>err; rc=$?
check '[ $rc -eq 2 ] && grep -q "does not split evenly over 2 ranks x 2 micro-batches" err && grep -q "batch 4 or 8" err' \
    "--batch 6 --micro-batches 2 on 2 ranks: exit $rc $(head -2 err)"

# class 10: different configurations stop at start-up, naming the flag and the ranks
for diff in "--steps 4" "--shard-optimizer" "--lr 0.5" "--save x.st"; do
    flag=${diff%% *}
    start=$(date +%s)
    timeout 120 $MPI -np 1 "$R" train $G --steps 3 --quiet : -np 1 "$R" train $G --steps 3 --quiet $diff >/dev/null 2>err
    rc=$?; secs=$(($(date +%s) - start))
    check '[ $rc -eq 2 ] && grep -q "configurations differ: $flag is .* on rank 0; .* on rank 1" err' \
        "ranks with '$diff' on rank 1: exit $rc $(head -2 err)"
    check '[ $secs -le 60 ] && [ ! -e x.st ]' "ranks with '$diff' on rank 1: ${secs}s, or a file written"
done
timeout 120 $MPI -np 1 "$R" train $G --steps 2 --quiet : -np 1 "$R" train $G --steps 2 --quiet --threads 2 >/dev/null 2>err
check '[ $? -eq 0 ]' "ranks with different --threads (each node its own cores) must train: $(head -2 err)"

echo "test_mpi_stop: $pass passed, $fail failed"
[ $fail -eq 0 ]
