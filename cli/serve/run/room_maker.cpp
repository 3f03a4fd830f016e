#include "serve/run/room_maker.h"

#include <utility>

namespace orbit::serve {

bool frees_pages(const Window& fork, int64_t page_size) {
  int64_t pages = 0;
  for (const InstanceInfo& i : fork.instances()) pages += (i.length + page_size - 1) / page_size;
  return pages > fork.stats().shared_pages;
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
  const int64_t page_size = context_.engine->options().page_size;
  if (context_.auditor.drop_for_pool([page_size](const Window& fork) { return frees_pages(fork, page_size); })) {
    return true;
  }
  if (renewed_ || !renew_) return false;
  renewed_ = true;
  return renew_();
}

}  // namespace orbit::serve
