// The store's blob format: one file per committed write, self-describing and checksummed.
//
//   [0, 8)         magic "ORBTBLOB"
//   [8, 12)        u32 format version (1)
//   [12, 16)       u32 H: byte length of the header record
//   [16, 16 + H)   header record (little-endian; str = u32 length + bytes):
//                    u8 kind, u8 encoding, u16 zero, str key, str model fingerprint,
//                    u32 attribute count, then (str name, str value) each,
//                    u32 tensor count, then per tensor:
//                      str name, u8 dtype, u8 codec (0 raw, 1 int8 rows), u8 ndim, u8 zero,
//                      i64 dims[ndim], u64 offset (from the data start), u64 bytes
//   zero padding to a multiple of 64: the data start D
//   [D, size - 64) payloads, each starting 64-byte aligned (raw: the tensor's bytes, row-major;
//                  int8 rows: numel int8 values, zero padding to 4, then float32 scales, one per row
//                  of the last dimension)
//   [size - 64, size) trailer: SHA-256 hex (64 ASCII characters) of bytes [0, size - 64)
//
// Why not safetensors: the store needs a checksum over the whole file, per-tensor int8 codecs with
// scales, the entry's key and fingerprint inside the file (so a blob can be matched to its row), and a
// streamed writer with fault-injection hooks. The framing above is ~100 lines of code for all of that.
// Host byte order must be little-endian (checked at compile time). The functions below are pure and
// thread-safe; an EncodedBlob borrows the value's tensor memory (keep the value alive while writing).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/store.h"
#include "orbit/store/value.h"

namespace orbit::store {

constexpr int64_t kMaxBlobDims = 8;
constexpr std::size_t kBlobTrailerBytes = 64;
constexpr uint32_t kBlobFormatVersion = 1;

bool blob_dtype_supported(at::ScalarType dtype);

// A blob ready to stream: `head`, then each piece in order, then the trailer (the writer hashes as it goes).
struct EncodedBlob {
  std::string head;                                            // magic, header record, padding
  std::vector<std::pair<const uint8_t*, std::size_t>> pieces;  // payloads and their padding, in file order
  std::vector<at::Tensor> keep_alive;                          // owners of the pieces' memory
  uint64_t size() const;                                       // file size including the trailer
};

// Encodes `value` for `key`. kInt8 quantizes every floating tensor per row of its last dimension
// (symmetric, scale = max|row| / 127); other tensors stay raw.
EncodedBlob encode_blob(const std::string& key, const std::string& model_fingerprint, const StoredValue& value,
                        BlobEncoding encoding);

// Symmetric int8 per row of the last dimension, as an int8 blob stores a floating tensor: q = round(x / s) clamped
// to ±127 (int8 [rows, d]), s = max|row| / 127 (float32 [rows]).
struct Int8Rows {
  at::Tensor q;
  at::Tensor scale;
};
Int8Rows quantize_int8_rows(const at::Tensor& x);
// What int8 rows lose: rounding to a step s leaves an error uniform in [-s/2, s/2] (variance s² / 12) on each value,
// so a row of d values is expected to carry d · s² / 12 of error energy; `signal` is the energy of the values read
// back. error / signal is kQuantizationErrorAttr's value.
struct RoundingEnergy {
  double error = 0;
  double signal = 0;
};
// The values of `rows` read back (float32 [rows, d]), their expected rounding error added to *energy when given.
at::Tensor dequantize_int8_rows(const Int8Rows& rows, RoundingEnergy* energy = nullptr);
// `x` quantized and read back, as an int8 blob would return it (x's shape and dtype); *energy as above.
at::Tensor int8_round_trip(const at::Tensor& x, RoundingEnergy* energy = nullptr);

// The attribute a value decoded from int8 rows carries: the relative energy of its expected rounding error,
// Σ (d · s² / 12) / Σ x² over its quantized rows (row step s = max|row| / 127, d values a row, x the values read
// back), "%.6g". Each value read back is within s / 2 of the original; the rounding error is uniform there, so
// this is what the value lost as a share of its energy (stories260K's canonicals: ~2.9e-5). The fidelity model
// prices reading such a canonical by it (planner/fidelity_model.h, quantized). Kept through later writes.
inline constexpr const char* kQuantizationErrorAttr = "quantization_error";
// The attribute's value in `value` (0 when absent or unreadable), or parsed from its text.
double quantization_error(const StoredValue& value);
double quantization_error(const std::string& attribute);

struct DecodedBlob {
  std::string key;
  std::string model_fingerprint;
  BlobEncoding encoding = BlobEncoding::kExact;
  std::string checksum;  // from the trailer (verified)
  ValuePtr value;        // raw tensors are views into the file buffer; int8 ones are dequantized copies
};

// The file size encode_blob would produce, computed without encoding (no quantization, no copies).
uint64_t encoded_blob_size(const std::string& key, const std::string& model_fingerprint, const StoredValue& value,
                           BlobEncoding encoding);

// Decodes a whole blob file held in `bytes` (uint8, contiguous CPU). Verifies the trailer checksum over
// the contents and, when `expected_checksum` is non-empty, that it matches the index. A corrupt,
// truncated or malformed blob is an expected fault (docs/ARCHITECTURE.md §8: served as a miss): it returns
// not_found with a reason naming `origin`, never throws for bad bytes.
Result<DecodedBlob> decode_blob(const at::Tensor& bytes, const std::string& expected_checksum,
                                const std::string& origin);

}  // namespace orbit::store
