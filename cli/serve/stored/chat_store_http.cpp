#include "serve/stored/chat_store_http.h"

#include <httplib.h>

#include "serve/http/serve_http_route.h"
#include "serve/stored/chat_store_wire.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace chat_store_route {

// As every route answers an error (serve_http_route.h: a 503 kv_pool_full carries Retry-After).
void reply_error(httplib::Response& res, const ApiError& e) { serve_http_route::reply_error(res, e); }

void reply(httplib::Response& res, const nlohmann::json& body) { res.set_content(dump(body), "application/json"); }

}  // namespace chat_store_route

void list_chat_completions(ServeCore& core, const httplib::Request& req, httplib::Response& res) {
  const Parsed<CompletionQuery> query = completion_list_query(req.params);  // httplib::Params is a multimap
  if (!query.ok()) return chat_store_route::reply_error(res, query.error);
  const std::optional<CompletionPage> page = core.chat_completions().list(*query.value);
  if (!page) return chat_store_route::reply_error(res, unknown_after(query.value->after));
  chat_store_route::reply(res, completion_list_body(*page));
}

void get_chat_completion(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res) {
  if (const std::optional<ApiError> bad = completion_retrieve_query_problem(req.params)) {
    return chat_store_route::reply_error(res, *bad);
  }
  if (core.chat_completions().live().running(id).first) {
    return chat_store_route::reply_error(res, completion_in_progress(id));
  }
  const std::optional<StoredCompletion> stored = core.chat_completions().get(id);
  if (!stored) return chat_store_route::reply_error(res, unknown_completion(id));
  chat_store_route::reply(res, completion_object(*stored));
}

void list_chat_messages(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res) {
  if (core.chat_completions().live().running(id).first) {
    return chat_store_route::reply_error(res, completion_in_progress(id));
  }
  const std::optional<StoredCompletion> stored = core.chat_completions().get(id);
  if (!stored) return chat_store_route::reply_error(res, unknown_completion(id));
  const Parsed<nlohmann::json> page = messages_page(*stored, req.params);
  if (!page.ok()) return chat_store_route::reply_error(res, page.error);
  chat_store_route::reply(res, *page.value);
}

void update_chat_completion(ServeCore& core, const std::string& id, const httplib::Request& req,
                            httplib::Response& res) {
  const Parsed<Metadata> metadata = parse_completion_update(req.body);
  if (!metadata.ok()) return chat_store_route::reply_error(res, metadata.error);
  if (core.chat_completions().live().running(id).first) {
    return chat_store_route::reply_error(res, completion_in_progress(id));
  }
  const std::optional<StoredCompletion> updated = core.chat_completions().update_metadata(id, *metadata.value);
  if (!updated) return chat_store_route::reply_error(res, unknown_completion(id));
  chat_store_route::reply(res, completion_object(*updated));
}

void delete_chat_completion(ServeCore& core, const std::string& id, httplib::Response& res) {
  // One still being generated is deleted there: nothing is stored when it ends (live_answers.h).
  const bool running = core.chat_completions().live().erase(id);
  if (!running && !core.chat_completions().erase(id)) return chat_store_route::reply_error(res, unknown_completion(id));
  chat_store_route::reply(res, {{"id", id}, {"object", "chat.completion.deleted"}, {"deleted", true}});
}

}  // namespace orbit::serve
