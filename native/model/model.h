// The transformer (Qwen3 / Qwen2 / Llama) as three kinds of state, after llm.c:
//   ModelConfig  - the blueprint (config.json)
//   ModelWeights - frozen base weights, ONE flat f32 allocation (plus one 16-bit one for matrices kept as bf16/f16)
//                  with named views per layer
//   LoraAdapter  - one adapter's A/B matrices, ONE flat f32 allocation per adapter with named views
//   RunState     - activations of one forward (optionally every layer's, for backward), ONE flat allocation
//   KVSlot       - one sequence's KV cache for generation
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../backend/backend.h"
#include "../core/common.h"

namespace mcprl {

// The blueprint, read from config.json in TypeScript (src/hf/config.ts resolves every default) and handed over
// by the N-API boundary with every field present: native code has no defaults of its own.
struct ModelConfig {
  std::string model_type;  // for messages only: the flags below decide the architecture
  int vocab, hidden, layers, heads, kv_heads, head_dim, inter, max_pos;
  float eps, rope_theta;   // rms_norm_eps, rope_theta
  RopeScaling rope;
  bool tie, qkv_bias, o_bias, qk_norm;
};

// Fails (naming the problem) when the sizes are inconsistent or out of what the ops support. Which architectures
// mcprl runs is decided once, where config.json is read (src/hf/config.ts, SUPPORTED_MODEL_TYPES): the engine runs
// whatever the flags describe and never branches on model_type.
void validate_config(const ModelConfig& c);

// Projection modules that can carry LoRA, in PEFT's names.
enum Module { Q = 0, K, V, O, GATE, UP, DOWN, NUM_MODULES };
const char* module_name(int m);          // "q_proj", ...
int module_index(const std::string& name);  // inverse of module_name; -1 for an unknown name
const char* module_parent(int m);        // "self_attn" or "mlp"
void module_dims(const ModelConfig& c, int m, int* in, int* out);

struct LayerWeights {
  float* ln1;            // (C) input_layernorm
  WeightRef w[NUM_MODULES]; // q (H*D, C), k (Hkv*D, C), v (Hkv*D, C), o (C, H*D), gate (I, C), up (I, C), down (C, I)
  float* b[NUM_MODULES]; // biases (out) or null: q/k/v for qwen2 or attention_bias, o for attention_bias
  float* q_norm;         // (D) qwen3 only
  float* k_norm;         // (D) qwen3 only
  float* ln2;            // (C) post_attention_layernorm
};

// How the load keeps the big matrices (projections, embedding, untied head): Auto as the checkpoint stores each
// (BF16 and F16 stay 16-bit, F32 stays f32), F32 widens every one (the oracle), BF16 keeps every one as bf16
// (rounding F32/F16 tensors to nearest even). Norm weights and biases are always f32.
enum class WeightMode { Auto, F32, BF16 };

struct ModelWeights {
  FloatBuffer memory;  // every f32 tensor lives here
  HalfBuffer half;     // every matrix kept as 16 bits lives here
  size_t elems_bf16 = 0, elems_f16 = 0;  // of half, by dtype
  WeightRef wte;       // (V, C)
  WeightRef lm_head;   // (V, C); == wte when tied
  float* norm = nullptr;     // (C)
  std::vector<LayerWeights> layers;
};

struct LoraTensor {
  std::string key;     // PEFT key, e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
  float* data;         // view into LoraAdapter::memory
  int rows, cols;      // A: (r, in); B: (out, r)
};

struct LoraAdapter {
  std::string name;
  int r = 0;
  float alpha = 0.0f, scale = 0.0f;  // scale = alpha / r, or alpha / sqrt(r) with rslora
  bool rslora = false;
  bool targets[NUM_MODULES] = {};
  FloatBuffer memory;                // every A and B, contiguous (optimizer steps are one loop)
  std::vector<LoraTensor> tensors;   // named views, PEFT key order: layer, module, A then B
  // views[layer][module] (A, B null when the module is not targeted)
  std::vector<std::vector<LoraView>> views;
  // Which weights `memory` holds: a number never used before, taken anew by everything that writes memory
  // (allocate/load, the trainer's writes and optimizer steps), so the prefix cache (prefix_cache.h) never
  // reuses KV computed with other weights under the same name.
  uint64_t version = 0;
  // W + scale · B A in f32 for each targeted projection, [layer][module] (empty when not targeted): the
  // Trainer's foldLora (lora_fold, CPU). A forward whose segments all use this adapter then reads one matrix
  // per projection instead of W and the B A pair. Current only while fold_version == version: the next
  // optimizer step or write leaves it stale, and forwards fall back to the LoRA products.
  std::vector<std::vector<std::vector<float>>> folded;
  uint64_t fold_version = 0;
};

// A weights version no adapter has had (process-wide, thread-safe; never 0, the base model's).
uint64_t new_weights_version();

// Allocates an adapter's flat buffer and views for `targets` (zero-filled). Used by loading and by
// training to create a new adapter.
void lora_allocate(LoraAdapter& a, const ModelConfig& c, int r, float alpha, bool rslora, const bool* targets);
// Loads adapter_model.safetensors of a PEFT folder, validating names and shapes against the adapter that
// adapter_config.json describes (read in TypeScript: rank r, alpha, rslora, targets[NUM_MODULES]).
void lora_load(LoraAdapter& a, const ModelConfig& c, const std::string& dir, int r, float alpha, bool rslora,
               const bool* targets);

// Folds the adapter's current weights into `folded` (see LoraAdapter) over the base weights w (host memory).
void lora_fold(LoraAdapter& a, const ModelConfig& c, const ModelWeights& w);
// Projection m of layer l as a forward or backward reads it: `fold`'s folded matrix when fold targets m,
// else the base weight.
WeightRef proj_weight(const ModelWeights& w, const LoraAdapter* fold, int l, int m);

// Moves an adapter's A and B into backend b's memory (its views follow); a new weights version.
void lora_to_backend(LoraAdapter& a, const Backend& b);

struct LayerActs {
  float* x;       // (T, C) residual stream entering the layer
  float* xn1;     // (T, C) input_layernorm(x)
  float* rstd1;   // (T)
  float* q_pre;   // (T, H*D) q_proj output (q_norm input for qwen3)
  float* q;       // (T, H*D) after q_norm and RoPE
  float* q_rstd;  // (T*H) q_norm rstd
  float* k_pre;   // (T, Hkv*D)
  float* k;       // (T, Hkv*D) after k_norm and RoPE
  float* k_rstd;  // (T*Hkv)
  float* v;       // (T, Hkv*D)
  float* att;     // (T, H*D) attention output (o_proj input)
  float* lse;     // (T, H) attention log-sum-exp
  float* x2;      // (T, C) residual after attention
  float* xn2;     // (T, C) post_attention_layernorm(x2)
  float* rstd2;   // (T)
  float* gate;    // (T, I)
  float* up;      // (T, I)
  float* act;     // (T, I) silu(gate) * up (down_proj input)
  float* xa[NUM_MODULES];  // (T, r_cap) LoRA x A^T per module (rows of a run of one adapter are a contiguous (n, r) block at row0 * r_cap)
};

struct RunState {
  int T_cap = 0, r_cap = 0;
  bool save_all = false;  // every layer keeps its own LayerActs (for backward); else all layers share one
  FloatBuffer memory;
  std::vector<LayerActs> layers;  // size L (aliases of layer 0 when !save_all)
  float* xf = nullptr;      // (T, C) residual after the last layer
  float* hf = nullptr;      // (T, C) final norm output (LM head input)
  float* rstdf = nullptr;   // (T)
  float* tmp = nullptr;     // (T, C) o_proj / down_proj output before the residual add
  std::vector<int32_t> pos;       // (T) position ids
  std::vector<int32_t> tokens;    // (T) input ids of the last forward
  const int32_t* pos_ops = nullptr;  // (T) pos where the backend's ops read it (pos itself on the CPU)
  IntBuffer stage_pos, stage_tokens; // their copies in the backend's memory when it is not the host's
  // The last row of each cache segment (its slot's last_h); elsewhere than the host, gathered there and
  // brought back in one copy.
  std::vector<int32_t> last_rows;
  IntBuffer stage_last_rows;
  FloatBuffer stage_last;
  std::vector<float> host_last;
};

struct KVSlot {
  int cap = 0, len = 0;
  FloatBuffer k, v;        // (L, cap, Hkv, D) keys after k_norm+RoPE, values
  std::vector<float> last_h;  // (C) final-normed hidden of the last token (next-token logits come from it)
  uint64_t rng = 0;        // sampling RNG state (splitmix64)
  bool has_h = false;
};

// One contiguous run of rows in a forward call.
struct Segment {
  int n = 0;                       // rows (tokens)
  KVSlot* slot = nullptr;          // null: a packed sequence starting at position 0; else appended to the cache
  const LoraAdapter* adapter = nullptr;  // null: base model
};

// The adapter whose folded weights a forward over segs reads: the one adapter of every segment, when its fold
// is current and no segment appends to a KV cache (the prefix cache reuses keys by weights version, so they must
// not depend on whether a fold was current); else null (the LoRA products run as usual).
const LoraAdapter* segments_fold(const std::vector<Segment>& segs);

class Model {
 public:
  ModelConfig cfg{};
  ModelWeights w;
  std::vector<float> inv_freq;  // (D/2)
  FloatBuffer inv_freq_b;       // (D/2) inv_freq in the backend's memory when it is not the host's
  const Backend* be = &cpu_backend();

  const float* inv_freq_ops() const { return be->memory ? inv_freq_b.data : inv_freq.data(); }
  // Moves the loaded weights into backend b's memory and runs every later op there (native/model/device.cc).
  // Run states, caches and adapters used with the model afterwards must live there too (lora_to_backend).
  void to_backend(const Backend& b);

  // Reads the safetensors weights of an HF folder for the architecture `config`.
  void load(const std::string& dir, const ModelConfig& config, WeightMode mode);
  // Forward over the segments' tokens (concatenated in `tokens`, T rows). Leaves rs.hf (T, C) = final
  // normed hidden. Cache segments append their keys/values to their slot and set slot->last_h.
  // save_all keeps every layer's activations in rs for a backward pass. layer_inputs (L, T, C), when not
  // null, receives each layer's input (training's recompute mode keeps only these and rebuilds a layer's
  // activations with layer_forward just before its backward).
  void forward(const int32_t* tokens, int T, const std::vector<Segment>& segs, RunState& rs, bool save_all,
               float* layer_inputs);
  // One decoder layer over the segments' rows (rs.pos already set): reads a.x, writes every activation of a
  // and the layer's output into x_next (which may alias a.x or rs.tmp). Cache segments write this layer's
  // keys/values into their slot from slot->len on; forward advances len after the last layer.
  void layer_forward(int l, const std::vector<Segment>& segs, LayerActs& a, RunState& rs, float* x_next) const;
  // Makes sure rs can hold T rows with adapters up to rank r.
  void reserve(RunState& rs, int T, int r, bool save_all);
  // Creates an empty cache slot holding up to cap tokens.
  void slot_init(KVSlot& s, int cap) const;
  // Copies src's first len rows (and last_h) into dst (dst->cap >= src.len).
  void slot_copy(KVSlot& dst, const KVSlot& src) const;
};

}  // namespace mcprl
