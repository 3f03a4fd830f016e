#include "serve/http/api_keys.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"

namespace orbit::serve {

namespace {

ApiKeys::Digest digest_of(const std::string& key) { return Sha256().update(key).digest(); }

// Whether `key` can be sent as it is in `Authorization: Bearer KEY`: no space (HTTP strips the value's ends and
// the scheme's separator is a space) and no control character.
bool sendable(const std::string& key) {
  for (const char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return false;
  }
  return true;
}

bool bearer_scheme(const std::string& value) {
  static const char kScheme[] = "bearer ";
  if (value.size() < sizeof kScheme - 1) return false;
  for (std::size_t i = 0; i + 1 < sizeof kScheme; ++i) {
    if (static_cast<char>(std::tolower(static_cast<unsigned char>(value[i]))) != kScheme[i]) return false;
  }
  return true;
}

}  // namespace

void ApiKeys::add(const std::string& key, const std::string& where) {
  ORBIT_CHECK(!key.empty(), "serve: " << where << ": the API key is empty");
  ORBIT_CHECK(sendable(key), "serve: " << where
                                       << ": the API key holds a space or a control character (it cannot be sent "
                                          "as `Authorization: Bearer KEY`)");
  digests_.push_back(digest_of(key));
}

ApiKeys ApiKeys::from(const std::optional<std::string>& flag, const std::optional<std::string>& file,
                      const std::optional<std::string>& env) {
  ApiKeys keys;
  if (flag) {
    keys.add(*flag, "argument '--api-key'");
    keys.source_ = "--api-key";
  }
  if (file) {
    std::ifstream in(*file);
    ORBIT_CHECK(in, "serve: argument '--api-key-file': cannot read " << *file << " (" << std::strerror(errno) << ")");
    std::string line;
    int64_t number = 0;
    const std::size_t before = keys.digests_.size();
    while (std::getline(in, line)) {
      ++number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      keys.add(line, "argument '--api-key-file': " + *file + " line " + std::to_string(number));
    }
    ORBIT_CHECK(!in.bad(), "serve: argument '--api-key-file': cannot read " << *file);
    ORBIT_CHECK(keys.digests_.size() > before,
                "serve: argument '--api-key-file': " << *file << " holds no key (one key per line)");
    keys.source_ += (keys.source_.empty() ? "--api-key-file " : ", --api-key-file ") + *file;
  }
  if (!flag && !file && env) {
    keys.add(*env, "environment variable ORBIT_API_KEY");
    keys.source_ = "ORBIT_API_KEY";
  }
  return keys;
}

bool ApiKeys::accepts(const std::string& key) const {
  const Digest sent = digest_of(key);
  unsigned char matched = 0;
  for (const Digest& d : digests_) {  // every key, every byte: no exit on the first difference or match
    unsigned char diff = 0;
    for (std::size_t i = 0; i < d.size(); ++i) diff |= static_cast<unsigned char>(d[i] ^ sent[i]);
    matched |= static_cast<unsigned char>(diff == 0);
  }
  return matched != 0;
}

std::optional<std::string> ApiKeys::refusal(bool present, const std::string& authorization) const {
  if (!present) {
    return "no API key given: this server requires the header `Authorization: Bearer KEY` on /v1/* (its keys "
           "come from " +
           source_ + ")";
  }
  if (!bearer_scheme(authorization)) {
    return "header Authorization: expected `Bearer KEY` (the Bearer scheme, a space, the API key)";
  }
  if (!accepts(authorization.substr(7))) {
    return "incorrect API key given in header Authorization (not one of this server's keys)";
  }
  return std::nullopt;
}

}  // namespace orbit::serve
