#include "orbit/common/sha256.h"

#include <openssl/evp.h>
#include <openssl/opensslv.h>

#include "orbit/common/error.h"

namespace orbit {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

namespace {

// The digest method, looked up once. On OpenSSL 3 `EVP_sha256()` is a placeholder that every
// EVP_DigestInit_ex resolves again through the provider registry (a fetch under a lock); the planner hashes
// a few keys per window instance, so that lookup was a tenth of a large window's planning time.
const EVP_MD* sha256_method() {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  ORBIT_CHECK(md != nullptr, "sha256: EVP_MD_fetch(SHA256) failed (no default provider?)");
  return md;
#else
  return EVP_sha256();
#endif
}

}  // namespace

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  ORBIT_CHECK(state_->ctx != nullptr, "sha256: EVP_MD_CTX_new failed (out of memory)");
  ORBIT_CHECK(EVP_DigestInit_ex(state_->ctx, sha256_method(), nullptr) == 1, "sha256: EVP_DigestInit_ex failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->ctx); }

Sha256& Sha256::update(const void* data, std::size_t size) {
  ORBIT_CHECK(!finished_, "sha256: update() after hex_digest()");
  if (size > 0) ORBIT_CHECK(EVP_DigestUpdate(state_->ctx, data, size) == 1, "sha256: EVP_DigestUpdate failed");
  return *this;
}

Sha256& Sha256::update_u64(std::uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  return update(bytes, sizeof bytes);
}

std::string Sha256::hex_digest() {
  ORBIT_CHECK(!finished_, "sha256: hex_digest() called twice");
  finished_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ORBIT_CHECK(EVP_DigestFinal_ex(state_->ctx, digest, &length) == 1, "sha256: EVP_DigestFinal_ex failed");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) { return Sha256().update(bytes).hex_digest(); }

}  // namespace orbit
