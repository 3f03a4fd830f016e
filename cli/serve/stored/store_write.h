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
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "serve/wire/serve_api.h"

namespace orbit::serve {

// The outcome of one write to a store: ok, or why it failed (the store's error, naming its file).
struct StoreWrite {
  bool ok = true;
  std::string error;  // set when !ok

  explicit operator bool() const { return ok; }
  static StoreWrite failed(std::string why) { return StoreWrite{false, std::move(why)}; }
};

// 507 insufficient storage for a request with store true whose store (`what`: "chat completions",
// "responses") failed its check before the run: names the field `store`, the reason, and what to do.
ApiError store_refusal(const std::string& what, const StoreWrite& check);

// {"stored": false, "store_error": WHY} for a failed write; {"stored": true} for one that went through.
nlohmann::json store_notice(const StoreWrite& write);

// `text` as one HTTP header value: control characters (a line break would end the header) become spaces,
// and it is cut at 512 bytes.
std::string header_value(const std::string& text);

}  // namespace orbit::serve
