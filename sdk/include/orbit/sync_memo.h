// The bounds of Window::sync's two memos (orbit/sync.h steps 2 and 3), and what they hold now.
//
// Each sync keeps what rendering and tokenizing its message list gave, for the lists that follow it: the renders
// of the list's prefixes (the cuts memo, step 2) and, for a prefix-stable tokenizer, the tokens of its text
// segments (the encodings memo, step 3). Both are process-wide (every engine and window of the process shares
// them), least recently used dropped first. A server whose every request brings a new list (an agent's turn adds
// messages) fills each memo with one entry per request until a bound stops it; these set the bounds, and
// sync_memo_usage reads what the memos hold (`orbit serve`: --sync-memo-entries, --sync-memo-mb, and /metrics'
// orbit_sync_memo_entries and orbit_sync_memo_bytes).
//
// A smaller memo changes no result: a list the memo no longer holds is rendered and tokenized again, and gives
// the same units and tokens (sdk/src/window/sync_memo.h gives the argument); only the time a sync takes grows.
// Thread-safety: every function may be called from any thread; a sync running meanwhile sees the old bounds or
// the new ones.
#pragma once

#include <cstdint>

namespace orbit {

struct SyncMemoLimits {
  // Lists each memo keeps at most, in [1, kMaxEntries]; the aliases that name a list by its first, second or
  // last message (sync_memo.h) are bounded by the same number apart.
  int64_t max_entries = 4096;
  // Bytes each memo's lists hold at most, in [kMinBytes, kMaxBytes]: the capacity of their texts, prefix records,
  // message keys, tokens and token bytes, and a fixed overhead per list. A list over it is not kept.
  int64_t max_bytes = int64_t{64} << 20;

  static constexpr int64_t kMaxEntries = int64_t{1} << 20;
  static constexpr int64_t kMinBytes = int64_t{1} << 10;
  static constexpr int64_t kMaxBytes = int64_t{1} << 40;
};

// Sets both memos' bounds, dropping their least recently used lists now until each holds within them. Throws
// orbit::Error naming SyncMemoLimits::max_entries or max_bytes when one is out of its range (nothing changed).
void set_sync_memo_limits(const SyncMemoLimits& limits);
// The bounds in force (SyncMemoLimits{} until set_sync_memo_limits).
SyncMemoLimits sync_memo_limits();

// What one memo holds now.
struct SyncMemoCount {
  int64_t entries = 0;  // lists kept (<= max_entries)
  int64_t bytes = 0;    // Σ their bytes, counted as SyncMemoLimits::max_bytes counts them (<= max_bytes)
};
struct SyncMemoUsage {
  SyncMemoCount cuts;       // step 2: the renders of each list's prefixes
  SyncMemoCount encodings;  // step 3: the tokens of each list's text segments (prefix-stable tokenizers only)
};
SyncMemoUsage sync_memo_usage();

}  // namespace orbit
