#include "orbit/store/remote_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "orbit/common/error.h"

namespace orbit::store {

namespace {

constexpr char kMarker[16] = {'o', 'r', 'b', 'i', 't', '-', 'h', 'm', 'a', 'c', '-', 'v', '1', '\0', '\0', '\0'};
constexpr std::size_t kTagBytes = 32;
static_assert(sizeof kMarker + kTagBytes == kRemoteSealBytes, "the seal is the marker and the tag");

void append_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// HMAC-SHA256(secret, domain ‖ |key| ‖ key ‖ |blob| ‖ blob): lengths framed so no two (key, blob) pairs
// hash the same bytes; the domain tells values and manifests apart.
std::array<unsigned char, kTagBytes> tag_of(const std::string& secret, const std::string& key, std::string_view blob,
                                            const char* domain = "orbit.remote-hmac.v1") {
  std::string head = domain;
  append_u64(head, key.size());
  head += key;
  append_u64(head, blob.size());
  std::array<unsigned char, kTagBytes> tag{};
  std::size_t length = 0;
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  const bool ok =
      ctx != nullptr &&
      EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(head.data()), head.size()) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(blob.data()), blob.size()) == 1 &&
      EVP_MAC_final(ctx, tag.data(), &length, tag.size()) == 1;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  ORBIT_CHECK(ok && length == kTagBytes, "remote: HMAC-SHA256 failed in OpenSSL");
  return tag;
}

constexpr const char* kManifestDomain = "orbit.remote-manifest-hmac.v1";
constexpr std::size_t kManifestTagHex = 2 * kTagBytes;

std::string hex(const std::array<unsigned char, kTagBytes>& tag) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : tag) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

}  // namespace

std::string seal_remote_manifest(const std::string& secret, const std::string& key, const std::string& manifest) {
  if (secret.empty()) return manifest;
  return manifest + " " + hex(tag_of(secret, key, manifest, kManifestDomain));
}

Result<std::string_view> open_remote_manifest(const std::string& secret, const std::string& key,
                                              std::string_view text) {
  if (secret.empty()) return text;
  if (text.size() <= kManifestTagHex || text[text.size() - kManifestTagHex - 1] != ' ') {
    return Status::refused("remote manifest of key " + key +
                           " carries no authentication tag (written without the remote secret)");
  }
  const std::string_view manifest = text.substr(0, text.size() - kManifestTagHex - 1);
  const std::string expected = hex(tag_of(secret, key, manifest, kManifestDomain));
  if (CRYPTO_memcmp(expected.data(), text.data() + manifest.size() + 1, kManifestTagHex) != 0) {
    return Status::refused("remote manifest of key " + key +
                           ": its authentication tag does not verify (another secret, or altered)");
  }
  return manifest;
}

std::string seal_remote_value(const std::string& secret, const std::string& key, std::string blob) {
  if (secret.empty()) return blob;
  const std::array<unsigned char, kTagBytes> tag = tag_of(secret, key, blob);
  blob.append(kMarker, sizeof kMarker);
  blob.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  return blob;
}

Result<std::string_view> open_remote_value(const std::string& secret, const std::string& key, std::string_view value) {
  const bool sealed = value.size() >= kRemoteSealBytes &&
                      std::memcmp(value.data() + value.size() - kRemoteSealBytes, kMarker, sizeof kMarker) == 0;
  const std::string_view blob = sealed ? value.substr(0, value.size() - kRemoteSealBytes) : value;
  if (secret.empty()) return blob;
  if (!sealed) {
    return Status::refused("remote value of key " + key +
                           " carries no authentication tag (written without the remote secret)");
  }
  const std::array<unsigned char, kTagBytes> expected = tag_of(secret, key, blob);
  if (CRYPTO_memcmp(expected.data(), value.data() + value.size() - kTagBytes, kTagBytes) != 0) {
    return Status::refused("remote value of key " + key +
                           ": its authentication tag does not verify (another secret, or altered)");
  }
  return blob;
}

}  // namespace orbit::store
