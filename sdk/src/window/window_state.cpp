#include "window/window_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>

#include "orbit/common/error.h"
#include "orbit/runtime/paged_past.h"

namespace orbit::detail {

namespace {
thread_local std::vector<const WindowState*> windows_in_callback;  // innermost last
}  // namespace

InCallback::InCallback(const WindowState& w) { windows_in_callback.push_back(&w); }
InCallback::~InCallback() { windows_in_callback.pop_back(); }

std::map<std::string, ChunkPtr> live_evictions(WindowState& s) {
  std::map<std::string, ChunkPtr> out;
  for (auto it = s.evicted.begin(); it != s.evicted.end();) {
    ChunkPtr chunk = it->second.live();
    if (chunk == nullptr) {
      it = s.evicted.erase(it);
      continue;
    }
    out.emplace(it->first, std::move(chunk));
    ++it;
  }
  return out;
}

void refuse_in_callback(const WindowState& w, const char* what) {
  const bool inside =
      std::find(windows_in_callback.begin(), windows_in_callback.end(), &w) != windows_in_callback.end();
  ORBIT_CHECK(!inside, what << ": window " << w.id
                            << " is decoding on this thread: generate's on_token, on_text and on_logprobs must not use "
                               "the window they decode (end the run by returning false, then call it)");
}

WindowState::~WindowState() {
  if (!core) return;
  core->pool().clear(entries);
}

WindowSnapshot snapshot(const WindowState& s) {
  WindowSnapshot w;
  w.id = s.id;
  w.version = s.version;
  w.options = &s.options;
  w.entries.reserve(s.entries.size());
  for (const Entry& e : s.entries) w.entries.push_back(&e);
  w.page_size = s.core->pool().page_size();
  w.page_bytes = s.page_bytes();
  if (s.tail.has_value()) {
    w.tail_key = reuse_key(s.core->registry().turn_key(s.tail->tokens), s.tail->behind);
    w.tail_behind = s.tail->behind;
    w.tail_formed = s.tail->formed_window;
  }
  return w;
}

int64_t WindowState::index_of(InstanceId id) const {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].id == id) return static_cast<int64_t>(i);
  }
  return -1;
}

const Entry& WindowState::entry(InstanceId id, const char* what) const {
  const int64_t i = index_of(id);
  ORBIT_CHECK(i >= 0, what << ": window " << this->id << " holds no instance " << id);
  return entries[static_cast<std::size_t>(i)];
}

bool WindowState::has_deferred() const {
  for (const Entry& e : entries) {
    if (e.deferred) return true;
  }
  return false;
}

int64_t WindowState::tokens() const {
  int64_t n = 0;
  for (const Entry& e : entries) n += e.length;
  return n;
}

int64_t WindowState::page_bytes() const { return core->pool().page_bytes(); }

int64_t WindowState::pages_for(int64_t tokens) const {
  const int64_t ps = core->pool().page_size();
  return (tokens + ps - 1) / ps;
}

int64_t WindowState::device_bytes() const {
  int64_t pages = 0;
  for (const Entry& e : entries) pages += static_cast<int64_t>(e.kv->pages().size());
  return pages * page_bytes();
}

std::vector<uint64_t> WindowState::context_hashes() const {
  std::vector<uint64_t> out;
  out.reserve(entries.size());
  uint64_t h = 0;
  for (const Entry& e : entries) {
    out.push_back(h);
    h = context_hash(h, e.key, e.version);
  }
  return out;
}

std::vector<int64_t> stand_in_tokens(const std::string& key, int64_t rows) {
  ORBIT_CHECK(key.size() >= 8, "stand_in_tokens: content key '" << key << "' is shorter than 8 hex digits");
  const int64_t base = static_cast<int64_t>(std::stoull(key.substr(0, 8), nullptr, 16)) << 20;
  std::vector<int64_t> out(static_cast<std::size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out[static_cast<std::size_t>(r)] = -1 - (base + (r & ((int64_t{1} << 20) - 1)));
  return out;
}

std::vector<int64_t> WindowState::token_ids() const {
  std::vector<int64_t> out;
  for (const Entry& e : entries) {
    if (e.is_turn) {
      out.insert(out.end(), e.turn_tokens.begin(), e.turn_tokens.end());
    } else if (e.chunk->ref.kind == ChunkKind::kTokens) {
      out.insert(out.end(), e.chunk->tokens.begin(), e.chunk->tokens.end());
    } else {
      const std::vector<int64_t> rows = stand_in_tokens(e.key, e.length);
      out.insert(out.end(), rows.begin(), rows.end());
    }
  }
  return out;
}

KvState WindowState::content_chain() const {
  KvState chain;
  for (const Entry& e : entries) chain = detail::content_chain(chain, e.key);
  return chain;
}

KvState WindowState::state_chain() const {
  KvState chain;
  for (const Entry& e : entries) chain = kv_chain(chain, e.state);
  return chain;
}

runtime::Content entry_content(EngineCore& core, const Entry& entry) { return core.pool().gather(*entry.kv).layers; }

at::Tensor entry_positions(EngineCore& core, const std::vector<const Entry*>& entries, int64_t first_position,
                           int64_t* next_position) {
  const bool one_row = core.config().position_rows() == 1;
  std::vector<at::Tensor> pieces;
  std::vector<int64_t> flat;
  int64_t position = first_position;
  for (const Entry* e : entries) {
    const bool grid = e->chunk != nullptr && e->chunk->tensors != nullptr && e->chunk->tensors->grid.defined();
    if (one_row && !grid) {
      for (int64_t i = 0; i < e->length; ++i) flat.push_back(position + i);
    } else {
      if (!flat.empty()) pieces.push_back(at::tensor(flat, at::kLong));
      flat.clear();
      pieces.push_back(core.registry().positions_for(e->chunk.get(), e->length, position));
    }
    position += e->extent;
  }
  if (next_position != nullptr) *next_position = position;
  if (pieces.empty()) return at::tensor(flat, at::kLong);
  if (!flat.empty()) pieces.push_back(at::tensor(flat, at::kLong));
  return at::cat(pieces, -1);
}

std::vector<const runtime::PagedSequence*> entry_sequences(const std::vector<const Entry*>& entries) {
  std::vector<const runtime::PagedSequence*> seqs;
  seqs.reserve(entries.size());
  for (const Entry* e : entries) seqs.push_back(e->kv.get());
  return seqs;
}

runtime::PastKV gather_past(EngineCore& core, const std::vector<const Entry*>& entries, int64_t* next_position) {
  if (entries.empty()) {
    if (next_position != nullptr) *next_position = 0;
    return runtime::PastKV{};
  }
  runtime::PastKV past = core.pool().gather_all(entry_sequences(entries));
  past.positions = entry_positions(core, entries, 0, next_position);
  return past;
}

runtime::PastKV read_past(EngineCore& core, const std::vector<const Entry*>& entries, int64_t* next_position) {
  if (!core.model().device().is_cuda() || entries.empty()) return gather_past(core, entries, next_position);
  at::Tensor positions = entry_positions(core, entries, 0, next_position);
  return runtime::make_paged_past(core.pool().paged(entry_sequences(entries)), std::move(positions));
}

std::vector<WindowPast::Key> past_keys(const WindowState& s, int64_t* next_position) {
  std::vector<WindowPast::Key> keys;
  keys.reserve(s.entries.size());
  int64_t position = 0;
  for (const Entry& e : s.entries) {
    keys.push_back({e.version, position, e.length});
    position += e.extent;
  }
  if (next_position != nullptr) *next_position = position;
  return keys;
}

runtime::PastKV read_past(const WindowState& s, int64_t* next_position) {
  std::vector<const Entry*> entries;
  entries.reserve(s.entries.size());
  for (const Entry& e : s.entries) entries.push_back(&e);
  EngineCore& core = *s.core;
  if (s.past == nullptr || entries.empty()) return read_past(core, entries, next_position);
  int64_t position = 0;
  const std::vector<WindowPast::Key> keys = past_keys(s, &position);
  WindowPast::Rows rows = s.past->take();
  const std::size_t held = rows.matching(keys);
  rows.keep(held);
  if (held < entries.size()) {
    const std::vector<const Entry*> rest(entries.begin() + static_cast<std::ptrdiff_t>(held), entries.end());
    runtime::PastKV piece = core.pool().gather_all(entry_sequences(rest));
    piece.positions = entry_positions(core, rest, keys[held].start);
    rows.append(std::move(piece),
                std::vector<WindowPast::Key>(keys.begin() + static_cast<std::ptrdiff_t>(held), keys.end()));
  }
  if (next_position != nullptr) *next_position = position;
  runtime::PastKV past = rows.view();
  s.past->put(std::move(rows));
  return past;
}

runtime::PastKV concat_past(int64_t num_layers, const std::vector<runtime::Content>& contents,
                            const std::vector<at::Tensor>& positions) {
  runtime::PastKV past;
  if (contents.empty()) return past;
  past.layers.resize(static_cast<std::size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<at::Tensor> ks, vs;
    for (const auto& c : contents) {
      ks.push_back(c[static_cast<std::size_t>(l)].k);
      vs.push_back(c[static_cast<std::size_t>(l)].v);
    }
    past.layers[static_cast<std::size_t>(l)] = {at::cat(ks, 0), at::cat(vs, 0)};
  }
  past.positions = at::cat(positions, -1);
  return past;
}

}  // namespace orbit::detail
