// Safetensors reader and writer: round trips for every dtype and shape corner, exact half-precision
// bytes, metadata and alignment, atomic writes, and a corpus of hand-broken files (built in memory
// here, plus committed fixtures under tests/data/safetensors) that must each fail with orbit::Error
// naming the file and the tensor/field at fault.
#include "orbit/runtime/safetensors.h"

#include "orbit/common/error.h"

#include <ATen/ATen.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace orbit::runtime;

namespace {

// A fresh directory under the system temp dir, removed with everything in it on scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("orbit_test_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string le_u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// [u64 LE header length][header][data]: a safetensors image with no padding.
std::string make_image(const std::string& header, const std::string& data) {
  return le_u64(header.size()) + header + data;
}

// The message of the orbit::Error that `f` throws; fails the test when it throws nothing. Any other
// exception type escapes and fails the test too.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const orbit::Error& e) {
    return e.what();
  }
  FAIL("expected orbit::Error, nothing was thrown");
  return {};
}

StHeader parse(const std::string& image, const std::string& origin) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), origin);
}

std::string parse_error(const std::string& image, const std::string& origin) {
  return error_of([&] { parse(image, origin); });
}

uint16_t u16_at(const std::string& bytes, std::size_t offset) {
  return static_cast<uint16_t>(static_cast<uint8_t>(bytes[offset]) | (static_cast<uint8_t>(bytes[offset + 1]) << 8));
}

// The base of the broken corpus: a valid header with metadata and two tensors over 56 data bytes.
const std::string kEntryA = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
const std::string kEntryB = R"("b":{"dtype":"I64","shape":[4],"data_offsets":[24,56]})";
const std::string kMeta = R"("__metadata__":{"format":"pt"})";
const std::string kData(56, '\x01');

std::string base_header() { return "{" + kMeta + "," + kEntryA + "," + kEntryB + "}"; }
std::string with_b(const std::string& b_entry) { return "{" + kEntryA + ",\"b\":" + b_entry + "}"; }

}  // namespace

// ---- dtypes and round trips -------------------------------------------------------------------------

TEST_CASE("dtype names and sizes", "[safetensors][cpu]") {
  const std::vector<std::tuple<StDtype, std::string, std::size_t>> all = {
      {StDtype::kF64, "F64", 8}, {StDtype::kF32, "F32", 4},  {StDtype::kF16, "F16", 2}, {StDtype::kBF16, "BF16", 2},
      {StDtype::kI64, "I64", 8}, {StDtype::kI32, "I32", 4},  {StDtype::kI16, "I16", 2}, {StDtype::kI8, "I8", 1},
      {StDtype::kU8, "U8", 1},   {StDtype::kBool, "BOOL", 1}};
  for (const auto& [dtype, name, size] : all) {
    StDtype parsed = StDtype::kF32;
    CHECK(st_dtype_from_name(name, &parsed));
    CHECK(parsed == dtype);
    CHECK(st_dtype_name(dtype) == name);
    CHECK(st_dtype_size(dtype) == size);
  }
  StDtype unused;
  CHECK_FALSE(st_dtype_from_name("f32", &unused));
  CHECK_FALSE(st_dtype_from_name("U16", &unused));
  CHECK_FALSE(st_dtype_from_name("", &unused));
}

TEST_CASE("every dtype round trips through a file", "[safetensors][cpu]") {
  TempDir dir;
  struct Case {
    at::ScalarType type;
    StDtype stored;
  };
  const std::vector<Case> cases = {{at::kDouble, StDtype::kF64}, {at::kFloat, StDtype::kF32},
                                   {at::kHalf, StDtype::kF16},   {at::kBFloat16, StDtype::kBF16},
                                   {at::kLong, StDtype::kI64},   {at::kInt, StDtype::kI32},
                                   {at::kShort, StDtype::kI16},  {at::kChar, StDtype::kI8},
                                   {at::kByte, StDtype::kU8},    {at::kBool, StDtype::kBool}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION(st_dtype_name(c.stored)) {
      // Values exact in every dtype: halves for floats, small signed ints, 0..11 for U8, parity for BOOL.
      at::Tensor base = at::arange(-6, 6, at::kDouble).reshape({3, 4});
      at::Tensor t;
      if (c.type == at::kByte) {
        t = (base + 6).to(c.type);
      } else if (c.type == at::kBool) {
        t = base.remainder(2).eq(0);
      } else if (at::isFloatingType(c.type)) {
        t = (base * 0.5).to(c.type);
      } else {
        t = base.to(c.type);
      }
      StWriteOptions options;
      if (at::isFloatingType(c.type)) options.dtype = c.stored;  // integers ignore options.dtype
      const std::string path = dir.file(std::string(st_dtype_name(c.stored)) + ".safetensors");
      write_safetensors(path, {{"t", t}}, options);

      SafetensorsFile file(path);
      const StTensorInfo* info = file.find("t");
      REQUIRE(info != nullptr);
      CHECK(info->dtype == c.stored);
      CHECK(info->shape == std::vector<int64_t>{3, 4});
      CHECK(info->end - info->begin == 12 * st_dtype_size(c.stored));
      at::Tensor back = file.load("t", c.type);
      CHECK(back.scalar_type() == c.type);
      CHECK(at::equal(back, t));
      CHECK(at::equal(file.load("t", at::kDouble), t.to(at::kDouble)));
    }
  }
}

TEST_CASE("0-d, empty, non-contiguous and large tensors round trip", "[safetensors][cpu]") {
  TempDir dir;
  const std::string path = dir.file("shapes.safetensors");
  at::manual_seed(7);
  const at::Tensor scalar = at::scalar_tensor(3.25, at::kFloat);
  const at::Tensor empty_rows = at::empty({0, 3}, at::kFloat);
  const at::Tensor empty_cols = at::empty({5, 0}, at::kLong);
  const at::Tensor transposed = at::arange(12, at::kFloat).reshape({3, 4}).t();
  const at::Tensor large = at::randn({1024, 1024}, at::kFloat);  // 4 MiB
  REQUIRE_FALSE(transposed.is_contiguous());
  write_safetensors(path, {{"scalar", scalar},
                           {"empty_rows", empty_rows},
                           {"empty_cols", empty_cols},
                           {"transposed", transposed},
                           {"large", large}});

  SafetensorsFile file(path);
  CHECK(file.find("scalar")->shape.empty());
  CHECK(file.find("scalar")->numel() == 1);
  CHECK(file.load("scalar", at::kFloat).dim() == 0);
  CHECK(file.load("scalar", at::kFloat).item<float>() == 3.25f);
  CHECK(file.load("empty_rows", at::kFloat).sizes().vec() == std::vector<int64_t>{0, 3});
  CHECK(file.load("empty_cols", at::kLong).sizes().vec() == std::vector<int64_t>{5, 0});
  CHECK(file.find("empty_cols")->begin == file.find("empty_cols")->end);
  CHECK(at::equal(file.load("transposed", at::kFloat), transposed));
  CHECK(at::equal(file.load("large", at::kFloat), large));
}

TEST_CASE("tensors are packed in the given order with contiguous offsets", "[safetensors][cpu]") {
  TempDir dir;
  const std::string path = dir.file("order.safetensors");
  write_safetensors(
      path, {{"z", at::ones({3}, at::kFloat)}, {"a", at::ones({2, 2}, at::kInt)}, {"m", at::ones({5}, at::kByte)}});
  SafetensorsFile file(path);
  const StHeader& h = file.header();
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[0].name == "z");
  CHECK(h.tensors[1].name == "a");
  CHECK(h.tensors[2].name == "m");
  CHECK(h.tensors[0].begin == 0);
  CHECK(h.tensors[1].begin == h.tensors[0].end);
  CHECK(h.tensors[2].begin == h.tensors[1].end);
  CHECK(h.tensors[2].end == 12 + 16 + 5);
  CHECK(h.data_offset + h.tensors[2].end == fs::file_size(path));  // nothing after the last tensor
}

TEST_CASE("floats are stored as exact f16/bf16 bytes; integers keep their dtype", "[safetensors][cpu]") {
  TempDir dir;
  const at::Tensor values = at::tensor(std::vector<float>{1.0f, -2.5f, 0.1f, 65504.0f});
  const at::Tensor ints = at::tensor(std::vector<int32_t>{70000, -3});
  struct Case {
    StDtype dtype;
    std::vector<uint16_t> bits;
    std::vector<float> decoded;
  };
  // IEEE half: 0.1 rounds to 0x2E66 = 0.0999755859375; 65504 is its largest finite value.
  // bfloat16 (round to nearest even): 0.1 -> 0x3DCD = 0.10009765625; 65504 rounds up to 0x4780 = 65536.
  const std::vector<Case> cases = {
      {StDtype::kF16, {0x3C00, 0xC100, 0x2E66, 0x7BFF}, {1.0f, -2.5f, 0.0999755859375f, 65504.0f}},
      {StDtype::kBF16, {0x3F80, 0xC020, 0x3DCD, 0x4780}, {1.0f, -2.5f, 0.10009765625f, 65536.0f}}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION(st_dtype_name(c.dtype)) {
      const std::string path = dir.file("half.safetensors");
      StWriteOptions options;
      options.dtype = c.dtype;
      write_safetensors(path, {{"v", values}, {"i", ints}}, options);
      SafetensorsFile file(path);
      const StTensorInfo& v = *file.find("v");
      CHECK(v.dtype == c.dtype);
      const std::string bytes = read_bytes(path);
      for (std::size_t k = 0; k < c.bits.size(); ++k) {
        CHECK(u16_at(bytes, file.header().data_offset + v.begin + 2 * k) == c.bits[k]);
      }
      const at::Tensor decoded = file.load("v", at::kFloat);
      for (std::size_t k = 0; k < c.decoded.size(); ++k) {
        CHECK(decoded[static_cast<int64_t>(k)].item<float>() == c.decoded[k]);
      }
      CHECK(file.find("i")->dtype == StDtype::kI32);
      CHECK(at::equal(file.load("i", at::kInt), ints));
    }
  }
}

TEST_CASE("metadata round trips", "[safetensors][cpu]") {
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  StWriteOptions options;
  options.metadata = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\" \\ back"}, {"empty", ""}};
  write_safetensors(path, {{"w", at::zeros({2}, at::kFloat)}}, options);
  SafetensorsFile file(path);
  CHECK(file.header().metadata == options.metadata);

  write_safetensors(path, {{"w", at::zeros({2}, at::kFloat)}});  // no metadata: no __metadata__ key
  CHECK(read_bytes(path).find("__metadata__") == std::string::npos);
  CHECK(SafetensorsFile(path).header().metadata.empty());
}

TEST_CASE("the data section starts 8-byte aligned, the header padded with spaces", "[safetensors][cpu]") {
  TempDir dir;
  const std::string path = dir.file("align.safetensors");
  for (int len = 1; len <= 17; ++len) {
    const std::string name(static_cast<std::size_t>(len), 'x');
    write_safetensors(path, {{name, at::full({3}, static_cast<double>(len), at::kFloat)}});
    const std::string bytes = read_bytes(path);
    SafetensorsFile file(path);
    const uint64_t offset = file.header().data_offset;
    INFO("name length " << len);
    CHECK(offset % 8 == 0);
    const std::string header = bytes.substr(8, offset - 8);
    const std::size_t close = header.rfind('}');
    REQUIRE(close != std::string::npos);
    CHECK(header.size() - close - 1 < 8);
    CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);
    CHECK(file.load(name, at::kFloat)[2].item<float>() == static_cast<float>(len));
  }
}

// ---- writer errors and atomicity ------------------------------------------------------------------

TEST_CASE("write_safetensors rejects bad input and leaves no file behind", "[safetensors][cpu]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const at::Tensor t = at::ones({2}, at::kFloat);

  std::string msg = error_of([&] { write_safetensors(path, {{"w", t}, {"v", t}, {"w", t}}); });
  CHECK_THAT(msg, Contains(path) && Contains("tensor 'w' is given twice"));
  msg = error_of([&] { write_safetensors(path, {{"__metadata__", t}}); });
  CHECK_THAT(msg, Contains(path) && Contains("reserved"));
  msg = error_of([&] { write_safetensors(path, {{"u", at::Tensor()}}); });
  CHECK_THAT(msg, Contains(path) && Contains("tensor 'u' is undefined"));
  msg = error_of([&] { write_safetensors(path, {{"c", at::ones({2}, at::kComplexFloat)}}); });
  CHECK_THAT(msg, Contains(path) && Contains("tensor 'c'") && Contains("cannot store"));
  StWriteOptions int_options;
  int_options.dtype = StDtype::kI32;
  msg = error_of([&] { write_safetensors(path, {{"w", t}}, int_options); });
  CHECK_THAT(msg, Contains(path) && Contains("floating"));
  msg = error_of([&] { write_safetensors(path, {{"bad\xff utf8", t}}); });
  CHECK_THAT(msg, Contains(path) && Contains("header"));
  CHECK(dir.entries().empty());

  const std::string nowhere = dir.file("no/such/dir/x.safetensors");
  msg = error_of([&] { write_safetensors(nowhere, {{"w", t}}); });
  CHECK_THAT(msg, Contains(nowhere) && Contains("No such file or directory"));

  // The target is a directory: refused before anything is written.
  fs::create_directory(dir.file("target"));
  msg = error_of([&] { write_safetensors(dir.file("target"), {{"w", t}}); });
  CHECK_THAT(msg, Contains(dir.file("target") + ": refusing to write a safetensors file over a directory"));
  CHECK(dir.entries() == std::vector<std::string>{"target"});
}

TEST_CASE("write_safetensors replaces an existing file atomically", "[safetensors][cpu]") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_safetensors(path, {{"w", at::full({4}, 1.0, at::kFloat)}});
  SafetensorsFile before(path);  // a mapping of the old file stays valid across the replace
  write_safetensors(path, {{"w", at::full({6}, 2.0, at::kFloat)}, {"extra", at::ones({1}, at::kLong)}});
  CHECK(at::equal(before.load("w", at::kFloat), at::full({4}, 1.0, at::kFloat)));
  SafetensorsFile after(path);
  CHECK(at::equal(after.load("w", at::kFloat), at::full({6}, 2.0, at::kFloat)));
  CHECK(after.find("extra") != nullptr);
  CHECK(dir.entries() == std::vector<std::string>{"w.safetensors"});
}

// ---- reader errors ----------------------------------------------------------------------------------

TEST_CASE("SafetensorsFile reports unusable paths and missing tensors", "[safetensors][cpu]") {
  TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  CHECK_THAT(error_of([&] { SafetensorsFile f(missing); }), Contains(missing) && Contains("No such file"));
  CHECK_THAT(error_of([&] { SafetensorsFile f(dir.file("")); }), Contains("is a directory"));
  const std::string empty = dir.file("empty.safetensors");
  write_bytes(empty, "");
  CHECK_THAT(error_of([&] { SafetensorsFile f(empty); }), Contains(empty) && Contains("empty (0 bytes)"));

  const std::string path = dir.file("ok.safetensors");
  write_safetensors(path, {{"present", at::ones({2}, at::kFloat)}});
  SafetensorsFile file(path);
  CHECK(file.find("absent") == nullptr);
  CHECK_THAT(error_of([&] { file.load("absent", at::kFloat); }),
             Contains(path) && Contains("tensor 'absent' is not in the file"));
}

TEST_CASE("SafetensorsFile moves keep one owner of the mapping", "[safetensors][cpu]") {
  TempDir dir;
  const std::string p1 = dir.file("one.safetensors");
  const std::string p2 = dir.file("two.safetensors");
  write_safetensors(p1, {{"x", at::full({2}, 1.0, at::kFloat)}});
  write_safetensors(p2, {{"y", at::full({3}, 2.0, at::kFloat)}});
  SafetensorsFile a(p1);
  SafetensorsFile b(std::move(a));
  CHECK(a.find("x") == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract here
  CHECK(b.path() == p1);
  CHECK(at::equal(b.load("x", at::kFloat), at::full({2}, 1.0, at::kFloat)));
  SafetensorsFile c(p2);
  b = std::move(c);  // unmaps one.safetensors, takes two.safetensors
  CHECK(b.path() == p2);
  CHECK(b.find("x") == nullptr);
  CHECK(at::equal(b.load("y", at::kFloat), at::full({3}, 2.0, at::kFloat)));
}

// ---- the broken corpus (in memory and on disk) ------------------------------------------------------

TEST_CASE("the corpus base image is valid", "[safetensors][cpu]") {
  const std::string image = make_image(base_header(), kData);
  const StHeader h = parse(image, "base");
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.tensors[0].name == "a");
  CHECK(h.tensors[0].dtype == StDtype::kF32);
  CHECK(h.tensors[1].name == "b");
  CHECK(h.tensors[1].shape == std::vector<int64_t>{4});
  CHECK(h.tensors[1].begin == 24);
  CHECK(h.tensors[1].end == 56);
  CHECK(h.metadata.at("format") == "pt");
  CHECK(h.data_offset == 8 + base_header().size());

  // Accepted on purpose: gaps between tensors, trailing data bytes, an empty tensor anywhere in range,
  // unknown extra fields in an entry, whitespace around the JSON.
  const std::string lenient = R"( {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":[1]},)"
                              R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[4,4]},)"
                              R"("b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}   )";
  const StHeader l = parse(make_image(lenient, std::string(32, '\0')), "lenient");
  REQUIRE(l.tensors.size() == 3);
  CHECK(l.tensors[0].name == "a");
  CHECK(l.tensors[1].name == "e");
  CHECK(l.tensors[2].name == "b");
}

TEST_CASE("broken headers fail naming the file, tensor and field", "[safetensors][cpu]") {
  struct Case {
    const char* what;
    std::string header;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"garbage JSON", "{not json", {"not valid JSON"}},
      {"empty header", "", {"not valid JSON"}},
      {"trailing garbage", base_header() + " x", {"not valid JSON"}},
      {"invalid UTF-8", "{\"a\xff\":{}}", {"not valid JSON"}},
      {"comment", "{/* c */}", {"not valid JSON"}},
      {"not an object", "[1,2]", {"must be a JSON object", "array"}},
      {"metadata not an object", "{\"__metadata__\":[1]," + kEntryA + "}", {"'__metadata__' must be an object"}},
      {"metadata value not a string",
       R"({"__metadata__":{"k":1},)" + kEntryA + "}",
       {"'__metadata__' field 'k' must be a string", "number"}},
      {"entry not an object", with_b("5"), {"tensor 'b'", "entry must be an object", "number"}},
      {"dtype missing", with_b(R"({"shape":[4],"data_offsets":[24,56]})"), {"tensor 'b'", "'dtype' is missing"}},
      {"dtype not a string",
       with_b(R"({"dtype":8,"shape":[4],"data_offsets":[24,56]})"),
       {"tensor 'b'", "'dtype' must be a string"}},
      {"unknown dtype",
       with_b(R"({"dtype":"F8_E4M3","shape":[4],"data_offsets":[24,56]})"),
       {"tensor 'b'", "'dtype'", "unknown", "F8_E4M3"}},
      {"shape missing", with_b(R"({"dtype":"I64","data_offsets":[24,56]})"), {"tensor 'b'", "'shape' is missing"}},
      {"shape not an array",
       with_b(R"({"dtype":"I64","shape":4,"data_offsets":[24,56]})"),
       {"tensor 'b'", "'shape' must be an array"}},
      {"negative dim",
       with_b(R"({"dtype":"I64","shape":[2,-2],"data_offsets":[24,56]})"),
       {"tensor 'b'", "'shape' dim 1 is negative (-2)"}},
      {"float dim",
       with_b(R"({"dtype":"I64","shape":[4.0],"data_offsets":[24,56]})"),
       {"tensor 'b'", "'shape' dim 0 must be an integer"}},
      {"string dim",
       with_b(R"({"dtype":"I64","shape":["4"],"data_offsets":[24,56]})"),
       {"tensor 'b'", "'shape' dim 0 must be an integer", "string"}},
      {"dim past int64",
       with_b(R"({"dtype":"I64","shape":[9223372036854775808],"data_offsets":[24,56]})"),
       {"tensor 'b'", "does not fit in int64"}},
      {"numel overflow",
       with_b(R"({"dtype":"I64","shape":[4294967296,4294967296,2],"data_offsets":[24,56]})"),
       {"tensor 'b'", "'shape' has more elements than fit in 64 bits"}},
      {"numel overflow hidden by a zero dim",
       with_b(R"({"dtype":"I64","shape":[4294967296,4294967296,4,0],"data_offsets":[24,24]})"),
       {"tensor 'b'", "more elements than fit"}},
      {"byte size overflow",
       with_b(R"({"dtype":"I64","shape":[2305843009213693952],"data_offsets":[24,56]})"),
       {"tensor 'b'", "byte size overflows 64 bits"}},
      {"data_offsets missing", with_b(R"({"dtype":"I64","shape":[4]})"), {"tensor 'b'", "'data_offsets' is missing"}},
      {"data_offsets not an array",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":{"b":24}})"),
       {"tensor 'b'", "'data_offsets' must be an array of 2 integers", "object"}},
      {"data_offsets too short",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[24]})"),
       {"tensor 'b'", "'data_offsets' must be an array of 2 integers", "1 elements"}},
      {"data_offsets too long",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[24,56,60]})"),
       {"tensor 'b'", "'data_offsets' must be an array of 2 integers", "3 elements"}},
      {"negative offset",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[-8,24]})"),
       {"tensor 'b'", "'data_offsets' element 0 is negative (-8)"}},
      {"offset not an integer",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[24,"56"]})"),
       {"tensor 'b'", "'data_offsets' element 1 must be an integer"}},
      {"offset past u64",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[24,18446744073709551616]})"),
       {"tensor 'b'", "'data_offsets' element 1 must be an integer"}},
      {"begin after end",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[56,24]})"),
       {"tensor 'b'", "data_offsets [56, 24] begin after end"}},
      {"end past the data section",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[24,900]})"),
       {"tensor 'b': data_offsets [24, 900] run past the end of the data section (56 bytes)"}},
      {"huge offsets",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[18446744073709551584,18446744073709551615]})"),
       {"tensor 'b'", "run past the end of the data section"}},
      {"byte length mismatch",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[24,48]})"),
       {"tensor 'b'", "data_offsets [24, 48] span 24 bytes", "need 32"}},
      {"overlap",
       with_b(R"({"dtype":"I64","shape":[4],"data_offsets":[16,48]})"),
       {"tensor 'b': data_offsets [16, 48] overlap tensor 'a' at [0, 24]"}},
      {"same range twice", with_b(R"({"dtype":"F32","shape":[6],"data_offsets":[0,24]})"), {"overlap tensor 'a'"}},
      {"duplicate tensor name", "{" + kEntryA + "," + kEntryB + "," + kEntryA + "}", {"tensor 'a' is listed twice"}},
      {"duplicate field",
       with_b(R"({"dtype":"I64","dtype":"I64","shape":[4],"data_offsets":[24,56]})"),
       {"entry 'b': field 'dtype' is given twice"}},
      {"duplicate metadata key", R"({"__metadata__":{"k":"1","k":"2"}})", {"field 'k' is given twice"}},
      {"nesting past the depth bound",
       "{\"__metadata__\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
       {"nests deeper than 128 levels"}},
      {"number out of range",
       with_b(R"({"dtype":"I64","shape":[4e999],"data_offsets":[24,56]})"),
       {"not valid JSON: a number is out of range", "4e999"}},
  };
  TempDir dir;
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      const std::string image = make_image(c.header, kData);
      const std::string msg = parse_error(image, "mem://broken.safetensors");
      CHECK_THAT(msg, Contains("mem://broken.safetensors: "));
      for (const std::string& needle : c.needles) CHECK_THAT(msg, Contains(needle));

      // The same bytes through a real file: the message names the path.
      const std::string path = dir.file("broken.safetensors");
      write_bytes(path, image);
      const std::string file_msg = error_of([&] { SafetensorsFile f(path); });
      CHECK_THAT(file_msg, Contains(path + ": "));
      for (const std::string& needle : c.needles) CHECK_THAT(file_msg, Contains(needle));
    }
  }
}

TEST_CASE("broken length prefixes fail naming the file", "[safetensors][cpu]") {
  const std::string image = make_image(base_header(), kData);
  for (std::size_t n = 0; n < 8; ++n) {
    CHECK_THAT(parse_error(image.substr(0, n), "short"),
               Contains("short: file is " + std::to_string(n) + " bytes, shorter than the 8-byte"));
  }
  std::string past = image;
  past.replace(0, 8, le_u64(image.size()));
  CHECK_THAT(parse_error(past, "past"),
             Contains("past: header length " + std::to_string(image.size()) + " runs past the end of the file (" +
                      std::to_string(image.size()) + " bytes)"));
  std::string absurd = image;
  absurd.replace(0, 8, le_u64(uint64_t{1} << 63));
  CHECK_THAT(parse_error(absurd, "absurd"), Contains("absurd: header length 9223372036854775808 exceeds"));
}

TEST_CASE("every truncation of a valid file fails", "[safetensors][cpu]") {
  const std::string image = make_image(base_header(), kData);
  const std::size_t data_offset = 8 + base_header().size();
  REQUIRE_NOTHROW(parse(image, "whole"));
  for (std::size_t n = 0; n < image.size(); ++n) {
    INFO("truncated to " << n << " of " << image.size() << " bytes");
    const std::string msg = parse_error(image.substr(0, n), "cut");
    CHECK_THAT(msg, Contains("cut: "));
    if (n < 8) {
      CHECK_THAT(msg, Contains("shorter than the 8-byte"));
    } else if (n < data_offset) {
      CHECK_THAT(msg, Contains("header length") && Contains("runs past the end of the file"));
    } else {
      CHECK_THAT(msg, Contains("data_offsets") && Contains("run past the end of the data section (" +
                                                           std::to_string(n - data_offset) + " bytes)"));
    }
  }
}

TEST_CASE("committed fixtures load or fail as documented", "[safetensors][cpu]") {
  const std::string dir = std::string(ORBIT_TEST_DATA_DIR) + "/safetensors/";

  // valid.safetensors was written by an independent Python script; its data section is unaligned.
  SafetensorsFile valid(dir + "valid.safetensors");
  CHECK(valid.header().data_offset % 8 != 0);
  CHECK(valid.header().metadata.at("format") == "pt");
  CHECK(at::equal(valid.load("a", at::kFloat), at::arange(6, at::kFloat).reshape({2, 3})));
  CHECK(at::equal(valid.load("b", at::kLong), at::tensor(std::vector<int64_t>{-1, 0, 1, int64_t{1} << 40})));
  CHECK(valid.find("c")->dtype == StDtype::kBF16);
  CHECK(at::equal(valid.load("c", at::kFloat), at::tensor(std::vector<float>{1.0f, -2.5f})));

  const std::vector<std::pair<std::string, std::vector<std::string>>> broken = {
      {"truncated", {"tensor 'b': data_offsets [24, 56] run past the end of the data section (50 bytes)"}},
      {"header_past_eof", {"header length 1000 runs past the end of the file (89 bytes)"}},
      {"bad_json", {"not valid JSON"}},
      {"offsets_past_end",
       {"tensor 'model.norm.weight': data_offsets [0, 900] run past the end of the data section (512 bytes)"}},
      {"overlap", {"tensor 'b': data_offsets [16, 48] overlap tensor 'a' at [0, 24]"}},
      {"wrong_length", {"tensor 'a'", "span 24 bytes", "need 16"}},
      {"unknown_dtype", {"tensor 'a'", "'dtype'", "F8_E4M3"}},
      {"negative_dim", {"tensor 'a'", "'shape' dim 0 is negative (-1)"}},
      {"duplicate_name", {"tensor 'w' is listed twice"}},
      {"metadata_not_string", {"'__metadata__' field 'step' must be a string"}},
  };
  for (const auto& [name, needles] : broken) {
    DYNAMIC_SECTION(name) {
      const std::string path = dir + name + ".safetensors";
      REQUIRE(fs::file_size(path) < 1024);
      const std::string msg = error_of([&] { SafetensorsFile f(path); });
      CHECK_THAT(msg, Contains(path + ": "));
      for (const std::string& needle : needles) CHECK_THAT(msg, Contains(needle));
    }
  }
}

}  // namespace ORBIT_TEST_FILE
