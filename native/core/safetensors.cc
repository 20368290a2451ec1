#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common.h"
#include "json.h"
#include "weight.h"

namespace mcprl {

static constexpr uint64_t kMaxHeader = 100ull * 1024 * 1024;  // 100 MiB, as the safetensors format caps it

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, u;
  if (exp == 0) {
    if (mant == 0) u = sign;
    else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FF) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7F800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static int dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

StFile::StFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) FAIL(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd_, &st) != 0) FAIL(path + ": cannot stat: " + std::strerror(errno));
  size_ = (size_t)st.st_size;
  if (size_ < 8) FAIL(path + ": truncated safetensors file (" + std::to_string(size_) + " bytes, no header length)");
  void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) FAIL(path + ": mmap failed: " + std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= (uint64_t)map_[i] << (8 * i);  // little-endian u64
  if (n > kMaxHeader)
    FAIL(path + ": safetensors header of " + std::to_string(n) + " bytes exceeds the 100 MiB limit");
  if (8 + n > size_)
    FAIL(path + ": truncated safetensors file: header claims " + std::to_string(n) + " bytes but the file has " +
         std::to_string(size_) + " bytes");
  data_off_ = 8 + (size_t)n;
  const size_t data_size = size_ - data_off_;
  // Duplicate tensor names are an error of json_parse (a key twice in one object).
  Json h = json_parse(std::string((const char*)map_ + 8, (size_t)n), path + " header");
  if (!h.is_object()) FAIL(path + ": safetensors header is not a JSON object");
  // Non-negative integers that fit in 2^53 (JSON numbers as every writer produces them); nlohmann keeps
  // non-negative integers as unsigned.
  auto count = [](const Json& v) { return v.is_number_unsigned() && v.get<uint64_t>() <= (1ull << 53); };
  std::vector<const StTensor*> order;
  for (auto& kv : h.items()) {
    if (kv.key() == "__metadata__") continue;
    const std::string& name = kv.key();
    const Json& e = kv.value();
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      FAIL(path + ": tensor '" + name + "' has a malformed header entry (needs dtype, shape, data_offsets)");
    const Json& off = e["data_offsets"];
    StTensor t;
    t.name = name;
    t.dtype = e["dtype"].get<std::string>();
    for (auto& d : e["shape"]) {
      if (!count(d)) FAIL(path + ": tensor '" + name + "' has a bad shape");
      t.shape.push_back((int64_t)d.get<uint64_t>());
    }
    if (!count(off[0]) || !count(off[1]) || off[1].get<uint64_t>() < off[0].get<uint64_t>())
      FAIL(path + ": tensor '" + name + "' has bad data_offsets");
    t.begin = (size_t)off[0].get<uint64_t>();
    t.end = (size_t)off[1].get<uint64_t>();
    if (t.end > data_size)
      FAIL(path + ": tensor '" + name + "' data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
           "] out of range: the data section holds " + std::to_string(data_size) + " bytes (truncated file?)");
    int es = dtype_size(t.dtype);
    if (es == 0) FAIL(path + ": tensor '" + name + "' has unknown dtype " + t.dtype);
    // Element count with overflow detection: a huge shape must not wrap around to the byte length.
    uint64_t elems = 1;
    bool overflow = false;
    for (int64_t d : t.shape) overflow = overflow || __builtin_mul_overflow(elems, (uint64_t)d, &elems);
    if (overflow || __builtin_mul_overflow(elems, (uint64_t)es, &elems) || elems != t.end - t.begin)
      FAIL(path + ": tensor '" + name + "' byte length " + std::to_string(t.end - t.begin) + " does not match " +
           t.dtype + " shape " + shape_str(t.shape));
    auto ins = tensors_.emplace(name, std::move(t));
    if (!ins.second) FAIL(path + ": tensor '" + name + "' appears twice in the header");
    order.push_back(&ins.first->second);
  }
  std::sort(order.begin(), order.end(), [](const StTensor* a, const StTensor* b) { return a->begin < b->begin; });
  // Sorted by start, a tensor overlaps an earlier one iff it starts before the furthest end seen so far.
  const StTensor* reach = nullptr;
  for (const StTensor* t : order) {
    if (t->end == t->begin) continue;  // empty tensors occupy no bytes
    if (reach && t->begin < reach->end)
      FAIL(path + ": tensors '" + reach->name + "' and '" + t->name + "' have overlapping data_offsets");
    if (!reach || t->end > reach->end) reach = t;
  }
}

StFile::~StFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void StFile::read_f32(const StTensor& t, float* dst) const {
  const uint8_t* src = map_ + data_off_ + t.begin;
  const long n = (long)numel(t.shape);
  if (t.dtype == "F32") {
    std::memcpy(dst, src, (size_t)n * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    const bool bf = t.dtype == "BF16";
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long i = 0; i < n; ++i) {
      uint16_t h = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
      dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    FAIL(path_ + ": tensor '" + t.name + "' has unsupported dtype " + t.dtype + " (supported: F32, F16, BF16)");
  }
}

void StFile::read_16(const StTensor& t, uint16_t* dst, bool bf16) const {
  const uint8_t* src = map_ + data_off_ + t.begin;
  const long n = (long)numel(t.shape);
  if (t.dtype == (bf16 ? "BF16" : "F16")) {
    std::memcpy(dst, src, (size_t)n * 2);
  } else if (bf16 && (t.dtype == "F32" || t.dtype == "F16")) {
    const bool f32 = t.dtype == "F32";
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long i = 0; i < n; ++i) {
      float x;
      if (f32) {
        std::memcpy(&x, src + 4 * i, 4);
      } else {
        x = f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
      }
      dst[i] = f32_to_bf16(x);
    }
  } else if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") {
    FAIL(path_ + ": tensor '" + t.name + "' (" + t.dtype + ") cannot be kept as " + (bf16 ? "bf16" : "f16"));
  } else {
    FAIL(path_ + ": tensor '" + t.name + "' has unsupported dtype " + t.dtype + " (supported: F32, F16, BF16)");
  }
}

void StFile::release(const StTensor& t) const {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t b = (data_off_ + t.begin + page - 1) / page * page, e = (data_off_ + t.end) / page * page;
  if (e > b) madvise(const_cast<uint8_t*>(map_) + b, e - b, MADV_DONTNEED);
}

}  // namespace mcprl
