// The bounds of Window::sync's memos and what they hold (orbit/sync_memo.h): the cuts memo (sync_memo.h) and the
// encodings memo (sync_encode.h), both process-wide.
#include "orbit/sync_memo.h"

#include <mutex>

#include "orbit/common/error.h"
#include "window/sync_encode.h"
#include "window/sync_memo.h"

namespace orbit {

namespace {

std::mutex limits_mutex;  // orders set_sync_memo_limits calls, so both memos end with the same bounds
SyncMemoLimits limits;    // under limits_mutex

template <class Memo>
SyncMemoCount count_of(Memo& memo) {
  return {static_cast<int64_t>(memo.entries()), static_cast<int64_t>(memo.bytes())};
}

}  // namespace

void set_sync_memo_limits(const SyncMemoLimits& l) {
  ORBIT_CHECK(
      l.max_entries >= 1 && l.max_entries <= SyncMemoLimits::kMaxEntries,
      "SyncMemoLimits::max_entries must be in [1, " << SyncMemoLimits::kMaxEntries << "], got " << l.max_entries);
  ORBIT_CHECK(l.max_bytes >= SyncMemoLimits::kMinBytes && l.max_bytes <= SyncMemoLimits::kMaxBytes,
              "SyncMemoLimits::max_bytes must be in [" << SyncMemoLimits::kMinBytes << ", " << SyncMemoLimits::kMaxBytes
                                                       << "], got " << l.max_bytes);
  const std::lock_guard<std::mutex> lock(limits_mutex);
  const auto entries = static_cast<std::size_t>(l.max_entries);
  const auto bytes = static_cast<std::size_t>(l.max_bytes);
  detail::cuts_memo().set_limits(entries, bytes);
  detail::encode_memo().set_limits(entries, bytes);
  limits = l;
}

SyncMemoLimits sync_memo_limits() {
  const std::lock_guard<std::mutex> lock(limits_mutex);
  return limits;
}

SyncMemoUsage sync_memo_usage() { return {count_of(detail::cuts_memo()), count_of(detail::encode_memo())}; }

}  // namespace orbit
