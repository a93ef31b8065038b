#!/usr/bin/python3
"""ckptfile_torch.py: checkpoint files between remat and PyTorch, both ways.

Usage: /usr/bin/python3 tests/ckptfile_torch.py --remat build/remat

There is no safetensors package here: the format is read and written by hand
(torch_crosscheck.st_read / st_write), and the checksum is recomputed from
the recipe in docs/CHECKPOINT_FILES.md, independently of remat's C code.

remat -> PyTorch:
  1. `remat train` (GPT, AdamW, sequential batches, no dropout) saves a
     checkpoint file; its remat_checksum equals the recipe's digest;
  2. its parameters, in the standard nanoGPT layout, give in PyTorch the
     same validation loss as remat reports for them (tol 1e-5, as
     torch_crosscheck.py: fp32 round-off of a loss of ~5 is ~1e-6);
  3. its AdamW moments and update count, put into torch.optim.AdamW's state
     (exp_avg, exp_avg_sq, step), make PyTorch's next step land where
     `remat train --resume` lands (parameters within 1e-5, except the key
     third of c_attn.bias, whose gradient is round-off: see
     torch_crosscheck.py; it is held to lr).
PyTorch -> remat:
  4. a file PyTorch writes with the same names (no metadata) loads with
     `remat train --init`, and remat's validation loss on it is PyTorch's;
  5. the same file with a checksum by the recipe loads; with a wrong one it
     is refused (exit 1, "checksum mismatch");
  6. a whole checkpoint file written from PyTorch's state after step 3
     (parameters, moments, metadata, checksum) resumes in remat, and the
     next step matches PyTorch's again.
Prints one line per check and last "test_ckptfile_torch: N passed, N failed".
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_crosscheck as tc  # noqa: E402  (the GPT mirror, data, file helpers)

CFG = {"model": "gpt", "layers": 2, "dim": 32, "heads": 4, "context": 16, "vocab": 256, "batch": 4}
LR, WD, CLIP, VAL_FRACTION = 1e-3, 0.1, 1.0, 0.2
TOL = 1e-5


def recipe_checksum(tensors, meta):
    """tensors: {name: (dtype, shape, bytes)}; see docs/CHECKPOINT_FILES.md."""
    h = hashlib.sha256(b"remat-checksum-1\0" + b"%d\0" % len(tensors))
    for name in sorted(tensors, key=lambda s: s.encode()):
        dt, shape, data = tensors[name]
        h.update(name.encode() + b"\0" + dt.encode() + b"\0" + ",".join(map(str, shape)).encode() + b"\0")
        h.update(data)
    m = {k: v for k, v in meta.items() if k != "remat_checksum"}
    h.update(b"%d\0" % len(m))
    for k in sorted(m, key=lambda s: s.encode()):
        h.update(k.encode() + b"\0" + m[k].encode() + b"\0")
    return "sha256:" + h.hexdigest()


def f32_entries(arrays):
    return {n: ("F32", list(a.shape), np.ascontiguousarray(a, dtype="<f4").tobytes()) for n, a in arrays.items()}


def val_loss(P, val):
    """remat's evaluation: the mean loss of up to 20 sequential validation batches."""
    nb = min(tc.num_batches(val, CFG["batch"], CFG["context"]), 20)
    with torch.no_grad():
        losses = [tc.gpt_loss(P, *tc.gpt_batch(val, k, CFG, torch.float32), CFG).item() for k in range(nb)]
    return sum(losses) / len(losses)


def report_val(path):
    with open(path) as f:
        return json.load(f)["val_loss"]


def torch_adamw(P, names, state=None):
    """remat's AdamW: decay on 2-D tensors, betas (0.9, 0.95), eps 1e-8."""
    params = [P[n] for n in names]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() == 2], "weight_decay": WD},
                             {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    if state:
        m, v, t = state
        for n in names:
            opt.state[P[n]] = {"step": torch.tensor(float(t)), "exp_avg": torch.tensor(m[n]),
                               "exp_avg_sq": torch.tensor(v[n])}
    return opt


def torch_step(P, names, opt, train, k):
    a, b = tc.gpt_batch(train, k, CFG, torch.float32)
    opt.zero_grad(set_to_none=True)
    tc.gpt_loss(P, a, b, CFG).backward()
    torch.nn.utils.clip_grad_norm_([P[n] for n in names], CLIP)
    opt.step()


def compare_params(got, want):
    """(max |got - want| over the strictly held entries, names over tolerance)."""
    worst, bad = 0.0, []
    for n, w in want.items():
        if n not in got:
            bad.append(n + " (missing)")
            continue
        d = np.abs(got[n].astype(np.float64) - w)
        tol = np.full(d.shape, TOL)
        if n.endswith("attn.c_attn.bias"):  # the key third: Adam turns round-off into steps <= lr
            C = d.shape[0] // 3
            tol[C:2 * C] = LR
        worst = max(worst, float(d[tol == TOL].max()))
        if np.any(d > tol):
            bad.append(n)
    return worst, bad


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def report(self, ok, name, detail):
        self.passed += bool(ok)
        self.failed += not ok
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    return r.returncode, r.stdout.decode(errors="replace").strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--remat", default=os.path.join(os.environ.get("BUILD", "build"), "remat"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    checks = Checks()
    work = tempfile.TemporaryDirectory(prefix="remat_ckpt_torch_")
    d = work.name
    text = tc.make_text(3000, seed=11)
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    train, val = tc.train_val_split(tokens, VAL_FRACTION)
    data = os.path.join(d, "text.txt")
    with open(data, "wb") as f:
        f.write(text)
    names = tc.gpt_names(CFG["layers"])
    flags = ["--data", data, "--layers", "2", "--dim", "32", "--heads", "4", "--context", "16", "--batch", "4",
             "--sampler", "sequential", "--dropout", "0", "--lr", repr(LR), "--weight-decay", repr(WD),
             "--grad-clip", repr(CLIP), "--val-fraction", repr(VAL_FRACTION), "--threads", "2", "--quiet"]
    s3, s4, rep3 = (os.path.join(d, x) for x in ("s3.st", "s4.st", "s3.json"))

    # 1. remat saves after 3 steps; the checksum follows the recipe
    rc, out = run([args.remat, "train"] + flags + ["--steps", "3", "--save", s3, "--report", rep3])
    if rc != 0:
        checks.report(False, "remat train", "exit %d: %s" % (rc, out))
        print("test_ckptfile_torch: %d passed, %d failed" % (checks.passed, checks.failed))
        return 1
    arrays, meta = tc.st_read(s3)
    ok = meta.get("remat_checksum") == recipe_checksum(f32_entries(arrays), meta)
    checks.report(ok, "checksum recipe", "file %s, recipe %s" %
                  (meta.get("remat_checksum"), recipe_checksum(f32_entries(arrays), meta)))

    # 2. the parameters in PyTorch: same validation loss
    P = {n: torch.tensor(arrays[n], requires_grad=True) for n in names}
    extra = sorted(set(arrays) - set(names) - {"optimizer.%s.%s" % (w, n) for w in "mv" for n in names})
    tv, rv = val_loss(P, val), report_val(rep3)
    checks.report(abs(tv - rv) <= TOL and not extra, "remat file in PyTorch: val loss",
                  "remat %.6f torch %.6f (tol %.0e)%s" % (rv, tv, TOL, "; extra: %s" % extra if extra else ""))

    # 3. the moments in torch.optim.AdamW: one more step matches `remat train --resume`
    m = {n: arrays["optimizer.m." + n] for n in names}
    v = {n: arrays["optimizer.v." + n] for n in names}
    t = int(meta["optimizer_updates"])
    opt = torch_adamw(P, names, (m, v, t))
    torch_step(P, names, opt, train, 3)
    rc, out = run([args.remat, "train", "--resume", s3, "--steps", "4", "--quiet", "--threads", "2", "--save", s4])
    got, meta4 = tc.st_read(s4) if rc == 0 else ({}, {})
    want = {n: P[n].detach().double().numpy() for n in names}
    worst, bad = compare_params(got, want) if rc == 0 else (float("inf"), ["(remat exit %d: %s)" % (rc, out)])
    checks.report(not bad and t == 3 and meta4.get("optimizer_updates") == "4", "remat moments in torch AdamW",
                  "step 4: max|remat-torch| %.2e (tol %.0e); updates %d -> %s%s" %
                  (worst, TOL, t, meta4.get("optimizer_updates"), "; over: %s" % bad[:3] if bad else ""))

    # 4. PyTorch writes weights with the same names; remat --init loads them
    init = tc.gpt_init(CFG["layers"], CFG["dim"], CFG["context"], CFG["vocab"], seed=99)
    PI = {n: torch.tensor(a) for n, a in init}
    tv = val_loss(PI, val)
    plain, summed, wrong = (os.path.join(d, x) for x in ("torch.st", "torch_sum.st", "torch_bad.st"))
    tc.st_write(plain, init, {"format": "pt"})
    entries = f32_entries(dict(init))
    tc.st_write(summed, init, {"format": "pt", "remat_checksum": recipe_checksum(entries, {"format": "pt"})})
    tc.st_write(wrong, init, {"format": "pt", "remat_checksum": recipe_checksum(entries, {"format": "PT"})})
    for name, path in (("plain", plain), ("with checksum", summed)):
        rep = os.path.join(d, "init.json")
        rc, out = run([args.remat, "train"] + flags + ["--steps", "0", "--init", path, "--report", rep])
        rv = report_val(rep) if rc == 0 else float("nan")
        checks.report(rc == 0 and abs(rv - tv) <= TOL, "PyTorch file (%s) in remat --init" % name,
                      "exit %d, val loss remat %.6f torch %.6f (tol %.0e) %s" % (rc, rv, tv, TOL, out))

    # 5. a wrong checksum is refused
    rc, out = run([args.remat, "train"] + flags + ["--steps", "0", "--init", wrong])
    checks.report(rc == 1 and "checksum mismatch" in out and wrong in out, "wrong checksum refused",
                  "exit %d: %s" % (rc, out))

    # 6. a whole checkpoint file from PyTorch's state after step 4 resumes in remat
    st = {n: opt.state[P[n]] for n in names}
    tens = [(n, P[n].detach().numpy()) for n in names]
    tens += [("optimizer.m." + n, st[n]["exp_avg"].numpy()) for n in names]
    tens += [("optimizer.v." + n, st[n]["exp_avg_sq"].numpy()) for n in names]
    meta5 = dict(meta, step="4", data_position="4", steps="4", optimizer_updates="4")
    del meta5["remat_checksum"]
    meta5["remat_checksum"] = recipe_checksum(f32_entries(dict(tens)), meta5)
    tstate, s5 = os.path.join(d, "torch_state.st"), os.path.join(d, "s5.st")
    tc.st_write(tstate, tens, meta5)
    torch_step(P, names, opt, train, 4)
    rc, out = run([args.remat, "train", "--resume", tstate, "--steps", "5", "--quiet", "--threads", "2",
                   "--save", s5])
    got = tc.st_read(s5)[0] if rc == 0 else {}
    want = {n: P[n].detach().double().numpy() for n in names}
    worst, bad = compare_params(got, want) if rc == 0 else (float("inf"), ["(remat exit %d: %s)" % (rc, out)])
    checks.report(not bad, "PyTorch checkpoint file resumed in remat",
                  "step 5: max|remat-torch| %.2e (tol %.0e)%s" % (worst, TOL, "; over: %s" % bad[:3] if bad else ""))

    work.cleanup()
    print("test_ckptfile_torch: %d passed, %d failed" % (checks.passed, checks.failed))
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
