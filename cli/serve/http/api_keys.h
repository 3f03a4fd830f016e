// The keys `orbit serve` requires on /v1/* (--api-key, --api-key-file, else ORBIT_API_KEY), and the check of a
// request's `Authorization: Bearer KEY` against them.
//
// Where the keys come from: --api-key KEY (one key, taken as given, commas included) and --api-key-file PATH
// (one key per line; blank lines, also of spaces and tabs only, skipped, a trailing CR dropped) together; only when
// neither is given, the environment variable ORBIT_API_KEY (one key), as vLLM reads VLLM_API_KEY when --api-key is not
// given. None of them: no key is required. A key is never printed: errors name the flag, the file and the line, not the
// key.
//
// The check hashes the key sent (SHA-256) and compares the digest with every key's digest, each byte of each,
// without an early exit: its time depends on neither where a wrong key differs nor its length nor which key
// matched. The value is compared as sent (the request reader keeps '%' escapes as they were: %41 is not A).
// Thread-safety: immutable once built; accepts() may be called from any thread.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace orbit::serve {

class ApiKeys {
 public:
  using Digest = std::array<unsigned char, 32>;

  ApiKeys() = default;
  // The keys of --api-key (`flag`, when given), --api-key-file (`file`, when given), else of the variable
  // ORBIT_API_KEY (`env`, when set). Throws orbit::Error naming the flag, file (and line) or variable, and
  // why: an empty --api-key; a file missing, a directory, unreadable, empty or of blank lines only; a key
  // holding a space or a control character (which and at what byte: it cannot be sent in a header as it is);
  // an ORBIT_API_KEY set but empty.
  static ApiKeys from(const std::optional<std::string>& flag, const std::optional<std::string>& file,
                      const std::optional<std::string>& env);

  bool enabled() const { return !digests_.empty(); }
  std::size_t size() const { return digests_.size(); }
  // Where the keys came from, for the start's notice ("--api-key, --api-key-file keys.txt"); no key in it.
  const std::string& source() const { return source_; }

  // Why the value of a request's Authorization header (`present` false: none sent) is refused; nullopt when
  // it is "Bearer KEY" with one of the keys (the scheme's case does not matter, as RFC 9110 says).
  std::optional<std::string> refusal(bool present, const std::string& authorization) const;

 private:
  void add(const std::string& key, const std::string& where);
  // The keys of the file at `path`, one per line (a trailing CR dropped, lines of spaces and tabs skipped).
  void add_file(const std::string& path);
  bool accepts(const std::string& key) const;
  std::vector<Digest> digests_;
  std::string source_;
};

}  // namespace orbit::serve
