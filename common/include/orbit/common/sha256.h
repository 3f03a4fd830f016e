// SHA-256 through OpenSSL's libcrypto: identity of content and models is a cryptographic hash
// (STYLE.md 7), never position and never std::hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace orbit {

// Incremental SHA-256. Not thread-safe; one instance per thread.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // Appends an integer in little-endian byte order (portable framing for hashed records).
  Sha256& update_u64(std::uint64_t value);
  // Finishes the hash and returns 64 lowercase hex characters. The object cannot be updated after.
  std::string hex_digest();

 private:
  struct State;
  std::unique_ptr<State> state_;
  bool finished_ = false;
};

// One-shot helper.
std::string sha256_hex(std::string_view bytes);

}  // namespace orbit
