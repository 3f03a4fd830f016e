// The trace file format (orbit/trace.h): JSON in, JSON out, and validation by simulating the window.
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "orbit/common/atomic_file.h"
#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"
#include "orbit/common/json_input.h"
#include "orbit/common/json_repeated_key.h"
#include "orbit/trace.h"
#include "trace_internal.h"

namespace orbit {

using nlohmann::json;

namespace {

// The largest embeddings.std a trace may give: synthetic media embeddings scaled past it would overflow a
// model's norms (float32 squares).
constexpr double kMaxEmbeddingStd = 1e6;

constexpr TraceOp kAllOps[] = {TraceOp::kAdmit,     TraceOp::kTurn,    TraceOp::kEvict, TraceOp::kSlide,
                               TraceOp::kRecall,    TraceOp::kReorder, TraceOp::kPlace, TraceOp::kFork,
                               TraceOp::kSwitch,    TraceOp::kCommit,  TraceOp::kDrop,  TraceOp::kGenerate,
                               TraceOp::kDisposable};

// Where in the file a value sits, for error messages: "web.json: step 7 (evict)".
struct Where {
  std::string file;
  std::string what;
  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    ORBIT_FAIL(file << ": " << what << ": field '" << field << "': " << message);
  }
};

std::string type_of(const json& v) { return v.type_name(); }

// A value for an error message: "number 5", "string \"x\"", "an array of 3 items". Bounded in size and
// never recursive, whatever the file holds.
std::string described(const json& v) { return v.is_structured() ? json_brief(v) : type_of(v) + " " + json_brief(v); }

void check_fields(const Where& w, const json& obj, const std::set<std::string>& known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (known.count(it.key()) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      w.fail(it.key(), "unknown field (known here: " + list + ")");
    }
  }
}

// Whether `v` is a JSON integer that fits int64 (nlohmann keeps 2^63 and above as unsigned, which
// get<int64_t>() would wrap to a negative number).
bool is_int64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
  return v.is_number_integer();
}

int64_t get_int(const Where& w, const json& obj, const std::string& field, int64_t fallback, int64_t min_value) {
  if (!obj.contains(field)) return fallback;
  const json& v = obj.at(field);
  if (!v.is_number_integer()) w.fail(field, "must be an integer, got " + described(v));
  if (!is_int64(v)) w.fail(field, "got " + json_brief(v) + ", past the largest 64-bit integer");
  const int64_t x = v.get<int64_t>();
  if (x < min_value) w.fail(field, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
  return x;
}

uint64_t get_seed(const Where& w, const json& obj, uint64_t fallback) {
  if (!obj.contains("seed")) return fallback;
  const json& v = obj.at("seed");
  if (!v.is_number_unsigned()) w.fail("seed", "must be a non-negative integer, got " + described(v));
  return v.get<uint64_t>();
}

double get_double(const Where& w, const json& obj, const std::string& field, double fallback) {
  if (!obj.contains(field)) return fallback;
  const json& v = obj.at(field);
  if (!v.is_number()) w.fail(field, "must be a number, got " + described(v));
  return v.get<double>();
}

std::string get_string(const Where& w, const json& obj, const std::string& field, bool required) {
  if (!obj.contains(field)) {
    if (required) w.fail(field, "missing (required)");
    return {};
  }
  const json& v = obj.at(field);
  if (!v.is_string()) w.fail(field, "must be a string, got " + described(v));
  std::string s = v.get<std::string>();
  if (required && s.empty()) w.fail(field, "must not be empty");
  return s;
}

bool get_bool(const Where& w, const json& obj, const std::string& field, bool fallback) {
  if (!obj.contains(field)) return fallback;
  const json& v = obj.at(field);
  if (!v.is_boolean()) w.fail(field, "must be true or false, got " + described(v));
  return v.get<bool>();
}

std::vector<int64_t> get_token_list(const Where& w, const json& v, const std::string& field) {
  if (!v.is_array()) w.fail(field, "must be a list of token ids, got " + type_of(v));
  if (v.empty()) w.fail(field, "must not be empty");
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!is_int64(v[i]) || v[i].get<int64_t>() < 0) {
      w.fail(field, "item " + std::to_string(i) + " (" + json_brief(v[i]) + ") is not a non-negative integer token id");
    }
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

// The token-source fields of `obj` (tokens | random_tokens | sample, + seed, prompt, temperature).
// `prefix` names the fields in errors ("query." for a nested object). Exactly one kind must be present.
TokenSource parse_source_fields(const Where& w, const json& obj, const std::string& prefix, uint64_t default_seed) {
  const int kinds = static_cast<int>(obj.contains("tokens")) + static_cast<int>(obj.contains("random_tokens")) +
                    static_cast<int>(obj.contains("sample")) + static_cast<int>(obj.contains("text"));
  if (kinds != 1) {
    w.fail(prefix + "tokens", kinds == 0 ? "missing: give one of 'tokens', 'random_tokens', 'sample' or 'text'"
                                         : "give only one of 'tokens', 'random_tokens', 'sample' and 'text'");
  }
  const Where inner{w.file, w.what};
  TokenSource s;
  if (obj.contains("bos") && !obj.contains("text")) w.fail(prefix + "bos", "only meaningful with 'text'");
  if (obj.contains("text")) {
    const json& t = obj.at("text");
    if (!t.is_string()) w.fail(prefix + "text", "must be a string, got " + type_of(t));
    if (t.get<std::string>().empty()) w.fail(prefix + "text", "must not be empty");
    for (const char* f : {"seed", "prompt", "temperature"}) {
      if (obj.contains(f)) w.fail(prefix + f, "only meaningful with 'random_tokens' or 'sample'");
    }
    bool bos = false;
    if (obj.contains("bos")) {
      if (!obj.at("bos").is_boolean()) w.fail(prefix + "bos", "must be true or false, got " + described(obj.at("bos")));
      bos = obj.at("bos").get<bool>();
    }
    return TokenSource::from_text(t.get<std::string>(), bos);
  }
  if (obj.contains("tokens")) {
    s.kind = TokenSource::Kind::kTokens;
    s.tokens = get_token_list(inner, obj.at("tokens"), prefix + "tokens");
    for (const char* f : {"seed", "prompt", "temperature"}) {
      if (obj.contains(f)) w.fail(prefix + f, "only meaningful with 'random_tokens' or 'sample'");
    }
    return s;
  }
  const bool random = obj.contains("random_tokens");
  const std::string count_field = random ? "random_tokens" : "sample";
  const json& c = obj.at(count_field);
  if (!is_int64(c) || c.get<int64_t>() < 1)
    w.fail(prefix + count_field, "must be a positive integer, got " + described(c));
  s.kind = random ? TokenSource::Kind::kRandom : TokenSource::Kind::kSample;
  s.count = c.get<int64_t>();
  if (obj.contains("seed") && !obj.at("seed").is_number_unsigned()) {
    w.fail(prefix + "seed", "must be a non-negative integer, got " + described(obj.at("seed")));
  }
  s.seed = obj.contains("seed") ? obj.at("seed").get<uint64_t>() : default_seed;
  if (random) {
    for (const char* f : {"prompt", "temperature"}) {
      if (obj.contains(f)) w.fail(prefix + f, "only meaningful with 'sample'");
    }
  } else {
    if (obj.contains("prompt")) s.prompt = get_token_list(inner, obj.at("prompt"), prefix + "prompt");
    if (obj.contains("temperature")) {
      const json& t = obj.at("temperature");
      if (!t.is_number() || t.get<double>() < 0)
        w.fail(prefix + "temperature", "must be a number >= 0, got " + described(t));
      s.temperature = t.get<double>();
    }
  }
  return s;
}

// A <tokens> value: a list of ids, or an object holding one token source.
TokenSource parse_source_value(const Where& w, const json& v, const std::string& field, uint64_t default_seed) {
  if (v.is_array()) return TokenSource::explicit_tokens(get_token_list(w, v, field));
  if (!v.is_object()) {
    w.fail(field,
           "must be a token list or an object {\"text\": \"...\"} / {\"random_tokens\": n, ...}, got " + type_of(v));
  }
  check_fields(Where{w.file, w.what + ", " + field}, v,
               {"tokens", "random_tokens", "sample", "seed", "prompt", "temperature", "text", "bos"});
  return parse_source_fields(w, v, field + ".", default_seed);
}

json source_fields_json(const TokenSource& s) {
  json o = json::object();
  switch (s.kind) {
    case TokenSource::Kind::kTokens: o["tokens"] = s.tokens; break;
    case TokenSource::Kind::kRandom:
      o["random_tokens"] = s.count;
      o["seed"] = s.seed;
      break;
    case TokenSource::Kind::kSample:
      o["sample"] = s.count;
      o["seed"] = s.seed;
      o["prompt"] = s.prompt;
      o["temperature"] = s.temperature;
      break;
    case TokenSource::Kind::kText:
      o["text"] = s.text;
      if (s.bos) o["bos"] = true;
      break;
  }
  return o;
}

json source_value_json(const TokenSource& s) {
  if (s.kind == TokenSource::Kind::kTokens) return json(s.tokens);
  return source_fields_json(s);
}

TraceChunk parse_chunk(const std::string& file, const json& v, std::size_t index) {
  Where w{file, "chunk " + std::to_string(index)};
  if (!v.is_object()) w.fail("chunks", "each chunk must be an object, got " + type_of(v));
  TraceChunk c;
  c.name = get_string(w, v, "name", true);
  w.what += " ('" + c.name + "')";
  check_fields(w, v,
               {"name", "tokens", "random_tokens", "sample", "seed", "prompt", "temperature", "text", "bos",
                "embeddings", "pin"});
  c.pin = get_bool(w, v, "pin", false);
  if (v.contains("embeddings")) {
    for (const char* f : {"tokens", "random_tokens", "sample", "seed", "prompt", "temperature", "text", "bos"}) {
      if (v.contains(f)) w.fail(f, "a chunk holds either 'embeddings' or tokens, not both");
    }
    const json& e = v.at("embeddings");
    if (!e.is_object()) w.fail("embeddings", "must be an object {\"grid\": [t, h, w], \"seed\": s}, got " + type_of(e));
    check_fields(Where{file, w.what + ", embeddings"}, e, {"grid", "seed", "std"});
    c.embeddings = true;
    if (!e.contains("grid")) w.fail("embeddings.grid", "missing (required): [t, h, w]");
    const json& g = e.at("grid");
    if (!g.is_array() || g.size() != 3) w.fail("embeddings.grid", "must be [t, h, w], got " + described(g));
    for (std::size_t i = 0; i < 3; ++i) {
      if (!is_int64(g[i]) || g[i].get<int64_t>() < 1)
        w.fail("embeddings.grid",
               "must be 3 positive integers, got item " + std::to_string(i) + " = " + described(g[i]));
      c.media.grid[i] = g[i].get<int64_t>();
    }
    c.media.seed = get_seed(Where{file, w.what + ", embeddings"}, e, trace_detail::name_seed(c.name));
    c.media.std = get_double(Where{file, w.what + ", embeddings"}, e, "std", 1.0);
    // Far past any model's activations; at 1e308 the embeddings were inf, refused later naming no file or chunk.
    if (!(c.media.std > 0 && c.media.std <= kMaxEmbeddingStd))
      w.fail("embeddings.std", "must be in (0, 1e6], got " + described(e.at("std")));
    return c;
  }
  c.tokens = parse_source_fields(w, v, "", trace_detail::name_seed(c.name));
  return c;
}

TraceStep parse_step(const std::string& file, const json& v, std::size_t index) {
  Where w{file, "step " + std::to_string(index)};
  if (!v.is_object()) w.fail("steps", "each step must be an object, got " + type_of(v));
  const std::string op = get_string(w, v, "op", true);
  TraceStep s;
  bool found = false;
  for (TraceOp o : kAllOps) {
    if (op == trace_op_name(o)) {
      s.op = o;
      found = true;
    }
  }
  if (!found) {
    std::string list;
    for (TraceOp o : kAllOps) list += (list.empty() ? "" : ", ") + std::string(trace_op_name(o));
    w.fail("op", "unknown op '" + op + "' (known: " + list + ")");
  }
  w.what += " (" + op + ")";
  s.note = get_string(w, v, "note", false);
  const uint64_t step_seed = trace_detail::name_seed("step:" + std::to_string(index));
  switch (s.op) {
    case TraceOp::kAdmit:
    case TraceOp::kRecall:
      check_fields(w, v, {"op", "note", "chunk", "before"});
      s.chunk = get_string(w, v, "chunk", true);
      s.before = get_string(w, v, "before", false);
      break;
    case TraceOp::kTurn:
      check_fields(w, v,
                   {"op", "note", "tokens", "random_tokens", "sample", "seed", "prompt", "temperature", "text", "bos"});
      s.tokens = parse_source_fields(w, v, "", step_seed);
      break;
    case TraceOp::kEvict:
      check_fields(w, v, {"op", "note", "chunk", "turn"});
      if (v.contains("chunk") == v.contains("turn"))
        w.fail("chunk", "give exactly one of 'chunk' (a name) and 'turn' (an index)");
      s.chunk = get_string(w, v, "chunk", false);
      if (v.contains("chunk") && s.chunk.empty()) w.fail("chunk", "must not be empty");
      s.turn = get_int(w, v, "turn", -1, 0);
      break;
    case TraceOp::kSlide:
      check_fields(w, v, {"op", "note", "count"});
      s.count = get_int(w, v, "count", 1, 1);
      break;
    case TraceOp::kReorder: {
      check_fields(w, v, {"op", "note", "order"});
      if (!v.contains("order")) w.fail("order", "missing (required): the window's chunk names in their new order");
      const json& o = v.at("order");
      if (!o.is_array()) w.fail("order", "must be a list of chunk names, got " + type_of(o));
      for (std::size_t i = 0; i < o.size(); ++i) {
        if (!o[i].is_string())
          w.fail("order", "item " + std::to_string(i) + " (" + json_brief(o[i]) + ") is not a chunk name");
        s.order.push_back(o[i].get<std::string>());
      }
      break;
    }
    case TraceOp::kPlace: check_fields(w, v, {"op", "note"}); break;
    case TraceOp::kFork:
    case TraceOp::kSwitch:
    case TraceOp::kDrop:
      check_fields(w, v, {"op", "note", "branch"});
      s.branch = get_string(w, v, "branch", true);
      break;
    case TraceOp::kCommit:
      check_fields(w, v, {"op", "note", "branch"});
      s.branch = get_string(w, v, "branch", false);
      break;
    case TraceOp::kGenerate:
      check_fields(w, v, {"op", "note", "max_tokens", "query", "append"});
      s.max_tokens = get_int(w, v, "max_tokens", 8, 1);
      s.append = get_bool(w, v, "append", false);
      if (v.contains("query")) s.tokens = parse_source_value(w, v.at("query"), "query", step_seed);
      break;
    case TraceOp::kDisposable:
      check_fields(w, v, {"op", "note", "chunk", "answer_tokens", "query"});
      s.chunk = get_string(w, v, "chunk", true);
      s.answer_tokens = get_int(w, v, "answer_tokens", 4, 1);
      if (v.contains("query")) s.tokens = parse_source_value(w, v.at("query"), "query", step_seed);
      break;
  }
  return s;
}

json step_json(const TraceStep& s) {
  json o = {{"op", trace_op_name(s.op)}};
  switch (s.op) {
    case TraceOp::kAdmit:
    case TraceOp::kRecall:
      o["chunk"] = s.chunk;
      if (!s.before.empty()) o["before"] = s.before;
      break;
    case TraceOp::kTurn: o.update(source_fields_json(s.tokens)); break;
    case TraceOp::kEvict:
      if (!s.chunk.empty())
        o["chunk"] = s.chunk;
      else
        o["turn"] = s.turn;
      break;
    case TraceOp::kSlide: o["count"] = s.count; break;
    case TraceOp::kReorder: o["order"] = s.order; break;
    case TraceOp::kPlace: break;
    case TraceOp::kFork:
    case TraceOp::kSwitch:
    case TraceOp::kDrop: o["branch"] = s.branch; break;
    case TraceOp::kCommit:
      if (!s.branch.empty()) o["branch"] = s.branch;
      break;
    case TraceOp::kGenerate:
      o["max_tokens"] = s.max_tokens;
      if (!s.tokens.empty()) o["query"] = source_value_json(s.tokens);
      if (s.append) o["append"] = true;
      break;
    case TraceOp::kDisposable:
      o["chunk"] = s.chunk;
      o["answer_tokens"] = s.answer_tokens;
      if (!s.tokens.empty()) o["query"] = source_value_json(s.tokens);
      break;
  }
  if (!s.note.empty()) o["note"] = s.note;
  return o;
}

}  // namespace

namespace trace_detail {

uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a stable default seed per name
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h >> 1;  // fits an int64 too (JSON readers that lack unsigned 64-bit)
}

}  // namespace trace_detail

TokenSource TokenSource::explicit_tokens(std::vector<int64_t> tokens) {
  TokenSource s;
  s.kind = Kind::kTokens;
  s.tokens = std::move(tokens);
  return s;
}

TokenSource TokenSource::from_text(std::string text, bool bos) {
  TokenSource s;
  s.kind = Kind::kText;
  s.text = std::move(text);
  s.bos = bos;
  return s;
}

TokenSource TokenSource::random(int64_t count, uint64_t seed) {
  TokenSource s;
  s.kind = Kind::kRandom;
  s.count = count;
  s.seed = seed;
  return s;
}

const char* trace_op_name(TraceOp op) noexcept {
  switch (op) {
    case TraceOp::kAdmit: return "admit";
    case TraceOp::kTurn: return "turn";
    case TraceOp::kEvict: return "evict";
    case TraceOp::kSlide: return "slide";
    case TraceOp::kRecall: return "recall";
    case TraceOp::kReorder: return "reorder";
    case TraceOp::kPlace: return "place";
    case TraceOp::kFork: return "fork";
    case TraceOp::kSwitch: return "switch";
    case TraceOp::kCommit: return "commit";
    case TraceOp::kDrop: return "drop";
    case TraceOp::kGenerate: return "generate";
    case TraceOp::kDisposable: return "disposable";
  }
  return "?";
}

bool trace_op_mutates(TraceOp op) noexcept {
  switch (op) {
    case TraceOp::kAdmit:
    case TraceOp::kTurn:
    case TraceOp::kEvict:
    case TraceOp::kSlide:
    case TraceOp::kRecall:
    case TraceOp::kReorder:
    case TraceOp::kPlace: return true;
    default: return false;
  }
}

const TraceChunk* Trace::find_chunk(const std::string& name) const {
  for (const TraceChunk& c : chunks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Trace parse_trace(const std::string& json_text, const std::string& source) {
  const json root = parse_json_input(json_text, source);
  const Where top{source, "top level"};
  // A key given twice would be read as its last value alone ("chunk": "a", "chunk": "b" admits b).
  if (const std::optional<RepeatedKey> repeated = first_repeated_key(json_text)) {
    Where{source, repeated->object.empty() ? "top level" : repeated->object}.fail(
        repeated->key, "given twice in one object (JSON would keep only the last value): write it once");
  }
  if (!root.is_object()) top.fail("format", "the trace must be a JSON object, got " + type_of(root));
  check_fields(top, root, {"format", "name", "description", "probe", "chunks", "steps"});
  Trace t;
  t.source = source;
  t.format = get_string(top, root, "format", true);
  if (t.format != kTraceFormat)
    top.fail("format", "'" + t.format + "' is not supported (expected '" + kTraceFormat + "')");
  t.name = get_string(top, root, "name", false);
  t.description = get_string(top, root, "description", false);
  if (root.contains("probe")) t.probe = parse_source_value(top, root.at("probe"), "probe", 1);
  if (!root.contains("chunks")) top.fail("chunks", "missing (required; may be [])");
  if (!root.at("chunks").is_array()) top.fail("chunks", "must be a list, got " + type_of(root.at("chunks")));
  if (!root.contains("steps")) top.fail("steps", "missing (required)");
  if (!root.at("steps").is_array()) top.fail("steps", "must be a list, got " + type_of(root.at("steps")));
  for (std::size_t i = 0; i < root.at("chunks").size(); ++i)
    t.chunks.push_back(parse_chunk(source, root.at("chunks")[i], i));
  for (std::size_t i = 0; i < root.at("steps").size(); ++i)
    t.steps.push_back(parse_step(source, root.at("steps")[i], i));
  validate_trace(t);
  return t;
}

Trace load_trace(const std::string& path) {
  check_regular_input(path, "the trace file");
  std::ifstream in(path, std::ios::binary);
  ORBIT_CHECK(in.good(), path << ": cannot open the trace file");
  std::ostringstream text;
  text << in.rdbuf();
  ORBIT_CHECK(!in.bad(), path << ": read error");
  return parse_trace(text.str(), path);
}

std::string trace_to_json(const Trace& trace, int indent) {
  json root = {{"format", trace.format}};
  if (!trace.name.empty()) root["name"] = trace.name;
  if (!trace.description.empty()) root["description"] = trace.description;
  root["probe"] = source_value_json(trace.probe);
  json chunks = json::array();
  for (const TraceChunk& c : trace.chunks) {
    json o = {{"name", c.name}};
    if (c.embeddings) {
      o["embeddings"] = {{"grid", c.media.grid}, {"seed", c.media.seed}, {"std", c.media.std}};
    } else {
      o.update(source_fields_json(c.tokens));
    }
    if (c.pin) o["pin"] = true;
    chunks.push_back(o);
  }
  root["chunks"] = chunks;
  json steps = json::array();
  for (const TraceStep& s : trace.steps) steps.push_back(step_json(s));
  root["steps"] = steps;
  return root.dump(indent) + "\n";
}

void save_trace(const Trace& trace, const std::string& path) {
  validate_trace(trace);
  write_file_atomically(path, trace_to_json(trace), "the trace file");
}

}  // namespace orbit
