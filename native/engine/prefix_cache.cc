// The prefix cache's blocks, LRU and hash chain, and chunked prefill (see prefix_cache.h for the why).
#include "prefix_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "../kernels/gemm.h"

namespace mcprl {

namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  // splitmix64's finaliser over h ^ x: a cheap well-spread 64-bit hash step.
  uint64_t z = h ^ (x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t block_hash(const AdapterKey& key, uint64_t parent_hash, const int32_t* tokens, int n) {
  uint64_t h = mix(parent_hash, key.second);
  for (char c : key.first) h = mix(h, (uint8_t)c);
  h = mix(h, (uint64_t)n);
  for (int i = 0; i < n; ++i) h = mix(h, (uint32_t)tokens[i]);
  return h;
}

constexpr uint64_t kRootHash = 0x6d63707266697821ULL;

}  // namespace

void PrefixCache::set_capacity(size_t bytes) {
  capacity_ = bytes;
  stats.capacity_bytes = bytes;
  make_room(0);
}

void PrefixCache::set_limit(size_t bytes) {
  limit_ = bytes;
  make_room(0);
}

void PrefixCache::clear() {
  blocks_.clear();
  index_.clear();
  lru_.clear();
  keys_.clear();
  bytes_ = 0;
  stats.blocks = 0;
  stats.bytes = 0;
}

int PrefixCache::find(const AdapterKey& key, int parent, const int32_t* tokens, int n, uint64_t* hash) const {
  const uint64_t ph = parent < 0 ? kRootHash : blocks_.at(parent)->hash;
  const uint64_t h = block_hash(key, ph, tokens, n);
  *hash = h;
  auto range = index_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    const Block& b = *blocks_.at(it->second);
    // The hash only finds candidates: a hit is the same weights, the same parent and the same ids.
    if (b.parent == parent && b.n == n && b.key == key && std::equal(tokens, tokens + n, b.tokens.begin())) return it->second;
  }
  return -1;
}

int PrefixCache::match(const AdapterKey& key, const int32_t* tokens, int n, std::vector<int>& out) {
  out.clear();
  if (capacity_ == 0 || blocks_.empty()) return 0;
  int pos = 0, parent = -1;
  while (pos < n) {
    const int len = std::min(kPrefillChunk, n - pos);
    uint64_t h;
    const int id = find(key, parent, tokens + pos, len, &h);
    if (id < 0) break;
    out.push_back(id);
    parent = id;
    pos += len;
  }
  if (!out.empty()) touch(out.back());
  return pos;
}

void PrefixCache::touch(int b) {
  for (int id = b; id >= 0;) {
    Block& blk = *blocks_.at(id);
    lru_.splice(lru_.end(), lru_, blk.lru);
    id = blk.parent;
  }
}

void PrefixCache::erase(int b) {
  auto it = blocks_.find(b);
  Block& blk = *it->second;
  if (blk.parent >= 0) {
    auto p = blocks_.find(blk.parent);
    if (p != blocks_.end()) p->second->children -= 1;
  }
  auto range = index_.equal_range(blk.hash);
  for (auto i = range.first; i != range.second; ++i)
    if (i->second == b) { index_.erase(i); break; }
  lru_.erase(blk.lru);
  if (--keys_[blk.key] == 0) keys_.erase(blk.key);
  bytes_ -= blk.bytes;
  blocks_.erase(it);
  stats.evicted_blocks += 1;
  stats.blocks = blocks_.size();
  stats.bytes = bytes_;
}

void PrefixCache::drop_key(const AdapterKey& key) {
  // Every block of a key: its whole chains, since a chain never changes adapter.
  std::vector<int> ids;
  for (auto& kv : blocks_)
    if (kv.second->key == key) ids.push_back(kv.first);
  for (int id : ids) erase(id);
}

bool PrefixCache::make_room(size_t want) {
  const size_t cap = room();
  if (want > cap) return false;
  while (bytes_ + want > cap && !lru_.empty()) {
    // The least recent leaf: touch() keeps ancestors more recent than descendants, so it is the front.
    auto it = lru_.begin();
    while (it != lru_.end() && blocks_.at(*it)->children > 0) ++it;
    if (it == lru_.end()) return false;
    erase(*it);
  }
  return bytes_ + want <= cap;
}

int PrefixCache::insert(const Model& m, const AdapterKey& key, int parent, const int32_t* tokens, int n,
                        const KVSlot& slot, int pos, const float* last_h) {
  if (room() == 0) return -1;
  uint64_t h;
  const int have = find(key, parent, tokens, n, &h);
  if (have >= 0) {
    // Already there (the same ids under the same parent and weights): the same bits, kept once.
    touch(have);
    return have;
  }
  const int L = m.cfg.layers, C = m.cfg.hidden;
  const size_t KD = (size_t)m.cfg.kv_heads * m.cfg.head_dim;
  const size_t floats = 2 * (size_t)L * n * KD + C;
  const size_t bytes = floats * sizeof(float) + (size_t)n * sizeof(int32_t) + sizeof(Block);
  // The parent must survive making room: touch it first (it is then among the most recent).
  if (parent >= 0) touch(parent);
  if (!make_room(bytes)) return -1;
  if (parent >= 0 && !blocks_.count(parent)) return -1;
  auto blk = std::make_unique<Block>();
  blk->hash = h;
  blk->key = key;
  blk->parent = parent;
  blk->n = n;
  blk->tokens.assign(tokens, tokens + n);
  // The block lives where the slots do (the backend's memory); every layer's keys and values in one copy_rows.
  blk->kv.allocate(2 * (size_t)L * n * KD, m.be->memory);
  std::vector<RowCopy> copies;
  copies.reserve(2 * L);
  for (int l = 0; l < L; ++l) {
    copies.push_back({blk->kv.data + (size_t)l * n * KD, slot.k.data + ((size_t)l * slot.cap + pos) * KD, n * KD});
    copies.push_back({blk->kv.data + ((size_t)(L + l) * n) * KD, slot.v.data + ((size_t)l * slot.cap + pos) * KD, n * KD});
  }
  m.be->copy_rows(copies.data(), (int)copies.size());
  blk->last_h.resize(C);  // kept on the host, as the slots' own last_h
  m.be->download(blk->last_h.data(), last_h, sizeof(float) * C);
  blk->bytes = bytes;
  // Ids are reused once they wrap (a server inserting for weeks): skip those still held.
  int id;
  do {
    id = next_id_;
    next_id_ = next_id_ == std::numeric_limits<int>::max() ? 0 : next_id_ + 1;
  } while (blocks_.count(id));
  blk->lru = lru_.insert(lru_.end(), id);
  if (parent >= 0) blocks_.at(parent)->children += 1;
  index_.emplace(h, id);
  keys_[key] += 1;
  bytes_ += bytes;
  blocks_[id] = std::move(blk);
  touch(id);
  stats.inserted_blocks += 1;
  stats.blocks = blocks_.size();
  stats.bytes = bytes_;
  return id;
}

void PrefixCache::restore(const Model& m, int b, KVSlot& slot, int pos) const {
  const Block& blk = *blocks_.at(b);
  const int L = m.cfg.layers, n = blk.n;
  const size_t KD = (size_t)m.cfg.kv_heads * m.cfg.head_dim;
  CHECK(pos + n <= slot.cap, "KV cache slot overflow");
  std::vector<RowCopy> copies;
  copies.reserve(2 * L);
  for (int l = 0; l < L; ++l) {
    copies.push_back({slot.k.data + ((size_t)l * slot.cap + pos) * KD, blk.kv.data + (size_t)l * n * KD, n * KD});
    copies.push_back({slot.v.data + ((size_t)l * slot.cap + pos) * KD, blk.kv.data + ((size_t)(L + l) * n) * KD, n * KD});
  }
  m.be->copy_rows(copies.data(), (int)copies.size());
  std::copy(blk.last_h.begin(), blk.last_h.end(), slot.last_h.begin());
  slot.has_h = true;
}

void prefill_chunked(Model& m, RunState& rs, PrefixCache& cache, KVSlot& slot, const int32_t* tokens, int n,
                     const LoraAdapter* adapter) {
  CHECK(n > 0, "empty prompt");
  CHECK(slot.len + n <= slot.cap, "KV cache slot overflow");
  const AdapterKey key = adapter ? AdapterKey{adapter->name, adapter->version} : AdapterKey{"", 0};
  cache.stats.prompts += 1;
  cache.stats.prompt_tokens += n;
  // The cache holds prompts from position 0 only: a slot that already holds tokens continues uncached.
  const bool cached = slot.len == 0;
  int done = 0, parent = -1;
  if (cached) {
    std::vector<int> hit;
    done = cache.match(key, tokens, n, hit);
    int pos = 0;
    for (int b : hit) {
      cache.restore(m, b, slot, pos);
      pos += cache.block_tokens(b);
    }
    slot.len = done;
    parent = hit.empty() ? -1 : hit.back();
    cache.stats.hit_blocks += hit.size();
    cache.stats.hit_tokens += done;
  }
  // Every product of the prefill in the packed kernel (gemm.h, blocked mode): a row's bits then depend on neither
  // the forward's row count nor where it starts, so forwards of up to kPrefillRows rows (each weight packed once
  // per forward, not once per block) give the same bits as a cached prefix plus the rest.
  BlockedGemm blocked;
  Segment seg;
  seg.slot = &slot;
  seg.adapter = adapter;
  const int C = m.cfg.hidden;
  while (done < n) {
    // A forward ends on a block boundary (a multiple of kPrefillChunk, absolute position) or at the prompt's end.
    const int start = slot.len;
    int len = n - done;
    if (len > kPrefillRows) len = kPrefillRows - (start + kPrefillRows) % kPrefillChunk;
    seg.n = len;
    m.forward(tokens + done, len, {seg}, rs, false, nullptr);
    cache.stats.prefilled_tokens += len;
    // Its blocks, each kept when its prefix is (the first block, or its parent still in the cache): a full block may
    // be extended by the next one, a partial one is the prompt's last (a leaf). rs.hf holds the forward's rows.
    for (int b0 = start; b0 < start + len; b0 += kPrefillChunk) {
      const int bn = std::min(kPrefillChunk, start + len - b0);
      if (cached && (b0 == 0 || parent >= 0))
        parent = cache.insert(m, key, parent, tokens + b0, bn, slot, b0, rs.hf + (size_t)(b0 + bn - 1 - start) * C);
      else
        parent = -1;
    }
    done += len;
  }
}

}  // namespace mcprl
