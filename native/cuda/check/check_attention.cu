// The op check's attention cases (harness.cuh): packed sequences forward and backward, and generation segments
// continuing a KV cache, CPU vs CUDA.
#include "harness.cuh"

namespace cuda_check {

// Packed sequences of the given lengths: forward and backward, CPU vs CUDA, timed on the device.
void check_attention(const std::string& name, const vector<int>& lens, int H, int Hkv, int D, bool dump) {
  Rng r(6 + H * 7 + Hkv * 13 + D);
  vector<int> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  const int T = cu.back(), nseq = (int)lens.size();
  const size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
  auto q = r.uniform(nq, -2, 2), k = r.uniform(nk, -2, 2), v = r.uniform(nk, -1, 1), dout = r.uniform(nq, -1, 1);
  vector<AttnSegment> segs;
  for (int s = 0; s < nseq; ++s) segs.push_back({cu[s], lens[s], 0, k.data() + (size_t)cu[s] * Hkv * D, v.data() + (size_t)cu[s] * Hkv * D});
  vector<float> out(nq), lse((size_t)T * H), dq(nq), dk(nk), dv(nk);
  auto t0 = std::chrono::steady_clock::now();
  attention_forward(out.data(), lse.data(), q.data(), segs.data(), nseq, H, Hkv, D);
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                     cu.data(), nseq, H, Hkv, D);
  const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Dump d(dump ? "attention_" + name : std::string(), "attention");
  d.f32("q", q, {T, H, D}); d.f32("k", k, {T, Hkv, D}); d.f32("v", v, {T, Hkv, D}); d.f32("dout", dout, {T, H, D});
  d.i32("cu_seqlens", vector<int32_t>(cu.begin(), cu.end()), {nseq + 1});
  d.f32("cpu.out", out, {T, H, D}); d.f32("cpu.lse", lse, {T, H}); d.f32("cpu.dq", dq, {T, H, D});
  d.f32("cpu.dk", dk, {T, Hkv, D}); d.f32("cpu.dv", dv, {T, Hkv, D});
  const std::string params = "\"H\":" + std::to_string(H) + ",\"Hkv\":" + std::to_string(Hkv) + ",\"D\":" + std::to_string(D);
  if (g_cpu_only) return d.finish(params);
  Dev<float> gq(q), gk(k), gv(v), gd(dout), go(nq), gl((size_t)T * H), gdq(nq), gdk(nk), gdv(nk);
  vector<AttnSegment> dsegs;
  for (int s = 0; s < nseq; ++s) dsegs.push_back({cu[s], lens[s], 0, gk.p + (size_t)cu[s] * Hkv * D, gv.p + (size_t)cu[s] * Hkv * D});
  auto fwd = [&] { cuda::attention_forward(go.p, gl.p, gq.p, dsegs.data(), nseq, H, Hkv, D); };
  auto bwd = [&] {
    cuda::attention_backward(gdq.p, gdk.p, gdv.p, gd.p, gq.p, gk.p, gv.p, go.p, gl.p, cu.data(), nseq, H, Hkv, D);
  };
  // The tensor-core kernels first (head_dim a multiple of 16): bf16 operands, so bf16 accuracy (2e-2); then the
  // f32 kernels, whose outputs the dump keeps for the PyTorch oracle.
  for (const bool tc : {true, false}) {
    if (tc && D % 16 != 0) continue;
    cuda::attention_set_tensor_cores(tc);
    fwd();
    bwd();
    Report rep{"cuda.op.attention." + name + (tc ? ".tc" : ""), tc ? 2e-2 : 1e-4};
    rep.add("out", out, go.get());
    rep.add("lse", lse, gl.get());
    rep.add("dq", dq, gdq.get());
    rep.add("dk", dk, gdk.get());
    rep.add("dv", dv, gdv.get());
    const double fms = time_ms(fwd), bms = time_ms(bwd);
    // Causal FLOPs: each (query, key <= query) pair costs 2D for the scores and 2D for P V (forward); the
    // backward recomputes scores and does dP, dV, dK (in dk/dv) and again scores, dP and dQ (in dq): 5x (plus 2).
    double pairs = 0;
    for (int n : lens) pairs += 0.5 * (double)n * (n + 1);
    const double fflop = pairs * H * 4.0 * D;
    rep.extra = ",\"T\":" + std::to_string(T) + ",\"H\":" + std::to_string(H) + ",\"Hkv\":" + std::to_string(Hkv) +
                ",\"D\":" + std::to_string(D) + ",\"nseq\":" + std::to_string(nseq) + ",\"fwd_ms\":" + fmt("%.3f", fms) +
                ",\"bwd_ms\":" + fmt("%.3f", bms) + ",\"fwd_tflops\":" + fmt("%.2f", fflop / fms * 1e-9) +
                ",\"bwd_tflops\":" + fmt("%.2f", 2.5 * fflop / bms * 1e-9) +
                ",\"cpu_s\":" + fmt("%.2f", cpu_s);
    rep.print();
  }
  d.f32("cuda.out", go.get(), {T, H, D}); d.f32("cuda.lse", gl.get(), {T, H});
  d.f32("cuda.dq", gdq.get(), {T, H, D}); d.f32("cuda.dk", gdk.get(), {T, Hkv, D}); d.f32("cuda.dv", gdv.get(), {T, Hkv, D});
  d.finish(params);
}

// Generation segments: queries continue a KV cache (npast > 0): a decode step (nq = 1), a prefill continuation,
// and a fresh packed sequence in the same call. Forward only (no backward over the cache).
void check_attention_generation() {
  Rng r(7);
  const int H = 8, Hkv = 2, D = 64;
  struct S { int npast, nq; };
  const vector<S> ss = {{500, 1}, {100, 37}, {0, 45}, {1023, 1}};
  vector<vector<float>> kc, vc;
  vector<AttnSegment> segs;
  int T = 0;
  for (auto s : ss) {
    kc.push_back(r.uniform((size_t)(s.npast + s.nq) * Hkv * D, -2, 2));
    vc.push_back(r.uniform((size_t)(s.npast + s.nq) * Hkv * D, -1, 1));
    T += s.nq;
  }
  auto q = r.uniform((size_t)T * H * D, -2, 2);
  vector<float> out((size_t)T * H * D), lse((size_t)T * H);
  int q0 = 0;
  for (size_t i = 0; i < ss.size(); ++i) {
    segs.push_back({q0, ss[i].nq, ss[i].npast, kc[i].data(), vc[i].data()});
    q0 += ss[i].nq;
  }
  attention_forward(out.data(), lse.data(), q.data(), segs.data(), (int)segs.size(), H, Hkv, D);
  vector<std::unique_ptr<Dev<float>>> gk, gv;
  vector<AttnSegment> dsegs = segs;
  for (size_t i = 0; i < ss.size(); ++i) {
    gk.emplace_back(new Dev<float>(kc[i]));
    gv.emplace_back(new Dev<float>(vc[i]));
    dsegs[i].k = gk.back()->p;
    dsegs[i].v = gv.back()->p;
  }
  Dev<float> gq(q), go(out.size()), gl(lse.size());
  for (const bool tc : {true, false}) {
    cuda::attention_set_tensor_cores(tc);
    cuda::attention_forward(go.p, gl.p, gq.p, dsegs.data(), (int)dsegs.size(), H, Hkv, D);
    Report rep{std::string("cuda.op.attention.generation_segments") + (tc ? ".tc" : ""), tc ? 2e-2 : 1e-4};
    rep.add("out", out, go.get());
    rep.add("lse", lse, gl.get());
    rep.print();
  }
}

}  // namespace cuda_check
