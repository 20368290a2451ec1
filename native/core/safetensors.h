// Safetensors reader: mmap, header validation with errors that name the file and the tensor, and
// widening of F32/F16/BF16 tensors to f32.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mcprl {

struct StTensor {
  std::string name;
  std::string dtype;             // "F32", "F16", "BF16", ... as written in the header
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;     // byte offsets into the data section
};

class StFile {
 public:
  // Opens and validates: header length <= 100 MB, header inside the file, valid JSON, known dtypes'
  // byte lengths match their shapes, offsets inside the data section and not overlapping.
  explicit StFile(const std::string& path);
  ~StFile();
  StFile(const StFile&) = delete;
  StFile& operator=(const StFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  // Widens the tensor to f32 into dst (numel floats). Throws for dtypes other than F32/F16/BF16.
  void read_f32(const StTensor& t, float* dst) const;
  // Reads the tensor as 16-bit `bf16` (true) or f16 (false) elements into dst (numel): a copy when the file
  // stores that dtype, else through f32 (rounded to nearest even for bf16). Only BF16 -> bf16, F16 -> f16 and
  // F32/F16 -> bf16 are asked for. Throws for dtypes other than F32/F16/BF16.
  void read_16(const StTensor& t, uint16_t* dst, bool bf16) const;
  // Drops the file pages of the tensor's bytes from this process's memory (they were copied; the mapping
  // stays valid and would read them again), so a load's peak memory is the weights, not weights + file.
  void release(const StTensor& t) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  size_t data_off_ = 0;
  std::map<std::string, StTensor> tensors_;
};

int64_t numel(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);

}  // namespace mcprl
