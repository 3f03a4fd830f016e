// orbit::pages_freed_by_closing (orbit/pool_room.h): the windows' entries' sequences, counted by the shared pool
// (SharedPool::freed_by) under one operation hold of their engine.
#include "orbit/pool_room.h"

#include <set>

#include "orbit/common/error.h"
#include "orbit/window.h"
#include "window/window_state.h"

namespace orbit {

int64_t pages_freed_by_closing(const PoolRoomQuery& query) { return detail::EngineCore::pages_freed_by_closing(query); }

namespace detail {

int64_t EngineCore::pages_freed_by_closing(const PoolRoomQuery& query) {
  if (query.closing.empty()) return 0;
  std::set<const Window*> seen;
  EngineCore* core = nullptr;
  for (const Window* w : query.closing) {
    ORBIT_CHECK(w != nullptr && w->state_ != nullptr,
                "pages_freed_by_closing: `closing` holds a null or closed window");
    ORBIT_CHECK(seen.insert(w).second, "pages_freed_by_closing: `closing` holds window " << w->state_->id << " twice");
    ORBIT_CHECK(core == nullptr || core == w->state_->core.get(),
                "pages_freed_by_closing: `closing` holds windows of different engines");
    core = w->state_->core.get();
  }
  const OpHold hold(*core);
  std::vector<const runtime::PagedSequence*> seqs;
  for (const Window* w : query.closing) {
    for (const Entry& e : w->state_->entries) {
      if (e.kv) seqs.push_back(e.kv.get());
    }
  }
  const std::set<std::string> kept(query.placed_again.begin(), query.placed_again.end());
  return core->pool().freed_by(seqs, kept);
}

}  // namespace detail
}  // namespace orbit
