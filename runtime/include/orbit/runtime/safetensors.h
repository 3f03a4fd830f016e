// Safetensors reader and writer (https://huggingface.co/docs/safetensors, format version 1).
//
// File layout:
//   [0, 8)            u64 little-endian N: the header's byte length
//   [8, 8 + N)        UTF-8 JSON object: { "__metadata__": {str: str}?,
//                                          "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]} ... }
//   [8 + N, size)     data section; a tensor's bytes are [8 + N + b, 8 + N + e)
//
// The reader memory-maps the file and validates everything before any tensor is touched: header length
// within the file, JSON well-formed, every entry's dtype known, shape non-negative without overflow,
// offsets ordered and inside the data section, byte length == numel × dtype size, no two tensors
// overlapping. Every failure throws orbit::Error naming the file and the tensor/field.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace orbit::runtime {

enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32" -> kF32 ...; returns false for an unknown name.
bool st_dtype_from_name(const std::string& name, StDtype* out);
const char* st_dtype_name(StDtype dtype) noexcept;
std::size_t st_dtype_size(StDtype dtype) noexcept;

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offset into the data section, inclusive
  uint64_t end = 0;    // exclusive
  int64_t numel() const;
};

struct StHeader {
  std::vector<StTensorInfo> tensors;            // in order of data offset
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_offset = 0;                     // 8 + N: where the data section starts in the file
};

// Parses and validates a complete safetensors image held in memory. `origin` names the file in
// errors. Exposed separately so tests and the fuzzer can feed it arbitrary bytes.
StHeader parse_safetensors(const uint8_t* bytes, std::size_t size, const std::string& origin);

// A memory-mapped, validated safetensors file. Move-only; unmaps on destruction.
class SafetensorsFile {
 public:
  // Throws orbit::Error naming `path` when it cannot be opened or fails validation.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  // nullptr when absent.
  const StTensorInfo* find(const std::string& name) const;
  // Copies the tensor out of the mapping, converted to `dtype` (CPU). Throws if absent.
  at::Tensor load(const std::string& name, at::ScalarType dtype) const;

 private:
  std::string path_;
  StHeader header_;
  std::map<std::string, std::size_t> index_;
  const uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

struct StWriteOptions {
  StDtype dtype = StDtype::kF32;                // floating tensors are converted to this on write
  std::map<std::string, std::string> metadata;  // written as "__metadata__"
};

// Writes tensors (CPU or not; converted and made contiguous) to `path` atomically: a temporary file in
// the same directory, fsync, rename. Names must be unique. Integer tensors keep their dtype.
// The header is padded with spaces so the data section starts 8-byte aligned.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const StWriteOptions& options = {});

}  // namespace orbit::runtime
