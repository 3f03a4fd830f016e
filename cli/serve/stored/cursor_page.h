// The cursor pages of OpenAI's list endpoints (no HTTP here): GET /v1/responses/{id}/input_items
// (responses_items.h), GET /v1/chat/completions and GET /v1/chat/completions/{id}/messages
// (chat_store_wire.h). A page is {object: "list", data, first_id, last_id, has_more}; its query takes
// order ("asc" or "desc"; each endpoint has its default), limit (1..100, default 20) and after (the id of
// the item the page starts after: the previous page's last_id, as the openai client's auto-pagination sends
// it). A parameter given twice, a bad value, or a parameter the endpoint does not take is a 400 naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/wire/serve_api.h"

namespace orbit::serve {

using QueryParams = std::multimap<std::string, std::string>;  // name -> value, as httplib::Params holds them

struct PageQuery {
  bool descending = false;
  int64_t limit = 20;
  std::string after;  // "" = from the first
  QueryParams rest;   // the endpoint's own parameters (those `takes` accepted)
};

// Reads order, limit and after from `params` (order defaults to `default_order`). A parameter `takes`
// accepts goes to PageQuery::rest unchecked; any other is refused as unsupported, `served` listing what
// the endpoint takes ("order, limit and after are"). Parameters are checked in name order.
Parsed<PageQuery> read_page_query(const QueryParams& params, const std::string& default_order,
                                  const std::string& served,
                                  const std::function<bool(const std::string& name)>& takes = nullptr);

// One page of `items` (a JSON array in ascending order, each item with an "id") under `query`; a 400
// naming `after` when no item has that id.
Parsed<nlohmann::json> json_page(nlohmann::json items, const PageQuery& query);

// {object: "list", data, first_id, last_id (null when data is empty), has_more}
nlohmann::json page_body(nlohmann::json data, bool has_more);

// A 400 naming a query parameter: "<param>: <message>", with `code` (OpenAI's, as the body's fields have them;
// "" answers null).
ApiError bad_query_param(const std::string& param, const std::string& message, const std::string& code = "");

}  // namespace orbit::serve
