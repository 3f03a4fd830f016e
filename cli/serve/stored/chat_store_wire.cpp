#include "serve/stored/chat_store_wire.h"

#include <algorithm>

#include "orbit/common/json_input.h"
#include "serve/wire/repeated_key.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve {

using nlohmann::json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace chat_store_wire {

// One request message as the messages list returns it (a ChatCompletionStoreMessage).
json store_message(const json& m, const std::string& id) {
  json out = {{"id", id},
              {"role", m.value("role", json(nullptr))},
              {"content", nullptr},
              {"name", m.value("name", json(nullptr))},
              {"content_parts", nullptr}};
  const json content = m.value("content", json(nullptr));
  if (content.is_string()) {
    out["content"] = content;
  } else if (content.is_array()) {
    std::string text;
    for (const json& part : content) {
      if (part.is_object() && part.value("type", "") == "text") text += part.value("text", "");
    }
    out["content"] = text;
    out["content_parts"] = content;
  }
  for (const char* name : {"tool_calls", "tool_call_id"}) {
    if (m.contains(name) && !m[name].is_null()) out[name] = m[name];
  }
  return out;
}

json store_messages(const std::string& messages_json, const std::string& completion_id) {
  const json messages = json::parse(messages_json, nullptr, false);
  json out = json::array();
  if (!messages.is_array()) return out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    out.push_back(store_message(messages[i], completion_id + "-" + std::to_string(i)));
  }
  return out;
}

bool metadata_param(const std::string& name) { return name == "model" || name.rfind("metadata", 0) == 0; }

}  // namespace chat_store_wire

bool storable(const RunResult& result) {
  // A choice whose stream ended with the tool_call_stream_mismatch error told its client the answer failed:
  // the calls it holds are not those the client assembled, so a later GET must not return them as answered.
  auto finished = [](const RunResult& choice) {
    return choice.finish_reason != "cancelled" && !choice.tool_stream_mismatch;
  };
  if (!finished(result)) return false;
  return std::all_of(result.extra_choices.begin(), result.extra_choices.end(), finished);
}

json store_failed_chunk(const ResponseIds& ids, const StoreWrite& write) {
  json chunk = usage_chunk(ids, "chat.completion.chunk", nullptr);
  if (!ids.usage_null) chunk.erase("usage");  // under include_usage, null as in every chunk but the usage one
  chunk["orbit"] = store_notice(write);
  return chunk;
}

StoredCompletion stored_completion(const ChatRequest& request, const ResponseIds& ids, const RunResult& result) {
  StoredCompletion c;
  c.id = ids.id;
  c.created = ids.created;
  c.model = ids.model;
  c.metadata = request.metadata;
  c.body = chat_completion_text(ids, result);
  c.messages = dump(chat_store_wire::store_messages(request.messages_json, ids.id));
  return c;
}

json completion_object(const StoredCompletion& completion) {
  json body = json::parse(completion.body);
  body["metadata"] = completion.metadata;
  return body;
}

std::optional<ApiError> completion_retrieve_query_problem(const QueryParams& params) {
  if (params.empty()) return std::nullopt;
  const std::string& name = params.begin()->first;
  return api_error(400, name + ": this query parameter is not supported by this server (a retrieve takes none)",
                   "invalid_request_error", "unsupported_parameter", name);
}

Parsed<CompletionQuery> completion_list_query(const QueryParams& params) {
  Parsed<CompletionQuery> out;
  const Parsed<PageQuery> page = read_page_query(params, "asc", "after, limit, order, model and metadata[KEY] are",
                                                 chat_store_wire::metadata_param);
  if (!page.ok()) {
    out.error = page.error;
    return out;
  }
  CompletionQuery query;
  query.descending = page.value->descending;
  query.limit = page.value->limit;
  query.after = page.value->after;
  for (const auto& [name, value] : page.value->rest) {
    if (name == "model") {
      query.model = value;
      continue;
    }
    const bool bracketed = name.size() > 10 && name[8] == '[' && name.back() == ']';
    if (!bracketed) {
      out.error = bad_query_param(name, "give each metadata pair to match as metadata[KEY]=VALUE");
      return out;
    }
    query.metadata[name.substr(9, name.size() - 10)] = value;
  }
  out.value = std::move(query);
  return out;
}

json completion_list_body(const CompletionPage& page) {
  json data = json::array();
  for (const StoredCompletion& c : page.data) data.push_back(completion_object(c));
  return page_body(std::move(data), page.has_more);
}

Parsed<json> messages_page(const StoredCompletion& completion, const QueryParams& params) {
  const Parsed<PageQuery> query = read_page_query(params, "asc", "after, limit and order are");
  if (!query.ok()) return {std::nullopt, query.error};
  return json_page(json::parse(completion.messages), *query.value);
}

Parsed<Metadata> parse_completion_update(std::string_view text) {
  Parsed<Metadata> out;
  try {
    const json body = parse_json_input(text.data(), text.data() + text.size(), "the body");
    if (!body.is_object())
      invalid_body(std::string("the body must be a JSON object, got ") + json_type_name(body), true);
    refuse_repeated_keys(text);
    for (const auto& [name, value] : body.items()) {
      if (name != "metadata") {
        throw RequestInvalid{api_error(400, name + ": only metadata can be updated on a stored chat completion",
                                       "invalid_request_error", "unsupported_parameter", name)};
      }
    }
    if (!body.contains("metadata")) missing_field("metadata", "(give null to clear it)");
    Metadata metadata;
    if (!body["metadata"].is_null()) {
      check_metadata(body["metadata"]);
      for (const auto& [key, value] : body["metadata"].items()) metadata[key] = value.get<std::string>();
    }
    out.value = std::move(metadata);
  } catch (const RequestInvalid& e) {
    out.error = e.error;
  } catch (const Error& e) {
    out.error = api_error(400, e.what(), "invalid_request_error", "invalid_value");  // not JSON
  }
  return out;
}

ApiError unknown_completion(const std::string& id) {
  return api_error(404,
                   "no stored chat completion '" + id +
                       "' (never stored, created without store true, deleted, or dropped from the store)",
                   "invalid_request_error", "not_found", "completion_id");
}

ApiError completion_in_progress(const std::string& id) {
  return api_error(409,
                   "chat completion '" + id +
                       "' is still being generated: it is stored when its answer ends (ask again then); "
                       "DELETE now deletes it",
                   "invalid_request_error", "chat_completion_in_progress", "completion_id");
}

ApiError unknown_after(const std::string& after) {
  return bad_query_param("after", "no stored chat completion '" + after +
                                      "', nor one that left recently (the cursor is kept for the last 4 x "
                                      "--max-chat-completions to be deleted or evicted): start the list again");
}

}  // namespace orbit::serve
