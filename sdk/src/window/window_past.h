// WindowPast: a window's KV kept as one contiguous past between its reads and builds on the CPU, so that a read or
// a forward after a short append copies the entries appended since, not the whole window.
//
// Every CPU read of a window (a forward behind it, a decode's first step, logits) needs its entries' rows as one
// past. Gathered afresh from the pool each time, a turn of an agent's conversation copied the whole window two or
// three times (the sync's forward, the decode's read), and the ever larger temporary buffers, each a few rows
// longer than the one freed before, left the heap fragmented around the small allocations made in between.
//
// Rows are keyed by what determines them: an entry's content version (engine-wide, new whenever an instance's KV
// is formed; a kept or forked entry carries its version with the same pages and patch factors), its first
// position and its length (its positions follow from its chunk, which the version fixes, and those two). The
// leading entries whose keys match are kept, the others gathered and appended. Only rows read from the pool are
// keyed: a build's fresh forward rows can differ from what their pages hold (a bfloat16 pool).
//
// Rows once written are never written again while a tensor outside these buffers views them (a past handed out
// earlier and still held): such buffers are copied first (Rows::writable).
//
// Thread-safety: take, put and bytes lock; the rows taken belong to their taker until put back, and a reader that
// finds them taken gathers its own.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "orbit/runtime/model.h"

namespace orbit::detail {

class WindowPast {
 public:
  // What determines an entry's rows and positions in a past.
  struct Key {
    uint64_t version = 0;
    int64_t start = 0;
    int64_t length = 0;
    bool operator==(const Key& o) const { return version == o.version && start == o.start && length == o.length; }
  };

  struct Rows {
    std::vector<runtime::LayerKV> kv;  // per layer, K and V [capacity, heads, dim]
    at::Tensor positions;              // [capacity], or [position rows, capacity]
    int64_t rows = 0;                  // rows written, of which the first `keyed_rows` are `keys`' rows
    int64_t keyed_rows = 0;
    std::vector<Key> keys;  // the entries whose rows lead the buffers, in window order
    // The buffers were allocated here: rows appended first are taken as they are, and what made them may share
    // their memory in ways no reference count shows (a tensor over a stored value's bytes), so they are copied
    // before anything is written into them.
    bool owned = false;

    int64_t bytes() const;  // the buffers' capacity
    // How many leading keys equal `want`'s.
    std::size_t matching(const std::vector<Key>& want) const;
    // Keeps the first `n` keys and their rows (n ≤ keys.size()).
    void keep(std::size_t n);
    // Appends `past`'s rows and positions; `keys` names them (their lengths sum to its rows), or is empty for rows
    // no key names (a forward's own): rows after those are never keyed. The first rows appended to empty buffers
    // become them (no copy); later ones are copied in, the buffers doubling as they grow.
    void append(runtime::PastKV past, const std::vector<Key>& keys);
    // The rows written, as a past (views of the buffers).
    runtime::PastKV view() const;
    // Buffers of at most twice the rows written or 64 rows (none for none): copied to fit where they are larger,
    // as after keep() dropped most of them.
    void fit();

   private:
    // Buffers for `rows` rows, allocated here, that no tensor outside them views, the rows written copied over.
    void writable(int64_t rows);
    void regrow(int64_t capacity);  // new buffers of `capacity` rows, the rows written copied over
  };

  // The rows kept, leaving none here (empty when none are, or another caller holds them).
  Rows take();
  // Keeps `rows` (their keyed part, fit()) for the next taker, replacing any kept since.
  void put(Rows rows);
  // Drops the kept rows past the leading entries whose keys match `keys` (the window as an operation left it)
  // and fits the buffers to what is left: a window that shrank keeps no buffer sized to what it held before.
  void fit(const std::vector<Key>& keys);
  int64_t bytes() const;  // what the kept rows' buffers hold

 private:
  mutable std::mutex mu_;
  Rows rows_;
};

}  // namespace orbit::detail
