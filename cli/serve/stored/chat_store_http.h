// OpenAI's stored chat completions over HTTP (cpp-httplib): the routes serve_routes.cpp registers under
// /v1/chat/completions besides POST (chat_store_wire.h has what each answers and refuses; ServeCore's
// chat_completions() keeps them).
#pragma once

#include <string>

#include "serve/serve_core.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace orbit::serve {

// GET /v1/chat/completions: a page of stored completions.
void list_chat_completions(ServeCore& core, const httplib::Request& req, httplib::Response& res);
// GET /v1/chat/completions/{id}: the completion as returned, with its metadata as last updated.
void get_chat_completion(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res);
// GET /v1/chat/completions/{id}/messages: a page of the request's messages.
void list_chat_messages(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res);
// POST /v1/chat/completions/{id}: {"metadata"} replaces its metadata; answers the completion.
void update_chat_completion(ServeCore& core, const std::string& id, const httplib::Request& req,
                            httplib::Response& res);
// DELETE /v1/chat/completions/{id}: {"id", "object": "chat.completion.deleted", "deleted": true}.
void delete_chat_completion(ServeCore& core, const std::string& id, httplib::Response& res);

}  // namespace orbit::serve
