"""hf_tiny.py DIR [SEED]: a small Hugging Face LlamaForCausalLM folder of
random weights, written with the standard library alone (so a test runs
without PyTorch): config.json as transformers writes it, and
model.safetensors in BF16 (an 8-byte little-endian header length, a JSON
header, the raw little-endian data). Shape: 2 layers, width 64, 4 query
heads sharing 2 key/value heads, MLP 128, vocabulary 256 (one token per
byte), untied head. Matrices are N(0, 0.02), norms near 1."""
import json
import os
import random
import struct
import sys

LAYERS, DIM, HEADS, KV_HEADS, FFN, VOCAB = 2, 64, 4, 2, 128, 256


def tensors():
    """(name, shape) of every weight, in LlamaForCausalLM's order."""
    kv = DIM // HEADS * KV_HEADS
    out = [("model.embed_tokens.weight", (VOCAB, DIM))]
    for l in range(LAYERS):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", (DIM,)), (p + "self_attn.q_proj.weight", (DIM, DIM)),
                (p + "self_attn.k_proj.weight", (kv, DIM)), (p + "self_attn.v_proj.weight", (kv, DIM)),
                (p + "self_attn.o_proj.weight", (DIM, DIM)), (p + "post_attention_layernorm.weight", (DIM,)),
                (p + "mlp.gate_proj.weight", (FFN, DIM)), (p + "mlp.up_proj.weight", (FFN, DIM)),
                (p + "mlp.down_proj.weight", (DIM, FFN))]
    return out + [("model.norm.weight", (DIM,)), ("lm_head.weight", (VOCAB, DIM))]


def bf16(x):
    """The two bytes of x rounded to bfloat16 (to nearest, ties to even)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return struct.pack("<H", (u + 0x7FFF + ((u >> 16) & 1)) >> 16)


def main():
    path, seed = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "intermediate_size": FFN, "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 256,
        "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    header, blobs, off = {}, [], 0
    for name, shape in tensors():
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        draw = (lambda: 1.0 + 0.1 * rng.gauss(0, 1)) if len(shape) == 1 else (lambda: 0.02 * rng.gauss(0, 1))
        blobs.append(b"".join(bf16(draw()) for _ in range(n)))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    main()
