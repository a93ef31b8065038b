#!/usr/bin/env python3
"""peft_lora.py: the Hugging Face peer of `remat train --init DIR --lora 16`
for issue 29's LoRA target (bench/bf16.sh): transformers' LlamaForCausalLM
loaded from the same folder, PEFT's LoRA (r 16, alpha 32, dropout 0) on the
seven projections, AdamW on the adapters, random token batches; one JSON
object with step_ms_median (the median of the steps after the first),
peak_rss_bytes (getrusage maxrss, ~300 MB of Python and libraries included:
base_rss_bytes) and the versions.

  --autocast bf16   forward and loss under torch.autocast("cpu", bfloat16)
  --checkpoint layers   model.gradient_checkpointing_enable() (non-reentrant)
  --dtype float32|bfloat16   how the base is loaded (default float32: fp32
                    weights, as remat keeps its trainable state; bf16 halves
                    the frozen base like remat's --frozen-dtype bf16)

Needs torch 2.x, transformers and peft (a venv; never in make test):
  python bench/peft_lora.py --model DIR --context 512 --batch 4 --steps 3 --threads 2 --autocast bf16 --checkpoint layers
"""
import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import emit  # noqa: E402

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a LlamaForCausalLM folder")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="bf16")
    ap.add_argument("--checkpoint", choices=["none", "layers"], default="layers")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--out")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import peft
    import torch
    import transformers

    torch.set_num_threads(a.threads)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=getattr(torch, a.dtype))
    if a.checkpoint == "layers":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = peft.get_peft_model(model, peft.LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0,
                                                       target_modules=targets))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    g = torch.Generator().manual_seed(5)
    V = model.config.vocab_size
    times = []
    for step in range(a.warmup + a.steps):
        ids = torch.randint(0, V, (a.batch, a.context), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        loss.item()
        if step >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    st = sorted(times)
    res = {"impl": "peft", "autocast": a.autocast, "checkpoint": a.checkpoint, "dtype": a.dtype,
           "torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "peft_version": peft.__version__, "threads": a.threads, "context": a.context, "batch": a.batch,
           "step_ms": [round(t, 1) for t in times], "step_ms_median": st[len(st) // 2],
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "base_rss_bytes": base_rss}
    return emit(res, a.out)


if __name__ == "__main__":
    sys.exit(main())
