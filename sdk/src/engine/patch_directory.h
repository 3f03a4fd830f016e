// A chunk's patch directory in the chunk store: the contexts its newest patches were formed under, so that an
// engine opened later on the same store (another process, or after a restart) finds a stale patch of the chunk
// as the engine that formed it would. A patch's own key names one context exactly; a stale lookup compares
// contexts, which the patch catalog (plan/patch_catalog.h) keeps in memory only. KvStore writes the directory
// each time it stores a formed patch and reads it the first time it looks for a chunk's stale patches.
//
//   key     SHA-256 over the tag "orbit/patch-directory", kPatchDirectoryVersion and the chunk's content key
//   value   kind "other"; attrs "content" = "patch-directory", "version", "chunk" (the chunk's key), "keys" and
//           "variants" (one line per patch, oldest first); tensors "counts" int64 [n] (context entries per
//           patch), "hashes" int64 [Σ counts] and "tokens" float64 [Σ counts] (each context as key hash →
//           tokens, plan/window_meta.h context_key_hash), "facts" float64 [n, 3] (context tokens, residual,
//           sensitivity), "exact" int64 [n], "ranks" int64 [n, 2] (the factors' rank_k, rank_v)
//
// Kept on disk only (a store with a store_dir): never cached in memory, so each read sees what other engines on
// the store wrote, and never written to a remote tier (planning does not wait on the network). At most
// kPatchDirectoryRecords formations (a patch's orbit key is not listed apart from its exact key), as the planner
// compares a chunk's newest 16. A write merges what the disk lists at that moment with this engine's patches, so
// engines on one store keep each other's; two writing the same chunk's directory at the same moment can still
// lose one's newest patch (the last write wins). A directory that does not decode, or holds a residual outside
// [0, 1] or a rank below 1, is ignored: it only helps find patches, each of which is still read and checked by its own
// key.
#pragma once

#include <string>
#include <vector>

#include "orbit/store/value.h"
#include "plan/patch_catalog.h"

namespace orbit::detail {

constexpr int kPatchDirectoryVersion = 2;
constexpr std::size_t kPatchDirectoryRecords = 16;

std::string patch_directory_key(const std::string& chunk_key);

// The records (formed factor patches, oldest first; their context_tokens, context_total, residual and
// sensitivity and ranks are kept, their context key lists are not) as the value stored under that key.
store::ValuePtr patch_directory_value(const std::string& chunk_key, const std::vector<PatchRecord>& records);

// The records a directory value of `chunk_key` holds (context empty, context_tokens filled); empty when the
// value is not such a directory or does not decode.
std::vector<PatchRecord> decode_patch_directory(const store::StoredValue& value, const std::string& chunk_key);

}  // namespace orbit::detail
