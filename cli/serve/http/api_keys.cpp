#include "serve/http/api_keys.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"

namespace orbit::serve {

namespace {

ApiKeys::Digest digest_of(const std::string& key) { return Sha256().update(key).digest(); }

// Why `key` cannot be sent as it is in `Authorization: Bearer KEY` (HTTP strips the value's ends and the
// scheme's separator is a space): its first space or control character and where, not the key; "" when it can.
std::string unsendable(const std::string& key) {
  for (std::size_t i = 0; i < key.size(); ++i) {
    const auto u = static_cast<unsigned char>(key[i]);
    if (u == ' ') return "a space at byte " + std::to_string(i + 1);
    if (u < 0x20 || u == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", u);
      return std::string("a control character (") + code + ") at byte " + std::to_string(i + 1);
    }
  }
  return "";
}

// Whether a line of a key file is blank: nothing but spaces and tabs (an editor's stray indentation is no key).
bool blank(const std::string& line) { return line.find_first_not_of(" \t") == std::string::npos; }

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
  const std::string why = unsendable(key);
  ORBIT_CHECK(why.empty(), "serve: " << where << ": the API key holds " << why
                                     << " (it cannot be sent as `Authorization: Bearer KEY`)");
  digests_.push_back(digest_of(key));
}

void ApiKeys::add_file(const std::string& path) {
  const std::string arg = "serve: argument '--api-key-file': ";
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  ORBIT_CHECK(status.type() != std::filesystem::file_type::not_found, arg << path << ": no such file");
  ORBIT_CHECK(status.type() != std::filesystem::file_type::directory,
              arg << path << ": is a directory, not a file of keys (one key per line)");
  errno = 0;
  std::ifstream in(path);
  ORBIT_CHECK(in, arg << path << ": cannot open it (" << std::strerror(errno) << ")");
  std::string line;
  int64_t number = 0;
  const std::size_t before = digests_.size();
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (blank(line)) continue;
    add(line, "argument '--api-key-file': " + path + " line " + std::to_string(number));
  }
  ORBIT_CHECK(!in.bad(), arg << path << ": cannot read it (" << std::strerror(errno) << ")");
  ORBIT_CHECK(number > 0, arg << path << ": the file is empty (one key per line)");
  ORBIT_CHECK(digests_.size() > before,
              arg << path << ": holds no key, only " << number << " blank line(s) (one key per line)");
  source_ += (source_.empty() ? "--api-key-file " : ", --api-key-file ") + path;
}

ApiKeys ApiKeys::from(const std::optional<std::string>& flag, const std::optional<std::string>& file,
                      const std::optional<std::string>& env) {
  ApiKeys keys;
  if (flag) {
    keys.add(*flag, "argument '--api-key'");
    keys.source_ = "--api-key";
  }
  if (file) keys.add_file(*file);
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

// The messages follow OpenAI's ("Incorrect API key provided: sk-...abcd") without its masked key: no part of
// the key sent, nor where the server's keys come from (a file's path), is told to a client that has no key.
std::optional<std::string> ApiKeys::refusal(bool present, const std::string& authorization) const {
  if (!present) {
    return "You didn't provide an API key: this server requires the header `Authorization: Bearer KEY` on /v1/*";
  }
  if (!bearer_scheme(authorization)) {
    return "Incorrect API key provided: header Authorization: expected `Bearer KEY` (the Bearer scheme, a space, "
           "the API key)";
  }
  if (!accepts(authorization.substr(7))) {
    return "Incorrect API key provided: the key in header Authorization is not one of this server's keys";
  }
  return std::nullopt;
}

}  // namespace orbit::serve
