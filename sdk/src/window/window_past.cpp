// WindowPast (window_past.h): a window's past kept between its reads and builds.
#include "window/window_past.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
#include <utility>

namespace orbit::detail {

namespace {

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// `old` with room for `capacity` along `dim`, its first `rows` there copied over.
at::Tensor regrown(const at::Tensor& old, int64_t dim, int64_t capacity, int64_t rows) {
  std::vector<int64_t> shape = old.sizes().vec();
  shape[static_cast<std::size_t>(dim < 0 ? dim + old.dim() : dim)] = capacity;
  at::Tensor t = at::empty(shape, old.options());
  if (rows > 0) t.narrow(dim, 0, rows).copy_(old.narrow(dim, 0, rows));
  return t;
}

}  // namespace

int64_t WindowPast::Rows::bytes() const {
  int64_t total = tensor_bytes(positions);
  for (const runtime::LayerKV& layer : kv) total += tensor_bytes(layer.k) + tensor_bytes(layer.v);
  return total;
}

std::size_t WindowPast::Rows::matching(const std::vector<Key>& want) const {
  std::size_t n = 0;
  while (n < keys.size() && n < want.size() && keys[n] == want[n]) ++n;
  return n;
}

void WindowPast::Rows::keep(std::size_t n) {
  keys.resize(std::min(n, keys.size()));
  keyed_rows = 0;
  for (const Key& k : keys) keyed_rows += k.length;
  rows = keyed_rows;
}

void WindowPast::Rows::writable(int64_t need) {
  const int64_t capacity = kv.front().k.size(0);
  // Another holder of a buffer: a handle to the same tensor (a copy of these rows: a fork's window), or another
  // tensor over its storage (a past handed out earlier and still held) beyond our own, one per buffer.
  std::map<const void*, std::size_t> own;
  const auto count = [&](const at::Tensor& t) { ++own[t.storage().unsafeGetStorageImpl()]; };
  for (const runtime::LayerKV& layer : kv) {
    count(layer.k);
    count(layer.v);
  }
  count(positions);
  const auto held_elsewhere = [&](const at::Tensor& t) {
    return t.use_count() > 1 || t.storage().use_count() > own[t.storage().unsafeGetStorageImpl()];
  };
  const bool viewed = held_elsewhere(positions) || std::any_of(kv.begin(), kv.end(), [&](const runtime::LayerKV& l) {
                        return held_elsewhere(l.k) || held_elsewhere(l.v);
                      });
  if (owned && !viewed && need <= capacity) return;
  regrow(need <= capacity ? capacity : std::max<int64_t>({need, 2 * capacity, 64}));
}

void WindowPast::Rows::regrow(int64_t capacity) {
  for (runtime::LayerKV& layer : kv) {
    layer.k = regrown(layer.k, 0, capacity, rows);
    layer.v = regrown(layer.v, 0, capacity, rows);
  }
  positions = regrown(positions, -1, capacity, rows);
  owned = true;
}

void WindowPast::Rows::fit() {
  if (rows == 0) {
    *this = Rows{};
    return;
  }
  const int64_t capacity = kv.front().k.size(0);
  if (capacity > 2 * rows && capacity > 64) {
    c10::InferenceMode guard;  // as append's
    regrow(rows);
  }
}

void WindowPast::Rows::append(runtime::PastKV past, const std::vector<Key>& named) {
  if (past.layers.empty()) return;
  // The buffers are written in place by whichever read comes next, inside InferenceMode or not: inference tensors
  // (what a read under InferenceMode made) may only be written in place under it.
  c10::InferenceMode guard;
  const int64_t n = past.layers.front().k.size(0);
  const bool keyed = !named.empty() && keyed_rows == rows;
  if (rows == 0) {
    kv = std::move(past.layers);
    positions = std::move(past.positions);
    owned = false;
  } else {
    writable(rows + n);
    for (std::size_t l = 0; l < kv.size(); ++l) {
      kv[l].k.narrow(0, rows, n).copy_(past.layers[l].k);
      kv[l].v.narrow(0, rows, n).copy_(past.layers[l].v);
    }
    positions.narrow(-1, rows, n).copy_(past.positions);
  }
  rows += n;
  if (keyed) {
    keys.insert(keys.end(), named.begin(), named.end());
    keyed_rows = rows;
  }
}

runtime::PastKV WindowPast::Rows::view() const {
  runtime::PastKV past;
  if (rows == 0) return past;
  past.layers.resize(kv.size());
  for (std::size_t l = 0; l < kv.size(); ++l) past.layers[l] = {kv[l].k.narrow(0, 0, rows), kv[l].v.narrow(0, 0, rows)};
  past.positions = positions.narrow(-1, 0, rows).contiguous();  // a view for 1-D positions
  return past;
}

WindowPast::Rows WindowPast::take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(rows_, Rows{});
}

void WindowPast::put(Rows rows) {
  rows.keep(rows.keys.size());
  rows.fit();
  std::lock_guard<std::mutex> lock(mu_);
  rows_ = std::move(rows);
}

void WindowPast::fit(const std::vector<Key>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  rows_.keep(rows_.matching(keys));
  rows_.fit();
}

int64_t WindowPast::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_.bytes();
}

}  // namespace orbit::detail
