#include "engine/patch_directory.h"

#include <ATen/ATen.h>

#include <cmath>
#include <sstream>

#include "orbit/common/sha256.h"

namespace orbit::detail {

namespace {

constexpr char kDirectoryContent[] = "patch-directory";

std::string lines(const std::vector<PatchRecord>& records, std::string PatchRecord::*field) {
  std::string out;
  for (std::size_t i = 0; i < records.size(); ++i) out += (i ? "\n" : "") + records[i].*field;
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  if (!text.empty() && text.back() == '\n') out.push_back("");
  return out;
}

std::string attr(const store::StoredValue& value, const char* name) {
  const auto it = value.attrs.find(name);
  return it == value.attrs.end() ? std::string() : it->second;
}

// The tensor `name` of `dtype` with `n` rows (and `cols` columns when cols > 0), or null.
const at::Tensor* column(const store::StoredValue& value, const char* name, at::ScalarType dtype, int64_t n,
                         int64_t cols = 0) {
  const at::Tensor* t = value.find(name);
  if (t == nullptr || t->scalar_type() != dtype || t->dim() != (cols > 0 ? 2 : 1) || t->size(0) != n) return nullptr;
  if (cols > 0 && t->size(1) != cols) return nullptr;
  return t;
}

// -1 (unknown) or a measured value: a residual is a share of the deficit's energy (at most 1), a sensitivity a
// ratio of energies (any size >= 0).
bool valid_residual(double x) { return x == -1 || (x >= 0 && x <= 1 + 1e-6); }
bool valid_sensitivity(double x) { return std::isfinite(x) && (x == -1 || x >= 0); }

}  // namespace

std::string patch_directory_key(const std::string& chunk_key) {
  Sha256 h;
  const std::string tag = "orbit/patch-directory";
  h.update_u64(tag.size()).update(tag);
  h.update_u64(static_cast<uint64_t>(kPatchDirectoryVersion));
  h.update_u64(chunk_key.size()).update(chunk_key);
  return h.hex_digest();
}

store::ValuePtr patch_directory_value(const std::string& chunk_key, const std::vector<PatchRecord>& records) {
  const int64_t n = static_cast<int64_t>(records.size());
  int64_t entries = 0;
  for (const PatchRecord& r : records) entries += static_cast<int64_t>(r.context_tokens.size());
  at::Tensor counts = at::empty({n}, at::kLong), exact = at::empty({n}, at::kLong);
  at::Tensor facts = at::empty({n, 3}, at::kDouble), ranks = at::empty({n, 2}, at::kLong);
  at::Tensor hashes = at::empty({entries}, at::kLong), tokens = at::empty({entries}, at::kDouble);
  int64_t at_entry = 0;
  for (int64_t i = 0; i < n; ++i) {
    const PatchRecord& r = records[static_cast<std::size_t>(i)];
    counts.data_ptr<int64_t>()[i] = static_cast<int64_t>(r.context_tokens.size());
    exact.data_ptr<int64_t>()[i] = r.exact ? 1 : 0;
    double* f = facts.data_ptr<double>() + 3 * i;
    f[0] = r.context_total;
    f[1] = r.residual;
    f[2] = r.sensitivity;
    ranks.data_ptr<int64_t>()[2 * i] = r.rank_k;
    ranks.data_ptr<int64_t>()[2 * i + 1] = r.rank_v;
    for (const auto& [hash, count] : r.context_tokens) {
      hashes.data_ptr<int64_t>()[at_entry] = static_cast<int64_t>(hash);
      tokens.data_ptr<double>()[at_entry++] = count;
    }
  }
  return store::make_value(EntryKind::kOther,
                           {{"counts", counts},
                            {"hashes", hashes},
                            {"tokens", tokens},
                            {"facts", facts},
                            {"exact", exact},
                            {"ranks", ranks}},
                           {{"content", kDirectoryContent},
                            {"version", std::to_string(kPatchDirectoryVersion)},
                            {"chunk", chunk_key},
                            {"keys", lines(records, &PatchRecord::key)},
                            {"variants", lines(records, &PatchRecord::variant)}},
                           /*copy=*/false);
}

std::vector<PatchRecord> decode_patch_directory(const store::StoredValue& value, const std::string& chunk_key) {
  if (value.kind != EntryKind::kOther || attr(value, "content") != kDirectoryContent ||
      attr(value, "version") != std::to_string(kPatchDirectoryVersion) || attr(value, "chunk") != chunk_key) {
    return {};
  }
  const std::vector<std::string> keys = split_lines(attr(value, "keys"));
  const std::vector<std::string> variants = split_lines(attr(value, "variants"));
  const int64_t n = static_cast<int64_t>(keys.size());
  const at::Tensor* counts = column(value, "counts", at::kLong, n);
  const at::Tensor* facts = column(value, "facts", at::kDouble, n, 3);
  const at::Tensor* exact = column(value, "exact", at::kLong, n);
  const at::Tensor* ranks = column(value, "ranks", at::kLong, n, 2);
  if (variants.size() != keys.size() || counts == nullptr || facts == nullptr || exact == nullptr || ranks == nullptr) {
    return {};
  }
  int64_t entries = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = counts->data_ptr<int64_t>()[i];
    if (c < 0 || c > (int64_t{1} << 24)) return {};
    entries += c;
  }
  const at::Tensor* hashes = column(value, "hashes", at::kLong, entries);
  const at::Tensor* tokens = column(value, "tokens", at::kDouble, entries);
  if (hashes == nullptr || tokens == nullptr || value.tensors.size() != 6) return {};
  std::vector<PatchRecord> out;
  int64_t at_entry = 0;
  for (int64_t i = 0; i < n; ++i) {
    PatchRecord r;
    r.key = keys[static_cast<std::size_t>(i)];
    r.variant = variants[static_cast<std::size_t>(i)];
    r.exact = exact->data_ptr<int64_t>()[i] != 0;
    const double* f = facts->data_ptr<double>() + 3 * i;
    r.context_total = f[0];
    r.residual = f[1];
    r.sensitivity = f[2];
    r.rank_k = ranks->data_ptr<int64_t>()[2 * i];
    r.rank_v = ranks->data_ptr<int64_t>()[2 * i + 1];
    if (r.rank_k < 1 || r.rank_v < 1 || r.key.empty() || !std::isfinite(r.context_total) || r.context_total < 0 ||
        !valid_residual(r.residual) || !valid_sensitivity(r.sensitivity)) {
      return {};
    }
    for (int64_t e = 0; e < counts->data_ptr<int64_t>()[i]; ++e, ++at_entry) {
      const double t = tokens->data_ptr<double>()[at_entry];
      if (!std::isfinite(t) || t < 0) return {};
      r.context_tokens.emplace_back(static_cast<uint64_t>(hashes->data_ptr<int64_t>()[at_entry]), t);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace orbit::detail
