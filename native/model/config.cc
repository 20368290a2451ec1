// The blueprint's helpers: projection modules (names, shapes) and the consistency check of a ModelConfig.
#include "model.h"

namespace mcprl {

const char* module_name(int m) {
  static const char* n[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return n[m];
}

int module_index(const std::string& name) {
  for (int m = 0; m < NUM_MODULES; ++m)
    if (name == module_name(m)) return m;
  return -1;
}

const char* module_parent(int m) { return m <= O ? "self_attn" : "mlp"; }

void module_dims(const ModelConfig& c, int m, int* in, int* out) {
  const int C = c.hidden, HD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim, I = c.inter;
  switch (m) {
    case Q: *in = C; *out = HD; break;
    case K: case V: *in = C; *out = KD; break;
    case O: *in = HD; *out = C; break;
    case GATE: case UP: *in = C; *out = I; break;
    default: *in = I; *out = C; break;
  }
}

void validate_config(const ModelConfig& c) {
  if (c.model_type.empty()) FAIL("model config: model_type is empty");
  if (c.vocab <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.inter <= 0 ||
      c.max_pos <= 0 || c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 1024 || c.heads % c.kv_heads != 0)
    FAIL("model config: inconsistent sizes (heads must be a multiple of kv heads, head_dim even and <= 1024)");
  if (!(c.eps > 0.0f) || !(c.rope_theta > 0.0f)) FAIL("model config: rmsNormEps and ropeTheta must be positive");
  if (c.rope.type < 0 || c.rope.type > 2 || (c.rope.type != 0 && !(c.rope.factor > 0.0f)))
    FAIL("model config: bad rope scaling");
  if (c.rope.type == 2 && !(c.rope.high_freq_factor != c.rope.low_freq_factor && c.rope.original_max_position > 0))
    FAIL("model config: bad llama3 rope scaling (high and low frequency factors must differ)");
}

}  // namespace mcprl
