// What a request the KV pool refused does before it tries again: RoomMaker, one refusal at a time (used by
// RequestPath's chat sync and completion admit, request_run.cpp).
//
// Thread-safety: a RoomMaker is one request's, called under the gate that request holds.
#pragma once

#include <cstdint>
#include <functional>

#include "orbit/capacity.h"
#include "orbit/window.h"
#include "serve/serve_context.h"
#include "serve/sessions/session_table.h"

namespace orbit::serve {

// Whether closing `fork` (an audit's) gives pages back to the pool: it holds pages no other window holds (its
// window's, that window moved on or let go). Each instance's KV is in whole pages of `page_size` tokens of its own.
bool frees_pages(const Window& fork, int64_t page_size);

// What a sync or an admit the KV pool refused does before it is tried again (RequestPath::sync_making_room,
// admit_completion), one refusal at a time. A refusal for a window's own bound stands: no other window's room cures
// it. The first for the pool checks that what the request needs fits the whole pool at all (`check_holds` throws
// PoolTooSmall: nothing is let go); then each lets the least recently used idle window go (SessionTable::let_go_idle,
// never `keep`'s), else drops the oldest waiting audit whose fork alone holds pages (Auditor::drop_for_pool with
// frees_pages: one whose pages a window in use holds too would free none, and is kept); neither left, `renew` runs
// once, where there is one (false: it made no room). False: the refusal stands.
class RoomMaker {
 public:
  RoomMaker(ServeContext& context, SessionTable& sessions, const Session* keep, std::function<void()> check_holds,
            std::function<bool()> renew = {});

  bool operator()(const CapacityRefused& e);

 private:
  ServeContext& context_;
  SessionTable& sessions_;
  const Session* keep_;
  std::function<void()> check_holds_;
  std::function<bool()> renew_;
  bool checked_ = false, renewed_ = false;
};

}  // namespace orbit::serve
