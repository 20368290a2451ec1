// The op check's cases for every op but attention and the GEMM (harness.cuh): embedding, RMSNorm, RoPE, SwiGLU,
// the linear layer with LoRA, the LM head and AdamW, CPU vs CUDA.
#include "harness.cuh"

namespace cuda_check {

void check_embedding() {
  Rng r(1);
  const int V = 1000, C = 1024, T = 300;
  auto wte = to_bf16(r.uniform((size_t)V * C, -1, 1));
  vector<int32_t> ids(T);
  for (auto& x : ids) x = r.below(V);
  vector<float> ref((size_t)T * C);
  embedding_forward(ref.data(), ids.data(), WeightRef(wte.data(), WDtype::BF16), T, C);
  Dev<uint16_t> dw(wte);
  Dev<int32_t> di(ids);
  Dev<float> out((size_t)T * C);
  cuda::embedding_forward(out.p, di.p, WeightRef(dw.p, WDtype::BF16), T, C);
  Report rep{"cuda.op.embedding.bf16", 0.0};
  rep.add("out", ref, out.get());
  rep.print();
}

void check_rmsnorm(const char* name, int N, int C) {
  Rng r(2 + N);
  auto x = r.uniform((size_t)N * C, -2, 2), w = r.uniform(C, 0.5f, 1.5f), dout = r.uniform((size_t)N * C, -1, 1);
  auto dw0 = r.uniform(C, -1, 1);  // dw accumulates: start from something that is not zero
  vector<float> out((size_t)N * C), rstd(N), dx((size_t)N * C), dw = dw0;
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  Dump d(std::string("rmsnorm_") + name, "rmsnorm");
  d.f32("x", x, {N, C}); d.f32("w", w, {C}); d.f32("dout", dout, {N, C}); d.f32("dw0", dw0, {C});
  d.f32("cpu.out", out, {N, C}); d.f32("cpu.dx", dx, {N, C}); d.f32("cpu.dw", dw, {C});
  if (g_cpu_only) return d.finish("\"eps\":1e-6");
  Dev<float> gx(x), gw(w), gd(dout), gdw(dw0), gout((size_t)N * C), grstd(N), gdx((size_t)N * C);
  cuda::rmsnorm_forward(gout.p, grstd.p, gx.p, gw.p, N, C, 1e-6f);
  cuda::rmsnorm_backward(gdx.p, gdw.p, gd.p, gx.p, gw.p, grstd.p, N, C);
  Report rep{std::string("cuda.op.rmsnorm.") + name, 1e-4};
  rep.add("out", out, gout.get());
  rep.add("rstd", rstd, grstd.get());
  rep.add("dx", dx, gdx.get());
  rep.add("dw", dw, gdw.get());
  rep.print();
  d.f32("cuda.out", gout.get(), {N, C}); d.f32("cuda.dx", gdx.get(), {N, C}); d.f32("cuda.dw", gdw.get(), {C});
  d.finish("\"eps\":1e-6");
}

void check_rope() {
  Rng r(3);
  const int T = g_quick ? 100 : 2048, H = 8, D = 128;
  vector<int32_t> pos(T);
  // Packed sequences: positions restart at 0 at each boundary (every 700 rows here).
  for (int t = 0; t < T; ++t) pos[t] = t % 700;
  vector<float> inv(D / 2);
  rope_inv_freq(inv.data(), D, 1e6f, RopeScaling{0, 1, 1, 1, 0});
  auto x = r.uniform((size_t)T * H * D, -1, 1), g = r.uniform((size_t)T * H * D, -1, 1);
  vector<float> y = x, dx = g;
  rope_forward(y.data(), pos.data(), inv.data(), T, H, D);
  rope_backward(dx.data(), pos.data(), inv.data(), T, H, D);
  Dump d("rope", "rope");
  d.f32("x", x, {T, H, D}); d.f32("dout", g, {T, H, D}); d.i32("pos", pos, {T}); d.f32("inv_freq", inv, {D / 2});
  d.f32("cpu.out", y, {T, H, D}); d.f32("cpu.dx", dx, {T, H, D});
  if (g_cpu_only) return d.finish("");
  Dev<float> gy(x), gdx(g), ginv(inv);
  Dev<int32_t> gpos(pos);
  cuda::rope_forward(gy.p, gpos.p, ginv.p, T, H, D);
  cuda::rope_backward(gdx.p, gpos.p, ginv.p, T, H, D);
  Report rep{"cuda.op.rope.T" + std::to_string(T), 1e-4};
  rep.add("out", y, gy.get());
  rep.add("dx", dx, gdx.get());
  rep.print();
  d.f32("cuda.out", gy.get(), {T, H, D}); d.f32("cuda.dx", gdx.get(), {T, H, D});
  d.finish("");
}

void check_swiglu() {
  Rng r(4);
  const long N = g_quick ? 4096 : (1L << 22);
  auto gate = r.uniform(N, -6, 6), up = r.uniform(N, -2, 2), dout = r.uniform(N, -1, 1);
  vector<float> out(N), dg(N), du(N);
  swiglu_forward(out.data(), gate.data(), up.data(), N);
  swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), N);
  Dev<float> a(gate), b(up), c(dout), o(N), x(N), y(N);
  cuda::swiglu_forward(o.p, a.p, b.p, N);
  cuda::swiglu_backward(x.p, y.p, c.p, a.p, b.p, N);
  Report rep{"cuda.op.swiglu", 1e-4};
  rep.add("out", out, o.get());
  rep.add("dgate", dg, x.get());
  rep.add("dup", du, y.get());
  rep.print();
}

void check_linear_lora() {
  Rng r(5);
  const int N = 300, in = 1024, out = 768, rank = 16;
  const float scale = 2.0f;
  auto W = to_bf16(r.uniform((size_t)out * in, -0.05f, 0.05f));
  auto b = r.uniform(out, -1, 1), x = r.uniform((size_t)N * in, -1, 1), dy = r.uniform((size_t)N * out, -1, 1);
  auto A = r.uniform((size_t)rank * in, -0.05f, 0.05f), B = r.uniform((size_t)out * rank, -0.05f, 0.05f);
  auto dA0 = r.uniform(A.size(), -1, 1), dB0 = r.uniform(B.size(), -1, 1);
  const WeightRef Wh(W.data(), WDtype::BF16);
  // CPU: base then LoRA, as the model runs them.
  vector<float> y((size_t)N * out), xa((size_t)N * rank), dx((size_t)N * in), dh((size_t)N * rank), dA = dA0, dB = dB0;
  linear_forward(y.data(), x.data(), Wh, b.data(), N, in, out);
  vector<float> y_base = y;
  LoraView lv{A.data(), B.data(), rank, scale};
  lora_forward(y.data(), xa.data(), x.data(), lv, N, in, out);
  linear_backward(dx.data(), dy.data(), Wh, N, in, out);
  vector<float> dx_base = dx;
  lora_backward(dx.data(), dA.data(), dB.data(), dh.data(), dy.data(), x.data(), xa.data(), lv, N, in, out);
  Dump d("linear_lora", "linear_lora");
  d.bf16("W", W, {out, in}); d.f32("b", b, {out}); d.f32("x", x, {N, in}); d.f32("dy", dy, {N, out});
  d.f32("A", A, {rank, in}); d.f32("B", B, {out, rank}); d.f32("dA0", dA0, {rank, in}); d.f32("dB0", dB0, {out, rank});
  d.f32("cpu.y", y, {N, out}); d.f32("cpu.dx", dx, {N, in}); d.f32("cpu.dA", dA, {rank, in}); d.f32("cpu.dB", dB, {out, rank});
  const std::string params = "\"scale\":" + fmt("%.9g", scale);
  if (g_cpu_only) return d.finish(params);
  // CUDA
  Dev<uint16_t> gW(W);
  Dev<float> gb(b), gx(x), gdy(dy), gA(A), gB(B), gdA(dA0), gdB(dB0), gy((size_t)N * out), gxa((size_t)N * rank),
      gdx((size_t)N * in), gdh((size_t)N * rank);
  const WeightRef gWh(gW.p, WDtype::BF16);
  cuda::linear_forward(gy.p, gx.p, gWh, gb.p, N, in, out);
  auto gy_base = gy.get();
  LoraView glv{gA.p, gB.p, rank, scale};
  cuda::linear_backward(gdx.p, gdy.p, gWh, N, in, out);
  auto gdx_base = gdx.get();
  Report lin{"cuda.op.linear.bf16", 1e-2};
  lin.add("y", y_base, gy_base);
  lin.add("dx", dx_base, gdx_base);
  lin.print();
  // The LoRA products alone are f32: feed the CUDA op the CPU's base results so only they differ.
  Dev<float> gy2(y_base), gdx2(dx_base);
  cuda::lora_forward(gy2.p, gxa.p, gx.p, glv, N, in, out);
  cuda::lora_backward(gdx2.p, gdA.p, gdB.p, gdh.p, gdy.p, gx.p, gxa.p, glv, N, in, out);
  Report lo{"cuda.op.lora.f32.r16", 1e-4};
  lo.add("y", y, gy2.get());
  lo.add("xa", xa, gxa.get());
  lo.add("dx", dx, gdx2.get());
  lo.add("dA", dA, gdA.get());
  lo.add("dB", dB, gdB.get());
  lo.add("dh", dh, gdh.get());
  lo.print();
  // The whole CUDA chain (base + LoRA on the CUDA base results) for the torch comparison.
  Dev<float> gy3((size_t)N * out), gdx3((size_t)N * in), gdA3(dA0), gdB3(dB0);
  cuda::linear_forward(gy3.p, gx.p, gWh, gb.p, N, in, out);
  cuda::lora_forward(gy3.p, gxa.p, gx.p, glv, N, in, out);
  cuda::linear_backward(gdx3.p, gdy.p, gWh, N, in, out);
  cuda::lora_backward(gdx3.p, gdA3.p, gdB3.p, gdh.p, gdy.p, gx.p, gxa.p, glv, N, in, out);
  d.f32("cuda.y", gy3.get(), {N, out}); d.f32("cuda.dx", gdx3.get(), {N, in});
  d.f32("cuda.dA", gdA3.get(), {rank, in}); d.f32("cuda.dB", gdB3.get(), {out, rank});
  d.finish(params);
}

void check_lm_head(const std::string& name, int N, int C, int V, int chunk, bool bf16, double tol, bool dump) {
  Rng r(8 + V);
  auto Wf = r.uniform((size_t)V * C, -0.1f, 0.1f);
  vector<uint16_t> Wb;
  if (bf16) Wb = to_bf16(Wf);
  auto h = r.uniform((size_t)N * C, -1, 1), dlogp = r.uniform(N, -1, 1);
  vector<int32_t> targets(N), mask_idx(N);
  vector<float> inv_temp(N);
  const size_t words = ((size_t)V + 31) / 32;
  vector<uint32_t> masks(2 * words);
  for (auto& w : masks) w = (uint32_t)r.g() | 0x11111111u;  // about 5/8 of the tokens allowed in each set
  for (int n = 0; n < N; ++n) {
    targets[n] = r.below(V);
    inv_temp[n] = n % 3 == 0 ? 1.0f : 1.0f / 0.7f;  // rows at temperature 1 and at 0.7
    mask_idx[n] = n % 5 == 0 ? 0 : n % 7 == 0 ? 1 : -1;  // a few constrained rows
  }
  const WeightRef Wh = bf16 ? WeightRef(Wb.data(), WDtype::BF16) : WeightRef(Wf.data());
  vector<float> logp(N), lse(N), ent(N), g((size_t)N * C), dh((size_t)N * C), scratch((size_t)chunk * V);
  auto t0 = std::chrono::steady_clock::now();
  lm_head_forward(logp.data(), lse.data(), ent.data(), g.data(), h.data(), Wh, targets.data(), N, C, V, scratch.data(),
                  chunk, inv_temp.data(), mask_idx.data(), masks.data());
  lm_head_backward(dh.data(), dlogp.data(), g.data(), Wh, targets.data(), N, C, inv_temp.data());
  const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Dump d(dump ? "lm_head_" + name : std::string(), "lm_head");
  if (bf16) d.bf16("W", Wb, {V, C}); else d.f32("W", Wf, {V, C});
  d.f32("h", h, {N, C}); d.f32("dlogp", dlogp, {N}); d.i32("targets", targets, {N}); d.f32("inv_temp", inv_temp, {N});
  d.i32("mask_idx", mask_idx, {N});
  d.tensor("masks", "u32", masks, {2, (long)words});
  d.f32("cpu.logp", logp, {N}); d.f32("cpu.lse", lse, {N}); d.f32("cpu.entropy", ent, {N}); d.f32("cpu.dh", dh, {N, C});
  if (g_cpu_only) return d.finish("");
  Dev<uint16_t> gWb(bf16 ? Wb : vector<uint16_t>());
  Dev<float> gWf(bf16 ? vector<float>() : Wf);
  const WeightRef gW = bf16 ? WeightRef(gWb.p, WDtype::BF16) : WeightRef(gWf.p);
  Dev<float> gh(h), gdl(dlogp), git(inv_temp), glogp(N), glse(N), gent(N), gg((size_t)N * C), gdh((size_t)N * C);
  Dev<int32_t> gt(targets), gmi(mask_idx);
  Dev<uint32_t> gm(masks);
  auto fwd = [&] {
    cuda::lm_head_forward(glogp.p, glse.p, gent.p, gg.p, gh.p, gW, gt.p, N, C, V, nullptr, chunk, git.p, gmi.p, gm.p);
  };
  fwd();
  cuda::lm_head_backward(gdh.p, gdl.p, gg.p, gW, gt.p, N, C, git.p);
  Report rep{"cuda.op.lm_head." + name, tol};
  rep.add("logp", logp, glogp.get());
  rep.add("lse", lse, glse.get());
  rep.add("entropy", ent, gent.get());
  rep.add("g", g, gg.get());
  rep.add("dh", dh, gdh.get());
  const double ms = time_ms(fwd, 3);
  rep.extra = ",\"N\":" + std::to_string(N) + ",\"C\":" + std::to_string(C) + ",\"V\":" + std::to_string(V) +
              ",\"fwd_ms\":" + fmt("%.3f", ms) + ",\"fwd_tflops\":" + fmt("%.2f", 4.0 * N * C * (double)V / ms * 1e-9) +
              ",\"cpu_s\":" + fmt("%.2f", cpu_s);
  rep.print();
  d.f32("cuda.logp", glogp.get(), {N}); d.f32("cuda.lse", glse.get(), {N}); d.f32("cuda.entropy", gent.get(), {N});
  d.f32("cuda.dh", gdh.get(), {N, C});
  d.finish("");
}

void check_adamw() {
  Rng r(9);
  const size_t n = g_quick ? 10000 : 3000000;
  auto p = r.uniform(n, -1, 1), m = r.uniform(n, -0.01f, 0.01f), v = r.uniform(n, 0, 1e-4f);
  const AdamWConfig c{0.9f, 0.999f, 1e-8f, 0.01f};
  Dev<float> gp(p), gm(m), gv(v);
  for (long step = 1; step <= 3; ++step) {
    auto g = r.uniform(n, -1, 1);
    adamw_step(p.data(), g.data(), m.data(), v.data(), n, step, 1e-3f, c);
    Dev<float> gg(g);
    cuda::adamw_step(gp.p, gg.p, gm.p, gv.p, n, step, 1e-3f, c);
  }
  Report rep{"cuda.op.adamw.3steps", 1e-4};
  rep.add("param", p, gp.get());
  rep.add("m", m, gm.get());
  rep.add("v", v, gv.get());
  rep.print();
}

}  // namespace cuda_check
