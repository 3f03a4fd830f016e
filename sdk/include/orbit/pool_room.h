// orbit::pages_freed_by_closing: how much room in an engine's KV pool closing some of its windows would give back
// now, counted from the pool's reference counts, so a caller under pool pressure (a server holding window copies
// it would rather keep) closes only what gives room.
//
//   window A   p0 p1 p2 | p3 p4          closing {fork of A}      frees nothing while A holds p0..p4
//   fork of A  p0 p1 p2 | p3 p4          closing {fork of A}      frees p0..p4 once A closed or moved on
//   fork of B  p0 p1 p2 (B's set too)    closing {both forks}     frees what only the two of them hold
//
// A chunk's shared canonical pages (docs/ARCHITECTURE.md §13) count once no window outside `closing` places the
// chunk: the set goes with its last placement. A set whose chunk the caller is about to place again
// (`placed_again`: the keys of its next sync's or admit's chunks) is not counted: that placement writes it anew,
// so closing its holders gives that caller no room.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orbit {

class Window;

struct PoolRoomQuery {
  std::vector<const Window*> closing;     // windows of one engine, each once; none null
  std::vector<std::string> placed_again;  // chunk keys (ChunkRef::key, SyncUnit::key) the caller places next
};

// Distinct pool pages closing every window in query.closing together would return to the pool now (0 for none).
// Throws orbit::Error for a null window, one given twice, or windows of different engines. Thread-safety: as a
// read of each window (Window::stats): no other thread may use those windows meanwhile; other windows of the
// engine may change the pool meanwhile, so the count holds as of the call.
int64_t pages_freed_by_closing(const PoolRoomQuery& query);

}  // namespace orbit
