// What the remote tier (orbit/store/remote_tier.h) stores for a key: shared by its reads' probe
// (remote_tier.cpp) and its background writer (remote_tier_writer.cpp).
#pragma once

#include <string>

#include "orbit/store/value.h"

namespace orbit::store {

// The blob file's bytes of `value` (blob_format.h: exact encoding, trailer included) for `key` of the model
// `fingerprint`, sealed with `secret` (remote_auth.h: a MAC when the secret is set).
std::string sealed_remote_blob(const std::string& secret, const std::string& key, const std::string& fingerprint,
                               const StoredValue& value);

}  // namespace orbit::store
