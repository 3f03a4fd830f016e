#include "serve/responses/responses_disk.h"

#include <nlohmann/json.hpp>

#include "orbit/common/error.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace response_rows {

constexpr const char* kFormat = "orbit-serve-responses 1";

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS responses(id TEXT PRIMARY KEY, named INTEGER NOT NULL, session TEXT NOT NULL,"
    " previous TEXT, added TEXT NOT NULL, body TEXT NOT NULL, read_key TEXT NOT NULL, used INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS responses_key ON responses(read_key, used) WHERE named = 1;"
    "CREATE INDEX IF NOT EXISTS responses_used ON responses(used);"
    "CREATE INDEX IF NOT EXISTS responses_previous ON responses(previous);";

nlohmann::json message_json(const ChatMessage& m) {
  ORBIT_CHECK(m.parts.empty(), "responses store: a message with chunk parts cannot be stored");
  nlohmann::json j{{"role", m.role}};
  // Content null or left out as the request had it (the template tells them from ""); rows before that
  // distinction hold a string.
  if (m.content_form == ContentForm::kText) j["content"] = m.content;
  if (m.content_form == ContentForm::kNull) j["content"] = nullptr;
  if (m.name) j["name"] = *m.name;
  if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
  if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
  if (!m.tool_calls.empty()) {
    j["tool_calls"] = nlohmann::json::array();
    for (const ChatToolCall& c : m.tool_calls)
      j["tool_calls"].push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
  }
  return j;
}

ChatMessage message_of(const nlohmann::json& j) {
  ChatMessage m;
  m.role = j.at("role").get<std::string>();
  if (!j.contains("content")) {
    m.content_form = ContentForm::kAbsent;
  } else if (j["content"].is_null()) {
    m.content_form = ContentForm::kNull;
  } else {
    m.content = j["content"].get<std::string>();
  }
  if (j.contains("name")) m.name = j["name"].get<std::string>();
  if (j.contains("tool_call_id")) m.tool_call_id = j["tool_call_id"].get<std::string>();
  if (j.contains("reasoning_content")) m.reasoning_content = j["reasoning_content"].get<std::string>();
  if (j.contains("tool_calls")) {
    for (const auto& c : j["tool_calls"]) {
      m.tool_calls.push_back(ChatToolCall{c.at("id").get<std::string>(), c.at("name").get<std::string>(),
                                          c.at("arguments").get<std::string>()});
    }
  }
  return m;
}

}  // namespace response_rows

using Statement = SqlStatement;

std::string messages_to_json(const std::vector<ChatMessage>& messages) {
  nlohmann::json list = nlohmann::json::array();
  for (const ChatMessage& m : messages) list.push_back(response_rows::message_json(m));
  // Replaced, not thrown: a row that cannot be written would fail the answer after its run.
  return list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<ChatMessage> messages_from_json(const std::string& text, const std::string& what) {
  std::vector<ChatMessage> out;
  try {
    const nlohmann::json list = nlohmann::json::parse(text);
    ORBIT_CHECK(list.is_array(), "not an array");
    for (const auto& m : list) out.push_back(response_rows::message_of(m));
  } catch (const std::exception& e) {
    ORBIT_FAIL(what << ": its messages do not parse (" << e.what() << ")");
  }
  return out;
}

ResponseDisk::ResponseDisk(const std::string& path)
    : file_("responses store", path, response_rows::kSchema, response_rows::kFormat) {}

std::vector<std::string> ResponseDisk::insert(const std::function<std::vector<ResponseRow>()>& plan, int64_t capacity) {
  SqlTransaction t(file_);
  for (const ResponseRow& row : plan()) insert_row(row);
  std::vector<std::string> evicted = evict_to(capacity);
  t.commit();
  return evicted;
}

void ResponseDisk::insert_row(const ResponseRow& row) {
  Statement s(file_,
              "INSERT OR IGNORE INTO responses(id, named, session, previous, added, body, read_key, used) "
              "VALUES(?1, ?7, ?2, ?3, ?4, ?5, ?6, (SELECT COALESCE(MAX(used), 0) + 1 FROM responses))");
  s.text(1, row.id).text(2, row.session);
  if (row.previous.empty()) {
    s.null(3);
  } else {
    s.text(3, row.previous);
  }
  s.text(4, messages_to_json(row.added)).text(5, row.body).text(6, row.read_key).integer(7, row.named ? 1 : 0);
  s.step();
}

std::optional<ResponseRow> ResponseDisk::load(const std::string& id) const {
  Statement s(file_,
              "SELECT named, session, COALESCE(previous, ''), added, body, read_key FROM responses WHERE id = ?");
  s.text(1, id);
  if (!s.step()) return std::nullopt;
  ResponseRow row;
  row.id = id;
  row.named = s.column_int(0) != 0;
  row.session = s.column_text(1);
  row.previous = s.column_text(2);
  row.added = messages_from_json(s.column_text(3), file_.label() + ": response '" + id + "'");
  row.body = s.column_text(4);
  row.read_key = s.column_text(5);
  return row;
}

bool ResponseDisk::has(const std::string& id) const {
  Statement s(file_, "SELECT 1 FROM responses WHERE id = ?");
  s.text(1, id);
  return s.step();
}

std::string ResponseDisk::find_by_key(const std::string& read_key) const {
  Statement s(file_, "SELECT id FROM responses WHERE named = 1 AND read_key = ? ORDER BY used DESC LIMIT 1");
  s.text(1, read_key);
  return s.step() ? s.column_text(0) : std::string();
}

bool ResponseDisk::touch(const std::string& id) {
  Statement s(file_, "UPDATE responses SET used = (SELECT MAX(used) + 1 FROM responses) WHERE id = ? AND named = 1");
  s.text(1, id);
  s.step();
  return file_.changes() > 0;
}

void ResponseDisk::collect(std::string id) {
  while (!id.empty()) {
    Statement row(file_, "SELECT named, COALESCE(previous, '') FROM responses WHERE id = ?");
    row.text(1, id);
    if (!row.step() || row.column_int(0) != 0 || (kept_ && kept_(id))) return;
    const std::string previous = row.column_text(1);
    Statement continued(file_, "SELECT 1 FROM responses WHERE previous = ? LIMIT 1");
    continued.text(1, id);
    if (continued.step()) return;
    Statement erase(file_, "DELETE FROM responses WHERE id = ?");
    erase.text(1, id);
    erase.step();
    id = previous;
  }
}

bool ResponseDisk::unname(const std::string& id) {
  SqlTransaction t(file_);
  Statement s(file_, "UPDATE responses SET named = 0 WHERE id = ? AND named = 1");
  s.text(1, id);
  s.step();
  const bool was_named = file_.changes() > 0;
  if (was_named) collect(id);
  t.commit();
  return was_named;
}

void ResponseDisk::collect_all(const std::vector<std::string>& ids) {
  SqlTransaction t(file_);
  for (const std::string& id : ids) collect(id);
  t.commit();
}

std::vector<std::string> ResponseDisk::evict_to(int64_t capacity) {
  std::vector<std::string> evicted;
  const int64_t excess = named_count() - capacity;
  if (excess <= 0) return evicted;
  {
    Statement oldest(file_, "SELECT id FROM responses WHERE named = 1 ORDER BY used LIMIT ?");
    oldest.integer(1, excess);
    while (oldest.step()) evicted.push_back(oldest.column_text(0));
  }
  for (const std::string& id : evicted) {
    Statement s(file_, "UPDATE responses SET named = 0 WHERE id = ?");
    s.text(1, id);
    s.step();
    collect(id);
  }
  return evicted;
}

int64_t ResponseDisk::named_count() const {
  Statement s(file_, "SELECT COUNT(*) FROM responses WHERE named = 1");
  return s.step() ? s.column_int(0) : 0;
}

}  // namespace orbit::serve
