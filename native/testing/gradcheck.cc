#include "gradcheck.h"

#include <cmath>
#include <functional>
#include <random>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../ops/lm_head.h"

namespace mcprl {

namespace {

using Vec = std::vector<float>;

struct Checker {
  std::mt19937 rng;
  double eps;
  int samples;
  std::vector<GradcheckResult> results;

  Vec randn(size_t n, float s = 1.0f) {
    std::normal_distribution<float> d(0.0f, s);
    Vec v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  static double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (double)a[i] * b[i];
    return s;
  }
  // Compare analytic gradient `g` of input `x` against central differences of loss().
  void check(const std::string& name, Vec& x, const Vec& g, const std::function<double()>& loss) {
    CHECK(g.size() == x.size(), "gradcheck: gradient size mismatch for " + name);
    GradcheckResult r{name, 0.0, 0.0, 0};
    std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
    int n = std::min<int>(samples, (int)x.size());
    for (int s = 0; s < n; ++s) {
      size_t i = (int)x.size() <= samples ? (size_t)s : pick(rng);
      float orig = x[i];
      x[i] = orig + (float)eps;
      double lp = loss();
      x[i] = orig - (float)eps;
      double lm = loss();
      x[i] = orig;
      double num = (lp - lm) / (2.0 * eps);
      r.max_abs_err = std::max(r.max_abs_err, std::fabs(num - (double)g[i]));
      r.max_abs_grad = std::max(r.max_abs_grad, std::fabs(num));
      r.checked++;
    }
    results.push_back(r);
  }
  // A forward's outputs (logp, lse, entropy, g) against another computation of them: the largest difference, and
  // the largest reference value as the scale.
  void compare(const std::string& name, const Vec (&want)[4], const Vec (&got)[4]) {
    GradcheckResult r{name, 0.0, 0.0, 0};
    for (int k = 0; k < 4; ++k)
      for (size_t i = 0; i < want[k].size(); ++i) {
        r.max_abs_err = std::max(r.max_abs_err, std::fabs((double)got[k][i] - want[k][i]));
        r.max_abs_grad = std::max(r.max_abs_grad, std::fabs((double)want[k][i]));
        r.checked++;
      }
    results.push_back(r);
  }
};

}  // namespace

std::vector<GradcheckResult> gradcheck_op(const std::string& op, unsigned seed, double eps, int samples) {
  const Backend& be = cpu_backend();
  Checker ck{std::mt19937(seed), eps, samples, {}};

  if (op == "rmsnorm" || op == "qknorm") {
    // qknorm: the same op applied per head (rows = T*H, C = head_dim), as Qwen3 does.
    int N = op == "rmsnorm" ? 5 : 6 * 4, C = op == "rmsnorm" ? 16 : 8;
    Vec x = ck.randn((size_t)N * C), wt = ck.randn(C), w = ck.randn((size_t)N * C), out((size_t)N * C), rstd(N);
    for (auto& v : wt) v += 1.0f;
    auto loss = [&] { be.rmsnorm_forward(out.data(), rstd.data(), x.data(), wt.data(), N, C, 1e-6f); return Checker::dot(out, w); };
    loss();
    Vec dx((size_t)N * C), dw(C, 0.0f);
    be.rmsnorm_backward(dx.data(), dw.data(), w.data(), x.data(), wt.data(), rstd.data(), N, C);
    ck.check("dx", x, dx, loss);
    ck.check("dw", wt, dw, loss);
  } else if (op == "rope") {
    int T = 7, H = 3, D = 8;
    std::vector<int32_t> pos = {0, 1, 2, 0, 1, 5, 1000};
    Vec inv(D / 2);
    RopeScaling sc; sc.type = 2; sc.factor = 8; sc.low_freq_factor = 1; sc.high_freq_factor = 4; sc.original_max_position = 64;
    rope_inv_freq(inv.data(), D, 10000.0f, sc);
    Vec x = ck.randn((size_t)T * H * D), w = ck.randn((size_t)T * H * D), out;
    auto loss = [&] { out = x; be.rope_forward(out.data(), pos.data(), inv.data(), T, H, D); return Checker::dot(out, w); };
    Vec dx = w;
    be.rope_backward(dx.data(), pos.data(), inv.data(), T, H, D);
    ck.check("dx", x, dx, loss);
  } else if (op == "attention") {
    // Two packed sequences (lengths 4 and 5), GQA with 4 query heads over 2 kv heads.
    int H = 4, Hkv = 2, D = 8;
    std::vector<int> cu = {0, 4, 9};
    int T = 9, nseq = 2;
    Vec q = ck.randn((size_t)T * H * D), k = ck.randn((size_t)T * Hkv * D), v = ck.randn((size_t)T * Hkv * D);
    Vec w = ck.randn((size_t)T * H * D), out((size_t)T * H * D), lse((size_t)T * H);
    auto fwd = [&] {
      std::vector<AttnSegment> segs;
      for (int s = 0; s < nseq; ++s) {
        AttnSegment a;
        a.q0 = cu[s]; a.nq = cu[s + 1] - cu[s]; a.npast = 0;
        a.k = k.data() + (size_t)cu[s] * Hkv * D; a.v = v.data() + (size_t)cu[s] * Hkv * D;
        segs.push_back(a);
      }
      be.attention_forward(out.data(), lse.data(), q.data(), segs.data(), nseq, H, Hkv, D);
      return Checker::dot(out, w);
    };
    fwd();
    Vec dq(q.size()), dk(k.size()), dv(v.size());
    be.attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(), out.data(),
                          lse.data(), cu.data(), nseq, H, Hkv, D);
    ck.check("dq", q, dq, fwd);
    ck.check("dk", k, dk, fwd);
    ck.check("dv", v, dv, fwd);
  } else if (op == "attention_long") {
    // The tiles on long sequences: 130 rows (three key blocks of 64, the last cut short; query tiles of 48 / group
    // rows straddle the block boundaries, so diagonal tiles are cut in the middle) and 71 rows, packed; GQA ratio
    // 1, 2, 4 with head_dim 128, 8, 64.
    const std::vector<int> cu = {0, 130, 201};
    const int T = cu.back(), nseq = 2, Hkv = 2;
    Checker lk{std::mt19937(seed + 1), eps, std::min(samples, 16), {}};  // fewer entries: each loss is a long forward
    for (auto [group, D] : {std::pair{1, 128}, std::pair{2, 8}, std::pair{4, 64}}) {
      const int H = Hkv * group;
      const std::string tag = " g" + std::to_string(group) + " D" + std::to_string(D);
      Vec q = ck.randn((size_t)T * H * D), k = ck.randn((size_t)T * Hkv * D), v = ck.randn((size_t)T * Hkv * D);
      Vec w = ck.randn((size_t)T * H * D), out((size_t)T * H * D), lse((size_t)T * H);
      auto fwd = [&] {
        AttnSegment segs[2];
        for (int s = 0; s < nseq; ++s)
          segs[s] = AttnSegment{cu[s], cu[s + 1] - cu[s], 0, k.data() + (size_t)cu[s] * Hkv * D, v.data() + (size_t)cu[s] * Hkv * D};
        be.attention_forward(out.data(), lse.data(), q.data(), segs, nseq, H, Hkv, D);
        return Checker::dot(out, w);
      };
      fwd();
      Vec dq(q.size()), dk(k.size()), dv(v.size());
      be.attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(), out.data(),
                            lse.data(), cu.data(), nseq, H, Hkv, D);
      lk.check("dq" + tag, q, dq, fwd);
      lk.check("dk" + tag, k, dk, fwd);
      lk.check("dv" + tag, v, dv, fwd);
    }
    ck.results = lk.results;
  } else if (op == "swiglu") {
    long N = 40;
    Vec g = ck.randn(N, 2.0f), u = ck.randn(N), w = ck.randn(N), out(N);
    auto loss = [&] { be.swiglu_forward(out.data(), g.data(), u.data(), N); return Checker::dot(out, w); };
    Vec dg(N), du(N);
    be.swiglu_backward(dg.data(), du.data(), w.data(), g.data(), u.data(), N);
    ck.check("dgate", g, dg, loss);
    ck.check("dup", u, du, loss);
  } else if (op == "linear" || op == "lora") {
    // y = x W^T + b (+ s (x A^T) B^T): dx through the frozen W and the adapter, dA and dB.
    int N = 5, in = 12, out = 10, r = 3;
    Vec x = ck.randn((size_t)N * in), W = ck.randn((size_t)out * in), b = ck.randn(out);
    Vec A = ck.randn((size_t)r * in), B = ck.randn((size_t)out * r), w = ck.randn((size_t)N * out);
    Vec y((size_t)N * out), xa((size_t)N * r);
    bool lora = op == "lora";
    auto view = [&] { LoraView l; l.A = A.data(); l.B = B.data(); l.r = r; l.scale = 0.7f; return l; };
    auto loss = [&] {
      be.linear_forward(y.data(), x.data(), W.data(), b.data(), N, in, out);
      if (lora) be.lora_forward(y.data(), xa.data(), x.data(), view(), N, in, out);
      return Checker::dot(y, w);
    };
    loss();
    Vec dx((size_t)N * in), dA((size_t)r * in, 0.0f), dB((size_t)out * r, 0.0f), dh((size_t)N * r);
    be.linear_backward(dx.data(), w.data(), W.data(), N, in, out);
    if (lora) be.lora_backward(dx.data(), dA.data(), dB.data(), dh.data(), w.data(), x.data(), xa.data(), view(), N, in, out);
    ck.check("dx", x, dx, loss);
    if (lora) {
      ck.check("dA", A, dA, loss);
      ck.check("dB", B, dB, loss);
    }
  } else if (op == "lm_head" || op == "lm_head_sampler") {
    // L = sum_n a_n logp_n, chunk 3 over 7 rows so chunk edges are exercised; repeated targets.
    // lm_head_sampler: rows at temperatures 0.7, 1.3, 1, 0.5, … and rows 1, 3, 4 restricted to allowed sets
    // (rows 3 and 4 share one) that hold their target.
    int N = 7, C = 6, V = 13, chunk = 3;
    Vec h = ck.randn((size_t)N * C), W = ck.randn((size_t)V * C), a = ck.randn(N);
    std::vector<int32_t> tg = {0, 12, 5, 5, 3, 7, 1};
    const bool sampler = op == "lm_head_sampler";
    Vec inv_temp = {1 / 0.7f, 1 / 1.3f, 1.0f, 2.0f, 1 / 0.7f, 1.0f, 1 / 1.1f};
    std::vector<int32_t> mask_idx = {-1, 0, -1, 1, 1, -1, -1};
    std::vector<uint32_t> masks = {(1u << 12) | (1u << 2) | (1u << 9), (1u << 5) | (1u << 3) | (1u << 0) | (1u << 11)};
    Vec logp(N), lse(N), ent(N), g((size_t)N * C), scratch((size_t)chunk * V);
    auto loss = [&] {
      be.lm_head_forward(logp.data(), lse.data(), ent.data(), g.data(), h.data(), W.data(), tg.data(), N, C, V,
                         scratch.data(), chunk, sampler ? inv_temp.data() : nullptr, sampler ? mask_idx.data() : nullptr,
                         sampler ? masks.data() : nullptr);
      return Checker::dot(logp, a);
    };
    loss();
    Vec dh((size_t)N * C);
    be.lm_head_backward(dh.data(), a.data(), g.data(), W.data(), tg.data(), N, C, sampler ? inv_temp.data() : nullptr);
    ck.check("dh", h, dh, loss);
  } else if (op == "lm_head_tiles") {
    // The online log-sum-exp over vocabulary tiles (ops/lm_head.h): V = 13 in tiles of 4 columns (the last of one),
    // rows at temperatures and with allowed sets as lm_head_sampler's, row 1's set {9, 12} all in later tiles (its
    // first tiles contribute nothing). L = sum_n a_n logp_n. Also "forward vs one tile": logp, lse, entropy and g
    // against the same op in one tile of 13 (the plain two-pass LM head).
    int N = 7, C = 6, V = 13, chunk = 3, cols = 4;
    Vec h = ck.randn((size_t)N * C), W = ck.randn((size_t)V * C), a = ck.randn(N);
    std::vector<int32_t> tg = {0, 12, 5, 5, 3, 7, 1};
    Vec inv_temp = {1 / 0.7f, 1 / 1.3f, 1.0f, 2.0f, 1 / 0.7f, 1.0f, 1 / 1.1f};
    std::vector<int32_t> mask_idx = {-1, 0, -1, 1, 1, -1, -1};
    std::vector<uint32_t> masks = {(1u << 12) | (1u << 9), (1u << 5) | (1u << 3) | (1u << 0) | (1u << 11)};
    Vec logp(N), lse(N), ent(N), g((size_t)N * C), scratch((size_t)chunk * V);
    auto forward = [&](int tile) {
      lm_head_forward_tiles(logp.data(), lse.data(), ent.data(), g.data(), h.data(), W.data(), tg.data(), N, C, V,
                            scratch.data(), chunk, tile, inv_temp.data(), mask_idx.data(), masks.data());
    };
    auto loss = [&] {
      forward(cols);
      return Checker::dot(logp, a);
    };
    forward(V);
    const Vec one[4] = {logp, lse, ent, g};
    loss();
    const Vec tiled[4] = {logp, lse, ent, g};
    Vec dh((size_t)N * C);
    be.lm_head_backward(dh.data(), a.data(), g.data(), W.data(), tg.data(), N, C, inv_temp.data());
    ck.check("dh", h, dh, loss);
    ck.compare("forward vs one tile", one, tiled);
  } else if (op == "lm_head_fused") {
    // The fused path (ops/lm_head.h) with small tiles: 100 rows at temperatures in blocks of at most 48 rows (on two
    // threads, rows 0-47 and 48-99: panels of 32 and 16 rows, and a last block of 4 rows in a panel of 16), C = 16,
    // V = 29 in tiles of 8 (the last of 5: the zero-padded copy), targets in every tile. L = sum_n a_n logp_n.
    // Also "fused vs two-pass": logp, lse, entropy and g against lm_head_forward_tiles in one tile of 29, "bf16 vs
    // widened": the head rounded to bf16 against the same values widened to f32, and "rows alone vs together":
    // rows 3.. in a call of their own against the same rows of the whole call.
    int N = 100, C = 16, V = 29;
    const LmHeadFusedTiles tiles{8, 48};
    Vec h = ck.randn((size_t)N * C), W = ck.randn((size_t)V * C), a = ck.randn(N), inv_temp(N);
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; ++n) {
      tg[n] = (n * 11 + 3) % V;
      inv_temp[n] = n % 3 == 0 ? 1.0f : 1.0f / (0.5f + 0.02f * (float)n);
    }
    Vec logp(N), lse(N), ent(N), g((size_t)N * C), scratch((size_t)N * V);
    auto fused = [&](WeightRef w) {
      lm_head_forward_fused(logp.data(), lse.data(), ent.data(), g.data(), h.data(), w, tg.data(), N, C, V,
                            inv_temp.data(), tiles);
    };
    auto loss = [&] {
      fused(W.data());
      return Checker::dot(logp, a);
    };
    lm_head_forward_tiles(logp.data(), lse.data(), ent.data(), g.data(), h.data(), W.data(), tg.data(), N, C, V,
                          scratch.data(), N, V, inv_temp.data(), nullptr, nullptr);
    const Vec two_pass[4] = {logp, lse, ent, g};
    loss();
    const Vec got[4] = {logp, lse, ent, g};
    Vec dh((size_t)N * C);
    be.lm_head_backward(dh.data(), a.data(), g.data(), W.data(), tg.data(), N, C, inv_temp.data());
    ck.check("dh", h, dh, loss);
    ck.compare("fused vs two-pass", two_pass, got);
    std::vector<uint16_t> w16(W.size());
    Vec widened(W.size());
    for (size_t i = 0; i < W.size(); ++i) w16[i] = f32_to_bf16(W[i]);
    widen(widened.data(), WeightRef(w16.data(), WDtype::BF16), 0, W.size());
    fused(widened.data());
    const Vec f32[4] = {logp, lse, ent, g};
    fused(WeightRef(w16.data(), WDtype::BF16));
    const Vec b16[4] = {logp, lse, ent, g};
    ck.compare("bf16 vs widened", f32, b16);
    // Rows 3.. alone (other lane groups, blocks and threads) against the same rows of the whole call.
    const int skip = 3, n2 = N - skip;
    Vec logp2(n2), lse2(n2), ent2(n2), g2((size_t)n2 * C);
    lm_head_forward_fused(logp2.data(), lse2.data(), ent2.data(), g2.data(), h.data() + (size_t)skip * C, W.data(),
                          tg.data() + skip, n2, C, V, inv_temp.data() + skip, tiles);
    auto tail = [&](const Vec& v, size_t per) { return Vec(v.begin() + (long)(skip * per), v.end()); };
    const Vec whole[4] = {tail(got[0], 1), tail(got[1], 1), tail(got[2], 1), tail(got[3], C)};
    const Vec alone[4] = {logp2, lse2, ent2, g2};
    ck.compare("rows alone vs together", whole, alone);
  } else {
    FAIL("gradcheck: unknown op '" + op + "'");
  }
  return ck.results;
}

}  // namespace mcprl
