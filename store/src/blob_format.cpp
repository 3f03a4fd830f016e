#include "orbit/store/blob_format.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the store's blob format assumes a little-endian host"
#endif

namespace orbit::store {

namespace {

constexpr char kMagic[8] = {'O', 'R', 'B', 'T', 'B', 'L', 'O', 'B'};
constexpr std::size_t kAlign = 64;
const uint8_t kZeros[kAlign] = {};

enum : uint8_t { kCodecRaw = 0, kCodecInt8Rows = 1 };

// Stable on-disk dtype codes (never reorder).
constexpr at::ScalarType kDtypes[] = {at::kFloat, at::kHalf,  at::kBFloat16, at::kDouble, at::kLong,
                                      at::kInt,   at::kShort, at::kChar,     at::kByte,   at::kBool};
constexpr int kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);

int dtype_code(at::ScalarType dtype) {
  for (int i = 0; i < kNumDtypes; ++i) {
    if (kDtypes[i] == dtype) return i;
  }
  return -1;
}

std::size_t padded(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}
void put_str(std::string& out, const std::string& s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Bounds-checked reader over the header record; any overrun marks the cursor failed.
class Cursor {
 public:
  Cursor(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  template <typename T>
  T get() {
    T value{};
    if (!take(sizeof value)) return value;
    std::memcpy(&value, data_ + pos_ - sizeof value, sizeof value);
    return value;
  }
  std::string get_str() {
    const uint32_t n = get<uint32_t>();
    if (failed_ || !take(n)) return {};
    return std::string(reinterpret_cast<const char*>(data_ + pos_ - n), n);
  }
  bool failed() const { return failed_; }
  bool at_end() const { return pos_ == size_; }

 private:
  bool take(std::size_t n) {
    if (failed_ || n > size_ - pos_) {
      failed_ = true;
      return false;
    }
    pos_ += n;
    return true;
  }
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

Status corrupt(const std::string& origin, const std::string& what) {
  return Status::not_found("corrupt blob " + origin + ": " + what);
}

}  // namespace

bool blob_dtype_supported(at::ScalarType dtype) { return dtype_code(dtype) >= 0; }

uint64_t EncodedBlob::size() const {
  uint64_t total = head.size() + kBlobTrailerBytes;
  for (const auto& piece : pieces) total += piece.second;
  return total;
}

namespace {

bool quantized(const at::Tensor& x, BlobEncoding encoding) {
  return encoding == BlobEncoding::kInt8 && at::isFloatingType(x.scalar_type()) && x.numel() > 0;
}

uint64_t payload_bytes(const at::Tensor& x, BlobEncoding encoding) {
  if (!quantized(x, encoding)) return x.nbytes();
  const uint64_t numel = static_cast<uint64_t>(x.numel());
  const uint64_t rows = numel / static_cast<uint64_t>(x.dim() == 0 ? 1 : x.size(-1));
  return numel + (4 - numel % 4) % 4 + 4 * rows;
}

// Magic, version, header record and padding: everything before the first payload.
std::string blob_head(const std::string& key, const std::string& model_fingerprint, const StoredValue& value,
                      BlobEncoding encoding) {
  std::string record;
  put<uint8_t>(record, static_cast<uint8_t>(value.kind));
  put<uint8_t>(record, static_cast<uint8_t>(encoding));
  put<uint16_t>(record, 0);
  put_str(record, key);
  put_str(record, model_fingerprint);
  put<uint32_t>(record, static_cast<uint32_t>(value.attrs.size()));
  for (const auto& [name, text] : value.attrs) {
    put_str(record, name);
    put_str(record, text);
  }
  put<uint32_t>(record, static_cast<uint32_t>(value.tensors.size()));
  uint64_t offset = 0;
  for (const NamedTensor& t : value.tensors) {
    const at::Tensor& x = t.tensor;
    put_str(record, t.name);
    put<uint8_t>(record, static_cast<uint8_t>(dtype_code(x.scalar_type())));
    put<uint8_t>(record, quantized(x, encoding) ? kCodecInt8Rows : kCodecRaw);
    put<uint8_t>(record, static_cast<uint8_t>(x.dim()));
    put<uint8_t>(record, 0);
    for (int64_t d : x.sizes()) put<int64_t>(record, d);
    const uint64_t nbytes = payload_bytes(x, encoding);
    put<uint64_t>(record, offset);
    put<uint64_t>(record, nbytes);
    offset += padded(nbytes);
  }
  std::string head(kMagic, sizeof kMagic);
  put<uint32_t>(head, kBlobFormatVersion);
  put<uint32_t>(head, static_cast<uint32_t>(record.size()));
  head += record;
  head.append(padded(head.size()) - head.size(), '\0');
  return head;
}

}  // namespace

uint64_t encoded_blob_size(const std::string& key, const std::string& model_fingerprint, const StoredValue& value,
                           BlobEncoding encoding) {
  uint64_t total = blob_head(key, model_fingerprint, value, encoding).size() + kBlobTrailerBytes;
  for (const NamedTensor& t : value.tensors) total += padded(payload_bytes(t.tensor, encoding));
  return total;
}

Int8Rows quantize_int8_rows(const at::Tensor& x) {
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const at::Tensor rows = x.to(at::kFloat).reshape({-1, cols});
  const at::Tensor scale = (rows.abs().amax({1}, /*keepdim=*/true) / 127.0).clamp_min(1e-30);
  return {(rows / scale).round().clamp(-127, 127).to(at::kChar).contiguous(), scale.reshape({-1}).contiguous()};
}

at::Tensor dequantize_int8_rows(const Int8Rows& rows, RoundingEnergy* energy) {
  const at::Tensor x = rows.q.to(at::kFloat) * rows.scale.view({-1, 1});
  if (energy != nullptr) {
    energy->error += static_cast<double>(x.size(1)) * rows.scale.to(at::kDouble).square().sum().item<double>() / 12.0;
    energy->signal += x.to(at::kDouble).square().sum().item<double>();
  }
  return x;
}

at::Tensor int8_round_trip(const at::Tensor& x, RoundingEnergy* energy) {
  return dequantize_int8_rows(quantize_int8_rows(x), energy).view(x.sizes()).to(x.scalar_type());
}

EncodedBlob encode_blob(const std::string& key, const std::string& model_fingerprint, const StoredValue& value,
                        BlobEncoding encoding) {
  EncodedBlob blob;
  blob.head = blob_head(key, model_fingerprint, value, encoding);
  for (const NamedTensor& t : value.tensors) {
    const at::Tensor& x = t.tensor;
    ORBIT_CHECK(x.is_contiguous() && x.device().is_cpu(),
                "encode_blob: tensor '" << t.name << "' of key " << key << " is not contiguous CPU");
    const uint64_t nbytes = payload_bytes(x, encoding);
    if (quantized(x, encoding)) {
      const Int8Rows rows = quantize_int8_rows(x);
      const at::Tensor& q = rows.q;
      const at::Tensor& s = rows.scale;
      blob.keep_alive.push_back(q);
      blob.keep_alive.push_back(s);
      const std::size_t qbytes = static_cast<std::size_t>(q.numel());
      const std::size_t qpad = (4 - qbytes % 4) % 4;
      blob.pieces.emplace_back(static_cast<const uint8_t*>(q.data_ptr()), qbytes);
      if (qpad) blob.pieces.emplace_back(kZeros, qpad);
      blob.pieces.emplace_back(static_cast<const uint8_t*>(s.data_ptr()), static_cast<std::size_t>(s.nbytes()));
    } else if (nbytes) {
      blob.pieces.emplace_back(static_cast<const uint8_t*>(x.data_ptr()), nbytes);
    }
    const std::size_t pad = padded(nbytes) - nbytes;
    if (pad) blob.pieces.emplace_back(kZeros, pad);
  }
  return blob;
}

namespace {

// A blob's frame, checked: its trailer, its header record's place and the start of its payloads.
struct BlobFrame {
  std::size_t body = 0;         // bytes before the trailer
  std::size_t record_size = 0;  // the header record, from byte 16
  std::size_t data_start = 0;   // the first payload, kAlign-aligned
  std::string checksum;         // SHA-256 of the body, hex
};

// The blob's size, trailer checksum (and the index's, when `expected_checksum` is not empty), magic, version and
// the bounds of its header record and data section; the first that fails returns its corrupt() status.
Result<BlobFrame> check_frame(const uint8_t* data, std::size_t size, const std::string& expected_checksum,
                              const std::string& origin) {
  if (size < 16 + kBlobTrailerBytes) return corrupt(origin, "truncated (" + std::to_string(size) + " bytes)");
  BlobFrame frame;
  frame.body = size - kBlobTrailerBytes;
  frame.checksum = Sha256().update(data, frame.body).hex_digest();
  const std::string trailer(reinterpret_cast<const char*>(data + frame.body), kBlobTrailerBytes);
  if (trailer != frame.checksum) {
    // A trailer that is not hex (a truncated or overwritten blob ends in other bytes) is not printed as it is.
    const bool hex = std::all_of(trailer.begin(), trailer.end(), [](char c) { return std::isxdigit(c) != 0; });
    return corrupt(origin, "checksum mismatch (" +
                               (hex ? "trailer " + trailer.substr(0, 16) + "..." : std::string("no checksum trailer")) +
                               ", contents " + frame.checksum.substr(0, 16) + "...)");
  }
  if (!expected_checksum.empty() && expected_checksum != frame.checksum) {
    return corrupt(origin, "checksum " + frame.checksum.substr(0, 16) + "... differs from the index's " +
                               expected_checksum.substr(0, 16) + "...");
  }
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0) return corrupt(origin, "bad magic");
  uint32_t version = 0, record_size = 0;
  std::memcpy(&version, data + 8, 4);
  std::memcpy(&record_size, data + 12, 4);
  if (version != kBlobFormatVersion) return corrupt(origin, "unknown format version " + std::to_string(version));
  if (record_size > frame.body - 16) return corrupt(origin, "header record past the end");
  frame.record_size = record_size;
  frame.data_start = padded(16 + record_size);
  if (frame.data_start > frame.body) return corrupt(origin, "data section past the end");
  return frame;
}

// The tensor record at `c` and its payload in `bytes`: a view of it (raw) or its rows dequantized (int8, their
// expected rounding error added to `rounding`). A record the cursor runs out inside leaves `c` failed and returns
// an empty NamedTensor (the caller reports the header record malformed); a record that reads but does not fit
// returns its corrupt() status.
Result<NamedTensor> read_tensor(Cursor& c, const at::Tensor& bytes, const BlobFrame& frame, const std::string& origin,
                                RoundingEnergy& rounding) {
  NamedTensor t;
  t.name = c.get_str();
  const auto code = c.get<uint8_t>();
  const auto codec = c.get<uint8_t>();
  const auto ndim = c.get<uint8_t>();
  c.get<uint8_t>();
  if (c.failed()) return NamedTensor{};
  if (code >= kNumDtypes || codec > kCodecInt8Rows || ndim > kMaxBlobDims) {
    return corrupt(origin, "tensor '" + t.name + "': bad dtype, codec or rank");
  }
  std::vector<int64_t> shape(ndim);
  uint64_t numel = 1;
  for (auto& d : shape) {
    d = c.get<int64_t>();
    if (d < 0 || (d > 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))) {
      return corrupt(origin, "tensor '" + t.name + "': bad shape");
    }
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t offset = c.get<uint64_t>();
  const uint64_t nbytes = c.get<uint64_t>();
  if (c.failed()) return NamedTensor{};
  const std::size_t body = frame.body;
  const std::size_t data_start = frame.data_start;
  const at::ScalarType dtype = kDtypes[code];
  const uint64_t rows = numel == 0 ? 0 : numel / static_cast<uint64_t>(ndim == 0 ? 1 : shape.back());
  const uint64_t qbytes = numel + (4 - numel % 4) % 4;
  const uint64_t want = codec == kCodecRaw ? numel * c10::elementSize(dtype) : qbytes + 4 * rows;
  if (nbytes != want || offset % kAlign != 0 || offset > body - data_start || nbytes > body - data_start - offset) {
    return corrupt(origin, "tensor '" + t.name + "': payload size or offset out of range");
  }
  const int64_t begin = static_cast<int64_t>(data_start + offset);
  if (numel == 0) {
    t.tensor = at::empty(shape, at::TensorOptions().dtype(dtype));
  } else if (codec == kCodecRaw) {
    t.tensor = bytes.narrow(0, begin, static_cast<int64_t>(nbytes)).view(dtype).view(shape);
  } else {
    const at::Tensor q = bytes.narrow(0, begin, static_cast<int64_t>(numel)).view(at::kChar);
    const at::Tensor s =
        bytes.narrow(0, begin + static_cast<int64_t>(qbytes), static_cast<int64_t>(4 * rows)).view(at::kFloat);
    const at::Tensor x = dequantize_int8_rows({q.view({static_cast<int64_t>(rows), -1}), s}, &rounding);
    t.tensor = x.view(shape).to(dtype);
  }
  return t;
}

}  // namespace

double quantization_error(const std::string& attribute) {
  if (attribute.empty()) return 0.0;
  const double e = std::strtod(attribute.c_str(), nullptr);
  return std::isfinite(e) && e > 0 ? e : 0.0;
}

double quantization_error(const StoredValue& value) {
  auto it = value.attrs.find(kQuantizationErrorAttr);
  return it == value.attrs.end() ? 0.0 : quantization_error(it->second);
}

Result<DecodedBlob> decode_blob(const at::Tensor& bytes, const std::string& expected_checksum,
                                const std::string& origin) {
  ORBIT_CHECK(bytes.scalar_type() == at::kByte && bytes.dim() == 1 && bytes.is_contiguous(),
              "decode_blob: expects a contiguous uint8 [size] buffer");
  const uint8_t* data = bytes.data_ptr<uint8_t>();
  Result<BlobFrame> checked = check_frame(data, static_cast<std::size_t>(bytes.numel()), expected_checksum, origin);
  if (!checked) return checked.status();
  const BlobFrame& frame = checked.value();
  DecodedBlob out;
  out.checksum = frame.checksum;

  Cursor c(data + 16, frame.record_size);
  const auto kind = c.get<uint8_t>();
  const auto encoding = c.get<uint8_t>();
  c.get<uint16_t>();
  out.key = c.get_str();
  out.model_fingerprint = c.get_str();
  if (kind > static_cast<uint8_t>(EntryKind::kOther) || encoding > static_cast<uint8_t>(BlobEncoding::kInt8)) {
    return corrupt(origin, "unknown kind or encoding");
  }
  out.encoding = static_cast<BlobEncoding>(encoding);
  std::map<std::string, std::string> attrs;
  const uint32_t num_attrs = c.get<uint32_t>();
  for (uint32_t i = 0; i < num_attrs && !c.failed(); ++i) {
    std::string name = c.get_str();
    attrs[name] = c.get_str();
  }
  std::vector<NamedTensor> tensors;
  RoundingEnergy rounding;
  const uint32_t num_tensors = c.get<uint32_t>();
  for (uint32_t i = 0; i < num_tensors && !c.failed(); ++i) {
    Result<NamedTensor> t = read_tensor(c, bytes, frame, origin, rounding);
    if (!t) return t.status();
    if (c.failed()) break;
    tensors.push_back(std::move(t).value());
  }
  if (c.failed() || !c.at_end()) return corrupt(origin, "malformed header record");
  // A value dequantized before (written again from a read of an int8 blob) keeps its first estimate: its rows
  // lie on the int8 grid already, so quantizing them again loses nothing more.
  if (rounding.signal > 0 && attrs.count(kQuantizationErrorAttr) == 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", rounding.error / rounding.signal);
    attrs[kQuantizationErrorAttr] = buf;
  }
  try {
    out.value = make_value(static_cast<EntryKind>(kind), std::move(tensors), std::move(attrs), /*copy=*/false);
  } catch (const Error& e) {
    return corrupt(origin, e.what());
  }
  return out;
}

}  // namespace orbit::store
