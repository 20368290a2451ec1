// Automatic prefix caching (after vLLM's): the KV of prompts prefilled earlier, kept in blocks of kPrefillChunk
// tokens, so that a prompt that starts like an earlier one (a GRPO group's rollouts share their first prompt; a
// rollout's next turn starts with its last prompt) prefills only the rest.
//
// Determinism: prefill runs every product in the GEMM's blocked mode (gemm.h: the packed kernel, whose row results
// depend on neither the row count of the product nor which rows share it), and every other op of the forward is
// per row or, for attention, per position, so a prompt's rows are the same bits whether they were computed in one
// forward, in several, or copied from blocks. The cache keeps a prompt's KV in blocks of kPrefillChunk rows at
// fixed absolute positions (0, B, 2B, ...): a full one (which later blocks can extend), or a prompt's last, partial
// one (reused only by a prompt that ends with exactly those tokens, which keeps the blocks aligned). Decoded tokens'
// KV (row-wise products, gemm.h) is never cached: a prefill of those tokens would round differently.
//
// Blocks are keyed by a hash chain over (adapter name, adapter weights version, parent block, the chunk's token
// ids); a hit is verified by comparing all of those, never by the hash alone. Memory is bounded by a byte budget
// (least recently used blocks go first; a block's ancestors are always more recent than it, so eviction takes
// leaves and never leaves an unreachable child).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/common.h"
#include "../model/model.h"

namespace mcprl {

// Tokens per block of the cache, at fixed absolute positions: a prompt loses at most 63 tokens of reuse.
constexpr int kPrefillChunk = 64;

// Rows per prefill forward at most (whole blocks, or up to the prompt's end): the packed GEMM packs each weight once
// per forward, so a prompt of up to 512 tokens packs it once. Bounds the forward's activations; the results do not
// depend on it (blocked mode, above).
constexpr int kPrefillRows = 8 * kPrefillChunk;

// Which weights computed a block: the adapter's name ("" for the base model) and its weights version
// (LoraAdapter::version; 0 for the base model).
using AdapterKey = std::pair<std::string, uint64_t>;

// Atomic so that they can be read without the engine's lock: `/metrics` never waits for a prefill.
struct PrefixCacheStats {
  std::atomic<uint64_t> prompts{0};          // prompts prefilled
  std::atomic<uint64_t> prompt_tokens{0};    // their tokens
  std::atomic<uint64_t> hit_tokens{0};       // tokens whose KV came from the cache
  std::atomic<uint64_t> hit_blocks{0};
  std::atomic<uint64_t> prefilled_tokens{0}; // tokens computed by a forward
  std::atomic<uint64_t> inserted_blocks{0};
  std::atomic<uint64_t> evicted_blocks{0};   // dropped for room or because their adapter changed
  std::atomic<uint64_t> blocks{0}, bytes{0}, capacity_bytes{0};  // now
};

class PrefixCache {
 public:
  // 0 turns the cache off (prefill still runs in aligned chunks: the same results). Shrinking evicts.
  void set_capacity(size_t bytes);
  size_t capacity() const { return capacity_; }
  // The room the KV budget leaves the cache now (EngineState: the budget less every KV slot's reservation); the
  // cache holds at most min(capacity, limit) bytes. Lowering it evicts now, so slots never wait for the cache.
  void set_limit(size_t bytes);
  size_t bytes() const { return bytes_; }
  // Drops every block whose adapter is no longer live with that weights version (unloaded, replaced, trained).
  template <class Live>
  void purge_stale(Live live) {
    for (auto it = keys_.begin(); it != keys_.end();) {
      auto cur = it++;
      if (!live(cur->first)) drop_key(cur->first);
    }
  }
  // The longest run of cached blocks that starts `tokens` (n of them): the ids of the blocks in order; their
  // tokens add up to the return value. Only a prompt's whole rest may match a partial block.
  int match(const AdapterKey& key, const int32_t* tokens, int n, std::vector<int>& out);
  // Keeps the chunk at rows [pos, pos + n) of `slot` (a full chunk, or the prompt's last one) under `parent`
  // (-1 for the first chunk) with last_h, the final-normed hidden of its last row (in the backend's memory, as the
  // block's keys and values are). Returns the block id, or -1
  // when it does not fit the budget.
  int insert(const Model& m, const AdapterKey& key, int parent, const int32_t* tokens, int n, const KVSlot& slot, int pos,
             const float* last_h);
  // Copies block b's KV into rows [pos, pos + n) of slot (and its last_h into the slot).
  void restore(const Model& m, int b, KVSlot& slot, int pos) const;
  int block_tokens(int b) const { return blocks_.at(b)->n; }
  void clear();
  PrefixCacheStats stats;

 private:
  struct Block {
    uint64_t hash;
    AdapterKey key;
    int parent, n, children = 0;
    std::vector<int32_t> tokens;  // (n)
    FloatBuffer kv;               // (2, L, n, Hkv*D): keys then values
    std::vector<float> last_h;    // (C)
    size_t bytes;
    std::list<int>::iterator lru;
  };
  // The id of the block with exactly these ids under parent and key, or -1; *hash gets their chain hash.
  int find(const AdapterKey& key, int parent, const int32_t* tokens, int n, uint64_t* hash) const;
  void touch(int b);   // most recent, then its ancestors (so they stay more recent than it)
  void erase(int b);
  void drop_key(const AdapterKey& key);
  bool make_room(size_t bytes);

  size_t room() const { return capacity_ < limit_ ? capacity_ : limit_; }

  size_t capacity_ = 0, bytes_ = 0, limit_ = SIZE_MAX;
  int next_id_ = 0;
  std::unordered_map<int, std::unique_ptr<Block>> blocks_;
  std::unordered_multimap<uint64_t, int> index_;  // hash -> block ids (verified on lookup)
  std::list<int> lru_;                            // least recently used first
  std::map<AdapterKey, int> keys_;                // blocks per adapter key
};

// Prefills `tokens` (n) into `slot` (empty, or holding earlier tokens: then nothing is cached): blocks of `cache`
// that match the start of the prompt are copied, the rest is computed in forwards of up to kPrefillRows rows in
// blocked mode and its blocks inserted. Leaves slot->len += n and slot->last_h, as Model::forward does.
void prefill_chunked(Model& m, RunState& rs, PrefixCache& cache, KVSlot& slot, const int32_t* tokens, int n,
                     const LoraAdapter* adapter);

}  // namespace mcprl
