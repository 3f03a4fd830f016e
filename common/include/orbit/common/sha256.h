// SHA-256 through OpenSSL's libcrypto: identity of content and models is a cryptographic hash
// (docs/ARCHITECTURE.md §6), never position and never std::hash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace orbit {

// Incremental SHA-256. Not thread-safe; one instance per thread. The planner hashes a few keys per window
// instance and operation, so a hash allocates nothing of its own: the OpenSSL context comes from a small
// per-thread pool and goes back to it when the object is destroyed (OpenSSL still allocates its digest
// state once per hash).
class Sha256 {
 public:
  using Digest = std::array<unsigned char, 32>;

  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // Appends an integer in little-endian byte order (portable framing for hashed records).
  Sha256& update_u64(std::uint64_t value);
  // Finishes the hash and returns its 32 bytes. The object cannot be updated or finished again after.
  Digest digest();
  // Finishes the hash and returns 64 lowercase hex characters (digest(), hex-encoded).
  std::string hex_digest();

 private:
  evp_md_ctx_st* ctx_ = nullptr;
  bool finished_ = false;
};

// 64 lowercase hex characters of `digest`, written over `out` (no allocation once `out` has held a key).
void hex_encode(const Sha256::Digest& digest, std::string& out);

// One-shot helper.
std::string sha256_hex(std::string_view bytes);

}  // namespace orbit
