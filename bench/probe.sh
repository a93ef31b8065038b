#!/bin/sh
# bench/probe.sh: the scratch file's bandwidth probe (issue 28, item 5) and
# how much a plan moves with the bandwidth it assumes.
#
#   flock -x /work/notes/suite.lock sh bench/probe.sh        (`make` first)
#
# 1. spread: REPS runs of a tiny model with --scratch --page activations
#    (the probe is nearly all such a run does), each run's measured
#    scratch_write_bps and scratch_read_bps from --report; with PEER=path of
#    another remat binary (e.g. one built from a383371, a single 32 MiB
#    pass), the two alternate, run by run. Prints per binary the minimum,
#    median and maximum over the runs, max/min and the coefficient of
#    variation, and the mean wall time of a run.
# 2. plans: SHAPE under --memory-limit LIMIT with --scratch, fused, planned
#    with each of BANDWIDTHS (--scratch-bandwidth) and with the probe's
#    figure: what the plan pages (activations, moments, parameters, MiB a
#    step), its predicted step and the measured one (step_ms_median over
#    STEPS steps; the disk's real bandwidth is what the probe says, so a
#    plan that assumed more waits for it), ROUNDS rounds alternating over
#    the bandwidths, medians.
#
# Environment: REPS [20] PEER [none] SCRATCH [build/bench_probe] THREADS
#   [all cores] SHAPE LIMIT [80MiB] BANDWIDTHS ["0.2 0.5 1 2 4"] STEPS [4]
#   ROUNDS [3] PARTS ["spread plans"]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
REPS=${REPS:-20}
PEER=${PEER:-}
SCRATCH=${SCRATCH:-$(pwd)/build/bench_probe}
SHAPE=${SHAPE:-"--layers 6 --dim 256 --heads 4 --context 128 --batch 8"}
LIMIT=${LIMIT:-80MiB}
BANDWIDTHS=${BANDWIDTHS:-"0.2 0.5 1 2 4"}
STEPS=${STEPS:-4}
PARTS=${PARTS:-"spread plans"}
ROUNDS=${ROUNDS:-3}
OUT=$(mktemp -d /tmp/remat_probe.XXXXXX)
mkdir -p "$SCRATCH"
fields() { f=$1; shift; for k; do printf "%s " "$(field "$f" "$k")"; done; } # the report's numbers, in order
trap 'rm -rf "$OUT" "$SCRATCH"' EXIT
echo "bench/probe.sh: $(lscpu | sed -n 's/^Model name: *//p'), scratch $SCRATCH ($(df -T "$SCRATCH" | awk 'NR == 2 { print $2 }')), OPENBLAS_CORETYPE/L2_SIZE unset"

case " $PARTS " in *" spread "*)
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --steps 1 --quiet --scratch $SCRATCH --page activations"
for i in $(seq "$REPS"); do
    for b in "$REMAT" ${PEER:+"$PEER"}; do
        t0=$(date +%s.%N)
        "$b" train $TINY --report "$OUT/r.json" >/dev/null
        t1=$(date +%s.%N)
        echo "$b $(fields "$OUT/r.json" scratch_write_bps scratch_read_bps) $t0 $t1" \
             "$(fields "$OUT/r.json" scratch_write_bps_min scratch_write_bps_max scratch_read_bps_min scratch_read_bps_max)" \
             >> "$OUT/spread"
    done
done
"$PYTHON" - "$OUT/spread" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
for b in dict.fromkeys(r[0] for r in rows):
    mine = [r for r in rows if r[0] == b]
    t = st.mean(float(r[4]) - float(r[3]) for r in mine)
    out = []
    for k, name in ((1, "write"), (2, "read")):
        x = sorted(float(r[k]) / 1e6 for r in mine)
        out.append("%s MB/s min %.0f median %.0f max %.0f (max/min %.2f, cv %.0f%%)" % (
            name, x[0], st.median(x), x[-1], x[-1] / x[0], 100 * st.pstdev(x) / st.mean(x)))
    within = [float(r[6]) / float(r[5]) for r in mine if len(r) > 8 and float(r[5] or 0) > 0]
    inside = "; within a run (rounds' max/min, median over runs): write %.2f, read %.2f" % (
        st.median(within), st.median(float(r[8]) / float(r[7]) for r in mine)) if within else ""
    print("spread %s: %d runs: %s; %.2f s a run%s" % (b, len(mine), "; ".join(out), t, inside))
PY
;; esac

case " $PARTS " in *" plans "*)
printf "plans: %s --threads %s --fuse-optimizer --grad-clip 0 --memory-limit %s --scratch, %s steps, %s alternating rounds (medians)\n" \
    "$SHAPE" "$THREADS" "$LIMIT" "$STEPS" "$ROUNDS"
for round in $(seq "$ROUNDS"); do
    for bw in measured $BANDWIDTHS; do
        flag=""
        [ "$bw" = measured ] || flag="--scratch-bandwidth ${bw}GB/s"
        "$REMAT" train $SHAPE --threads "$THREADS" --fuse-optimizer --grad-clip 0 --memory-limit "$LIMIT" \
            --scratch "$SCRATCH" $flag --steps "$STEPS" --quiet --report "$OUT/p.json" >/dev/null
        echo "$bw $(fields "$OUT/p.json" scratch_write_bps scratch_read_bps paged_values paged_moments paged_params \
                    paged_out_bytes step_ms_predicted step_ms_median io_wait_ms)" >> "$OUT/plans"
    done
done
"$PYTHON" - "$OUT/plans" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
print("%-24s %-14s %8s %10s %10s %10s" % ("bandwidth (GB/s)", "pages v/m/p", "MiB out", "pred. ms", "meas. ms", "waits ms"))
for bw in dict.fromkeys(r[0] for r in rows):
    mine = [r for r in rows if r[0] == bw]
    label = bw if bw != "measured" else "measured %.2f/%.2f" % (st.median(float(r[1]) for r in mine) / 1e9,
                                                                st.median(float(r[2]) for r in mine) / 1e9)
    pages = sorted(set("%s/%s/%s" % (r[3], r[4], r[5]) for r in mine))
    print("%-24s %-14s %8.1f %10.1f %10.1f %10.1f" % (label, ",".join(pages), st.median(float(r[6]) for r in mine) / 1048576,
          st.median(float(r[7]) for r in mine), st.median(float(r[8]) for r in mine), st.median(float(r[9]) for r in mine)))
PY
;; esac
