// The model check's comparing modes (model_check.cuh): parity (the CUDA and CPU backends' results written for
// scripts/device-model-check.py) and staged (the CPU backend with its memory declared elsewhere, bit for bit).
#include "model_check.cuh"

namespace model_check {

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

}  // namespace model_check
