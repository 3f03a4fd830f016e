#include "serve/responses_store.h"

#include <algorithm>

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

ResponseStore::ResponseStore(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {
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

void ResponseStore::put(std::shared_ptr<StoredResponse> response, const std::vector<ChatMessage>& read) {
  ORBIT_CHECK(response != nullptr && !response->id.empty(), "ResponseStore::put: a response needs an id");
  const std::vector<std::string> keys = response_keys::prefix_keys(read);
  const std::string key = keys.empty() ? std::string() : keys.back();
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string id = response->id;
  if (by_id_.count(id) != 0) return;  // ids are unique: a second put of one is a no-op
  recency_.push_front(id);
  by_id_[id] = Entry{std::move(response), recency_.begin(), key};
  if (!key.empty()) by_key_[key] = id;  // the newest of equal conversations
  while (by_id_.size() > capacity_) {
    const auto oldest = by_id_.find(recency_.back());
    const auto indexed = by_key_.find(oldest->second.key);
    if (indexed != by_key_.end() && indexed->second == oldest->first) by_key_.erase(indexed);
    by_id_.erase(oldest);
    recency_.pop_back();
  }
}

std::shared_ptr<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  touch(it->second);
  return it->second.response;
}

std::shared_ptr<StoredResponse> ResponseStore::continued_by(const std::vector<ChatMessage>& messages) {
  const std::vector<std::string> keys = response_keys::prefix_keys(messages);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
    const auto indexed = by_key_.find(*key);
    if (indexed == by_key_.end()) continue;
    Entry& entry = by_id_.at(indexed->second);
    touch(entry);
    return entry.response;
  }
  return nullptr;
}

std::size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_id_.size();
}

}  // namespace orbit::serve
