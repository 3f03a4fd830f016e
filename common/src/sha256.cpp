#include "orbit/common/sha256.h"

#include <openssl/evp.h>
#include <openssl/opensslv.h>

#include <vector>

#include "orbit/common/error.h"

namespace orbit {

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

// Finished contexts of this thread, ready for EVP_DigestInit_ex again. A new context is two allocations
// and a reused one none, which matters where the planner signs every instance of a large window. A
// context may be released on another thread than the one it came from: it is not tied to a thread.
struct ContextPool {
  static constexpr std::size_t kMaxKept = 16;
  std::vector<EVP_MD_CTX*> kept;
  ~ContextPool();
};

// Set once this thread's pool is destroyed (a Sha256 destroyed later, during thread or program exit,
// frees its context instead). A plain bool: it outlives the pool.
thread_local bool t_pool_gone = false;
thread_local ContextPool t_pool;

ContextPool::~ContextPool() {
  t_pool_gone = true;
  for (EVP_MD_CTX* ctx : kept) EVP_MD_CTX_free(ctx);
}

EVP_MD_CTX* acquire_context() {
  if (!t_pool_gone && !t_pool.kept.empty()) {
    EVP_MD_CTX* ctx = t_pool.kept.back();
    t_pool.kept.pop_back();
    return ctx;
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ORBIT_CHECK(ctx != nullptr, "sha256: EVP_MD_CTX_new failed (out of memory)");
  return ctx;
}

void release_context(EVP_MD_CTX* ctx) noexcept {
  if (ctx == nullptr) return;
  if (!t_pool_gone && t_pool.kept.size() < ContextPool::kMaxKept) {
    try {
      t_pool.kept.push_back(ctx);  // capacity for kMaxKept is reserved below; this cannot throw then
      return;
    } catch (...) {
    }
  }
  EVP_MD_CTX_free(ctx);
}

}  // namespace

Sha256::Sha256() {
  if (!t_pool_gone && t_pool.kept.capacity() < ContextPool::kMaxKept) t_pool.kept.reserve(ContextPool::kMaxKept);
  ctx_ = acquire_context();
  if (EVP_DigestInit_ex(ctx_, sha256_method(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    ctx_ = nullptr;
    ORBIT_CHECK(false, "sha256: EVP_DigestInit_ex failed");
  }
}

Sha256::~Sha256() { release_context(ctx_); }

Sha256& Sha256::update(const void* data, std::size_t size) {
  ORBIT_CHECK(!finished_, "sha256: update() after the digest was taken");
  if (size > 0) ORBIT_CHECK(EVP_DigestUpdate(ctx_, data, size) == 1, "sha256: EVP_DigestUpdate failed");
  return *this;
}

Sha256& Sha256::update_u64(std::uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  return update(bytes, sizeof bytes);
}

Sha256::Digest Sha256::digest() {
  ORBIT_CHECK(!finished_, "sha256: the digest was already taken");
  finished_ = true;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ORBIT_CHECK(EVP_DigestFinal_ex(ctx_, out, &length) == 1 && length == 32, "sha256: EVP_DigestFinal_ex failed");
  Digest d;
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = out[i];
  return d;
}

std::string Sha256::hex_digest() {
  std::string out;
  hex_encode(digest(), out);
  return out;
}

void hex_encode(const Sha256::Digest& digest, std::string& out) {
  static const char* kHex = "0123456789abcdef";
  out.resize(2 * digest.size());
  for (std::size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
}

std::string sha256_hex(std::string_view bytes) { return Sha256().update(bytes).hex_digest(); }

}  // namespace orbit
