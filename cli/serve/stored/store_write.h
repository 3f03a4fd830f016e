// What a client of `orbit serve` is told about the write of an answer it asked to keep (`store: true` on
// /v1/chat/completions and /v1/responses), shared by both stores (chat_store.h, responses_store.h):
//
//   before the run  the store is checked (ChatStore::check_writable, ResponseStore::check_writable: a real
//                   write, not a free-space estimate); when it cannot take one the request is refused with
//                   store_refusal's 507 (type server_error, code store_unavailable, param store) and nothing
//                   runs.
//   after the run   the answer is written. When that write fails (the disk filled meanwhile) the answer is
//                   still given, and says so: the header `Orbit-Stored: false` with `Orbit-Store-Error: WHY`
//                   (a stored one has `Orbit-Stored: true`); a streamed answer, whose headers went first,
//                   carries store_notice's {"stored": false, "store_error": WHY} as "orbit" in its last chunk
//                   (chat) or in response.completed's response (Responses). /metrics counts each such write
//                   in orbit_store_write_failures_total{store}, and stderr names the id and the reason.
//   held            such an answer is held in memory and its write retried (pending_writes.h) once the store
//                   takes writes again, and a last time at shutdown: `Orbit-Store-Pending: true` and
//                   "store_pending": true say so (false: no room to hold it, `--store-pending-mb`; it will
//                   not be written). With `--store DIR` a held answer is also appended, synced, to the
//                   store's journal of held answers (held_journal.h), so that a crash does not lose it: the
//                   next start writes it (`Orbit-Store-Journaled: true`, "store_journaled": true). Where the
//                   journal cannot take it (the same full disk) it is held in memory only
//                   (`Orbit-Store-Journaled: false`): a crash or `kill -9` loses it, a clean stop tries it a
//                   last time. The check before the run cannot reserve the answer's room: its size is
//                   not known until it ends (n choices, log probabilities), and SQLite reserves no disk space
//                   (its "reserved bytes" are per page, for extensions), so the retry is what makes a disk
//                   that filled during the run cost no answer, as long as the server runs or stops cleanly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/wire/serve_api.h"

namespace orbit::serve {

// The outcome of one write to a store: ok, or why it failed (the store's error, naming its file).
struct StoreWrite {
  bool ok = true;
  std::string error;  // set when !ok
  // A failed write whose answer the store holds for a retry (pending_writes.h); false: it will not be
  // written (no room to hold it: `--store-pending-mb`).
  bool held = false;
  // A held answer whose record is in the store's journal of held answers (held_journal.h): it survives a
  // crash. false: held in memory only.
  bool journaled = false;

  explicit operator bool() const { return ok; }
  static StoreWrite failed(std::string why) { return StoreWrite{false, std::move(why)}; }
};

// 507 insufficient storage for a request with store true whose store (`what`: "chat completions",
// "responses") failed its check before the run: names the field `store`, the reason, and what to do.
ApiError store_refusal(const std::string& what, const StoreWrite& check);

// {"stored": false, "store_error": WHY, "store_pending": HELD} for a failed write (with "store_journaled":
// JOURNALED when held); {"stored": true} for one that went through.
nlohmann::json store_notice(const StoreWrite& write);

// The headers of a whole answer whose write was attempted: Orbit-Stored (true or false) and, for a failed
// write, Orbit-Store-Error (its reason, as header_value), Orbit-Store-Pending (true: held for a retry) and,
// when held, Orbit-Store-Journaled (true: in the journal, it survives a crash; false: in memory only).
std::vector<std::pair<std::string, std::string>> store_header_fields(const StoreWrite& write);

// `text` as one HTTP header value: control characters (a line break would end the header) become spaces,
// and it is cut at 512 bytes.
std::string header_value(const std::string& text);

}  // namespace orbit::serve
