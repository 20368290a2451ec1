#!/usr/bin/env python3
"""PyTorch reference for mcprl training: GRPO-family and SFT losses and their gradients w.r.t. every LoRA
tensor, on a Hugging Face folder (qwen3 / qwen2 / llama) plus a PEFT adapter.

Its own straightforward implementation in float64, written from the HF modelling code, not from the engine:
sequences are run one at a time (no packing), full logits and log_softmax, autograd for every gradient.
The loss definitions follow native/train/loss.h (and DESIGN.md); they are written here with torch ops
(torch.min / torch.clamp / detach) so autograd, not a hand-derived formula, gives the gradient.

Usage: torch_train_ref.py request.json   (prints a JSON result on stdout; a list of requests gives a list)
request: {"model": dir, "adapter": dir | null,
          "sequences": [{tokenIds, mask, advantage?, oldLogprobs?, temperature?, allowed?}],
          "loss": {kind, clipEpsilon?, clipEpsilonHigh?, beta?, cispoEpsMax?, maxLength?} | null,
          "grads_out": path | null}
result: {"loss", "policyLoss", "kl", "clipFraction", "meanRatio", "entropy", "logprobs": [[...per token, 0 at t=0]]}
A sequence's temperature T (default 1) divides its logits; allowed[t] (a list of token ids, or null) restricts
the distribution of token t to those tokens (constrained decoding): log π(t) = log_softmax over allowed of z / T.
With grads_out, a safetensors file of F32 gradients under the adapter's PEFT key names.
With "optimizer": {lr, beta1, beta2, eps, weightDecay, maxGradNorm} and "params_out", one optimiser step is
taken with torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW and the new adapter weights are written.
The adapter is loaded strictly by its PEFT key names: a missing or unexpected key is an error.
"""
import json
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)

DT = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2), "F64": (torch.float64, 8)}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n].decode("utf8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, _ = DT[info["dtype"]]
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(buf[base + b:base + e]), dtype=dtype).reshape(info["shape"])
        out[name] = t.to(torch.float64)
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode("utf8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_model(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(d, f)))
    else:
        w = read_safetensors(os.path.join(d, "model.safetensors"))
    return cfg, w


MODULES = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def load_adapter(d, cfg):
    acfg = json.load(open(os.path.join(d, "adapter_config.json")))
    t = read_safetensors(os.path.join(d, "adapter_model.safetensors"))
    r, alpha = acfg["r"], acfg["lora_alpha"]
    scale = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
    lora, expected = {}, set()
    for i in range(cfg["num_hidden_layers"]):
        for mod in acfg["target_modules"]:
            p = f"base_model.model.model.layers.{i}.{MODULES[mod]}.{mod}"
            ka, kb = p + ".lora_A.weight", p + ".lora_B.weight"
            expected |= {ka, kb}
            if ka not in t or kb not in t:
                raise SystemExit(f"adapter {d}: missing {ka if ka not in t else kb}")
            lora[(i, mod)] = (t[ka].clone().requires_grad_(True), t[kb].clone().requires_grad_(True), ka, kb)
    extra = set(t) - expected
    if extra:
        raise SystemExit(f"adapter {d}: unexpected keys {sorted(extra)[:3]}")
    return lora, scale


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def inv_freq(cfg, D):
    base = cfg.get("rope_theta", 10000.0)
    f = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / f
        fl = torch.where(wl > lo_wl, f / factor, f)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * fl / factor + smooth * fl
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        f = torch.where(medium, smoothed, fl)
    elif rs and rs.get("rope_type", rs.get("type")) == "linear":
        f = f / rs["factor"]
    return f


def rope(x, pos, f):  # x (T, H, D), rotate_half convention
    ang = pos[:, None].to(torch.float64) * f[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def forward_logits(cfg, w, lora, scale, ids):
    """Logits (T, V) of one sequence; lora may be None (the adapter-free model)."""
    arch = cfg["model_type"]
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    f = inv_freq(cfg, D)
    pos = torch.arange(T)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]

    def proj(i, mod, block, inp):
        y = inp @ w[f"model.layers.{i}.{block}.{mod}.weight"].T
        b = w.get(f"model.layers.{i}.{block}.{mod}.bias")
        if b is not None:
            y = y + b
        if lora is not None and (i, mod) in lora:
            A, B, _, _ = lora[(i, mod)]
            y = y + scale * ((inp @ A.T) @ B.T)
        return y

    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(L):
        p = f"model.layers.{i}"
        hN = rms(x, w[f"{p}.input_layernorm.weight"], eps)
        q = proj(i, "q_proj", "self_attn", hN).view(T, H, D)
        k = proj(i, "k_proj", "self_attn", hN).view(T, Hkv, D)
        v = proj(i, "v_proj", "self_attn", hN).view(T, Hkv, D)
        if arch == "qwen3":
            q = rms(q, w[f"{p}.self_attn.q_norm.weight"], eps)
            k = rms(k, w[f"{p}.self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, f), rope(k, pos, f)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        att = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D) + mask
        o = torch.einsum("hts,shd->thd", att.softmax(-1), v).reshape(T, H * D)
        x = x + proj(i, "o_proj", "self_attn", o)
        hN = rms(x, w[f"{p}.post_attention_layernorm.weight"], eps)
        g = proj(i, "gate_proj", "mlp", hN)
        u = proj(i, "up_proj", "mlp", hN)
        x = x + proj(i, "down_proj", "mlp", torch.nn.functional.silu(g) * u)
    x = rms(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return x @ head.T


def token_logprobs(logits, ids, temperature=1.0, allowed=None):
    """(logπ of tokens 1..T-1, entropy at those positions): logits row t-1 predicts token t, at the temperature,
    renormalised over allowed[t] where given."""
    z = logits[:-1] / temperature
    if allowed:
        keep = torch.ones_like(z, dtype=torch.bool)
        for t in range(1, len(ids)):
            if allowed[t] is not None:
                keep[t - 1] = False
                keep[t - 1, torch.tensor(allowed[t], dtype=torch.long)] = True
        z = z.masked_fill(~keep, float("-inf"))
    lsm = torch.log_softmax(z, -1)
    lp = lsm.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    p = lsm.exp()
    ent = -torch.where(p > 0, p * lsm, torch.zeros_like(p)).sum(-1)
    return lp, ent


def run(req, models):
    if req["model"] not in models:
        models[req["model"]] = load_model(req["model"])
    cfg, w = models[req["model"]]
    lora, scale = load_adapter(req["adapter"], cfg) if req.get("adapter") else (None, 0.0)
    lc = req.get("loss") or {"kind": "sft"}
    kind = lc["kind"]
    eps_lo = lc.get("clipEpsilon", 0.2)
    eps_hi = lc.get("clipEpsilonHigh", 0.28 if kind == "dapo" else eps_lo)
    beta = lc.get("beta", 0.0)
    eps_max = lc.get("cispoEpsMax", 5.0)
    seqs = req["sequences"]
    G = len(seqs)
    masks = [torch.tensor(s["mask"][1:], dtype=torch.bool) for s in seqs]
    N = sum(int(m.sum()) for m in masks)
    Lmax = lc.get("maxLength") or max(int(m.sum()) for m in masks)

    total = torch.zeros(())
    pol_total = torch.zeros(())
    kl_sum = ratio_sum = clipped = ent_sum = 0.0
    out_lp = []
    for s, m in zip(seqs, masks):
        ids = s["tokenIds"]
        temp, allowed = float(s.get("temperature", 1.0)), s.get("allowed")
        lp_all, ent_all = token_logprobs(forward_logits(cfg, w, lora, scale, ids), ids, temp, allowed)
        out_lp.append([0.0] + lp_all.detach().tolist())
        lp = lp_all[m]
        n = lp.numel()
        ent_sum += float(ent_all[m].sum())
        if n == 0:
            continue
        A = float(s.get("advantage", 0.0))
        old = torch.tensor(s["oldLogprobs"][1:])[m] if s.get("oldLogprobs") else lp.detach()
        if beta > 0:
            with torch.no_grad():
                ref = token_logprobs(forward_logits(cfg, w, None, 0.0, ids), ids, temp, allowed)[0][m]
            kl = torch.exp(ref - lp) - (ref - lp) - 1
        else:
            kl = torch.zeros_like(lp)
        kl_sum += float(kl.sum())
        ratio = torch.exp(lp - old)
        if kind == "sft":
            tok = -lp
            pol = tok.sum() / N
            seq_total = pol
            ratio_sum += n
        elif kind in ("grpo", "dapo", "dr_grpo"):
            tok = -torch.min(ratio * A, torch.clamp(ratio, 1 - eps_lo, 1 + eps_hi) * A)
            clipped += float((((ratio > 1 + eps_hi) & (A > 0)) | ((ratio < 1 - eps_lo) & (A < 0))).sum())
            ratio_sum += float(ratio.sum())
            norm = {"grpo": G * n, "dapo": N, "dr_grpo": G * Lmax}[kind]
            pol = tok.sum() / norm
            seq_total = (tok + beta * kl).sum() / norm
        elif kind == "cispo":
            tok = -torch.clamp(ratio, max=eps_max).detach() * A * lp
            clipped += float((ratio > eps_max).sum())
            ratio_sum += float(ratio.sum())
            pol = tok.sum() / N
            seq_total = (tok + beta * kl).sum() / N
        elif kind == "gspo":
            sig = torch.exp((lp - old).mean())
            term = -torch.min(sig * A, torch.clamp(sig, 1 - eps_lo, 1 + eps_hi) * A)
            clipped += n if ((float(sig) > 1 + eps_hi and A > 0) or (float(sig) < 1 - eps_lo and A < 0)) else 0
            ratio_sum += float(sig) * n
            pol = term / G
            seq_total = (term + beta * kl.mean()) / G
        else:
            raise SystemExit(f"unknown loss kind {kind}")
        total = total + seq_total
        pol_total = pol_total + pol

    result = {"loss": float(total), "policyLoss": float(pol_total), "kl": kl_sum / max(N, 1),
              "clipFraction": clipped / max(N, 1), "meanRatio": ratio_sum / max(N, 1),
              "entropy": ent_sum / max(N, 1), "trainedTokens": N, "logprobs": out_lp}
    if req.get("grads_out"):
        if lora is None:
            raise SystemExit("grads_out needs an adapter")
        params = [t for (A, B, _, _) in lora.values() for t in (A, B)]
        grads = torch.autograd.grad(total, params, allow_unused=True) if total.requires_grad else [None] * len(params)
        out = {}
        for (A, B, ka, kb), gA, gB in zip(lora.values(), grads[0::2], grads[1::2]):
            out[ka] = gA if gA is not None else torch.zeros_like(A)
            out[kb] = gB if gB is not None else torch.zeros_like(B)
        write_safetensors(req["grads_out"], out)
        if req.get("optimizer"):
            o = req["optimizer"]
            for p, g in zip(params, grads):
                p.grad = g if g is not None else torch.zeros_like(p)
            if o.get("maxGradNorm", 1.0) > 0:
                result["gradNorm"] = float(torch.nn.utils.clip_grad_norm_(params, o.get("maxGradNorm", 1.0)))
            opt = torch.optim.AdamW(params, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.99)),
                                    eps=o.get("eps", 1e-8), weight_decay=o.get("weightDecay", 0.0))
            opt.step()
            write_safetensors(req["params_out"], {k: t for (A, B, ka, kb) in lora.values() for k, t in ((ka, A), (kb, B))})
    return result


def main():
    req = json.load(open(sys.argv[1]))
    models = {}
    out = [run(r, models) for r in req] if isinstance(req, list) else run(req, models)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
