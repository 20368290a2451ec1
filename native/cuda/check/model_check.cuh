// The model check's shared parts (mcprl-cuda-model-check, model_main.cu): a Qwen3 config from its folder or by
// shape name, a GRPO micro-batch read or made up, an adapter read or filled, one policy gradient; and the modes, by
// file.
#pragma once
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

#include "../../core/json.h"
#include "../../model/model.h"
#include "../../train/optim.h"
#include "../../train/train.h"
#include "../cuda_common.cuh"
#include "../ops.h"

namespace model_check {

using namespace mcprl;
using std::string;
using std::vector;

// ---- model_common.cu
string read_text(const string& path);
void write_f32(const string& path, const float* p, size_t n);
// The ModelConfig of a Qwen3 config.json (the fields this check's folders carry; TypeScript's reader,
// src/hf/config.ts, is the engine's).
ModelConfig qwen3_config(const string& dir);
ModelConfig qwen3_shape(const string& name);

// ---- one GRPO micro-batch with an adapter: log-probabilities with and without it, and the LoRA gradient
MicroBatch read_batch(const string& path);

inline const LossParams kGrpo = {LOSS_GRPO, 0.2f, 0.28f, 0.0f, 0.0f};

struct GradResult {
  vector<float> logp, logp_base, grad;
  double seconds = 0;
};

GradResult policy_gradient(Model& m, LoraAdapter& a, const MicroBatch& mb);
void load_adapter(LoraAdapter& a, const ModelConfig& c, const string& dir);
void fill_adapter(LoraAdapter& a, uint64_t seed, float scale);
MicroBatch random_batch(const ModelConfig& c, const vector<int>& lens, uint64_t seed, float temperature);

// ---- the modes: model_compare.cu (parity, staged), model_bench.cu (bench)
int run_parity(const string& dir);
int run_staged(const string& dir);
int run_bench(const string& shape);

}  // namespace model_check
