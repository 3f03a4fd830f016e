// A chunk's patch directory in the store (engine/patch_directory.h): its value round-trips the records the
// catalog keeps of formed patches (contexts as key hashes and tokens, residual, sensitivity, exactness), and
// its decoder gives nothing for a value that is another chunk's, another kind or damaged. The end-to-end case
// (an engine reopened on the store reads a stale patch the first formed) is tests/python/test_patch_reopen.py.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "engine/patch_directory.h"
#include "plan/window_meta.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::detail;

namespace {

PatchRecord record(const std::string& key, std::vector<std::pair<uint64_t, double>> context, double residual,
                   int64_t rank = 16) {
  PatchRecord r;
  r.key = key;
  r.variant = "full";
  r.context_tokens = std::move(context);
  for (const auto& [hash, tokens] : r.context_tokens) r.context_total += tokens;
  r.residual = residual;
  r.sensitivity = 0.25;
  r.rank_k = rank;
  r.rank_v = rank + 1;
  return r;
}

// The value with one tensor or attribute replaced.
store::ValuePtr edited(const store::StoredValue& v, const std::string& name, const at::Tensor& tensor,
                       const std::string& attr = "", const std::string& text = "") {
  std::vector<store::NamedTensor> tensors;
  for (const store::NamedTensor& t : v.tensors) tensors.push_back({t.name, t.name == name ? tensor : t.tensor});
  std::map<std::string, std::string> attrs = v.attrs;
  if (!attr.empty()) attrs[attr] = text;
  return store::make_value(v.kind, tensors, attrs);
}

}  // namespace

TEST_CASE("a patch directory round-trips its records and refuses what does not fit", "[store][cpu]") {
  const std::string chunk(64, 'c');
  const std::vector<PatchRecord> records = {
      record(std::string(64, 'a'), {{context_key_hash("x"), 48}, {~uint64_t{0}, 8}}, 0.5),
      record(std::string(64, 'b'), {}, 0, 4)};
  const store::ValuePtr v = patch_directory_value(chunk, records);
  CHECK(patch_directory_key(chunk).size() == 64);
  CHECK(patch_directory_key(chunk) != patch_directory_key(std::string(64, 'd')));
  const std::vector<PatchRecord> back = decode_patch_directory(*v, chunk);
  REQUIRE(back.size() == 2);
  for (std::size_t i = 0; i < back.size(); ++i) {
    CHECK(back[i].key == records[i].key);
    CHECK(back[i].variant == records[i].variant);
    CHECK(back[i].context_tokens == records[i].context_tokens);  // hashes past int64's range kept bit for bit
    CHECK(back[i].context_total == records[i].context_total);
    CHECK(back[i].residual == records[i].residual);
    CHECK(back[i].sensitivity == records[i].sensitivity);
    CHECK(back[i].rank_k == records[i].rank_k);
    CHECK(back[i].rank_v == records[i].rank_v);
    CHECK(back[i].context.empty());
  }
  CHECK(decode_patch_directory(*v, std::string(64, 'd')).empty());  // another chunk's
  CHECK(decode_patch_directory(*edited(*v, "", {}, "version", "0"), chunk).empty());
  CHECK(decode_patch_directory(*edited(*v, "", {}, "keys", "only-one"), chunk).empty());
  CHECK(decode_patch_directory(*edited(*v, "counts", at::tensor(std::vector<int64_t>{2, 1})), chunk).empty());
  CHECK(decode_patch_directory(*edited(*v, "counts", at::tensor(std::vector<int64_t>{-1, 3})), chunk).empty());
  CHECK(decode_patch_directory(*edited(*v, "tokens", at::tensor(std::vector<double>{1, -2})), chunk).empty());
  const at::Tensor nan_facts = at::full({2, 3}, std::nan(""), at::kDouble);
  CHECK(decode_patch_directory(*edited(*v, "facts", nan_facts), chunk).empty());
  CHECK(decode_patch_directory(*edited(*v, "exact", at::zeros({2}, at::kInt)), chunk).empty());
  // A factor patch keeps at least one direction; the ranks are what a stale lookup filters on.
  CHECK(decode_patch_directory(*edited(*v, "ranks", at::zeros({2, 2}, at::kLong)), chunk).empty());
  CHECK(decode_patch_directory(*edited(*v, "ranks", at::ones({2}, at::kLong)), chunk).empty());
  // A residual is a share of the deficit's energy: 50 would price every read of the patch as a near-total loss.
  const at::Tensor big_residual = at::tensor(std::vector<double>{56, 50, 0.25, 0, 0, 0.25}, at::kDouble).view({2, 3});
  CHECK(decode_patch_directory(*edited(*v, "facts", big_residual), chunk).empty());
  const at::Tensor fine = at::tensor(std::vector<double>{56, 1, 0.25, 0, -1, -1}, at::kDouble).view({2, 3});
  CHECK(decode_patch_directory(*edited(*v, "facts", fine), chunk).size() == 2);
}

}  // namespace ORBIT_TEST_FILE
