// Content and patch keys (docs/ARCHITECTURE.md §6). Every hashed record starts with a domain tag and frames each
// field with its length, so different inputs never produce the same byte stream.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/store.h"

namespace orbit {

namespace {

void put_field(Sha256& h, std::string_view text) {
  h.update_u64(text.size());
  h.update(text);
}

void put_ints(Sha256& h, const std::vector<int64_t>& values) {
  h.update_u64(values.size());
  for (int64_t v : values) h.update_u64(static_cast<uint64_t>(v));
}

Sha256& begin(Sha256& h, const char* tag, const std::string& model_fingerprint) {
  ORBIT_CHECK(!model_fingerprint.empty(), tag << ": the model fingerprint is empty");
  put_field(h, tag);
  put_field(h, model_fingerprint);
  return h;
}

// The grid relative to its per-coordinate minimum: position-free, shape-preserving.
std::vector<int64_t> normalized_grid(const std::vector<int64_t>& grid, int64_t dims, const char* what) {
  ORBIT_CHECK(dims >= 1, what << ": grid_dims must be >= 1, got " << dims);
  ORBIT_CHECK(grid.size() % static_cast<size_t>(dims) == 0,
              what << ": grid has " << grid.size() << " values, not a multiple of grid_dims " << dims);
  std::vector<int64_t> out(grid);
  for (int64_t c = 0; c < dims; ++c) {
    int64_t lowest = std::numeric_limits<int64_t>::max();
    for (size_t i = static_cast<size_t>(c); i < grid.size(); i += static_cast<size_t>(dims)) {
      lowest = std::min(lowest, grid[i]);
    }
    for (size_t i = static_cast<size_t>(c); i < grid.size(); i += static_cast<size_t>(dims)) out[i] -= lowest;
  }
  return out;
}

void check_key(const std::string& key, const char* what) {
  ORBIT_CHECK(is_store_key(key), what << ": '" << key << "' is not a store key (64 lowercase hex characters)");
}

}  // namespace

bool is_store_key(const std::string& key) {
  if (key.size() != 64) return false;
  return std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string chunk_key_tokens(const std::string& model_fingerprint, const std::vector<int64_t>& tokens) {
  Sha256 h;
  begin(h, "orbit.chunk.tokens.v1", model_fingerprint);
  put_ints(h, tokens);
  return h.hex_digest();
}

std::string chunk_key_media(const std::string& model_fingerprint, const std::string& media_digest,
                            const std::vector<int64_t>& grid, int64_t grid_dims) {
  ORBIT_CHECK(!media_digest.empty(), "chunk_key_media: media_digest is empty");
  Sha256 h;
  begin(h, "orbit.chunk.media.v1", model_fingerprint);
  put_field(h, media_digest);
  h.update_u64(static_cast<uint64_t>(grid_dims));
  put_ints(h, normalized_grid(grid, grid_dims, "chunk_key_media"));
  return h.hex_digest();
}

std::string chunk_key_embeddings(const std::string& model_fingerprint, const EmbeddingBytes& embeddings,
                                 const std::vector<int64_t>& grid, int64_t grid_dims) {
  ORBIT_CHECK(embeddings.data != nullptr || embeddings.size == 0, "chunk_key_embeddings: data is null");
  ORBIT_CHECK(!embeddings.dtype.empty(), "chunk_key_embeddings: dtype is empty");
  ORBIT_CHECK(embeddings.rows >= 0 && embeddings.cols >= 0,
              "chunk_key_embeddings: negative shape [" << embeddings.rows << ", " << embeddings.cols << "]");
  Sha256 h;
  begin(h, "orbit.chunk.embeddings.v1", model_fingerprint);
  put_field(h, embeddings.dtype);
  h.update_u64(static_cast<uint64_t>(embeddings.rows)).update_u64(static_cast<uint64_t>(embeddings.cols));
  h.update_u64(embeddings.size);
  h.update(embeddings.data, embeddings.size);
  h.update_u64(grid.empty() ? 0 : static_cast<uint64_t>(grid_dims));
  put_ints(h, grid.empty() ? grid : normalized_grid(grid, grid_dims, "chunk_key_embeddings"));
  return h.hex_digest();
}

namespace {

// chain = H(chain, key), written over `chain` (a signer pushes one key per window instance: no allocation).
void chain_step(std::string& chain, const std::string& key) {
  Sha256 h;
  put_field(h, chain);
  put_field(h, key);
  hex_encode(h.digest(), chain);
}

// Limb `limb` (0 = the most significant) of a digest read as a 256-bit big-endian number: the same value
// the digest's hex characters [16·limb, 16·limb + 16) spell.
uint64_t digest_limb(const Sha256::Digest& d, std::size_t limb) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | d[limb * 8 + i];
  return v;
}

}  // namespace

ContextSigner::ContextSigner(std::size_t prefix) : prefix_(prefix) {
  Sha256 h;
  put_field(h, "orbit.context.exact.v2");
  chain_ = h.hex_digest();
  if (prefix_ == 0) prefix_chain_ = chain_;
}

void ContextSigner::push(const std::string& key) {
  check_key(key, "context signature");
  chain_step(chain_, key);
  ++size_;
  if (size_ == prefix_) {
    prefix_chain_ = chain_;
  } else if (size_ > prefix_) {
    Sha256 h;
    put_field(h, "orbit.context.member.v2");
    put_field(h, key);
    const Sha256::Digest d = h.digest();
    uint64_t carry = 0;
    for (std::size_t limb = 0; limb < 4; ++limb) {  // limb 0 is the least significant
      const uint64_t add = digest_limb(d, 3 - limb);
      const uint64_t s1 = sum_[limb] + add;
      const uint64_t c1 = s1 < add ? 1 : 0;
      const uint64_t s2 = s1 + carry;
      carry = c1 + (s2 < carry ? 1 : 0);
      sum_[limb] = s2;
    }
  }
}

std::string ContextSigner::exact() const { return chain_; }

std::string ContextSigner::orbit() const {
  Sha256 h;
  put_field(h, "orbit.context.orbit.v2");
  put_field(h, size_ <= prefix_ ? chain_ : prefix_chain_);
  h.update_u64(size_ <= prefix_ ? 0 : size_ - prefix_);
  for (uint64_t limb : sum_) h.update_u64(limb);
  return h.hex_digest();
}

std::string exact_signature(const std::vector<std::string>& context) {
  ContextSigner s;
  for (const std::string& key : context) s.push(key);
  return s.exact();
}

std::string orbit_signature(const std::vector<std::string>& prefix, const std::vector<std::string>& antecedents) {
  ContextSigner s(prefix.size());
  for (const std::string& key : prefix) s.push(key);
  for (const std::string& key : antecedents) s.push(key);
  return s.orbit();
}

std::string patch_key(const PatchKey& key) {
  check_key(key.chunk, "patch_key: chunk");
  check_key(key.context_signature, "patch_key: context_signature");
  ORBIT_CHECK(!key.variant.empty(), "patch_key: variant is empty");
  ORBIT_CHECK(key.rank_k >= 0 && key.rank_v >= 0,
              "patch_key: ranks must be >= 0, got k " << key.rank_k << ", v " << key.rank_v);
  Sha256 h;
  put_field(h, "orbit.patch.v1");
  put_field(h, key.chunk);
  put_field(h, key.context_signature);
  put_field(h, key.variant);
  h.update_u64(static_cast<uint64_t>(key.rank_k)).update_u64(static_cast<uint64_t>(key.rank_v));
  return h.hex_digest();
}

const char* store_tier_name(StoreTier tier) noexcept {
  switch (tier) {
    case StoreTier::kDevice: return "device";
    case StoreTier::kHost: return "host";
    case StoreTier::kDisk: return "disk";
    case StoreTier::kRemote: return "remote";
  }
  return "?";
}

const char* entry_kind_name(EntryKind kind) noexcept {
  switch (kind) {
    case EntryKind::kCanonical: return "canonical";
    case EntryKind::kPatch: return "patch";
    case EntryKind::kEmbedding: return "embedding";
    case EntryKind::kOther: return "other";
  }
  return "?";
}

const char* blob_encoding_name(BlobEncoding encoding) noexcept {
  switch (encoding) {
    case BlobEncoding::kExact: return "exact";
    case BlobEncoding::kInt8: return "int8";
  }
  return "?";
}

}  // namespace orbit
