// The model check's bench mode (model_check.cuh): a LoRA GRPO train step and decode steps on random bf16 weights
// of a Qwen3 shape, with a per-op breakdown.
#include "model_check.cuh"

namespace model_check {

// ---- bench: random bf16 weights made on the device
__global__ void fill_uniform_bf16(uint16_t* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    p[i] = (uint16_t)(__float_as_uint(u * scale) >> 16);
  }
}

void random_model(Model& m, const ModelConfig& c, uint64_t seed) {
  const Backend& B = cuda_backend();
  m.cfg = c;
  m.inv_freq.resize(c.head_dim / 2);
  rope_inv_freq(m.inv_freq.data(), c.head_dim, c.rope_theta, c.rope);
  const size_t C = c.hidden, D = c.head_dim, L = c.layers;
  size_t n16 = (size_t)c.vocab * C;
  for (int mod = 0; mod < NUM_MODULES; ++mod) {
    int in, out;
    module_dims(c, mod, &in, &out);
    n16 += L * (size_t)in * out;
  }
  const size_t n32 = C + L * (2 * C + 2 * D);
  m.w.half.allocate(n16, B.memory);
  m.w.memory.allocate(n32, B.memory);
  fill_uniform_bf16<<<4096, 256>>>(m.w.half.data, n16, seed, 0.03f);
  CUDA_LAUNCHED("fill_uniform_bf16");
  vector<float> ones(n32, 1.0f);
  B.upload(m.w.memory.data, ones.data(), sizeof(float) * n32);
  uint16_t* h = m.w.half.data;
  float* f = m.w.memory.data;
  m.w.wte = WeightRef(h, WDtype::BF16);
  m.w.lm_head = m.w.wte;
  h += (size_t)c.vocab * C;
  m.w.norm = f;
  f += C;
  m.w.layers.assign(c.layers, LayerWeights{});
  for (auto& lw : m.w.layers) {
    lw.ln1 = f; f += C;
    lw.ln2 = f; f += C;
    lw.q_norm = f; f += D;
    lw.k_norm = f; f += D;
    for (int mod = 0; mod < NUM_MODULES; ++mod) {
      int in, out;
      module_dims(c, mod, &in, &out);
      lw.w[mod] = WeightRef(h, WDtype::BF16);
      lw.b[mod] = nullptr;
      h += (size_t)in * out;
    }
  }
  m.w.elems_bf16 = n16;
  m.inv_freq_b.allocate(m.inv_freq.size(), B.memory);
  B.upload(m.inv_freq_b.data, m.inv_freq.data(), sizeof(float) * m.inv_freq.size());
  m.be = &B;
}

// ---- per-op breakdown: every Backend entry wrapped to synchronise before and after and add the wall time to its
// op's total. The synchronisations perturb the step (launch overlap is lost), so the shares are a breakdown;
// step times are measured without the wrapper.
struct OpTime {
  const char* name;
  const void* fn;
  double seconds = 0;
  long calls = 0;
};
vector<OpTime> g_ops;

template <auto Fn, typename... A>
void timed_call(A... a) {
  static OpTime* t = [] {
    for (auto& o : g_ops)
      if (o.fn == reinterpret_cast<const void*>(Fn)) return &o;
    FAIL("an op was not registered for the breakdown");
  }();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  Fn(a...);
  CUDA_CHECK(cudaDeviceSynchronize());
  t->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t->calls++;
}

template <auto Fn, typename... A>
auto timed(void (*)(A...), const char* name) -> void (*)(A...) {
  g_ops.push_back(OpTime{name, reinterpret_cast<const void*>(Fn)});
  return &timed_call<Fn, A...>;
}

const Backend& profiled_cuda_backend() {
  static const Backend b = [] {
    g_ops.reserve(32);
    Backend p = cuda_backend();
    p.name = "cuda-profiled";
#define TIMED(op) p.op = timed<cuda::op>(cuda::op, #op)
    TIMED(gemm); TIMED(gemm_w); TIMED(embedding_forward); TIMED(rmsnorm_forward); TIMED(rmsnorm_backward);
    TIMED(rope_forward); TIMED(rope_backward); TIMED(attention_forward); TIMED(attention_backward);
    TIMED(swiglu_forward); TIMED(swiglu_backward); TIMED(linear_forward); TIMED(linear_backward);
    TIMED(lora_forward); TIMED(lora_backward); TIMED(lm_head_forward); TIMED(lm_head_backward);
    TIMED(logits_forward); TIMED(copy); TIMED(copy_rows); TIMED(upload); TIMED(download); TIMED(zero); TIMED(add);
    TIMED(gather_rows); TIMED(scatter_add_rows);
#undef TIMED
    return p;
  }();
  return b;
}

// Runs fn once on the profiled backend and prints each op's share: {"op": [ms, calls], ...} by time, largest first.
template <typename F>
void print_breakdown(const string& figure, Model& m, F fn) {
  const Backend* keep = m.be;
  m.be = &profiled_cuda_backend();
  for (auto& o : g_ops) { o.seconds = 0; o.calls = 0; }
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.be = keep;
  vector<OpTime> v = g_ops;
  std::sort(v.begin(), v.end(), [](const OpTime& x, const OpTime& y) { return x.seconds > y.seconds; });
  Json ops = Json::object();
  double in_ops = 0;
  for (auto& o : v)
    if (o.calls) {
      ops[o.name] = {std::round(o.seconds * 1e5) / 100.0, o.calls};
      in_ops += o.seconds;
    }
  Json line = {{"figure", figure}, {"total_ms", std::round(total * 1e5) / 100.0},
               {"outside_ops_ms", std::round((total - in_ops) * 1e5) / 100.0}, {"ops_ms_calls", ops},
               {"note", "each op synchronised before and after (a breakdown, not the step's time)"}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

double now_s() {
  CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// FLOPs one LoRA step needs over T tokens in nseq causal sequences of length n with M loss tokens: the frozen
// projections forward and their input gradient (2 + 2 per weight per token: no weight gradient), the LoRA
// products (forward 2, backward 4 per LoRA weight per token), causal attention (QK^T and PV forward; five
// products in the backward: the scores again, dV, dP, dQ, dK) and the LM head over the loss rows (the logits
// and g = p^T W forward; its backward uses g).
double step_flops(const ModelConfig& c, int T, int nseq, int n, int M, int r, bool backward) {
  const double C = c.hidden, HD = (double)c.heads * c.head_dim, KD = (double)c.kv_heads * c.head_dim, I = c.inter;
  const double proj = C * HD + 2 * C * KD + HD * C + 3 * C * I;
  const double lora = r * ((C + HD) + 2 * (C + KD) + (HD + C) + 3 * (C + I));
  const double pairs = (double)nseq * n * (n + 1) / 2.0;
  const double attn = 4.0 * pairs * c.head_dim * c.heads;  // forward: 2 products of 2 flops per pair per dim
  double f = c.layers * (2.0 * proj * T + 2.0 * lora * T + attn) + 2.0 * 2.0 * C * c.vocab * M;
  if (backward) f += c.layers * (2.0 * proj * T + 4.0 * lora * T + 2.5 * attn);
  return f;
}

void bench_train(const string& name, Model& m, int seq, int nseq) {
  const ModelConfig& c = m.cfg;
  const Backend& B = *m.be;
  const int r = 16, T = seq * nseq;
  bool targets[NUM_MODULES];
  std::fill(targets, targets + NUM_MODULES, true);
  LoraAdapter a;
  lora_allocate(a, c, r, 32.0f, false, targets);
  fill_adapter(a, 5, 0.01f);
  lora_to_backend(a, B);
  vector<int> lens(nseq, seq);
  MicroBatch mb = random_batch(c, lens, 3, 1.0f);
  // Every position but the last of a sequence carries the loss (random_batch takes the second half only).
  mb.loss_rows.clear();
  mb.loss_targets.clear();
  mb.seqs.clear();
  for (int s = 0; s < nseq; ++s) {
    LossSeq q;
    q.off = (int)mb.loss_rows.size();
    for (int i = 0; i + 1 < seq; ++i) {
      mb.loss_rows.push_back(s * seq + i);
      mb.loss_targets.push_back(mb.tokens[s * seq + i + 1]);
    }
    q.n = seq - 1;
    q.adv = s % 2 ? -1.0f : 1.0f;
    q.weight = 1.0f / ((float)nseq * q.n);
    mb.seqs.push_back(q);
  }
  const int M = (int)mb.loss_rows.size();
  FloatBuffer grad, mo, vo;
  grad.allocate(a.memory.size, B.memory);
  mo.allocate(a.memory.size, B.memory);
  vo.allocate(a.memory.size, B.memory);
  TrainWork w;
  const AdamWConfig opt = {0.9f, 0.999f, 1e-8f, 0.0f};
  cuda::memory_reset_peak();
  vector<double> fwd, step;
  for (int it = 0; it < 4; ++it) {  // the first of each is a warm-up
    double t0 = now_s();
    train_micro_batch(m, &a, nullptr, mb, kGrpo, w, nullptr, false);
    double t1 = now_s();
    B.zero(grad.data, sizeof(float) * grad.size);
    train_micro_batch(m, &a, grad.data, mb, kGrpo, w, nullptr, false);
    cuda::adamw_step(a.memory.data, grad.data, mo.data, vo.data, a.memory.size, it + 1, 1e-5f, opt);
    double t2 = now_s();
    if (it > 0) { fwd.push_back(t1 - t0); step.push_back(t2 - t1); }
  }
  print_breakdown("cuda.train." + name + ".breakdown", m, [&] {
    m.be->zero(grad.data, sizeof(float) * grad.size);
    train_micro_batch(m, &a, grad.data, mb, kGrpo, w, nullptr, false);
  });
  const double s = median(step), sf = median(fwd);
  const double flops = step_flops(c, T, nseq, seq, M, r, true);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("{\"figure\":\"cuda.train.%s.step\",\"tokens\":%d,\"sequences\":%d,\"loss_tokens\":%d,\"lora_rank\":%d,"
              "\"seconds\":%.4f,\"tokens_per_s\":%.1f,\"flops\":%.4g,\"tflops\":%.2f,\"forward_seconds\":%.4f,"
              "\"peak_alloc_gib\":%.2f,\"device_used_gib\":%.2f,\"runs\":%zu,\"note\":\"median of 3 after a warm-up; "
              "forward+LM head+loss+backward+AdamW; flops as step_flops counts them\"}\n",
              name.c_str(), T, nseq, M, r, s, T / s, flops, flops / s / 1e12, sf,
              cuda::memory_peak_bytes() / 1073741824.0, (total_b - free_b) / 1073741824.0, step.size());
  std::fflush(stdout);
}

void bench_decode(const string& name, Model& m, int batch, int prompt, int steps) {
  const ModelConfig& c = m.cfg;
  const Backend& B = *m.be;
  bool targets[NUM_MODULES];
  std::fill(targets, targets + NUM_MODULES, true);
  LoraAdapter a;
  lora_allocate(a, c, 16, 32.0f, false, targets);
  fill_adapter(a, 9, 0.01f);
  lora_to_backend(a, B);
  vector<KVSlot> slots(batch);
  for (auto& s : slots) m.slot_init(s, prompt + steps + 8);
  std::mt19937_64 g(1);
  RunState rs;
  // Prefill every slot with its prompt.
  {
    vector<int32_t> toks((size_t)batch * prompt);
    for (auto& t : toks) t = (int32_t)(g() % (uint64_t)c.vocab);
    vector<Segment> segs(batch);
    for (int b = 0; b < batch; ++b) segs[b] = Segment{prompt, &slots[b], &a};
    m.forward(toks.data(), (int)toks.size(), segs, rs, false, nullptr);
  }
  FloatBuffer logits;
  logits.allocate((size_t)batch * c.vocab, B.memory);
  vector<int32_t> toks(batch);
  vector<Segment> segs(batch);
  for (int b = 0; b < batch; ++b) segs[b] = Segment{1, &slots[b], &a};
  double t0 = 0;
  for (int it = 0; it < steps + 2; ++it) {  // two warm-up steps
    if (it == 2) t0 = now_s();
    for (auto& t : toks) t = (int32_t)(g() % (uint64_t)c.vocab);
    m.forward(toks.data(), batch, segs, rs, false, nullptr);
    B.logits_forward(logits.data, rs.hf, m.w.lm_head, batch, c.hidden, c.vocab);
  }
  const double s = (now_s() - t0) / steps;
  print_breakdown("cuda.decode." + name + ".b" + std::to_string(batch) + ".breakdown", m, [&] {
    m.forward(toks.data(), batch, segs, rs, false, nullptr);
    m.be->logits_forward(logits.data, rs.hf, m.w.lm_head, batch, c.hidden, c.vocab);
  });
  // Bytes one step must read at least: every weight once (bf16 matrices, f32 norms, f32 LoRA) and the KV cache.
  const double kv_len = prompt + 2 + steps / 2.0;
  const double bytes = 2.0 * m.w.half.size + 4.0 * m.w.memory.size + 4.0 * a.memory.size +
                       batch * 2.0 * 4.0 * c.layers * kv_len * c.kv_heads * c.head_dim;
  std::printf("{\"figure\":\"cuda.decode.%s.b%d\",\"batch\":%d,\"prompt\":%d,\"steps\":%d,\"seconds_per_step\":%.5f,"
              "\"tokens_per_s\":%.1f,\"bytes_per_step\":%.4g,\"gb_per_s\":%.1f,\"note\":\"forward + LM-head logits "
              "on the device per step (f32 KV cache, last hidden row copied to the host per sequence); no sampling\"}\n",
              name.c_str(), batch, batch, prompt, steps, s, batch / s, bytes, bytes / s / 1e9);
  std::fflush(stdout);
}

int run_bench(const string& shape) {
  const ModelConfig c = qwen3_shape(shape);
  Model m;
  random_model(m, c, 42);
  // The step with the f32 attention kernels first, for the comparison; then the default (tensor cores).
  cuda::attention_set_tensor_cores(false);
  bench_train(shape + ".f32_attention", m, 1024, 4);
  cuda::attention_set_tensor_cores(true);
  bench_train(shape, m, 1024, 4);
  bench_decode(shape, m, 1, 256, 32);
  bench_decode(shape, m, 64, 256, 16);
  return 0;
}

}  // namespace model_check
