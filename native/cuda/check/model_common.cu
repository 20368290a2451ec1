// The model check's shared parts (model_check.cuh): configs, batches, adapters and one policy gradient.
#include "model_check.cuh"

namespace model_check {

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

}  // namespace model_check
