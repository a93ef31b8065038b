#!/usr/bin/python3
# bench/measure.py OUT_JSON QUIET_WAIT LABEL -- CMD...: waits until no other
# process is running (up to QUIET_WAIT s), runs CMD, and writes its wall and
# CPU time and the CPU time that other processes used meanwhile (from
# /proc/stat: "others", in cores). Used by bench/run.sh and hf_finetune.sh.
import json, os, resource, subprocess, sys, time

out, wait, label = sys.argv[1], float(sys.argv[2]), sys.argv[3]
cmd = sys.argv[sys.argv.index("--") + 1:]
hz = os.sysconf("SC_CLK_TCK")

def busy():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v) - v[3] - (v[4] if len(v) > 4 else 0)) / hz  # all but idle and iowait
    except OSError:
        return None

def running():
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return int(line.split()[1]) - 1  # minus this process
    except OSError:
        pass
    return 0

t0, quiet = time.time(), 0
while time.time() - t0 < wait:
    quiet = quiet + 1 if running() <= 0 else 0
    if quiet >= 4:
        break
    time.sleep(0.5)
waited = time.time() - t0
b0, r0, w0 = busy(), resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
w1, r1, b1 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN), busy()
cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
wall = w1 - w0
others = max(0.0, (b1 - b0 - cpu) / wall) if b0 is not None and b1 is not None and wall > 0 else None
res = {"label": label, "cmd": cmd, "rc": p.returncode, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
       "others_cores": None if others is None else round(others, 3), "waited_s": round(waited, 1),
       "idle_at_start": quiet >= 4, "output_tail": p.stdout.decode(errors="replace")[-2000:]}
with open(out, "w") as f:
    json.dump(res, f, indent=1)
print("bench: %-12s exit %d, %.1f s wall, %.1f s CPU, others %.2f cores%s" % (
    label, p.returncode, wall, cpu, others or 0.0, "" if quiet >= 4 else " (machine was busy at start)"),
    file=sys.stderr)
sys.exit(p.returncode)
