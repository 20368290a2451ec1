#!/usr/bin/env python3
"""PyTorch forward oracle for the native engine: per-token log-probabilities of token sequences under a
Hugging Face folder (qwen3 / qwen2 / llama), optionally with a PEFT LoRA adapter.

A straightforward float64 implementation written from the HF modelling code (not from the engine): it reads
config.json and the safetensors files itself (no transformers), runs each sequence alone with a full causal
mask, and takes log_softmax over the full logits.

Usage: torch_ref.py request.json  ->  prints {"results": [{"logprobs": [[0, lp_1, ...], ...]}, ...]} on stdout
request: {"jobs": [{"model": dir, "adapter": dir | null, "sequences": [[token ids], ...]}, ...]}
(one process for many jobs: importing torch costs more than the tiny models' forward passes)
"""
import json
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)
DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
MODULES = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n].decode("utf8"))
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(buf[8 + n + b:8 + n + e]), dtype=DT[info["dtype"]]).reshape(info["shape"])
        out[name] = t.to(torch.float64)
    return out


def load_model(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        w = {}
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(d, f)))
        return cfg, w
    return cfg, read_safetensors(os.path.join(d, "model.safetensors"))


def load_adapter(d):
    if d is None:
        return None
    ac = json.load(open(os.path.join(d, "adapter_config.json")))
    r, alpha = ac["r"], ac.get("lora_alpha", ac["r"])
    scale = alpha / math.sqrt(r) if ac.get("use_rslora", False) else alpha / r
    return {"scale": scale, "w": read_safetensors(os.path.join(d, "adapter_model.safetensors"))}


def inv_freq(cfg, dim):
    base = cfg.get("rope_theta", 10000.0)
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        f = f / rs["factor"]
    elif kind == "llama3":
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wl = 2 * math.pi / f
        g = torch.where(wl > low_wl, f / factor, f)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * g / factor + smooth * g
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        f = torch.where(medium, smoothed, g)
    return f


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def logprobs(cfg, w, adapter, ids):
    mt = cfg["model_type"]
    C, L, H = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim") or C // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq(cfg, D))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    mask = torch.full((T, T), float("-inf")).triu(1)

    def proj(x, l, name, bias=None):
        p = f"model.layers.{l}.{MODULES[name]}.{name}"
        y = x @ w[p + ".weight"].T
        if p + ".bias" in w:
            y = y + w[p + ".bias"]
        if adapter is not None:
            k = "base_model.model." + p
            if k + ".lora_A.weight" in adapter["w"]:
                y = y + adapter["scale"] * ((x @ adapter["w"][k + ".lora_A.weight"].T) @ adapter["w"][k + ".lora_B.weight"].T)
        return y

    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = proj(h, l, "q_proj").view(T, H, D)
        k = proj(h, l, "k_proj").view(T, Hkv, D)
        v = proj(h, l, "v_proj").view(T, Hkv, D)
        if mt == "qwen3":
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // Hkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D) + mask
        o = torch.einsum("hts,shd->thd", torch.softmax(att, dim=-1), v).reshape(T, H * D)
        x = x + proj(o, l, "o_proj")
        h2 = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = proj(h2, l, "gate_proj"), proj(h2, l, "up_proj")
        x = x + proj(torch.nn.functional.silu(g) * u, l, "down_proj")
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    lp = torch.log_softmax(x @ head.T, dim=-1)
    out = [0.0] + [lp[t, ids[t + 1]].item() for t in range(T - 1)]
    return out


def main():
    req = json.load(open(sys.argv[1]))
    results = []
    for job in req["jobs"]:
        cfg, w = load_model(job["model"])
        adapter = load_adapter(job.get("adapter"))
        with torch.no_grad():
            results.append({"logprobs": [logprobs(cfg, w, adapter, s) for s in job["sequences"]]})
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
