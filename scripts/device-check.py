#!/usr/bin/env python3
"""The PyTorch oracle of the CUDA device check (scripts/device-check.sh runs it on the GPU machine).

  device-check.py --cublas-dir     prints the folder holding PyTorch's libcublas.so.13 (nothing if none), for
                                   MCPRL_CUBLAS_DIR
  device-check.py --dump DIR       recomputes every case the check executable dumped (DIR/<case>/meta.json +
                                   raw .bin tensors) in float64 with torch on the GPU, autograd for the
                                   backward, and compares both the CUDA and the CPU results with it; then times
                                   torch.matmul in bf16 as the peer of the check's GEMM figures.

One JSON line per figure on stdout; exit status 1 when a comparison misses its tolerance. rel is
max |x - truth| / max |truth| over the tensor. Tolerances: the CPU ops are f32 against float64 (1e-4); the CUDA
ops are f32 (1e-4) except where they multiply by a bf16 weight, rounding the activation to bf16 for the tensor
cores (1e-2: the LM head and the linear layer). bf16 weights are widened exactly on every side.
"""
import argparse
import glob
import json
import math
import os
import sys
import time


def cublas_dir():
    """The folder of libcublas.so.13 inside the pip-installed NVIDIA wheels (CUDA 12/13 layouts both searched)."""
    cands = []
    try:
        import nvidia.cublas as m  # namespace package: no __file__, one entry per install location

        cands += [os.path.join(p, "lib") for p in m.__path__]
    except Exception:
        pass
    try:
        import nvidia

        for p in nvidia.__path__:
            cands += [os.path.dirname(f) for f in glob.glob(os.path.join(p, "**", "libcublas.so.13"), recursive=True)]
    except Exception:
        pass
    for d in cands:
        if os.path.exists(os.path.join(d, "libcublas.so.13")):
            return d
    return None


TOL_CPU = 1e-4
TOL_CUDA = {"rmsnorm": 1e-4, "rope": 1e-4, "attention": 1e-4, "linear_lora": 1e-2, "lm_head": 1e-2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cublas-dir", action="store_true")
    ap.add_argument("--dump")
    a = ap.parse_args()
    if a.cublas_dir:
        d = cublas_dir()
        if d:
            print(d)
        return 0
    if not a.dump:
        ap.error("--dump DIR or --cublas-dir")
    import numpy as np
    import torch

    # The GPU on the device machine; the CPU in the dry mode (a --cpu-dump has only the CPU ops' results).
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    f64 = torch.float64
    np_types = {"f32": np.float32, "i32": np.int32, "u32": np.uint32, "bf16": np.uint16}

    def loader(case_dir, meta):
        def load(name):
            t = meta["tensors"][name]
            arr = np.fromfile(os.path.join(case_dir, name + ".bin"), dtype=np_types[t["dtype"]]).reshape(t["shape"])
            if t["dtype"] == "bf16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)  # exact widening
            if t["dtype"] == "u32":
                arr = arr.astype(np.int64)
            return torch.from_numpy(np.ascontiguousarray(arr)).to(dev)

        return load

    def rmsnorm(load, p):
        x = load("x").to(f64).requires_grad_()
        w = load("w").to(f64).requires_grad_()
        out = w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + p["eps"]))
        out.backward(load("dout").to(f64))
        return {"out": out, "dx": x.grad, "dw": load("dw0").to(f64) + w.grad}

    def rope(load, p):
        x = load("x").to(f64).requires_grad_()
        ang = (load("pos").to(torch.float32)[:, None] * load("inv_freq")[None, :]).to(f64)  # f32 product, as torch's HF code
        cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        out = x * cos + rot * sin
        out.backward(load("dout").to(f64))
        return {"out": out, "dx": x.grad}

    def linear_lora(load, p):
        x = load("x").to(f64).requires_grad_()
        A = load("A").to(f64).requires_grad_()
        B = load("B").to(f64).requires_grad_()
        W, b = load("W").to(f64), load("b").to(f64)
        y = x @ W.T + b + p["scale"] * ((x @ A.T) @ B.T)
        y.backward(load("dy").to(f64))
        return {"y": y, "dx": x.grad, "dA": load("dA0").to(f64) + A.grad, "dB": load("dB0").to(f64) + B.grad}

    def attention(load, p):
        H, Hkv, D = p["H"], p["Hkv"], p["D"]
        q = load("q").to(f64).requires_grad_()
        k = load("k").to(f64).requires_grad_()
        v = load("v").to(f64).requires_grad_()
        cu = load("cu_seqlens").tolist()
        outs, lses = [], []
        for t0, t1 in zip(cu[:-1], cu[1:]):
            n = t1 - t0
            qs = q[t0:t1].transpose(0, 1)
            ks = k[t0:t1].transpose(0, 1).repeat_interleave(H // Hkv, dim=0)  # head h reads kv head h // group
            vs = v[t0:t1].transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
            s = (qs @ ks.transpose(-1, -2)) / math.sqrt(D)
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=dev).triu(1), float("-inf"))
            lses.append(torch.logsumexp(s, -1).transpose(0, 1))
            outs.append((torch.softmax(s, -1) @ vs).transpose(0, 1))
        out = torch.cat(outs, 0)
        out.backward(load("dout").to(f64))
        return {"out": out, "lse": torch.cat(lses, 0), "dq": q.grad, "dk": k.grad, "dv": v.grad}

    def lm_head(load, p):
        W = load("W").to(f64)
        h = load("h").to(f64).requires_grad_()
        V = W.shape[0]
        targets, mask_idx, masks = load("targets").long(), load("mask_idx").long(), load("masks")
        z = (h @ W.T) * load("inv_temp").to(f64)[:, None]
        vi = torch.arange(V, device=dev)
        bits = ((masks[:, vi >> 5] >> (vi & 31)) & 1).bool()  # (nmasks, V)
        allowed = bits[mask_idx.clamp(min=0)] | (mask_idx < 0)[:, None]
        zm = z.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(zm, -1)
        logp = z.gather(1, targets[:, None])[:, 0] - lse  # the target's logit even when its token is masked (as the ops)
        pr = torch.softmax(zm, -1)
        entropy = -torch.where(allowed, pr * (zm - lse[:, None]), torch.zeros_like(pr)).sum(-1)
        logp.backward(load("dlogp").to(f64))
        return {"logp": logp, "entropy": entropy, "dh": h.grad}

    ops = {"rmsnorm": rmsnorm, "rope": rope, "linear_lora": linear_lora, "attention": attention, "lm_head": lm_head}
    failed = 0
    for meta_path in sorted(glob.glob(os.path.join(a.dump, "*", "meta.json"))):
        case_dir = os.path.dirname(meta_path)
        with open(meta_path) as f:
            meta = json.load(f)
        t = time.time()
        truth = ops[meta["op"]](loader(case_dir, meta), meta["params"])
        load = loader(case_dir, meta)
        tensors, ok = {}, True
        for side, tol in (("cuda", TOL_CUDA[meta["op"]]), ("cpu", TOL_CPU)):
            for name, ref in truth.items():
                key = side + "." + name
                if key not in meta["tensors"]:
                    continue
                got = load(key).to(f64)
                ref = ref.detach()
                err = (got - ref).abs().max().item()
                rel = err / max(ref.abs().max().item(), 1e-30)
                good = math.isfinite(rel) and rel <= tol
                ok = ok and good
                tensors[key] = {"max_abs": float("%.3e" % err), "rel": float("%.3e" % rel), "ok": good}
        failed += 0 if ok else 1
        print(json.dumps({"figure": "torch." + meta["case"], "ok": ok, "tol_cuda": TOL_CUDA[meta["op"]], "tol_cpu": TOL_CPU,
                          "tensors": tensors, "seconds": round(time.time() - t, 2)}), flush=True)

    # The peer of the check's GEMM rate: torch.matmul in bf16 (random data, median of 10 after 3 warm-ups).
    for n in (4096, 8192) if dev.type == "cuda" else ():
        a_, b_ = torch.randn(n, n, device=dev, dtype=torch.bfloat16), torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(3):
            a_ @ b_
        times = []
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            a_ @ b_
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1))
        ms = sorted(times)[len(times) // 2]
        print(json.dumps({"figure": "torch.matmul.bf16.%d.tflops" % n, "value": round(2 * n**3 / ms * 1e-9, 1),
                          "unit": "TFLOP/s", "ms": round(ms, 3)}), flush=True)
    print(json.dumps({"figure": "torch.summary", "ok": failed == 0, "failed": failed,
                      "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
