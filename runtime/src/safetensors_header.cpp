// Safetensors header parsing and validation: pure functions over a memory image, no tensors touched.
//
// Kept apart from safetensors.cpp (mmap, load, write) so the fuzzer in tests/fuzz can build this file
// alone, without linking libtorch. Everything here treats the input as hostile: every length and
// offset is checked before it is used, and arithmetic that could wrap is done with overflow checks.
//
// What a valid image looks like (see safetensors.h for the layout):
//   - at least 8 bytes; N = u64 LE at [0, 8); N <= kMaxHeaderBytes and 8 + N <= size
//   - [8, 8 + N) is one JSON object (trailing spaces allowed, as writers pad with them)
//   - no key appears twice in any JSON object (nlohmann would silently keep the last one)
//   - "__metadata__", when present, is an object whose values are all strings
//   - every other key is a tensor: {"dtype": str, "shape": [int >= 0 ...], "data_offsets": [b, e]}
//     with a known dtype, numel × dtype size representable in u64, 0 <= b <= e <= data section size,
//     e - b == numel × dtype size; extra fields in an entry are ignored
//   - no two non-empty tensors share a byte. Gaps between tensors and trailing bytes after the last
//     one are accepted (the reference implementation rejects them; reading them is harmless).
#include "orbit/runtime/safetensors.h"

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

namespace orbit::runtime {
namespace {

// The reference implementation refuses headers above 100 MB; a real one is a few hundred KB at most.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeEntry {
  StDtype dtype;
  const char* name;
  std::size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {StDtype::kF64, "F64", 8}, {StDtype::kF32, "F32", 4},   {StDtype::kF16, "F16", 2}, {StDtype::kBF16, "BF16", 2},
    {StDtype::kI64, "I64", 8}, {StDtype::kI32, "I32", 4},   {StDtype::kI16, "I16", 2}, {StDtype::kI8, "I8", 1},
    {StDtype::kU8, "U8", 1},   {StDtype::kBool, "BOOL", 1},
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// The first key repeated inside any JSON object, found in one SAX pass over the header (nlohmann's DOM keeps only
// the last value of a duplicated key, and its callback parser costs the square of a container's values). One
// frame per open object; frames[0] is the top level, so frames[0].last_key names the tensor whose entry is read.
class DuplicateKeyFinder : public JsonSaxWalk {
 public:
  bool start_object(std::size_t) override {
    frames_.emplace_back();
    return true;
  }
  bool end_object() override {
    if (!frames_.empty()) frames_.pop_back();
    return true;
  }
  bool key(string_t& key) override {
    if (frames_.empty()) return true;
    Frame& frame = frames_.back();
    frame.last_key = key;
    if (!frame.keys.insert(frame.last_key).second && message_.empty()) {
      if (frames_.size() == 1) {
        message_ = "tensor '" + frame.last_key + "' is listed twice in the header";
      } else {
        message_ = "entry '" + frames_.front().last_key + "': field '" + frame.last_key + "' is given twice";
      }
    }
    return true;
  }
  // Empty when no key was repeated.
  const std::string& message() const { return message_; }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> frames_;
  std::string message_;
};

std::string json_type(const nlohmann::json& value) { return value.type_name(); }

// A JSON integer as u64; false for floats, non-numbers and negative values.
bool as_non_negative(const nlohmann::json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

StTensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_size,
                         const std::string& origin) {
  const std::string where = origin + ": tensor '" + name + "'";
  ORBIT_CHECK(entry.is_object(), where << ": entry must be an object, got " << json_type(entry));
  StTensorInfo info;
  info.name = name;

  // dtype
  auto dtype_it = entry.find("dtype");
  ORBIT_CHECK(dtype_it != entry.end(), where << ": field 'dtype' is missing");
  ORBIT_CHECK(dtype_it->is_string(), where << ": field 'dtype' must be a string, got " << json_type(*dtype_it));
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  ORBIT_CHECK(st_dtype_from_name(dtype_name, &info.dtype),
              where << ": field 'dtype' has unknown or unsupported value '" << dtype_name
                    << "' (expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)");

  // shape: numel is computed over the non-zero dims with overflow checks, so [2^40, 2^40, 0] is
  // refused rather than accepted as empty: no consumer could allocate such a view anyway.
  auto shape_it = entry.find("shape");
  ORBIT_CHECK(shape_it != entry.end(), where << ": field 'shape' is missing");
  ORBIT_CHECK(shape_it->is_array(), where << ": field 'shape' must be an array, got " << json_type(*shape_it));
  uint64_t numel = 1;
  bool has_zero = false;
  for (std::size_t i = 0; i < shape_it->size(); ++i) {
    const nlohmann::json& dim = (*shape_it)[i];
    ORBIT_CHECK(dim.is_number_integer(),
                where << ": field 'shape' dim " << i << " must be an integer, got " << json_type(dim));
    uint64_t d = 0;
    ORBIT_CHECK(as_non_negative(dim, &d),
                where << ": field 'shape' dim " << i << " is negative (" << dim.get<int64_t>() << ")");
    ORBIT_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                where << ": field 'shape' dim " << i << " (" << d << ") does not fit in int64");
    info.shape.push_back(static_cast<int64_t>(d));
    if (d == 0) {
      has_zero = true;
      continue;
    }
    ORBIT_CHECK(!__builtin_mul_overflow(numel, d, &numel) &&
                    numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                where << ": field 'shape' has more elements than fit in 64 bits");
  }
  if (has_zero) numel = 0;
  uint64_t nbytes = 0;
  ORBIT_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(st_dtype_size(info.dtype)), &nbytes),
              where << ": field 'shape' holds " << numel << " elements of " << dtype_name
                    << ", whose byte size overflows 64 bits");

  // data_offsets
  auto offsets_it = entry.find("data_offsets");
  ORBIT_CHECK(offsets_it != entry.end(), where << ": field 'data_offsets' is missing");
  // Messages describe hostile values by type rather than dump() them: dump() recurses per nesting level.
  ORBIT_CHECK(offsets_it->is_array(),
              where << ": field 'data_offsets' must be an array of 2 integers, got " << json_type(*offsets_it));
  ORBIT_CHECK(offsets_it->size() == 2, where << ": field 'data_offsets' must be an array of 2 integers, got "
                                             << offsets_it->size() << " elements");
  for (std::size_t i = 0; i < 2; ++i) {
    const nlohmann::json& offset = (*offsets_it)[i];
    ORBIT_CHECK(offset.is_number_integer(),
                where << ": field 'data_offsets' element " << i << " must be an integer, got " << json_type(offset));
    ORBIT_CHECK(as_non_negative(offset, i == 0 ? &info.begin : &info.end),
                where << ": field 'data_offsets' element " << i << " is negative (" << offset.get<int64_t>() << ")");
  }
  ORBIT_CHECK(info.begin <= info.end,
              where << ": data_offsets [" << info.begin << ", " << info.end << "] begin after end");
  ORBIT_CHECK(info.end <= data_size, where << ": data_offsets [" << info.begin << ", " << info.end
                                           << "] run past the end of the data section (" << data_size << " bytes)");
  ORBIT_CHECK(info.end - info.begin == nbytes,
              where << ": data_offsets [" << info.begin << ", " << info.end << "] span " << (info.end - info.begin)
                    << " bytes but shape and dtype " << dtype_name << " need " << nbytes);
  return info;
}

void parse_metadata(const nlohmann::json& value, const std::string& origin, StHeader* header) {
  ORBIT_CHECK(value.is_object(), origin << ": '__metadata__' must be an object of strings, got " << json_type(value));
  for (auto it = value.begin(); it != value.end(); ++it) {
    ORBIT_CHECK(it->is_string(),
                origin << ": '__metadata__' field '" << it.key() << "' must be a string, got " << json_type(*it));
    header->metadata.emplace(it.key(), it->get<std::string>());
  }
}

}  // namespace

bool st_dtype_from_name(const std::string& name, StDtype* out) {
  for (const DtypeEntry& entry : kDtypes) {
    if (name == entry.name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

const char* st_dtype_name(StDtype dtype) noexcept {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

std::size_t st_dtype_size(StDtype dtype) noexcept {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // parse_safetensors guarantees this does not overflow
  return n;
}

StHeader parse_safetensors(const uint8_t* bytes, std::size_t size, const std::string& origin) {
  ORBIT_CHECK(size >= 8, origin << ": file is " << size
                                << " bytes, shorter than the 8-byte header length prefix of a safetensors file");
  const uint64_t header_len = read_u64_le(bytes);
  ORBIT_CHECK(header_len <= kMaxHeaderBytes, origin << ": header length " << header_len << " exceeds the "
                                                    << kMaxHeaderBytes << "-byte limit (not a safetensors file?)");
  ORBIT_CHECK(header_len <= size - 8,
              origin << ": header length " << header_len << " runs past the end of the file (" << size << " bytes)");
  StHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = size - header.data_offset;

  const char* first = reinterpret_cast<const char*>(bytes + 8);
  const nlohmann::json root =
      parse_json_input(first, first + header_len, origin + ": header (" + std::to_string(header_len) + " bytes)");
  ORBIT_CHECK(root.is_object(), origin << ": header must be a JSON object, got " << json_type(root));
  DuplicateKeyFinder duplicates;  // the text parsed above: this pass meets no syntax error
  nlohmann::json::sax_parse(first, first + header_len, &duplicates);
  ORBIT_CHECK(duplicates.message().empty(), origin << ": " << duplicates.message());

  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      parse_metadata(*it, origin, &header);
    } else {
      header.tensors.push_back(parse_entry(it.key(), *it, data_size, origin));
    }
  }

  // Order by data offset (ties: shorter range first, then name, so the order is deterministic) and
  // check for overlap against the furthest end seen so far; empty tensors occupy no bytes.
  std::sort(header.tensors.begin(), header.tensors.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  const StTensorInfo* furthest = nullptr;
  for (const StTensorInfo& info : header.tensors) {
    if (info.begin == info.end) continue;
    if (furthest != nullptr) {
      ORBIT_CHECK(info.begin >= furthest->end, origin << ": tensor '" << info.name << "': data_offsets [" << info.begin
                                                      << ", " << info.end << "] overlap tensor '" << furthest->name
                                                      << "' at [" << furthest->begin << ", " << furthest->end << "]");
    }
    if (furthest == nullptr || info.end > furthest->end) furthest = &info;
  }
  return header;
}

}  // namespace orbit::runtime
