#include "serve/responses/responses_store.h"

#include <algorithm>
#include <cstdio>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace response_keys {

void add_text(Sha256& h, const std::string& text) { h.update_u64(text.size()).update(text); }

void add_optional(Sha256& h, const std::optional<std::string>& text) {
  h.update_u64(text ? 1 : 0);
  if (text) add_text(h, *text);
}

// The hash of each prefix of `messages`: keys[k] covers messages[0..k].
std::vector<std::string> prefix_keys(const std::vector<ChatMessage>& messages) {
  std::vector<std::string> keys;
  keys.reserve(messages.size());
  std::string previous;
  for (const ChatMessage& m : messages) {
    Sha256 h;
    add_text(h, previous);
    add_text(h, m.role);
    add_text(h, m.content);
    add_optional(h, m.name);
    add_optional(h, m.tool_call_id);
    h.update_u64(m.tool_calls.size());
    for (const ChatToolCall& call : m.tool_calls) {
      add_text(h, call.id);
      add_text(h, call.name);
      add_text(h, call.arguments);
    }
    previous = h.hex_digest();
    keys.push_back(previous);
  }
  return keys;
}

// The most responses one transaction takes: a group is what queued while the one before committed.
constexpr std::size_t kMaxGroup = 64;

}  // namespace response_keys

std::vector<ChatMessage> StoredResponse::conversation() const {
  std::vector<const StoredResponse*> chain;
  for (const StoredResponse* r = this; r != nullptr; r = r->previous.get()) chain.push_back(r);
  std::vector<ChatMessage> out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    out.insert(out.end(), (*it)->added.begin(), (*it)->added.end());
  return out;
}

StoredResponse::~StoredResponse() {
  std::shared_ptr<StoredResponse> link = std::move(previous);
  // While this is the last owner of the next link, detach its predecessor before it is destroyed.
  while (link && link.use_count() == 1) link = std::move(link->previous);
}

ResponseStore::ResponseStore(ResponseStoreOptions options)
    : capacity_(std::max<std::size_t>(options.capacity, 1)),
      group_(options.group_commit ? response_keys::kMaxGroup : 1,
             {[this](const std::vector<const Pending*>& group) { commit(group); }, [this] { check(); }}) {
  if (!options.path.empty()) disk_ = std::make_unique<ResponseDisk>(options.path);
  std::random_device device;
  random_.seed((static_cast<uint64_t>(device()) << 32) ^ device());
}

std::string ResponseStore::new_id() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "resp_";
  std::lock_guard<std::mutex> lock(mutex_);
  for (int word = 0; word < 2; ++word) {
    const uint64_t bits = random_();
    for (int shift = 60; shift >= 0; shift -= 4) id += kHex[(bits >> shift) & 15];
  }
  return id;
}

void ResponseStore::touch(Entry& entry) { recency_.splice(recency_.begin(), recency_, entry.recency); }

void ResponseStore::remember(std::shared_ptr<StoredResponse> response, const std::string& key, bool on_disk) {
  const std::string id = response->id;
  recency_.push_front(id);
  by_id_[id] = Entry{std::move(response), recency_.begin(), key, on_disk};
  if (!key.empty()) by_key_[key] = id;  // the newest of equal conversations
  const std::size_t held = disk_ ? std::min(capacity_, kMemoryCapacity) : capacity_;
  while (by_id_.size() > held) forget(recency_.back());
  if (links_.size() > links_limit_) {  // drop the links no response in memory holds any more
    for (auto it = links_.begin(); it != links_.end();) it = it->second.expired() ? links_.erase(it) : std::next(it);
    links_limit_ = std::max<std::size_t>(1024, 2 * links_.size());
  }
}

void ResponseStore::forget(const std::string& id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  const auto indexed = by_key_.find(it->second.key);
  if (indexed != by_key_.end() && indexed->second == id) by_key_.erase(indexed);
  recency_.erase(it->second.recency);
  by_id_.erase(it);
}

StoreWrite ResponseStore::put(std::shared_ptr<StoredResponse> response, const std::vector<ChatMessage>& read) {
  ORBIT_CHECK(response != nullptr && !response->id.empty(), "ResponseStore::put: a response needs an id");
  const std::vector<std::string> keys = response_keys::prefix_keys(read);
  Pending pending{std::move(response), keys.empty() ? std::string() : keys.back()};
  if (!disk_) {
    std::lock_guard<std::mutex> lock(mutex_);
    // ids are unique: a second put of one is a no-op
    if (by_id_.count(pending.response->id) == 0) remember(std::move(pending.response), pending.key, false);
    return {};
  }
  // Not under mutex_, which a commit holds while it syncs: the puts that come meanwhile queue for the next.
  StoreWrite written = group_.submit(&pending);  // remembered by commit() once on disk
  if (!written) {
    std::fprintf(stderr, "orbit serve: response %s is kept in memory only (until a restart): %s\n",
                 pending.response->id.c_str(), written.error.c_str());
    std::lock_guard<std::mutex> lock(mutex_);
    if (by_id_.count(pending.response->id) == 0) remember(std::move(pending.response), pending.key, false);
  }
  return written;
}

void ResponseStore::commit(const std::vector<const Pending*>& group) {
  std::vector<ResponseRow> rows;
  rows.reserve(group.size());
  for (const Pending* p : group) {
    const StoredResponse& r = *p->response;
    rows.push_back(
        ResponseRow{r.id, true, r.session, r.previous ? r.previous->id : std::string(), r.added, r.body, p->key});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<std::string> evicted = disk_->insert(rows, static_cast<int64_t>(capacity_));
  for (const Pending* p : group) {
    links_[p->response->id] = p->response;
    if (by_id_.count(p->response->id) == 0) remember(p->response, p->key, true);
  }
  for (const std::string& dropped : evicted) forget(dropped);
}

StoreWrite ResponseStore::check_writable() {
  if (!disk_) return {};
  StoreWrite checked = group_.check();
  if (!checked)
    std::fprintf(stderr, "orbit serve: the responses store cannot take a write: %s\n", checked.error.c_str());
  return checked;
}

void ResponseStore::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  disk_->check_writable();
}

std::shared_ptr<StoredResponse> ResponseStore::load(const std::string& id) {
  // The rows from `id` back to the first link memory already holds (or the chain's first).
  std::vector<ResponseRow> rows;
  std::shared_ptr<StoredResponse> base;
  for (std::string next = id; !next.empty();) {
    const auto held = links_.find(next);
    if (held != links_.end()) base = held->second.lock();
    if (base) break;
    std::optional<ResponseRow> row = disk_->load(next);
    if (!row) {
      ORBIT_CHECK(next == id, "responses store " << disk_->path() << ": response '" << rows.back().id << "' continues '"
                                                 << next << "', which is missing");
      return nullptr;
    }
    next = row->previous;
    rows.push_back(std::move(*row));
  }
  for (auto row = rows.rbegin(); row != rows.rend(); ++row) {
    auto r = std::make_shared<StoredResponse>();
    r->id = row->id;
    r->session = std::move(row->session);
    r->added = std::move(row->added);
    r->body = std::move(row->body);
    r->previous = std::move(base);
    links_[r->id] = r;
    base = std::move(r);
  }
  return base;
}

bool ResponseStore::still_on_disk(const std::string& id) {
  try {
    return disk_->touch(id);
  } catch (const Error& e) {  // the disk cannot be written (full, read-only): the order is only a hint
    std::fprintf(stderr, "orbit serve: response %s is served without updating its use: %s\n", id.c_str(), e.what());
    return true;
  }
}

std::shared_ptr<StoredResponse> ResponseStore::find(const std::string& id) {
  const auto it = by_id_.find(id);
  if (it != by_id_.end()) {
    if (it->second.on_disk && !still_on_disk(id)) {  // deleted or evicted by another server on the store
      forget(id);
      return nullptr;
    }
    touch(it->second);
    return it->second.response;
  }
  if (!disk_) return nullptr;
  const std::optional<ResponseRow> row = disk_->load(id);
  if (!row || !row->named) return nullptr;
  std::shared_ptr<StoredResponse> response = load(id);
  (void)still_on_disk(id);
  remember(response, row->read_key, true);
  return response;
}

std::shared_ptr<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id);
}

std::shared_ptr<StoredResponse> ResponseStore::continued_by(const std::vector<ChatMessage>& messages) {
  const std::vector<std::string> keys = response_keys::prefix_keys(messages);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
    const auto indexed = by_key_.find(*key);
    if (indexed != by_key_.end()) return find(indexed->second);
    if (!disk_) continue;
    const std::string id = disk_->find_by_key(*key);
    if (!id.empty()) return find(id);
  }
  return nullptr;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool held = by_id_.count(id) != 0;
  forget(id);
  return disk_ ? disk_->unname(id) || held : held;
}

std::size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return disk_ ? static_cast<std::size_t>(disk_->named_count()) : by_id_.size();
}

}  // namespace orbit::serve
