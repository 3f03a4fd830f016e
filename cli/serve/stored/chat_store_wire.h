// OpenAI's stored chat completions on the wire (no HTTP here; chat_store_http.h serves them, chat_store.h
// keeps them):
//   POST   /v1/chat/completions with store: true   the completion is kept (stored_completion) unless the run
//                                                  was cancelled or a streamed choice ended with the
//                                                  tool_call_stream_mismatch error (storable)
//   GET    /v1/chat/completions/{id}               the chat.completion object as returned, with `metadata`
//                                                  as last updated (completion_object); no query parameters
//   GET    /v1/chat/completions                    a cursor page (cursor_page.h) of those objects: after,
//                                                  limit (1..100, default 20), order (asc, the default, or
//                                                  desc, by created), model, metadata[KEY]=VALUE (every pair
//                                                  must match) (completion_list_query, completion_list_body)
//   GET    /v1/chat/completions/{id}/messages      the request's messages, a cursor page (after, limit,
//                                                  order: asc by default) (messages_page)
//   POST   /v1/chat/completions/{id}               {"metadata": {...} | null} replaces the metadata (null
//                                                  clears it); any other field is a 400 naming it
//                                                  (parse_completion_update); answers the updated object
//   DELETE /v1/chat/completions/{id}               {id, object: "chat.completion.deleted", deleted: true}
// A message of the list is the ChatCompletionStoreMessage the openai client reads: {id: "<completion
// id>-<index>", role as sent, content (the text; its parts' text joined when parts were sent; null when
// none), name (or null), content_parts (the parts as sent, or null)}, with tool_calls and tool_call_id as
// sent. An unknown id is a 404 (code not_found, param completion_id); a bad query parameter a 400 naming it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "serve/stored/chat_store.h"
#include "serve/stored/cursor_page.h"
#include "serve/stored/store_write.h"
#include "serve/wire/serve_api.h"
#include "serve/wire/serve_wire.h"

namespace orbit::serve {

// Whether a run's answer may be stored: every choice finished (none cancelled because its client left) and
// none streamed a tool call its answer does not hold (RunResult::tool_stream_mismatch: that choice's stream
// ended with an error, so the client holds no answer to retrieve later; a Responses API response so failed
// is not stored either, responses_run.h).
bool storable(const RunResult& result);
// The record of a stored chat request's answer: `request` asked for store (its metadata and messages_json),
// `ids` and `result` are what chat_completion wrote the answer from (every choice of n > 1 included).
StoredCompletion stored_completion(const ChatRequest& request, const ResponseIds& ids, const RunResult& result);

// The chunk a streamed chat answer with store true ends with, before [DONE], when its write failed
// (store_write.h): {id, object: "chat.completion.chunk", created, model, choices: [], orbit: {stored: false,
// store_error}}, shaped as include_usage's chunk so that clients read past it.
nlohmann::json store_failed_chunk(const ResponseIds& ids, const StoreWrite& write);

// The chat.completion object with its current metadata.
nlohmann::json completion_object(const StoredCompletion& completion);
// The query of GET /v1/chat/completions/{id}: any parameter is a 400 naming it.
std::optional<ApiError> completion_retrieve_query_problem(const QueryParams& params);
// The query of GET /v1/chat/completions, or the 400 naming the parameter at fault.
Parsed<CompletionQuery> completion_list_query(const QueryParams& params);
nlohmann::json completion_list_body(const CompletionPage& page);
// One page of the completion's messages, or the 400 naming the parameter at fault.
Parsed<nlohmann::json> messages_page(const StoredCompletion& completion, const QueryParams& params);
// The body of POST /v1/chat/completions/{id}: the new metadata, or the 400 naming the field at fault.
Parsed<Metadata> parse_completion_update(std::string_view body);

// 404: no completion stored under `id`.
ApiError unknown_completion(const std::string& id);
// 409: the completion `id` is still being generated (ChatStore::live): stored once its answer ends.
ApiError completion_in_progress(const std::string& id);
// 400: `after` names no stored completion.
ApiError unknown_after(const std::string& after);

}  // namespace orbit::serve
