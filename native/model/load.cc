// Weights: the base model's safetensors (single file or sharded with model.safetensors.index.json) into
// ModelWeights, and LoRA adapters (new zero ones, or adapter_model.safetensors of a PEFT folder) into
// LoraAdapter. Every mismatch with the architecture fails naming the file and the tensor.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "../core/json.h"
#include "../kernels/gemm.h"
#include "model.h"
#include "../core/safetensors.h"

namespace mcprl {

static std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) FAIL(path + ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static bool file_exists(const std::string& p) {
  std::ifstream f(p);
  return (bool)f;
}

// A non-finite weight poisons every forward pass that touches it, silently: refuse it at load, naming the tensor.
static void check_finite(const std::string& path, const std::string& name, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      FAIL(path + ": tensor '" + name + "' holds " + (std::isnan(x[i]) ? "NaN" : "Inf") + " at element " + std::to_string(i));
}

// The same for a matrix kept as 16 bits: all exponent bits set is Inf (zero mantissa) or NaN.
static void check_finite16(const std::string& path, const std::string& name, const uint16_t* x, int64_t n, WDtype t) {
  const uint16_t exp = t == WDtype::BF16 ? 0x7f80 : 0x7c00, man = t == WDtype::BF16 ? 0x007f : 0x03ff;
  for (int64_t i = 0; i < n; ++i)
    if ((x[i] & exp) == exp)
      FAIL(path + ": tensor '" + name + "' holds " + ((x[i] & man) ? "NaN" : "Inf") + " at element " + std::to_string(i));
}

namespace {
struct Expected {
  std::string name;
  std::vector<int64_t> shape;
  bool matrix;                 // a projection, the embedding or the untied head: may be kept as 16 bits
  WDtype dtype = WDtype::F32;  // as kept in memory
  float* dst = nullptr;        // when f32
  uint16_t* hdst = nullptr;    // when 16-bit
  WeightRef ref() const { return dtype == WDtype::F32 ? WeightRef(dst) : WeightRef(hdst, dtype); }
};
}  // namespace

void Model::load(const std::string& dir, const ModelConfig& config, WeightMode mode) {
  validate_config(config);
  cfg = config;
  const ModelConfig& c = cfg;
  const int64_t C = c.hidden, V = c.vocab, D = c.head_dim, L = c.layers;
  // Layout of the flat weight buffer, in HF tensor order.
  std::vector<Expected> ex;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool matrix = false) {
    ex.push_back({name, shape, matrix});
  };
  add("model.embed_tokens.weight", {V, C}, true);
  for (int l = 0; l < L; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C});
    for (int m = 0; m < NUM_MODULES; ++m) {
      int in, out;
      module_dims(c, m, &in, &out);
      std::string base = p + module_parent(m) + "." + module_name(m);
      add(base + ".weight", {out, in}, true);
      if (((m == Q || m == K || m == Module::V) && c.qkv_bias) || (m == O && c.o_bias)) add(base + ".bias", {out});
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {D});
      add(p + "self_attn.k_norm.weight", {D});
    }
    add(p + "post_attention_layernorm.weight", {C});
  }
  add("model.norm.weight", {C});
  if (!c.tie) add("lm_head.weight", {V, C}, true);
  std::map<std::string, Expected*> by_name;
  for (auto& e : ex) by_name[e.name] = &e;
  // Which file holds which tensor: the index for sharded checkpoints, else model.safetensors.
  std::map<std::string, std::string> where;  // tensor -> file name
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (file_exists(index)) {
    Json j = json_parse(read_text(index), index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) FAIL(index + ": missing 'weight_map'");
    std::set<std::string> fs;
    for (auto& kv : j["weight_map"].items()) {
      if (!kv.value().is_string()) FAIL(index + ": weight_map entry '" + kv.key() + "' is not a file name");
      where[kv.key()] = kv.value().get<std::string>();
      fs.insert(kv.value().get<std::string>());
    }
    files.assign(fs.begin(), fs.end());
  } else if (file_exists(dir + "/model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    FAIL(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  // Tensors a checkpoint may carry that the model does not need.
  auto ignorable = [&](const std::string& n) {
    return (n.size() > 20 && n.compare(n.size() - 20, 20, "rotary_emb.inv_freq") == 0) || (c.tie && n == "lm_head.weight");
  };
  // Open every file first: the dtypes they store decide which matrices stay 16-bit, hence the layout.
  std::vector<std::unique_ptr<StFile>> opened;
  std::map<std::string, std::string> stored;  // tensor -> dtype in its file
  for (const std::string& fname : files) {
    opened.push_back(std::make_unique<StFile>(dir + "/" + fname));
    for (auto& kv : opened.back()->tensors()) stored.emplace(kv.first, kv.second.dtype);
  }
  size_t total = 0, total16 = 0;
  w.elems_bf16 = w.elems_f16 = 0;
  for (auto& e : ex) {
    auto st = stored.find(e.name);
    const std::string dt = st == stored.end() ? "" : st->second;
    if (e.matrix && mode == WeightMode::BF16 && (dt == "F32" || dt == "F16" || dt == "BF16")) e.dtype = WDtype::BF16;
    else if (e.matrix && mode == WeightMode::Auto && dt == "BF16") e.dtype = WDtype::BF16;
    else if (e.matrix && mode == WeightMode::Auto && dt == "F16") e.dtype = WDtype::F16;
    (e.dtype == WDtype::F32 ? total : total16) += (size_t)numel(e.shape);
    if (e.dtype == WDtype::BF16) w.elems_bf16 += (size_t)numel(e.shape);
    if (e.dtype == WDtype::F16) w.elems_f16 += (size_t)numel(e.shape);
  }
  w.memory.allocate(total);
  w.half.allocate(total16);
  {
    float* p = w.memory.data;
    uint16_t* h = w.half.data;
    for (auto& e : ex) {
      if (e.dtype == WDtype::F32) { e.dst = p; p += numel(e.shape); }
      else { e.hdst = h; h += numel(e.shape); }
    }
  }
  // Named views.
  w.wte = by_name["model.embed_tokens.weight"]->ref();
  w.norm = by_name["model.norm.weight"]->dst;
  w.lm_head = c.tie ? w.wte : by_name["lm_head.weight"]->ref();
  w.layers.assign(L, LayerWeights{});
  for (int l = 0; l < L; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& lw = w.layers[l];
    lw.ln1 = by_name[p + "input_layernorm.weight"]->dst;
    lw.ln2 = by_name[p + "post_attention_layernorm.weight"]->dst;
    for (int m = 0; m < NUM_MODULES; ++m) {
      std::string base = p + module_parent(m) + "." + module_name(m);
      lw.w[m] = by_name[base + ".weight"]->ref();
      auto it = by_name.find(base + ".bias");
      lw.b[m] = it == by_name.end() ? nullptr : it->second->dst;
    }
    lw.q_norm = c.qk_norm ? by_name[p + "self_attn.q_norm.weight"]->dst : nullptr;
    lw.k_norm = c.qk_norm ? by_name[p + "self_attn.k_norm.weight"]->dst : nullptr;
  }
  std::set<std::string> seen;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::string& fname = files[fi];
    const StFile& f = *opened[fi];
    for (auto& kv : f.tensors()) {
      const std::string& n = kv.first;
      auto it = by_name.find(n);
      if (it == by_name.end()) {
        if (ignorable(n)) continue;
        FAIL(f.path() + ": unexpected tensor '" + n + "' for a " + c.model_type + " model with this config");
      }
      if (!where.empty()) {
        auto wi = where.find(n);
        if (wi == where.end() || wi->second != fname)
          FAIL(f.path() + ": tensor '" + n + "' is not listed for this file in model.safetensors.index.json");
      }
      if (seen.count(n)) FAIL(f.path() + ": tensor '" + n + "' appears in more than one file");
      const Expected& e = *it->second;
      if (kv.second.shape != e.shape)
        FAIL(f.path() + ": tensor '" + n + "' has shape " + shape_str(kv.second.shape) + ", expected " + shape_str(e.shape));
      // In slices of 32 MiB of file, each slice's pages dropped once copied: the load's peak memory is the weights
      // plus one slice, not plus the largest tensor (the embedding).
      const StTensor& t = kv.second;
      const int64_t total_n = numel(e.shape);
      const int64_t esize = t.dtype == "F32" ? 4 : (t.dtype == "BF16" || t.dtype == "F16") ? 2 : 0;
      const int64_t slice = esize ? ((int64_t)32 << 20) / esize : total_n;
      for (int64_t i0 = 0; i0 < total_n || i0 == 0; i0 += slice) {
        const int64_t m = std::min(slice, total_n - i0);
        StTensor part = t;
        if (esize) {
          part.shape = {m};
          part.begin = t.begin + (size_t)(i0 * esize);
          part.end = part.begin + (size_t)(m * esize);
        }
        if (e.dtype == WDtype::F32) f.read_f32(part, e.dst + i0);
        else f.read_16(part, e.hdst + i0, e.dtype == WDtype::BF16);
        f.release(part);
        if (!esize || m <= 0) break;
      }
      if (e.dtype == WDtype::F32) check_finite(f.path(), n, e.dst, total_n);
      else check_finite16(f.path(), n, e.hdst, total_n, e.dtype);
      seen.insert(n);
    }
  }
  for (auto& e : ex)
    if (!seen.count(e.name)) {
      auto wi = where.find(e.name);
      FAIL(dir + "/" + (wi != where.end() ? wi->second : files.empty() ? std::string("model.safetensors") : files[0]) +
           ": missing tensor '" + e.name + "'");
    }
  for (auto& kv : where)
    if (!seen.count(kv.first) && !ignorable(kv.first) && by_name.count(kv.first))
      FAIL(dir + "/" + kv.second + ": missing tensor '" + kv.first + "' listed in model.safetensors.index.json");
  inv_freq.assign(c.head_dim / 2, 0.0f);
  rope_inv_freq(inv_freq.data(), c.head_dim, c.rope_theta, c.rope);
}

uint64_t new_weights_version() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

void lora_allocate(LoraAdapter& a, const ModelConfig& c, int r, float alpha, bool rslora, const bool* targets) {
  CHECK(r > 0, "LoRA rank must be positive");
  a.version = new_weights_version();
  a.r = r;
  a.alpha = alpha;
  a.rslora = rslora;
  a.scale = rslora ? alpha / std::sqrt((float)r) : alpha / (float)r;
  size_t total = 0;
  for (int l = 0; l < c.layers; ++l)
    for (int m = 0; m < NUM_MODULES; ++m)
      if (targets[m]) {
        int in, out;
        module_dims(c, m, &in, &out);
        total += (size_t)r * in + (size_t)out * r;
      }
  for (int m = 0; m < NUM_MODULES; ++m) a.targets[m] = targets[m];
  a.memory.allocate(total);
  a.tensors.clear();
  a.views.assign(c.layers, std::vector<LoraView>(NUM_MODULES));
  float* p = a.memory.data;
  for (int l = 0; l < c.layers; ++l)
    for (int m = 0; m < NUM_MODULES; ++m) {
      if (!targets[m]) continue;
      int in, out;
      module_dims(c, m, &in, &out);
      std::string key = "base_model.model.model.layers." + std::to_string(l) + "." + module_parent(m) + "." + module_name(m);
      a.tensors.push_back({key + ".lora_A.weight", p, r, in});
      LoraView& v = a.views[l][m];
      v.A = p; p += (size_t)r * in;
      a.tensors.push_back({key + ".lora_B.weight", p, out, r});
      v.B = p; p += (size_t)out * r;
      v.r = r;
      v.scale = a.scale;
    }
}

void lora_load(LoraAdapter& a, const ModelConfig& c, const std::string& dir, int r, float alpha, bool rslora,
               const bool* targets) {
  lora_allocate(a, c, r, alpha, rslora, targets);
  StFile f(dir + "/adapter_model.safetensors");
  std::set<std::string> seen;
  std::map<std::string, const LoraTensor*> by_key;
  for (auto& t : a.tensors) by_key[t.key] = &t;
  for (auto& kv : f.tensors()) {
    auto it = by_key.find(kv.first);
    if (it == by_key.end())
      FAIL(f.path() + ": unexpected tensor '" + kv.first + "' (not a lora_A/lora_B of a targeted module of this model)");
    const LoraTensor& t = *it->second;
    std::vector<int64_t> want = {t.rows, t.cols};
    if (kv.second.shape != want)
      FAIL(f.path() + ": tensor '" + kv.first + "' has shape " + shape_str(kv.second.shape) + ", expected " + shape_str(want));
    f.read_f32(kv.second, t.data);
    check_finite(f.path(), kv.first, t.data, (int64_t)t.rows * t.cols);
    seen.insert(kv.first);
  }
  for (auto& t : a.tensors)
    if (!seen.count(t.key)) FAIL(f.path() + ": missing tensor '" + t.key + "'");
}

void lora_fold(LoraAdapter& a, const ModelConfig& c, const ModelWeights& w) {
  a.folded.resize(c.layers);
  for (int l = 0; l < c.layers; ++l) {
    a.folded[l].resize(NUM_MODULES);
    for (int m = 0; m < NUM_MODULES; ++m) {
      if (!a.targets[m]) continue;
      int in, out;
      module_dims(c, m, &in, &out);
      std::vector<float>& f = a.folded[l][m];
      f.resize((size_t)out * in);
      const WeightRef W = w.layers[l].w[m];
#pragma omp parallel for schedule(static)
      for (int o = 0; o < out; ++o) widen(f.data() + (size_t)o * in, W, (size_t)o * in, in);
      const LoraView& v = a.views[l][m];
      gemm(false, false, out, in, v.r, v.scale, v.B, v.r, v.A, in, 1.0f, f.data(), in);  // += scale · B A
    }
  }
  a.fold_version = a.version;
}

WeightRef proj_weight(const ModelWeights& w, const LoraAdapter* fold, int l, int m) {
  if (fold && fold->targets[m]) return WeightRef(fold->folded[l][m].data());
  return w.layers[l].w[m];
}

const LoraAdapter* segments_fold(const std::vector<Segment>& segs) {
  if (segs.empty()) return nullptr;
  const LoraAdapter* a = segs[0].adapter;
  if (!a || a->folded.empty() || a->fold_version != a->version) return nullptr;
  for (auto& s : segs)  // and never a forward that fills a KV cache: cached keys must not depend on a fold
    if (s.adapter != a || s.slot) return nullptr;
  return a;
}

}  // namespace mcprl
