#include "serve/run/room_maker.h"

#include <utility>

#include "orbit/pool_room.h"

namespace orbit::serve {

namespace {

int64_t freed(std::vector<const Window*> closing, const std::vector<std::string>& placed_again) {
  PoolRoomQuery q;
  for (const Window* w : closing) {
    if (w != nullptr) q.closing.push_back(w);
  }
  q.placed_again = placed_again;
  return pages_freed_by_closing(q);
}

// Whether dropping every fork of `forks` together leaves the request short of pages still (`pages_short` known).
bool too_few(const std::vector<const Window*>& forks, const std::vector<std::string>& placed, int64_t pages_short) {
  return pages_short > 0 && freed(forks, placed) < pages_short;
}

}  // namespace

Auditor::PoolDrop drop_alone(std::vector<std::string> placed_again, int64_t pages_short) {
  return [placed = std::move(placed_again),
          pages_short](const std::vector<const Window*>& forks) -> std::optional<std::size_t> {
    if (too_few(forks, placed, pages_short)) return std::nullopt;
    for (std::size_t i = 0; i < forks.size(); ++i) {
      if (forks[i] != nullptr && freed({forks[i]}, placed) > 0) return i;
    }
    return std::nullopt;
  };
}

Auditor::PoolDrop drop_together(std::vector<std::string> placed_again, int64_t pages_short) {
  return [placed = std::move(placed_again),
          pages_short](const std::vector<const Window*>& forks) -> std::optional<std::size_t> {
    const int64_t all = freed(forks, placed);
    if (all == 0 || (pages_short > 0 && all < pages_short)) return std::nullopt;
    for (std::size_t i = 0; i < forks.size(); ++i) {
      if (forks[i] == nullptr) continue;
      std::vector<const Window*> others = forks;
      others[i] = nullptr;
      if (freed(others, placed) < all) return i;  // some page goes back only once this fork goes too
    }
    return std::nullopt;
  };
}

RoomMaker::RoomMaker(ServeContext& context, SessionTable& sessions, const Session* keep,
                     std::function<void()> check_holds, std::function<bool()> renew)
    : context_(context),
      sessions_(sessions),
      keep_(keep),
      check_holds_(std::move(check_holds)),
      renew_(std::move(renew)) {}

bool RoomMaker::operator()(const CapacityRefused& e) {
  if (e.bound() != CapacityRefused::Bound::kPool) return false;
  if (!checked_) check_holds_();
  checked_ = true;
  if (sessions_.let_go_idle(keep_)) return true;
  if (context_.auditor.drop_for_pool(drop_alone(placed_again_, e.pages_short()))) return true;
  if (renewed_ || !renew_) return false;
  renewed_ = true;
  return renew_();
}

}  // namespace orbit::serve
