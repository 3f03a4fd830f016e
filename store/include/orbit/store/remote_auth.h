// Authentication of remote values: an HMAC-SHA256 under an operator's secret, over the store key and the
// blob bytes, appended to each value the remote tier writes, so a value another party wrote to a shared
// server (without the secret) is refused instead of used.
//
//   sealed value = blob bytes ‖ "orbit-hmac-v1\0\0\0" (16 bytes) ‖ HMAC-SHA256(secret, framing ‖ key ‖ blob) (32 bytes)
//
// The blob format ends in 64 hex characters (its SHA-256 trailer), so an unsealed blob never carries the
// 16-byte marker at that offset: sealed and unsealed values are told apart without ambiguity.
//
// An entry's manifest (redis_backend.h) is sealed under the same secret, so that a reader refuses a
// manifest another party wrote before it fetches the parts that manifest names:
//
//   sealed manifest = text ‖ " " ‖ hex(HMAC-SHA256(secret, framing ‖ key ‖ text))   (64 hex characters)
//
// The secret is never part of a message, a warning or a stat; reasons name the key only.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "orbit/common/status.h"

namespace orbit::store {

// Bytes the seal adds to a value (marker and tag).
constexpr std::size_t kRemoteSealBytes = 48;

// `blob` followed by its seal for `key` when `secret` is not empty; `blob` unchanged otherwise.
std::string seal_remote_value(const std::string& secret, const std::string& key, std::string blob);

// The blob inside a value read from the remote (a view into `value`, the seal removed). With a secret:
// refused when the value carries no seal or a seal that does not verify for `key` under `secret`
// (written without the secret, with another secret, or altered). Without a secret: the blob of a sealed
// or an unsealed value alike (the tag is not checked: there is nothing to check it with).
Result<std::string_view> open_remote_value(const std::string& secret, const std::string& key, std::string_view value);

// `manifest` followed by its tag for `key` when `secret` is not empty; unchanged otherwise.
std::string seal_remote_manifest(const std::string& secret, const std::string& key, const std::string& manifest);

// The manifest text inside a sealed one (its tag removed). With a secret: refused when it carries no tag
// or one that does not verify for `key`. Without a secret: `text` itself (a trailing tag, if any, is for
// the manifest's parser to skip).
Result<std::string_view> open_remote_manifest(const std::string& secret, const std::string& key, std::string_view text);

}  // namespace orbit::store
