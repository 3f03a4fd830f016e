#include "serve/responses/responses_store.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "serve/stored/held_retry.h"
#include "serve/stored/journal_share.h"

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
    // Only where set: the keys of stored lists without reasoning stay what they were (the stream ends above).
    if (m.reasoning_content) add_optional(h, m.reasoning_content);
    if (m.content_form != ContentForm::kText) add_text(h, content_form_name(m.content_form));  // likewise
    previous = h.hex_digest();
    keys.push_back(previous);
  }
  return keys;
}

// The most responses one transaction takes: a group is what queued while the one before committed.
constexpr std::size_t kMaxGroup = 64;

ResponseRow row_of(const StoredResponse& r, bool named, const std::string& key) {
  return ResponseRow{r.id, named, r.session, r.previous ? r.previous->id : std::string(), r.added, r.body, key};
}

// What a held response costs the memory of pending writes.
std::size_t held_bytes(const StoredResponse& r) {
  std::size_t bytes = r.body.size();
  for (const ChatMessage& m : r.added) bytes += m.content.size();
  return bytes;
}

nlohmann::json journal_row(const StoredResponse& r, const std::string& key) {
  return {{"id", r.id},
          {"session", r.session},
          {"previous", r.previous ? r.previous->id : std::string()},
          {"added", messages_to_json(r.added)},
          {"body", r.body},
          {"read_key", key}};
}

// The id a journal record (journal_payload's JSON) names as its chain's link: the previous of its first row,
// its oldest link's or, with none, its response's. A held response's record when it has one, else a row on
// disk (or "").
std::string named_link(const nlohmann::json& record) {
  const nlohmann::json& links = record.at("links");
  return (links.empty() ? record.at("response") : links.front()).at("previous").get<std::string>();
}

// named_link of a record's payload (LinkOf).
std::string link_of(const std::string& payload) { return named_link(nlohmann::json::parse(payload)); }

ResponseRow row_of_journal(const nlohmann::json& j, const std::string& what) {
  ResponseRow row;
  row.id = j.at("id").get<std::string>();
  row.session = j.at("session").get<std::string>();
  row.previous = j.at("previous").get<std::string>();
  row.added = messages_from_json(j.at("added").get<std::string>(), what);
  row.body = j.at("body").get<std::string>();
  row.read_key = j.at("read_key").get<std::string>();
  return row;
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

ResponseStore::ResponseStore(ResponseStoreOptions options)
    : capacity_(std::max<std::size_t>(options.capacity, 1)),
      group_(options.group_commit ? response_keys::kMaxGroup : 1,
             {[this](const std::vector<const Pending*>& group) { commit(group); }, [this] { check(); }}),
      share_(options.path.empty() ? nullptr : std::make_unique<JournalShare>(options.path, response_keys::link_of)),
      journal_(!options.path.empty() && options.journal
                   ? std::make_unique<HeldJournal>(options.path, response_keys::link_of, share_.get())
                   : nullptr),
      pending_(options.pending_bytes, journal_.get()),
      before_disk_write_(std::move(options.before_disk_write)) {
  if (!options.path.empty()) disk_ = std::make_unique<ResponseDisk>(options.path);
  // A row a held response's journal record names stays, unnamed once deleted, until that record goes: a
  // start rebuilding the held one after a crash reads it there. This server's records are known here; those
  // of the other servers sharing the store (or gone, their journals not adopted yet) are read under the
  // store's lock, held until the deletion's transaction ends (JournalShareScope around each deleting call).
  if (disk_) {
    disk_->keep_while([this](const std::string& id) {
      return (journal_ && journal_->names(id)) || share_->named_elsewhere(id, journal_ ? journal_->path() : "");
    });
  }
  std::random_device device;
  random_.seed((static_cast<uint64_t>(device()) << 32) ^ device());
  if (journal_) recover_held();
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
  trim_memory();
  if (links_.size() > links_limit_) {  // drop the links no response in memory holds any more
    for (auto it = links_.begin(); it != links_.end();) it = it->second.expired() ? links_.erase(it) : std::next(it);
    links_limit_ = std::max<std::size_t>(1024, 2 * links_.size());
  }
}

void ResponseStore::trim_memory() {
  const std::size_t held = disk_ ? std::min(capacity_, kMemoryCapacity) : capacity_;
  auto oldest = recency_.rbegin();
  while (by_id_.size() > held) {
    // A response held for a retry stays: until its write lands, memory is the only place it is found.
    while (oldest != recency_.rend() && pending_.holds(*oldest)) ++oldest;
    if (oldest == recency_.rend()) return;
    const std::string id = *oldest++;  // forget() erases it from recency_: step past it first
    forget(id);
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
  if (written) {
    if (!pending_.empty()) retry_pending(false);  // the disk took a write: the held ones may fit again
    return written;
  }
  const std::string& id = pending.response->id;
  // Its record and its hold in one turn with erase(): a held response its record names, deleted in between,
  // would be released from the journal before this record names it (and its record lost with a crash).
  std::unique_lock<std::mutex> turn(journal_turn_);
  HoldOutcome held;
  {
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    if (journal_) lock.lock();
    // From the disk lookups that find the row its record names to the record's sync: another server's
    // deletion of that row reads the record first, or comes first (and the record carries that link itself).
    // Taken after mutex_, and held without it: a thread holding mutex_ may wait for another server's write,
    // which may wait for this lock.
    const JournalShareScope locked(journal_ && share_->lock().empty() ? share_.get() : nullptr);
    const std::string payload = journal_ ? journal_payload(pending) : std::string();
    if (lock.owns_lock()) lock.unlock();
    // Held before it is remembered: remembering trims memory, which keeps the held ones.
    held = pending_.hold(id, pending, response_keys::held_bytes(*pending.response), written.error, payload);
  }
  turn.unlock();
  written.held = held.held;
  written.journaled = held.journaled;
  const std::string where =
      held.journaled ? "and in the journal " + journal_->path() +
                           ": its write retried once the store takes writes, after a crash at the next start"
      : held.held ? "(" + (held.journal_error.empty() ? std::string("no journal") : held.journal_error) +
                        "): its write retried once the store takes writes"
                  : "until a restart: the responses held for a retry fill --store-pending-mb";
  std::fprintf(stderr, "orbit serve: response %s is kept in memory only: %s (%s)\n", id.c_str(), written.error.c_str(),
               where.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  if (by_id_.count(id) == 0) remember(pending.response, pending.key, false);
  return written;
}

std::string ResponseStore::journal_payload(const Pending& p) {
  nlohmann::json links = nlohmann::json::array();
  // The links no row holds, up to one held with its own record, which the last link names by id.
  std::vector<const StoredResponse*> missing;  // newest first
  for (const StoredResponse* link = p.response->previous.get();
       link != nullptr && !pending_.journaled(link->id) && !disk_->has(link->id); link = link->previous.get()) {
    missing.push_back(link);
  }
  for (auto link = missing.rbegin(); link != missing.rend(); ++link) {
    const auto entry = by_id_.find((*link)->id);
    links.push_back(response_keys::journal_row(**link, entry != by_id_.end() ? entry->second.key : std::string()));
  }
  // `links` moved in: an initializer list copies an lvalue, every link's body and messages with it.
  return nlohmann::json{{"response", response_keys::journal_row(*p.response, p.key)}, {"links", std::move(links)}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::shared_ptr<StoredResponse> ResponseStore::from_journal(const JournalEntry& e, Rebuilt& built, std::string& key) {
  // The records to rebuild, `e` first, then the record each names by id that is not rebuilt yet (a held link
  // with its own record): walked in a loop, not by recursion, since a held chain may run to any length.
  std::vector<std::pair<const JournalEntry*, nlohmann::json>> todo;
  todo.emplace_back(&e, nlohmann::json::parse(e.payload));
  for (;;) {
    const std::string named = response_keys::named_link(todo.back().second);
    const auto recorded = built.entries.find(named);
    if (recorded == built.entries.end() || built.responses.count(named) != 0 || !built.building.insert(named).second) {
      break;  // a row on disk, rebuilt already, or one whose rebuild began before (a cycle: the disk is asked)
    }
    todo.emplace_back(recorded->second, nlohmann::json::parse(recorded->second->payload));
  }
  std::shared_ptr<StoredResponse> last;
  for (auto it = todo.rbegin(); it != todo.rend(); ++it) {
    last = from_record(*it->first, it->second, built, key);
    if (last == nullptr) return nullptr;  // a link is gone: Rebuilt::gone names it
  }
  return last;
}

std::shared_ptr<StoredResponse> ResponseStore::from_record(const JournalEntry& e, const nlohmann::json& record,
                                                           Rebuilt& built, std::string& key) {
  std::vector<nlohmann::json> rows(record.at("links").begin(), record.at("links").end());
  rows.push_back(record.at("response"));
  std::shared_ptr<StoredResponse> last;
  for (const nlohmann::json& row_json : rows) {
    ResponseRow row = response_keys::row_of_journal(row_json, "held-answers journal " + e.file);
    if (const auto it = built.responses.find(row.id); it != built.responses.end()) {
      last = it->second;
      key = row.read_key;
      continue;
    }
    auto r = std::make_shared<StoredResponse>();
    r->id = row.id;
    r->session = std::move(row.session);
    r->added = std::move(row.added);
    r->body = std::move(row.body);
    if (!row.previous.empty()) {
      const auto known = built.responses.find(row.previous);
      r->previous = known != built.responses.end() ? known->second : load(row.previous);
      if (r->previous == nullptr) {  // its hold was most likely released already (Rebuilt::gone)
        built.gone = row.previous;
        return nullptr;
      }
    }
    built.responses[r->id] = r;
    key = std::move(row.read_key);
    last = std::move(r);
  }
  ORBIT_CHECK(last != nullptr && last->id == e.id, "its response is not its record's '" << e.id << "'");
  return last;
}

void ResponseStore::recover_held() {
  report_journal(*journal_, "responses");
  Rebuilt built;
  for (const JournalEntry& e : journal_->adopted().held) built.entries[e.id] = &e;
  std::vector<std::string> recovered;
  for (const JournalEntry& e : journal_->adopted().held) {
    if (e.link) continue;  // deleted while held: rebuilt only as a link of the holds that name it
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      std::string key;
      std::shared_ptr<StoredResponse> response = from_journal(e, built, key);
      if (response != nullptr) {
        pending_.adopt(e.id, Pending{response, key}, response_keys::held_bytes(*response));
        if (by_id_.count(e.id) == 0) remember(response, key, false);
        recovered.push_back(e.id);
        continue;
      }
      report_unconfirmed(e, built.gone);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "orbit serve: response %s in the journal %s is lost: %s\n", e.id.c_str(), e.file.c_str(),
                   error.what());
    }
    journal_->release(e.id);
  }
  {
    const JournalShareScope deleting(share_.get());
    std::lock_guard<std::mutex> lock(mutex_);
    collect_unnamed();  // the rows only the records lost named
  }
  if (recovered.empty()) return;
  report_recovered(pending_, recovered, retry_pending(true), "response");
}

void ResponseStore::report_unconfirmed(const JournalEntry& e, const std::string& gone) {
  std::fprintf(stderr,
               "orbit serve: response %s in the journal %s could not be confirmed released, and is not recovered: its "
               "chain continues '%s', which neither the store nor the journal holds. A held response's record keeps "
               "what it continues, so %s was most likely released already (deleted by its client, or stored, then "
               "deleted or evicted) by a server whose mark of that release did not reach the journal; if not (the "
               "store's database replaced or damaged), it is lost\n",
               e.id.c_str(), e.file.c_str(), gone.c_str(), e.id.c_str());
}

std::vector<ResponseRow> ResponseStore::rows_of(const std::vector<const Pending*>& group,
                                                std::vector<std::shared_ptr<StoredResponse>>& carried) {
  std::vector<ResponseRow> rows;
  rows.reserve(group.size());
  std::set<std::string> written;  // ids rows holds already
  for (const Pending* p : group) {
    // The links it continues that no row holds yet: held for a retry (written named), or deleted or dropped
    // while held (an unnamed link).
    std::vector<std::shared_ptr<StoredResponse>> missing;
    // A held link is not on disk (its write has not landed: no disk lookup); a retry's landing, not yet
    // released, may have written it, which the insert (by id) ignores.
    for (std::shared_ptr<StoredResponse> link = p->response->previous;
         link && written.count(link->id) == 0 && (pending_.holds(link->id) || !disk_->has(link->id));
         link = link->previous) {
      missing.push_back(link);
    }
    for (auto link = missing.rbegin(); link != missing.rend(); ++link) {
      const auto entry = by_id_.find((*link)->id);
      const std::string key = entry != by_id_.end() ? entry->second.key : std::string();
      rows.push_back(response_keys::row_of(**link, pending_.holds((*link)->id), key));
      written.insert((*link)->id);
      carried.push_back(*link);
    }
    rows.push_back(response_keys::row_of(*p->response, true, p->key));
    written.insert(p->response->id);
  }
  return rows;
}

bool ResponseStore::carries_links(const std::vector<const Pending*>& group) {
  return std::any_of(group.begin(), group.end(), [&](const Pending* p) {
    const StoredResponse* previous = p->response->previous.get();
    return previous != nullptr && (pending_.holds(previous->id) || !disk_->has(previous->id));
  });
}

void ResponseStore::commit(const std::vector<const Pending*>& group) {
  // Not between a held put's record and its hold: a row that record names, evicted here, is kept (keep_while).
  std::lock_guard<std::mutex> turn(journal_turn_);
  const JournalShareScope deleting(share_.get());  // the eviction's deletions, until both transactions end
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<StoredResponse>> carried;
  if (before_disk_write_) before_disk_write_();
  // A group carrying links no row holds (held ones) proves first that the disk takes a write: while it takes none
  // (full, read-only) a put continuing a held chain fails here, without building and writing the chain's rows.
  if (carries_links(group)) disk_->check_writable();
  // Which links no row holds is read inside the write's transaction (ResponseDisk::insert).
  const std::vector<std::string> evicted =
      disk_->insert([&] { return rows_of(group, carried); }, static_cast<int64_t>(capacity_));
  for (const std::shared_ptr<StoredResponse>& link : carried) {
    links_[link->id] = link;
    if (!pending_.holds(link->id)) continue;  // an unnamed link: memory serves it as before, if it holds it
    pending_.landed(link->id);
    const auto entry = by_id_.find(link->id);
    if (entry != by_id_.end()) entry->second.on_disk = true;
    std::fprintf(stderr, "orbit serve: response %s is stored now, with a response that continues it\n",
                 link->id.c_str());
  }
  for (const Pending* p : group) {
    links_[p->response->id] = p->response;
    const auto entry = by_id_.find(p->response->id);
    if (entry == by_id_.end()) {
      remember(p->response, p->key, true);
    } else {
      entry->second.on_disk = true;  // a held response, written by a retry
    }
  }
  for (const std::string& dropped : evicted) forget(dropped);
  collect_unnamed();
}

void ResponseStore::collect_unnamed() {
  if (!journal_) return;
  std::vector<std::string> ids = journal_->take_unnamed();
  unnamed_.insert(unnamed_.end(), ids.begin(), ids.end());
  if (unnamed_.empty()) return;
  try {
    disk_->collect_all(unnamed_);
    unnamed_.clear();
  } catch (const Error& e) {  // the disk cannot be written: they stay unnamed rows until the next write
    std::fprintf(stderr, "orbit serve: %zu unnamed responses no held one needs any more stay in the store: %s\n",
                 unnamed_.size(), e.what());
  }
}

RetryResult ResponseStore::retry_pending(bool all) {
  if (!disk_) return {};
  return retry_in_turn(retry_mutex_, all, [&] { return retry_held(pending_, group_, all, "response"); });
}

std::size_t ResponseStore::drain_pending() {
  if (!disk_) return 0;
  return drain_held(retry_mutex_, pending_, group_, journal_.get(), "response");
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
  std::lock_guard<std::mutex> turn(retry_mutex_);  // a retry in flight lands first: unnamed below
  // Not between a held put's record and its hold: the record may name this response, as a journal record or a
  // row, which stays (a link) only once that record is held.
  std::lock_guard<std::mutex> journal_turn(journal_turn_);
  pending_.forget(id, true);  // its record kept as a link while a held response's record names it
  // The store's lock, once a deletion takes it, is held until the deletions' transactions end.
  const JournalShareScope deleting(share_.get());
  std::lock_guard<std::mutex> lock(mutex_);
  const bool held = by_id_.count(id) != 0;
  forget(id);
  if (!disk_) return held;
  const bool unnamed = disk_->unname(id);  // its row stays as a link while a held response's record names it
  collect_unnamed();
  return unnamed || held;
}

std::size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return disk_ ? static_cast<std::size_t>(disk_->named_count()) : by_id_.size();
}

}  // namespace orbit::serve
