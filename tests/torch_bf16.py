#!/usr/bin/python3
"""torch_bf16.py: one step of `remat train --precision bf16` against PyTorch's
bf16 CPU autocast (torch.autocast("cpu", dtype=torch.bfloat16), in Debian's
torch 1.13 and later) on the same weights and batch (issue 29).

Usage: /usr/bin/python3 tests/torch_bf16.py --remat build/remat [--verbose]

remat's gradients are read back from one SGD step (no clipping, no decay):
g = (W_before - W_after) / lr, with lr = 10 so the rounding of the
subtraction (~1e-8 of W) is far below the tolerance. PyTorch runs the same
nanoGPT forward (tests/torch_crosscheck.py's gpt_loss) under autocast: its
linear layers and attention products take bf16 inputs and sum in fp32, its
layer norms, softmax and loss run in fp32, as remat's --precision bf16 does
(which rounds a little differently: remat keeps the gradients of bf16
activations in fp32 and rounds where a product reads them; autocast keeps
them in bf16).

Check, for every parameter: |g_remat - g_torch| / |g_torch| <= 2e-2 (2-norms),
the figure printed; also against fp32 PyTorch, for scale. The GPT is the
one of torch_crosscheck.py (weights larger than GPT-2's so attention and
GELU are far from their linear regimes), 2 layers, dim 64, 4 heads,
context 32, batch 4, on bytes of English-like text.
Last line: "test_torch_bf16: N passed, N failed".
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_crosscheck import gpt_batch, gpt_init, gpt_loss, gpt_names, make_text, st_read, st_write, train_val_split  # noqa: E402

TOL = 2e-2
LR = 10.0
CFG = {"model": "gpt", "layers": 2, "dim": 64, "heads": 4, "context": 32, "vocab": 256, "batch": 4}


def gpt2_init(seed):
    """GPT-2's initialisation (N(0, 0.02), the residual projections 0.02 /
    sqrt(2 L)), with layer-norm gains 1 + N(0, 0.1) and biases N(0, 0.02)
    so that their gradients are not trivial. (torch_crosscheck.py's larger
    weights, meant to expose fp32 bugs, put bf16 itself 5-10% away from
    fp32: there autocast and remat, each rounding its own way, differ by
    as much; GPT-2's are the regime people train in.)"""
    g = torch.Generator().manual_seed(seed)
    out = []
    for name, a in gpt_init(CFG["layers"], CFG["dim"], CFG["context"], CFG["vocab"], seed):
        if name.endswith(".bias"):
            std, mean = 0.02, 0.0
        elif a.ndim == 1:
            std, mean = 0.1, 1.0
        else:
            std, mean = 0.02 / (2 * CFG["layers"]) ** 0.5 if "c_proj" in name else 0.02, 0.0
        t = torch.randn(a.shape, generator=g, dtype=torch.float64) * std + mean
        out.append((name, t.float().numpy()))
    return out


def gpt_loss_fp32_islands(P, idx, tgt, cfg):
    """torch_crosscheck.py's gpt_loss under autocast with the two fp32
    islands the issue asks of remat: the attention softmax in fp32 (torch
    1.13's CPU autocast runs softmax in the dtype it is given, bf16 after a
    bf16 product) and the loss on fp32 logits (autocast rounds the head's
    output to bf16 before the cross-entropy upcasts it; remat's head takes
    bf16 inputs but keeps its sums in fp32). Each alone puts autocast's
    gradients 3-5% from fp32's here; every other product still rounds its
    output to bf16, and the backward carries bf16 gradients."""
    real_softmax, real_linear = torch.Tensor.softmax, F.linear
    head = P["transformer.wte.weight"]

    def softmax_fp32(t, *a, **k):
        return real_softmax(t.float(), *a, **k)

    def linear(x, w, b=None):
        if w is not head:
            return real_linear(x, w, b)
        with torch.autocast("cpu", enabled=False):  # bf16 inputs, fp32 sums and logits
            return real_linear(x.bfloat16().float(), w.bfloat16().float())

    torch.Tensor.softmax, F.linear = softmax_fp32, linear
    try:
        return gpt_loss(P, idx, tgt, cfg)
    finally:
        torch.Tensor.softmax, F.linear = real_softmax, real_linear


def torch_grads(init, train, autocast):
    P = {n: torch.tensor(a, dtype=torch.float32, requires_grad=True) for n, a in init}
    idx, tgt = gpt_batch(train, 0, CFG, torch.float32)
    if autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (gpt_loss_fp32_islands if autocast == "fp32 islands" else gpt_loss)(P, idx, tgt, CFG)
    else:
        loss = gpt_loss(P, idx, tgt, CFG)
    loss.float().backward()
    return {n: P[n].grad.double().numpy() for n, _ in init}, float(loss)


def remat_grads(remat, work, init, text, verbose):
    data, init_path, out = (os.path.join(work, f) for f in ("text.txt", "init.safetensors", "out.safetensors"))
    with open(data, "wb") as f:
        f.write(text)
    st_write(init_path, init, {"format": "pt"})
    cmd = [remat, "train", "--init", init_path, "--data", data, "--save", out, "--quiet", "--precision", "bf16",
           "--model", "gpt", "--layers", str(CFG["layers"]), "--dim", str(CFG["dim"]), "--heads", str(CFG["heads"]),
           "--context", str(CFG["context"]), "--vocab", str(CFG["vocab"]), "--batch", str(CFG["batch"]),
           "--sampler", "sequential", "--optimizer", "sgd", "--lr", repr(LR), "--dropout", "0", "--grad-clip", "0",
           "--steps", "1", "--val-fraction", "0.1", "--threads", "2", "--lr-schedule", "constant", "--warmup", "0"]
    if verbose:
        print("  $ " + " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("remat train exited %d: %s" % (r.returncode, r.stdout.decode(errors="replace")))
    got, meta = st_read(out)
    before = dict(init)
    return {n: (before[n].astype(np.float64) - got[n].astype(np.float64)) / LR for n, _ in init}, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", required=True)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    passed = failed = 0
    torch.manual_seed(0)
    torch.set_num_threads(2)
    text = make_text(20000, seed=29)
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    train, _ = train_val_split(tokens, 0.1)
    init = gpt2_init(1234)
    with tempfile.TemporaryDirectory() as work:
        g_remat, meta = remat_grads(args.remat, work, init, text, args.verbose)
    g_auto, loss_auto = torch_grads(init, train, "fp32 islands")
    g_plain, _ = torch_grads(init, train, "plain")
    g_fp32, loss_fp32 = torch_grads(init, train, False)
    ok = meta.get("precision") == "bf16"
    print("%s the saved file records precision %r" % ("ok  " if ok else "FAIL", meta.get("precision")))
    passed, failed = passed + ok, failed + (not ok)
    worst, worst_fp32, worst_plain, worst_name = 0.0, 0.0, 0.0, ""
    for n in gpt_names(CFG["layers"]):
        rel = np.linalg.norm(g_remat[n] - g_auto[n]) / max(np.linalg.norm(g_auto[n]), 1e-30)
        rel32 = np.linalg.norm(g_remat[n] - g_fp32[n]) / max(np.linalg.norm(g_fp32[n]), 1e-30)
        auto32 = np.linalg.norm(g_auto[n] - g_fp32[n]) / max(np.linalg.norm(g_fp32[n]), 1e-30)
        ok = bool(np.isfinite(rel)) and rel <= TOL
        passed, failed = passed + ok, failed + (not ok)
        if rel > worst:
            worst, worst_name = rel, n
        worst_fp32 = max(worst_fp32, rel32)
        worst_plain = max(worst_plain, np.linalg.norm(g_plain[n] - g_fp32[n]) / max(np.linalg.norm(g_fp32[n]), 1e-30))
        if args.verbose or not ok:
            print("%s %-32s remat vs autocast %.2e (vs fp32 %.2e; autocast vs fp32 %.2e)"
                  % ("ok  " if ok else "FAIL", n, rel, rel32, auto32))
    print("bf16 gradients, remat against torch %s bf16 CPU autocast (fp32 softmax and logits): worst relative difference %.2e "
          "(%s), tolerance %g; remat against fp32 torch %.2e; plain autocast against fp32 torch %.2e; "
          "autocast loss %.5f, fp32 loss %.5f" % (torch.__version__, worst, worst_name, TOL, worst_fp32, worst_plain,
                                                  loss_auto, loss_fp32))
    print("test_torch_bf16: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
