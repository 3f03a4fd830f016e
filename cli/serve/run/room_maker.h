// What a request the KV pool refused does before it tries again: RoomMaker, one refusal at a time (used by
// RequestPath's chat sync and completion admit, request_run.cpp), and which waiting audit such a request drops
// (drop_alone, drop_together), counted from the pool's reference counts (orbit::pages_freed_by_closing).
//
// Thread-safety: a RoomMaker is one request's, called under the gate that request holds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orbit/capacity.h"
#include "serve/serve_context.h"
#include "serve/sessions/audit.h"
#include "serve/sessions/session_table.h"

namespace orbit::serve {

// The oldest waiting audit whose fork alone gives the request pages back: pages no other window holds (its
// window's, once that window moved on or let go; a chunk's canonical set once no window but the fork places it),
// save the canonical sets of `placed_again` (the chunk keys the request places: its retry writes such a set anew,
// so dropping the fork that holds it gives the request no room). nullopt: none does, or, with `pages_short` (the
// refusal's CapacityRefused::pages_short(); 0: not known), dropping every waiting audit together would still leave
// the request short: none is dropped for no answer.
Auditor::PoolDrop drop_alone(std::vector<std::string> placed_again, int64_t pages_short = 0);
// The oldest waiting audit whose fork holds pages that dropping every waiting audit together gives back (counted as
// drop_alone counts): forks may share their pages with one another, so that none alone frees any, yet together they
// do. One whose every page a running request's window holds too is never chosen. nullopt: all of them together give
// the request no room, or (`pages_short`, as drop_alone) fewer than it lacks, so dropping any is loss.
Auditor::PoolDrop drop_together(std::vector<std::string> placed_again, int64_t pages_short = 0);

// What a sync or an admit the KV pool refused does before it is tried again (RequestPath::sync_making_room,
// admit_completion), one refusal at a time. A refusal for a window's own bound stands: no other window's room cures
// it. The first for the pool checks that what the request needs fits the whole pool at all (`check_holds` throws
// PoolTooSmall: nothing is let go); then each lets the least recently used idle window go (SessionTable::let_go_idle,
// never `keep`'s), else drops the oldest waiting audit whose fork alone gives the request pages (drop_alone with
// `placed_again`: one whose pages a window in use holds too would free none, and is kept; none is dropped where all
// of them together free fewer pages than the refusal says the request lacks); neither left, `renew`
// runs once, where there is one (false: it made no room). False: the refusal stands.
class RoomMaker {
 public:
  RoomMaker(ServeContext& context, SessionTable& sessions, const Session* keep, std::function<void()> check_holds,
            std::function<bool()> renew = {});

  // The chunk keys the request places (SyncUnit::key, ChunkRef::key): see drop_alone. None until set.
  void places(std::vector<std::string> keys) { placed_again_ = std::move(keys); }
  bool operator()(const CapacityRefused& e);

 private:
  ServeContext& context_;
  SessionTable& sessions_;
  const Session* keep_;
  std::function<void()> check_holds_;
  std::function<bool()> renew_;
  std::vector<std::string> placed_again_;
  bool checked_ = false, renewed_ = false;
};

}  // namespace orbit::serve
