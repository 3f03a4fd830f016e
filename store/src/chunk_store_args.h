// ChunkStore's argument checks, shared by chunk_store.cpp and chunk_store_put.cpp.
#pragma once

#include <string>

#include "orbit/common/error.h"
#include "orbit/store.h"

namespace orbit::store {

// Throws orbit::Error naming ChunkStore::<what> when `key` is not a store key.
inline void check_chunk_store_key(const std::string& key, const char* what) {
  ORBIT_CHECK(is_store_key(key),
              "ChunkStore::" << what << ": '" << key << "' is not a store key (64 lowercase hex characters)");
}

}  // namespace orbit::store
