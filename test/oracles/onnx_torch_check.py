#!/usr/bin/env python3
"""PyTorch reference forward for the export tests: per-token logprobs (and optionally full logits) of a
Hugging Face folder (qwen3 / qwen2 / llama), with or without a PEFT LoRA adapter applied unmerged
(y = xW^T + b + scale * (x A^T) B^T), in float64.

Written from the HF modelling code (Qwen3/Qwen2/Llama: RMSNorm, q/k norm, rotate_half RoPE with llama3
scaling, repeat_kv, causal softmax attention, SwiGLU), independently of src/export. It is the export tests'
oracle until the shared forward reference (test/oracles/torch_ref.py) is in the repository.

Usage: onnx_torch_check.py jobs.json  -> prints a JSON list, one {"logprobs": [[0, lp1, ...], ...]} per job.
jobs: [{"model": dir, "adapter": dir | null, "ids": [[int, ...], ...], "logits_out": path | null}]
logits_out receives the float32 logits of every sequence, concatenated along positions: [sum of T, V].
"""
import json
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)

DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = bytearray(buf[8 + n + b:8 + n + e])
        out[name] = torch.frombuffer(raw, dtype=DT[info["dtype"]]).reshape(info["shape"]).to(torch.float64)
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
    acfg = json.load(open(os.path.join(d, "adapter_config.json")))
    t = read_safetensors(os.path.join(d, "adapter_model.safetensors"))
    r = acfg["r"]
    scale = acfg["lora_alpha"] / (math.sqrt(r) if acfg.get("use_rslora") else r)
    lora = {}
    prefix = "base_model.model."
    for k in t:
        if k.endswith(".lora_A.weight"):
            target = k[len(prefix):-len(".lora_A.weight")] + ".weight"
            lora[target] = (t[k], t[k.replace(".lora_A.", ".lora_B.")])
    return lora, scale


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope_inv_freq(cfg, dim):
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling")
    if rs and (rs.get("rope_type") or rs.get("type")) == "llama3":
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def forward(cfg, w, lora, scale, ids):
    """Logits [T, V] of one sequence, positions 0..T-1."""
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)

    def linear(name, x):
        y = x @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        if name + ".weight" in lora:
            a, b = lora[name + ".weight"]
            y = y + scale * ((x @ a.T) @ b.T)
        return y

    ang = torch.arange(T, dtype=torch.float64)[:, None] * rope_inv_freq(cfg, D)[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):  # [heads, T, D]
        half = D // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    causal = torch.full((T, T), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        h = rms(x, w[p + ".input_layernorm.weight"], eps)
        q = linear(p + ".self_attn.q_proj", h).view(T, H, D)
        k = linear(p + ".self_attn.k_proj", h).view(T, KV, D)
        v = linear(p + ".self_attn.v_proj", h).view(T, KV, D)
        if cfg["model_type"] == "qwen3":
            q = rms(q, w[p + ".self_attn.q_norm.weight"], eps)
            k = rms(k, w[p + ".self_attn.k_norm.weight"], eps)
        q, k, v = rope(q.transpose(0, 1)), rope(k.transpose(0, 1)), v.transpose(0, 1)
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + causal, -1)
        x = x + linear(p + ".self_attn.o_proj", (att @ v).transpose(0, 1).reshape(T, H * D))
        h = rms(x, w[p + ".post_attention_layernorm.weight"], eps)
        x = x + linear(p + ".mlp.down_proj", torch.nn.functional.silu(linear(p + ".mlp.gate_proj", h)) * linear(p + ".mlp.up_proj", h))
    x = rms(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T


def main():
    results = []
    for job in json.load(open(sys.argv[1])):
        cfg, w = load_model(job["model"])
        lora, scale = load_adapter(job["adapter"]) if job.get("adapter") else ({}, 0.0)
        lps, all_logits = [], []
        for ids in job["ids"]:
            logits = forward(cfg, w, lora, scale, ids)
            lsm = torch.log_softmax(logits, -1)
            lps.append([0.0] + lsm[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist())
            all_logits.append(logits.to(torch.float32))
        if job.get("logits_out"):
            with open(job["logits_out"], "wb") as f:
                f.write(torch.cat(all_logits).numpy().tobytes())
        results.append({"logprobs": lps})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
