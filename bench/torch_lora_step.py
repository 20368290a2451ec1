"""The plain PyTorch peer of bench/train.bench.ts: one LoRA GRPO train step on the same Qwen3 shape, rank, targets,
tokens and loss, in f32 eager autograd on CPU (random frozen base, LoRA A random and B zero as PEFT initialises).

Step: per micro-batch (one sequence, as the engine's microBatchTokens = seq) forward with full [n, V] logits,
log-softmax, GRPO clipped-ratio loss (eps 0.2, per-sequence token mean, mean over sequences) with old logprobs,
backward (gradients accumulate); then grad-norm clip (1.0) and AdamW. Median of 3 steps after a warm-up.
Reads one JSON request on stdin: {hidden, layers, heads, kv_heads, head_dim, inter, vocab, rank, seq, step_tokens,
threads}; prints {"tokens_per_s", "seconds"}.
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

req = json.load(sys.stdin)
torch.set_num_threads(req["threads"])
torch.manual_seed(0)
C, L, H, Hkv, D, I, V, R = (req[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "inter", "vocab", "rank"))
seq, step_tokens = req["seq"], req["step_tokens"]


def frozen(*shape):
    return torch.randn(*shape) * 0.02


class Lora(torch.nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.W = frozen(o, i)
        self.A = torch.nn.Parameter(torch.randn(R, i) / math.sqrt(i))
        self.B = torch.nn.Parameter(torch.zeros(o, R))

    def forward(self, x):
        return x @ self.W.t() + 2.0 * ((x @ self.A.t()) @ self.B.t())


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = Lora(C, H * D), Lora(C, Hkv * D), Lora(C, Hkv * D), Lora(H * D, C)
        self.g, self.u, self.d = Lora(C, I), Lora(C, I), Lora(I, C)
        self.ln1, self.ln2, self.qn, self.kn = torch.ones(C), torch.ones(C), torch.ones(D), torch.ones(D)

    def forward(self, x, cos, sin):
        n = x.shape[0]
        h = rms(x, self.ln1)
        q = rms(self.q(h).view(n, H, D), self.qn)
        k = rms(self.k(h).view(n, Hkv, D), self.kn)
        v = self.v(h).view(n, Hkv, D)

        def rope(t):
            t1, t2 = t[..., : D // 2], t[..., D // 2:]
            return t * cos + torch.cat((-t2, t1), -1) * sin

        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        # Plain attention (this torch, 1.13, has no scaled_dot_product_attention): (H, n, n) scores, causal mask.
        s = (q.transpose(0, 1) @ k.permute(1, 2, 0)) / math.sqrt(D) + causal[:n, :n]
        a = torch.softmax(s, -1) @ v.transpose(0, 1)
        x = x + self.o(a.transpose(0, 1).reshape(n, H * D))
        h = rms(x, self.ln2)
        return x + self.d(F.silu(self.g(h)) * self.u(h))


wte = frozen(V, C)
layers = torch.nn.ModuleList([Layer() for _ in range(L)])
normf = torch.ones(C)
params = [p for p in layers.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-5)
inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
cos = torch.cat((ang.cos(), ang.cos()), -1)[:, None, :]
sin = torch.cat((ang.sin(), ang.sin()), -1)[:, None, :]
causal = torch.full((seq, seq), float("-inf")).triu(1)
nseq = step_tokens // seq
g = torch.Generator().manual_seed(3)
batch = [torch.randint(0, V, (seq,), generator=g) for _ in range(nseq)]
old = [-12 + 0.1 * torch.randn(seq - 1, generator=g) for _ in range(nseq)]


def step():
    opt.zero_grad(set_to_none=True)
    for i, toks in enumerate(batch):
        x = wte[toks]
        for layer in layers:
            x = layer(x, cos, sin)
        logits = rms(x, normf) @ wte.t()
        logp = torch.log_softmax(logits[:-1], -1).gather(-1, toks[1:, None])[:, 0]
        ratio = torch.exp(logp - old[i])
        adv = 1.0 if i % 2 else -1.0
        loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean() / nseq
        loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


step()
times = []
for _ in range(3):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps({"tokens_per_s": step_tokens / times[1], "seconds": times[1]}))
