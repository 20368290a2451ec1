// Moving a loaded model and its adapters into a backend's memory (a GPU's): one copy of each flat allocation,
// then every named view re-pointed at the same offset in the copy. Loading and validation stay on the host
// (load.cc); only the finished buffers travel.
#include "model.h"

namespace mcprl {

// p's place in the old allocation, at the same offset in the new one (null stays null).
template <typename T>
static T* rebase(T* p, const T* old_base, size_t n, T* new_base) {
  if (!p) return p;
  CHECK(p >= old_base && p < old_base + n, "a view points outside the buffer being moved");
  return new_base + (p - old_base);
}

template <typename T>
static AlignedBuffer<T> copy_to(const Backend& b, const AlignedBuffer<T>& src) {
  AlignedBuffer<T> dst;
  dst.allocate(src.size, b.memory);
  if (src.size) b.upload(dst.data, src.data, sizeof(T) * src.size);
  return dst;
}

void Model::to_backend(const Backend& b) {
  CHECK(b.memory, std::string("to_backend: backend ") + b.name + " keeps its tensors in host memory already");
  CHECK(!be->memory, "to_backend: the model has already moved to backend " + std::string(be->name));
  FloatBuffer f = copy_to(b, w.memory);
  HalfBuffer h = copy_to(b, w.half);
  auto f32 = [&](const float* p) { return rebase<const float>(p, w.memory.data, w.memory.size, f.data); };
  auto ref = [&](WeightRef r) {
    if (!r.data) return r;
    if (r.is_f32()) return WeightRef(f32(r.f32()));
    return WeightRef(rebase<const uint16_t>(r.u16(), w.half.data, w.half.size, h.data), r.dtype);
  };
  const bool tied = w.lm_head.data == w.wte.data;
  w.wte = ref(w.wte);
  w.lm_head = tied ? w.wte : ref(w.lm_head);
  w.norm = const_cast<float*>(f32(w.norm));
  for (LayerWeights& lw : w.layers) {
    lw.ln1 = const_cast<float*>(f32(lw.ln1));
    lw.ln2 = const_cast<float*>(f32(lw.ln2));
    lw.q_norm = const_cast<float*>(f32(lw.q_norm));
    lw.k_norm = const_cast<float*>(f32(lw.k_norm));
    for (int m = 0; m < NUM_MODULES; ++m) {
      lw.w[m] = ref(lw.w[m]);
      lw.b[m] = const_cast<float*>(f32(lw.b[m]));
    }
  }
  w.memory = std::move(f);
  w.half = std::move(h);
  inv_freq_b.allocate(inv_freq.size(), b.memory);
  b.upload(inv_freq_b.data, inv_freq.data(), sizeof(float) * inv_freq.size());
  be = &b;
}

void lora_to_backend(LoraAdapter& a, const Backend& b) {
  CHECK(b.memory && !a.memory.where, "lora_to_backend: the adapter must be in host memory and b elsewhere");
  FloatBuffer f = copy_to(b, a.memory);
  for (LoraTensor& t : a.tensors) t.data = rebase(t.data, a.memory.data, a.memory.size, f.data);
  for (auto& layer : a.views)
    for (LoraView& v : layer) {
      v.A = rebase<const float>(v.A, a.memory.data, a.memory.size, f.data);
      v.B = rebase<const float>(v.B, a.memory.data, a.memory.size, f.data);
    }
  a.memory = std::move(f);
  a.version = new_weights_version();
}

}  // namespace mcprl
