#include "serve/responses/responses_run.h"

#include <ctime>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "orbit/common/json_input.h"
#include "serve/run/tool_stream.h"
#include "serve/wire/serve_wire.h"

namespace orbit::serve {

using nlohmann::json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace response_flow {

// The window a prepared conversation runs in (responses_run.h, steps 1 to 4).
std::string session_of(ServeCore& core, const ResponseCall& call, const std::string* header_session) {
  if (header_session != nullptr) return *header_session;
  if (!call.request.chat.user.empty()) return session_for_user(call.request.chat.user);
  if (call.previous) return call.previous->session;
  if (auto continued = core.responses().continued_by(call.request.chat.messages)) return continued->session;
  return call.request.store ? call.head.id : "";
}

// The previous response's conversation between the instructions and the input.
std::optional<ApiError> join_previous(ServeCore& core, ResponseCall& call) {
  std::vector<ChatMessage>& messages = call.request.chat.messages;
  call.input_begin = call.request.has_instructions ? 1 : 0;
  const std::string& id = call.request.previous_response_id;
  if (id.empty()) return std::nullopt;
  if (core.responses().live().running(id).first) {  // asked first: one whose store is under way is waited for
    return api_error(400,
                     "previous_response_id: response '" + id +
                         "' is still in progress (its answer is not complete): continue it once it has completed",
                     "invalid_request_error", "previous_response_in_progress", "previous_response_id");
  }
  call.previous = core.responses().get(id);
  if (!call.previous) {
    // 400, as OpenAI answers it (the openai clients' BadRequestError): the request names something that is
    // not there, where a 404 says the endpoint's own resource is missing.
    return api_error(400,
                     "previous_response_id: no stored response '" + id +
                         "' (never stored, stored with "
                         "store false, or dropped from the store)",
                     "invalid_request_error", "previous_response_not_found", "previous_response_id");
  }
  std::vector<ChatMessage> earlier = call.previous->conversation();
  if (auto unpaired = call_pairing_error(call.request.call_items, earlier)) return unpaired;
  messages.insert(messages.begin() + static_cast<std::ptrdiff_t>(call.input_begin), earlier.begin(), earlier.end());
  call.input_begin += earlier.size();
  return std::nullopt;
}

// Messages [first, first + k) dropped, and the tool results left leading after them (their calls went).
std::size_t dropped_through(const std::vector<ChatMessage>& messages, std::size_t first, std::size_t k) {
  std::size_t end = first + k;
  while (end + 1 < messages.size() && messages[end].role == "tool") ++end;
  return end;
}

// truncation "auto" (responses_run.h): the fewest oldest messages dropped for the prompt to leave the
// answer's room, found by bisection over how many (each probe renders and tokenizes the list).
std::optional<ApiError> truncate_conversation(ServeCore& core, ResponseCall& call) {
  std::vector<ChatMessage>& messages = call.request.chat.messages;
  const int64_t context = core.context_tokens();
  const std::optional<int64_t> asked = call.request.chat.sampling.max_tokens;
  const int64_t room = asked ? *asked : std::min(core.options().default_max_tokens, context / 4);
  std::size_t first = 0;
  while (first + 1 < messages.size() && (messages[first].role == "system" || messages[first].role == "developer")) {
    ++first;
  }
  const auto fits = [&](std::size_t k) -> Parsed<bool> {
    ChatRequest probe = call.request.chat;
    const std::size_t end = dropped_through(messages, first, k);
    probe.messages.erase(probe.messages.begin() + static_cast<std::ptrdiff_t>(first),
                         probe.messages.begin() + static_cast<std::ptrdiff_t>(end));
    Parsed<int64_t> tokens = core.count_chat_tokens(probe);
    Parsed<bool> out;
    if (tokens.ok()) {
      out.value = *tokens.value + room <= context;
    } else if (tokens.error.code == "context_length_exceeded") {
      // Refused before tokenizing (its text is longer than the model's positions can hold at the most bytes a
      // token takes): it does not fit, and fewer messages may.
      out.value = false;
    } else {
      out.error = tokens.error;
    }
    return out;
  };
  const std::size_t most = messages.size() - 1 - first;  // the last message stays
  Parsed<bool> none = fits(0);
  if (!none.ok()) return responses_error(none.error);
  if (*none.value || most == 0) return std::nullopt;
  std::size_t lo = 0, hi = most;  // fits(lo) is false; fits(hi) may be: the least k that fits, else most
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    Parsed<bool> f = fits(mid);
    if (!f.ok()) return responses_error(f.error);
    (*f.value ? hi : lo) = mid;
  }
  const std::size_t end = dropped_through(messages, first, hi);
  if (end > call.input_begin) {
    call.whole_input.emplace(messages.begin() + static_cast<std::ptrdiff_t>(call.input_begin), messages.end());
  }
  // What is left of the input starts where it did, less what was dropped before it.
  call.input_begin -= std::min(call.input_begin, end) - std::min(call.input_begin, first);
  messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first),
                 messages.begin() + static_cast<std::ptrdiff_t>(end));
  return std::nullopt;
}

// A prompt past the context named at `instructions` rather than `input` when the instructions alone (without
// the input, the previous conversation or the tools) leave no token to generate: no input would fit.
ApiError name_overflow(ServeCore& core, const ResponseCall& call, ApiError error) {
  if (error.code != "context_length_exceeded" || error.param != "input" || !call.request.has_instructions) {
    return error;
  }
  ChatRequest probe = call.request.chat;
  probe.messages.resize(1);
  probe.tools_json.clear();
  probe.tool_names.clear();
  probe.tool_choice = ToolChoice{};
  probe.response_format = ResponseFormat{};
  const Parsed<int64_t> tokens = core.count_chat_tokens(probe);
  const bool past = tokens.ok() ? *tokens.value >= core.context_tokens() : tokens.error.code == error.code;
  if (!past) return error;
  error.param = "instructions";
  error.message = "instructions: the instructions alone leave no room in the context (" + error.message + ")";
  return error;
}

// The answer as the assistant message a client sends back: its text as the body wrote it (a token cut
// inside a character, or a byte token, left bytes that are not UTF-8; the body has U+FFFD there), so the
// stored conversation is what the client read, and a store writing it as JSON takes it.
ChatMessage answer_message(const RunResult& r) {
  ChatMessage answer;
  answer.role = "assistant";
  answer.content = as_written(r.text);
  answer.tool_calls = r.tool_calls;
  for (ChatToolCall& call : answer.tool_calls) {
    call.name = as_written(call.name);
    call.arguments = as_written(call.arguments);
  }
  if (r.reasoning && !r.reasoning->empty()) answer.reasoning_content = as_written(*r.reasoning);
  return answer;
}

// The response as stored but for its answer and body: its id, window, previous one and input.
std::shared_ptr<StoredResponse> stored_input(const ResponseCall& call) {
  const std::vector<ChatMessage>& messages = call.request.chat.messages;
  auto stored = std::make_shared<StoredResponse>();
  stored->id = call.head.id;
  stored->session = call.session;
  stored->previous = call.previous;
  if (call.whole_input) {
    stored->added = *call.whole_input;
  } else {
    stored->added.assign(messages.begin() + static_cast<std::ptrdiff_t>(call.input_begin), messages.end());
  }
  return stored;
}

// A prepared response with store true registered as running, shown meanwhile with status "in_progress", no
// output, and its input (ResponseStore::live).
void register_running(ServeCore& core, ResponseCall& call) {
  std::shared_ptr<StoredResponse> shown = stored_input(call);
  ChatMessage answer;  // none yet: input_items lists all but the last message
  answer.role = "assistant";
  shown->added.push_back(std::move(answer));
  shown->body = dump(response_body(call.head, nullptr));
  call.live = core.responses().live().begin(call.head.id, std::move(shown));
}

StoreWrite store(ServeCore& core, const ResponseCall& call, const RunResult& r, const json& body) {
  const std::vector<ChatMessage>& messages = call.request.chat.messages;
  std::shared_ptr<StoredResponse> stored = stored_input(call);
  stored->added.push_back(answer_message(r));
  stored->body = dump(body);
  std::vector<ChatMessage> read = messages;
  read.push_back(stored->added.back());
  const StoreWrite written = core.responses().put(std::move(stored), read);
  if (!written) core.metrics().count_store_write_failure("responses");
  return written;
}

}  // namespace response_flow

std::optional<ApiError> prepare_response(ServeCore& core, std::string_view body, const std::string* header_session,
                                         ResponseCall& call) {
  Parsed<ResponsesRequest> parsed = parse_responses_request(body, core.options().limits);
  if (!parsed.ok()) return parsed.error;
  call.request = std::move(*parsed.value);
  call.head.id = core.responses().new_id();
  call.head.created_at = static_cast<int64_t>(std::time(nullptr));
  call.head.model = core.model_name();
  call.head.previous_response_id = call.request.previous_response_id;
  call.head.echo = call.request.echo;
  if (auto missing = response_flow::join_previous(core, call)) return missing;
  if (call.request.truncate) {
    if (auto bad = response_flow::truncate_conversation(core, call))
      return response_flow::name_overflow(core, call, *bad);
  }
  call.session = response_flow::session_of(core, call, header_session);
  call.ticket = core.prepare_chat(call.request.chat, call.session);
  if (!call.ticket.ok()) return response_flow::name_overflow(core, call, responses_error(call.ticket.error()));
  if (call.request.store) {  // nothing runs for a response its store cannot take (store_write.h)
    const StoreWrite writable = core.responses().check_writable();
    if (!writable) call.ticket.refuse(store_refusal("responses", writable));
    if (!call.ticket.ok()) return call.ticket.error();
    response_flow::register_running(core, call);
  }
  return std::nullopt;
}

Parsed<int64_t> count_input_tokens(ServeCore& core, std::string_view body) {
  static const std::set<std::string> shaping = {
      "model", "input",     "instructions", "previous_response_id", "tools", "tool_choice", "parallel_tool_calls",
      "text",  "reasoning", "truncation",   "conversation"};
  Parsed<int64_t> out;
  // Ordered: the tools' schemas render in the order the client wrote them. A body nesting past the limit is not
  // read here (dump() recurses once per level: 80,000 nested arrays overflowed the stack); the parser below
  // refuses it, naming the depth.
  const bool too_deep = json_nests_deeper(body.data(), body.data() + body.size(), kMaxJsonDepth);
  nlohmann::ordered_json fields =
      too_deep ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(body, nullptr, false);
  std::string completed(body);
  if (fields.is_object()) {  // else the parser below names what is wrong with the body
    for (const auto& [key, value] : fields.items()) {
      if (shaping.count(key) == 0) {
        out.error = api_error(400, key + ": does not apply to counting input tokens", "invalid_request_error",
                              "unknown_parameter", key);
        return out;
      }
    }
    if (!fields.contains("model")) {
      fields["model"] = core.model_name();
      completed = fields.dump();
    }
  }
  ResponseCall call;
  Parsed<ResponsesRequest> parsed = parse_responses_request(completed, core.options().limits);
  if (!parsed.ok()) {
    out.error = parsed.error;
    return out;
  }
  call.request = std::move(*parsed.value);
  if (auto missing = response_flow::join_previous(core, call)) {
    out.error = *missing;
    return out;
  }
  if (call.request.truncate) {
    if (auto bad = response_flow::truncate_conversation(core, call)) {
      out.error = response_flow::name_overflow(core, call, *bad);
      return out;
    }
  }
  out = core.count_chat_tokens(call.request.chat);
  if (!out.ok()) out.error = response_flow::name_overflow(core, call, responses_error(out.error));
  return out;
}

namespace response_flow {

// The run of a prepared call and what follows it (run_response): `stream` set, the last events go to
// out.last_events.
ResponseOutcome run_and_finish(ServeCore& core, ResponseCall& call, const RunSink& run_sink, ResponseEvents* stream) {
  struct EndRunning {  // however it ends, stored or not, it no longer runs once this returns
    LiveAnswers<StoredResponse>::Hold& live;
    ~EndRunning() { live.end(); }
  } const end_running{call.live};
  ResponseOutcome out;
  out.run = core.run(call.ticket, run_sink);
  if (!out.run.result) {
    out.run.error = responses_error(out.run.error);
    if (stream) out.last_events = stream->failed(out.run.error);
    return out;
  }
  const RunResult& r = *out.run.result;
  out.body = response_body(call.head, &r);
  if (r.finish_reason == "cancelled") return out;  // no one to answer; not stored
  if (r.tool_stream_mismatch && stream) {          // a call went out as the answer does not hold it: failed, not stored
    out.last_events = stream->failed(tool_stream_error(*r.tool_stream_mismatch, 0));
    return out;
  }
  if (call.request.store && call.live.begin_store()) {  // not when a DELETE came while it ran
    out.stored = response_flow::store(core, call, r, out.body);
    call.store_tried = true;
  }
  if (stream) out.last_events = stream->finish(r, out.stored ? &*out.stored : nullptr);
  return out;
}

}  // namespace response_flow

void finish_call(ServeCore& core, ResponseCall& call) {
  call.ticket = RunTicket();  // released (run() has released a ticket that ran)
  call.live.end();            // refused or never run
  if (call.store_tried || call.session.empty() || call.session != call.head.id) return;
  core.end_session(call.session);  // kUnknown: never made (refused before it had a window)
}

ResponseOutcome run_response(ServeCore& core, ResponseCall& call, const RunSink& sink,
                             const std::function<bool(const std::string&)>& events) {
  std::optional<ResponseEvents> stream;
  RunSink run_sink = sink;
  if (events) {
    stream.emplace(call.head, StreamObfuscation(call.request.chat.sampling.include_obfuscation));
    if (core.options().test_fault == "stream_start") {  // ServeOptions::test_fault: tests only
      throw std::runtime_error(
          "fault injected before response.created (ORBIT_SERVE_TEST_FAULT=stream_start, for tests only)");
    }
    if (!events(stream->start())) run_sink.cancelled = [] { return true; };
    run_sink.on_text = [&](const std::string& delta) {
      const bool here = !sink.on_text || sink.on_text(delta);
      return events(stream->text(delta)) && here;
    };
    run_sink.on_logprobs = [&](int64_t, const StepLogprobs& step) { stream->logprobs(step); };
    run_sink.on_reasoning = [&](int64_t, const std::string& delta) {
      const bool here = !sink.on_text || sink.on_text("");
      return events(stream->reasoning(delta)) && here;
    };
    run_sink.on_tool_call = [&](int64_t, const ToolCallDelta& piece) {
      const bool here = !sink.on_tool_call || sink.on_tool_call(0, piece);
      return events(stream->call(piece)) && here;
    };
  }
  if (!stream) return response_flow::run_and_finish(core, call, run_sink, nullptr);
  try {
    return response_flow::run_and_finish(core, call, run_sink, &*stream);
  } catch (...) {  // response.created went out: the stream ends with response.failed naming the exception
    ResponseOutcome failed;
    failed.run.error = internal_error("POST /v1/responses", std::current_exception());
    failed.last_events = stream->failed(failed.run.error);
    return failed;
  }
}

}  // namespace orbit::serve
