// The CUDA engine's model-level check (issue 17): the model and trainer of native/model and native/train, unchanged,
// run on the CUDA backend after Model::to_backend / lora_to_backend. No Node: a standalone program, as check.cu.
// One JSON line per figure on stdout.
//
//   parity DIR   DIR/model (an HF Qwen3 folder), DIR/adapter (a PEFT LoRA adapter) and DIR/batch.json (a packed
//                micro-batch; scripts/device-model-check.py prepare writes all three). For the CUDA backend
//                (weights as stored, bf16) and the CPU backend (f32): the loss tokens' log-probabilities with and
//                without the adapter and the LoRA gradients of one GRPO loss, written to DIR/<backend>.*.f32 with
//                DIR/<backend>.json (the gradient's tensors in order), for the script's compare step (PyTorch +
//                transformers + peft on the same GPU).
//   staged MODEL No GPU needed: the same computation on the CPU backend twice, once as is and once with its
//                memory declared "elsewhere" (host buffers handed out through an Allocator), so every staging,
//                copy and transfer path the CUDA backend relies on runs; both must agree bit for bit.
//   bench SHAPE  Random bf16 weights of a Qwen3 shape (0.6b, 4b) made on the device: a LoRA GRPO train step
//                (forward, LM head and loss, backward, AdamW) over 4096 packed tokens (with the f32 attention
//                kernels, then with the tensor-core ones, the default), and decode steps at batch 1
//                and 64 (forward + LM-head logits, no sampling: the device sampler is not built). Seconds, tokens/s,
//                the FLOPs counted, bytes read per decode step, and device memory.
// Exit status: 0 done (parity and staged: every comparison that this program makes held), 1 otherwise, 2 no GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../core/json.h"
#include "../model/model.h"
#include "../train/optim.h"
#include "../train/train.h"
#include "cuda_common.cuh"
#include "ops.h"

using namespace mcprl;
using std::string;
using std::vector;

namespace {

string read_text(const string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) FAIL(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_f32(const string& path, const float* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(p), (std::streamsize)(n * sizeof(float)));
  if (!f) FAIL(path + ": cannot write");
}

// The ModelConfig of a Qwen3 config.json (the fields this check's folders carry; TypeScript's reader,
// src/hf/config.ts, is the engine's).
ModelConfig qwen3_config(const string& dir) {
  Json j = json_parse(read_text(dir + "/config.json"), dir + "/config.json");
  CHECK(j.value("model_type", string()) == "qwen3", dir + "/config.json: model_type must be qwen3");
  ModelConfig c{};
  c.model_type = "qwen3";
  c.vocab = j.at("vocab_size");
  c.hidden = j.at("hidden_size");
  c.layers = j.at("num_hidden_layers");
  c.heads = j.at("num_attention_heads");
  c.kv_heads = j.value("num_key_value_heads", c.heads);
  c.head_dim = j.value("head_dim", c.hidden / c.heads);
  c.inter = j.at("intermediate_size");
  c.max_pos = j.at("max_position_embeddings");
  c.eps = j.value("rms_norm_eps", 1e-6f);
  // transformers 5 writes rope_theta inside rope_parameters; earlier versions at the top level.
  c.rope_theta = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                     ? j["rope_parameters"].value("rope_theta", 1e6f)
                     : j.value("rope_theta", 1e6f);
  c.rope = RopeScaling{0, 1.0f, 1.0f, 1.0f, 0};
  c.tie = j.value("tie_word_embeddings", true);
  c.qkv_bias = c.o_bias = j.value("attention_bias", false);
  c.qk_norm = true;
  validate_config(c);
  return c;
}

ModelConfig qwen3_shape(const string& name) {
  ModelConfig c{};
  c.model_type = "qwen3";
  c.vocab = 151936;
  c.max_pos = 40960;
  c.eps = 1e-6f;
  c.rope_theta = 1e6f;
  c.rope = RopeScaling{0, 1.0f, 1.0f, 1.0f, 0};
  c.tie = true;
  c.qk_norm = true;
  c.head_dim = 128;
  c.kv_heads = 8;
  if (name == "0.6b") { c.hidden = 1024; c.layers = 28; c.heads = 16; c.inter = 3072; }
  else if (name == "4b") { c.hidden = 2560; c.layers = 36; c.heads = 32; c.inter = 9728; }
  else FAIL("unknown shape '" + name + "' (0.6b, 4b)");
  validate_config(c);
  return c;
}

// ---- one GRPO micro-batch with an adapter: log-probabilities with and without it, and the LoRA gradient
MicroBatch read_batch(const string& path) {
  Json j = json_parse(read_text(path), path);
  MicroBatch mb;
  mb.tokens = j.at("tokens").get<vector<int32_t>>();
  mb.cu_seqlens = j.at("cu_seqlens").get<vector<int>>();
  mb.loss_rows = j.at("loss_rows").get<vector<int32_t>>();
  mb.loss_targets = j.at("loss_targets").get<vector<int32_t>>();
  const vector<int> loss_cu = j.at("loss_cu").get<vector<int>>();  // (nseq + 1) offsets into the loss rows
  const vector<float> adv = j.at("adv").get<vector<float>>();
  const float temperature = j.at("temperature");
  mb.loss_inv_temp.assign(mb.loss_rows.size(), 1.0f / temperature);
  const int G = (int)adv.size();
  for (int s = 0; s < G; ++s) {
    LossSeq q;
    q.off = loss_cu[s];
    q.n = loss_cu[s + 1] - loss_cu[s];
    q.adv = adv[s];
    q.weight = 1.0f / ((float)G * (float)q.n);  // grpo: 1 / (G n_s)
    mb.seqs.push_back(q);
  }
  return mb;
}

const LossParams kGrpo = {LOSS_GRPO, 0.2f, 0.28f, 0.0f, 0.0f};

struct GradResult {
  vector<float> logp, logp_base, grad;
  double seconds = 0;
};

GradResult policy_gradient(Model& m, LoraAdapter& a, const MicroBatch& mb) {
  const Backend& B = *m.be;
  GradResult r;
  const size_t M = mb.loss_rows.size();
  FloatBuffer grad;
  grad.allocate(a.memory.size, B.memory);
  TrainWork w, w_base;
  r.logp.assign(M, 0.0f);
  r.logp_base.assign(M, 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  train_micro_batch(m, &a, grad.data, mb, kGrpo, w, r.logp.data(), false);
  train_micro_batch(m, nullptr, nullptr, mb, kGrpo, w_base, r.logp_base.data(), false);
  r.grad.assign(a.memory.size, 0.0f);
  B.download(r.grad.data(), grad.data, sizeof(float) * grad.size);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void load_adapter(LoraAdapter& a, const ModelConfig& c, const string& dir) {
  Json j = json_parse(read_text(dir + "/adapter_config.json"), dir + "/adapter_config.json");
  bool targets[NUM_MODULES] = {};
  for (const auto& t : j.at("target_modules")) {
    const int m = module_index(t.get<string>());
    CHECK(m >= 0, dir + "/adapter_config.json: unknown target module " + t.get<string>());
    targets[m] = true;
  }
  const bool rslora = j.value("use_rslora", false);
  lora_load(a, c, dir, j.at("r").get<int>(), j.at("lora_alpha").get<float>(), rslora, targets);
}

int run_parity(const string& dir) {
  const ModelConfig c = qwen3_config(dir + "/model");
  const MicroBatch mb = read_batch(dir + "/batch.json");
  struct Run { const char* tag; const Backend* be; WeightMode mode; };
  for (const Run& run : {Run{"cuda", &cuda_backend(), WeightMode::Auto}, Run{"cpu", &cpu_backend(), WeightMode::F32}}) {
    Model m;
    m.load(dir + "/model", c, run.mode);
    LoraAdapter a;
    load_adapter(a, c, dir + "/adapter");
    if (run.be->memory) {
      m.to_backend(*run.be);
      lora_to_backend(a, *run.be);
    }
    GradResult r = policy_gradient(m, a, mb);
    const string base = dir + "/" + run.tag;
    write_f32(base + ".logp.f32", r.logp.data(), r.logp.size());
    write_f32(base + ".logp_base.f32", r.logp_base.data(), r.logp_base.size());
    write_f32(base + ".grad.f32", r.grad.data(), r.grad.size());
    Json layout = Json::array();
    for (const LoraTensor& t : a.tensors) layout.push_back({{"key", t.key}, {"rows", t.rows}, {"cols", t.cols}});
    std::ofstream(base + ".json") << layout.dump() << "\n";
    std::printf("{\"figure\":\"cuda.model.parity.%s.written\",\"ok\":true,\"loss_tokens\":%zu,\"grad_elems\":%zu,"
                "\"weights\":\"%s\",\"seconds\":%.3f}\n",
                run.tag, r.logp.size(), r.grad.size(), run.mode == WeightMode::F32 ? "f32" : "as stored (bf16)", r.seconds);
    std::fflush(stdout);
  }
  return 0;
}

// ---- staged: the CPU backend with its memory declared elsewhere
void* host_alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  if (!p) FAIL("out of memory");
  std::memset(p, 0, bytes);
  return p;
}
void host_release(void* p, size_t) { std::free(p); }

void fill_adapter(LoraAdapter& a, uint64_t seed, float scale) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  for (size_t i = 0; i < a.memory.size; ++i) a.memory.data[i] = d(g);
}

MicroBatch random_batch(const ModelConfig& c, const vector<int>& lens, uint64_t seed, float temperature) {
  std::mt19937_64 g(seed);
  MicroBatch mb;
  mb.cu_seqlens.push_back(0);
  const int G = (int)lens.size();
  for (int s = 0; s < G; ++s) {
    const int row0 = mb.cu_seqlens.back(), n = lens[s];
    for (int i = 0; i < n; ++i) mb.tokens.push_back((int32_t)(g() % (uint64_t)c.vocab));
    LossSeq q;
    q.off = (int)mb.loss_rows.size();
    for (int i = n / 2; i + 1 < n; ++i) {  // the second half of each sequence carries the loss
      mb.loss_rows.push_back(row0 + i);
      mb.loss_targets.push_back(mb.tokens[row0 + i + 1]);
    }
    q.n = (int)mb.loss_rows.size() - q.off;
    q.adv = (s % 2 ? -1.0f : 1.0f) * (0.5f + 0.25f * (float)s);
    q.weight = 1.0f / ((float)G * (float)std::max(q.n, 1));
    mb.seqs.push_back(q);
    mb.cu_seqlens.push_back(row0 + n);
  }
  if (temperature != 1.0f) mb.loss_inv_temp.assign(mb.loss_rows.size(), 1.0f / temperature);
  return mb;
}

// Generation through KV-cache slots: two prompts prefilled in one call, then decode steps of both together;
// every slot's last hidden row after each call, concatenated.
vector<float> generate(Model& m, const LoraAdapter& a) {
  vector<KVSlot> slots(2);
  for (auto& s : slots) m.slot_init(s, 64);
  std::mt19937_64 g(5);
  RunState rs;
  vector<float> trace;
  vector<int> lens = {20, 33};
  for (int step = 0; step < 4; ++step) {
    vector<int32_t> toks;
    vector<Segment> segs;
    for (int b = 0; b < 2; ++b) {
      const int n = step == 0 ? lens[b] : 1;
      for (int i = 0; i < n; ++i) toks.push_back((int32_t)(g() % (uint64_t)m.cfg.vocab));
      segs.push_back(Segment{n, &slots[b], b == 0 ? &a : nullptr});
    }
    m.forward(toks.data(), (int)toks.size(), segs, rs, false, nullptr);
    for (auto& s : slots) trace.insert(trace.end(), s.last_h.begin(), s.last_h.end());
  }
  return trace;
}

int run_staged(const string& dir) {
  const ModelConfig c = qwen3_config(dir);
  static const Allocator elsewhere = {host_alloc, host_release};
  Backend staged_cpu = cpu_backend();
  staged_cpu.name = "cpu-staged";
  staged_cpu.memory = &elsewhere;
  const MicroBatch mb = random_batch(c, {37, 64, 9}, 7, 0.7f);
  bool targets[NUM_MODULES];
  std::fill(targets, targets + NUM_MODULES, true);
  GradResult res[2];
  vector<float> gen[2];
  for (int k = 0; k < 2; ++k) {
    Model m;
    m.load(dir, c, WeightMode::F32);
    LoraAdapter a;
    lora_allocate(a, c, 4, 8.0f, false, targets);
    fill_adapter(a, 11, 0.05f);
    if (k == 1) {
      m.to_backend(staged_cpu);
      lora_to_backend(a, staged_cpu);
    }
    res[k] = policy_gradient(m, a, mb);
    gen[k] = generate(m, a);
  }
  auto same = [](const vector<float>& x, const vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), sizeof(float) * x.size()) == 0;
  };
  const bool ok = same(res[0].logp, res[1].logp) && same(res[0].logp_base, res[1].logp_base) &&
                  same(res[0].grad, res[1].grad) && same(gen[0], gen[1]);
  double gmax = 0;
  for (float v : res[0].grad) gmax = std::max(gmax, (double)std::fabs(v));
  std::printf("{\"figure\":\"cuda.model.staged\",\"ok\":%s,\"loss_tokens\":%zu,\"grad_elems\":%zu,\"grad_max_abs\":%.4g,"
              "\"generation_values\":%zu,\"note\":\"CPU backend with its memory elsewhere vs as is: logp, base logp, LoRA "
              "gradient and the last hidden rows of KV-cache generation (prefill, 3 decode steps) bit for bit\"}\n",
              ok ? "true" : "false", res[0].logp.size(), res[0].grad.size(), gmax, gen[0].size());
  return ok && gmax > 0 ? 0 : 1;
}

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s parity DIR | staged MODEL_DIR | bench 0.6b|4b\n", argv[0]);
    return 64;
  }
  const string mode = argv[1];
  try {
    if (mode == "staged") return run_staged(argv[2]);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      std::printf("{\"figure\":\"cuda.model\",\"ok\":false,\"error\":\"no CUDA device\"}\n");
      return 2;
    }
    if (mode == "parity") return run_parity(argv[2]);
    if (mode == "bench") return run_bench(argv[2]);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 64;
  } catch (const std::exception& e) {
    std::printf("{\"figure\":\"cuda.model.%s\",\"ok\":false,\"error\":%s}\n", mode.c_str(), Json(e.what()).dump().c_str());
    return 1;
  }
}
