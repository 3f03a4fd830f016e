#include "serve/stored/cursor_page.h"

#include <algorithm>
#include <cstdlib>

namespace orbit::serve {

using nlohmann::json;

ApiError bad_query_param(const std::string& param, const std::string& message, const std::string& code) {
  return api_error(400, param + ": " + message, "invalid_request_error", code, param);
}

Parsed<PageQuery> read_page_query(const QueryParams& params, const std::string& default_order,
                                  const std::string& served,
                                  const std::function<bool(const std::string& name)>& takes) {
  Parsed<PageQuery> out;
  PageQuery query;
  query.descending = default_order == "desc";
  for (const auto& [name, value] : params) {
    if (params.count(name) > 1) {
      out.error = bad_query_param(name, "given more than once");
      return out;
    }
    if (name == "order") {
      if (value != "asc" && value != "desc") {
        out.error = bad_query_param(name, "must be 'asc' or 'desc'", "invalid_value");
        return out;
      }
      query.descending = value == "desc";
    } else if (name == "limit") {
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 100) {
        // OpenAI's codes for the bound passed (a limit of 0 or 101); one that is no integer is invalid_value.
        const bool whole = !value.empty() && *end == '\0';
        const char* code = !whole ? "invalid_value" : n < 1 ? "integer_below_min_value" : "integer_above_max_value";
        out.error = bad_query_param(name, "must be an integer from 1 to 100, got '" + value + "'", code);
        return out;
      }
      query.limit = n;
    } else if (name == "after") {
      query.after = value;
    } else if (takes && takes(name)) {
      query.rest.emplace(name, value);
    } else {
      out.error = api_error(400, name + ": this query parameter is not supported by this server (" + served + ")",
                            "invalid_request_error", "unsupported_parameter", name);
      return out;
    }
  }
  out.value = std::move(query);
  return out;
}

json page_body(json data, bool has_more) {
  const json first = data.empty() ? json(nullptr) : data.front()["id"];
  const json last = data.empty() ? json(nullptr) : data.back()["id"];
  return {
      {"object", "list"}, {"data", std::move(data)}, {"first_id", first}, {"last_id", last}, {"has_more", has_more}};
}

Parsed<json> json_page(json items, const PageQuery& query) {
  Parsed<json> out;
  if (query.descending) std::reverse(items.begin(), items.end());
  std::size_t begin = 0;
  if (!query.after.empty()) {
    const auto at = std::find_if(items.begin(), items.end(), [&](const json& i) { return i["id"] == query.after; });
    if (at == items.end()) {
      out.error = bad_query_param("after", "no item '" + query.after + "' in this list");
      return out;
    }
    begin = static_cast<std::size_t>(at - items.begin()) + 1;
  }
  const std::size_t end = std::min(items.size(), begin + static_cast<std::size_t>(query.limit));
  json data = json::array();
  for (std::size_t i = begin; i < end; ++i) data.push_back(std::move(items[i]));
  out.value = page_body(std::move(data), end < items.size());
  return out;
}

}  // namespace orbit::serve
