// Tool calls streamed as they are written (cli/serve/run/tool_stream.h): known answers fed to a ToolCallStream
// piece by piece (split at every byte position, and byte by byte), then finished as the run would finish them.
// The pieces it lets out, and then the ones its finish leaves in RunResult::unstreamed_calls, must spell the
// answer's calls exactly (ids, names, arguments), and those must be what parse_tool_calls reads of the whole
// text (the non-streamed answer); a call's name goes out before the call ends, its arguments in more than
// one piece; an answer that does not hold a call as it was streamed is a mismatch, and a chat answer with one
// is not stored. Without a model.
#include <string>
#include <vector>

#include "orbit/answer_calls.h"
#include "orbit/tool_calls.h"
#include "orbit_catch.h"
#include "serve/run/streamed_calls.h"
#include "serve/run/tool_stream.h"
#include "serve/stored/chat_store_wire.h"
#include "tool_stream_feed.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::test::tool_stream;

TEST_CASE("tool stream: two calls split at every byte spell the calls the whole answer reads", "[serve]") {
  const orbit::ToolCallParse whole = orbit::parse_tool_calls(kHermes, ToolCallFormat::kHermes);
  REQUIRE(whole.calls.size() == 2);
  for (std::size_t cut = 0; cut <= kHermes.size(); ++cut) {
    const Fed f = feed(kHermes, {cut}, Feed{});
    INFO("split at " << cut);
    CHECK(same_calls(assemble(f), f.r.tool_calls));
    CHECK(same_calls(f.r.tool_calls, whole.calls, false));
    CHECK(f.content + f.r.unstreamed == "Let me look.\n");
    CHECK(f.r.text == "Let me look.");
    CHECK(f.r.finish_reason == "tool_calls");
  }
}

TEST_CASE("tool stream: fed byte by byte, a call opens as its name closes and its arguments follow", "[serve]") {
  const Fed f = feed(kHermes, every_byte(kHermes), Feed{});
  REQUIRE(same_calls(assemble(f), f.r.tool_calls));
  CHECK(f.r.unstreamed_calls.empty());  // every piece went out as it was written: the last with the last byte
  const std::vector<std::string> names = {"\"search\"", "\"open\""};
  std::size_t call = 0;
  std::vector<int> pieces(2, 0);
  for (std::size_t i = 0; i < f.pieces.size(); ++i) {
    const sv::ToolCallDelta& d = f.pieces[i];
    if (d.opens) {
      // The byte that closes the name's string lets the call out, with no arguments yet.
      const std::size_t name_end = kHermes.find(names[call]) + names[call].size();
      CHECK(f.at[i] == name_end);
      CHECK(d.arguments.empty());
      CHECK(f.at[i] < kHermes.find("}}</tool_call>", name_end));  // before the call's end
      ++call;
    } else {
      ++pieces[d.index];
    }
  }
  CHECK(call == 2);
  CHECK(pieces[0] > 1);
  CHECK(pieces[1] > 1);
}

TEST_CASE("tool stream: calls in free text are read whole when the answer ends", "[serve]") {
  const Fed f = feed(kHermes, every_byte(kHermes), Feed{ToolCallFormat::kHermes, false, false, "stop"});
  CHECK(f.pieces.empty());
  REQUIRE(f.r.unstreamed_calls.size() == 2);
  for (const sv::ToolCallDelta& d : f.r.unstreamed_calls) CHECK(d.opens);
  CHECK(same_calls(assemble(f), f.r.tool_calls));
  CHECK(f.content == "Let me look.\n");
}

TEST_CASE("tool stream: arguments given as JSON text stream as the answer's call holds them", "[serve]") {
  // The cut readings of JSON text arguments are decoded and compacted as the whole call's are, so the pieces
  // spell the call; each cut reading was the text as written before, which the whole call is not.
  const std::string text =
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1, 2], \\\"b\\\": \\\"x y\\\"}\"}</tool_call>";
  const Fed f = feed(text, every_byte(text), Feed{});
  REQUIRE(f.r.tool_calls.size() == 1);
  CHECK(f.r.tool_calls[0].arguments == "{\"a\":[1,2],\"b\":\"x y\"}");
  CHECK_FALSE(f.r.tool_stream_mismatch);
  CHECK(same_calls(assemble(f), f.r.tool_calls));
  CHECK(f.pieces.size() > 2);
}

namespace {

// kHermes streamed byte by byte, then finished with `final_text` as the answer's text.
sv::RunResult finished_as(const std::string& final_text, const std::string& finish_reason = "stop") {
  sv::ToolCallStream stream(ToolCallFormat::kHermes, false, true);
  std::size_t pieces = 0;
  for (char c : kHermes) pieces += stream.push(std::string(1, c)).calls.size();
  REQUIRE(pieces > 4);  // both calls went out, in pieces
  sv::RunResult r;
  r.text = final_text;
  r.finish_reason = finish_reason;
  stream.finish(r);
  return r;
}

}  // namespace

TEST_CASE("tool stream: an answer that does not hold a call as it was streamed is a mismatch", "[serve]") {
  // The text the answer finishes with is not the one streamed: what a client assembled is not the call.
  std::string other_arguments = kHermes;
  other_arguments.replace(other_arguments.find("\"url\": \"a;b\""), 12, "\"url\": \"c\"");
  const sv::RunResult args = finished_as(other_arguments);
  REQUIRE(args.tool_stream_mismatch);
  const sv::ToolStreamMismatch& m = *args.tool_stream_mismatch;
  CHECK(m.index == 1);
  CHECK(m.what == "arguments");
  CHECK(m.name == "open");
  CHECK(m.streamed == "{\"url\":\"a;b\",\"tabs\":[1,2]}");
  CHECK(m.answered == "{\"url\":\"c\",\"tabs\":[1,2]}");
  CHECK(args.unstreamed_calls.empty());  // nothing more of the calls goes out
  REQUIRE(args.tool_calls.size() == 2);  // the answer's calls as parsed whole, the first with its streamed id
  CHECK(args.tool_calls[1].arguments == m.answered);
  CHECK(m.id.rfind("call_", 0) == 0);
  CHECK(args.tool_calls[0].id != m.id);

  const sv::ApiError e = sv::tool_stream_error(m, 2);
  CHECK(e.status == 500);
  CHECK(e.type == "server_error");
  CHECK(e.code == "tool_call_stream_mismatch");
  CHECK(e.param == "tool_calls");
  for (const std::string& said : {std::string("choice 2"), std::string("tool call 1"), m.id, std::string("'open'"),
                                  std::string("differ at byte 8")}) {
    CHECK_THAT(e.message, Catch::Matchers::Contains(said));
  }

  std::string renamed = kHermes;
  renamed.replace(renamed.find("\"search\""), 8, "\"find\"");
  const sv::RunResult name = finished_as(renamed);
  REQUIRE(name.tool_stream_mismatch);
  CHECK(name.tool_stream_mismatch->index == 0);
  CHECK(name.tool_stream_mismatch->what == "name");
  CHECK(name.tool_stream_mismatch->answered_name == "find");
  CHECK_THAT(sv::tool_stream_error(*name.tool_stream_mismatch, 0).message, Catch::Matchers::Contains("named 'find'"));

  // An answer that holds no call (its text ended inside one, read as content) after calls went out.
  const sv::RunResult missing = finished_as(kHermes.substr(0, kHermes.size() - 5));
  REQUIRE(missing.tool_stream_mismatch);
  CHECK(missing.tool_stream_mismatch->what == "missing");
  CHECK(missing.tool_stream_mismatch->index == 1);

  // A client that left reads nothing more: not checked.
  CHECK_FALSE(finished_as(other_arguments, "cancelled").tool_stream_mismatch);
  // The answer streamed: no mismatch.
  CHECK_FALSE(finished_as(kHermes).tool_stream_mismatch);
}

TEST_CASE("tool stream: a chat answer with a mismatched streamed call is not stored", "[serve]") {
  // The client was told the choice failed (tool_stream_error): a stored completion would answer a later GET
  // with calls it never assembled. A Responses response so failed is not stored either (responses_run.h).
  std::string other_arguments = kHermes;
  other_arguments.replace(other_arguments.find("\"url\": \"a;b\""), 12, "\"url\": \"c\"");
  sv::RunResult mismatched = finished_as(other_arguments);
  REQUIRE(mismatched.tool_stream_mismatch);
  CHECK_FALSE(sv::storable(mismatched));

  // n > 1: one choice that ended so keeps the whole completion out of the store.
  sv::RunResult first = finished_as(kHermes);
  REQUIRE_FALSE(first.tool_stream_mismatch);
  CHECK(sv::storable(first));
  first.extra_choices.push_back(finished_as(kHermes));
  CHECK(sv::storable(first));
  first.extra_choices.push_back(std::move(mismatched));
  CHECK_FALSE(sv::storable(first));
}

namespace {

// A reading of `calls` from index `first` on, the first `complete` of all complete; the last one's name may
// still grow when `name_open`.
orbit::ToolCallReading reading(std::vector<ChatToolCall> calls, bool name_open = false, std::size_t first = 0,
                               std::size_t complete = 0) {
  orbit::ToolCallReading r;
  r.calls = std::move(calls);
  r.cut = name_open;
  r.first = first;
  r.complete = complete;
  return r;
}

}  // namespace

TEST_CASE("streamed calls: a reading that does not extend what went out sends nothing of it", "[serve]") {
  sv::StreamedCalls calls;
  std::vector<sv::ToolCallDelta> out;
  calls.offer(reading({ChatToolCall{"call_1", "f", "{\"a\":"}}), out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].opens);
  CHECK(out[0].name == "f");
  CHECK(out[1].arguments == "{\"a\":");
  out.clear();
  calls.offer(reading({ChatToolCall{"call_9", "f", "{\"a\""}}), out);    // shorter: a cut reading may be
  calls.offer(reading({ChatToolCall{"call_9", "f", "{\"b\":1"}}), out);  // not an extension
  calls.offer(reading({ChatToolCall{"call_9", "g", "{\"a\":1"}}), out);  // another name
  CHECK(out.empty());
  calls.offer(reading({ChatToolCall{"call_9", "f", "{\"a\":1"}, ChatToolCall{"call_2", "gh", ""}}, true), out);
  REQUIRE(out.size() == 1);  // the second call's name may still grow: not opened
  CHECK(out[0].arguments == "1");
  CHECK(calls.opened() == 1);

  std::vector<ChatToolCall> answer = {ChatToolCall{"call_x", "f", "{\"a\":12}"}, ChatToolCall{"call_y", "g", "{}"}};
  const sv::SettledCalls settled = calls.settle(answer);
  CHECK_FALSE(settled.mismatch);
  CHECK(answer[0].id == "call_1");
  REQUIRE(settled.unsent.size() == 2);
  CHECK(settled.unsent[0].arguments == "2}");
  CHECK(settled.unsent[1].opens);
  CHECK(settled.unsent[1].arguments == "{}");

  std::vector<ChatToolCall> other = {ChatToolCall{"call_x", "f", "{\"a\":2}"}};
  const sv::SettledCalls bad = calls.settle(other);
  REQUIRE(bad.mismatch);
  CHECK(bad.mismatch->what == "arguments");
  CHECK(bad.mismatch->streamed == "{\"a\":1");
  CHECK(bad.unsent.empty());
}

TEST_CASE("streamed calls: a call complete and sent is done, and later readings start after it", "[serve]") {
  sv::StreamedCalls calls;
  std::vector<sv::ToolCallDelta> out;
  // Call 0 complete in the reading, call 1 being written: call 0 goes out whole and is done.
  calls.offer(reading({ChatToolCall{"call_1", "f", "{}"}, ChatToolCall{"call_2", "g", "{\"a\""}}, false, 0, 1), out);
  REQUIRE(out.size() == 4);
  CHECK(calls.done() == 1);
  CHECK(calls.opened() == 2);
  out.clear();
  // A reading from call 1 on extends call 1 alone; the complete call 1 then is done too.
  calls.offer(reading({ChatToolCall{"call_2", "g", "{\"a\":1}"}}, false, 1, 2), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].index == 1);
  CHECK(out[0].arguments == ":1}");
  CHECK(calls.done() == 2);
  // A call not complete is not done however far it went out.
  calls.offer(reading({ChatToolCall{"call_3", "h", "{\"b\":2}"}}, false, 2, 2), out);
  CHECK(calls.opened() == 3);
  CHECK(calls.done() == 2);
  std::vector<ChatToolCall> answer = {ChatToolCall{"x", "f", "{}"}, ChatToolCall{"y", "g", "{\"a\":1}"},
                                      ChatToolCall{"z", "h", "{\"b\":2}"}};
  const sv::SettledCalls settled = calls.settle(answer);
  CHECK_FALSE(settled.mismatch);
  CHECK(settled.unsent.empty());
  CHECK(answer[2].id == "call_3");
}

TEST_CASE("streamed calls: arguments growing under the number held come without the bytes that went out", "[serve]") {
  sv::StreamedCalls calls;
  std::vector<sv::ToolCallDelta> out;
  CHECK(calls.held().growing == 0);
  orbit::ToolCallReading r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"ab"}});
  r.growing = 7;
  calls.offer(r, out);
  REQUIRE(out.size() == 2);
  CHECK(calls.held().growing == 7);
  CHECK(calls.held().bytes == 8);
  out.clear();
  // The reader left out the 8 bytes held: the piece is what it gives, taken without comparing.
  r = reading({ChatToolCall{"call_1", "f", "cd"}});
  r.growing = 7;
  r.arguments_from = 8;
  calls.offer(r, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].arguments == "cd");
  out.clear();
  // Shorter under the same number (a cut character left out): nothing goes out, nothing is lost.
  r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"abc"}});
  r.growing = 7;
  calls.offer(r, out);
  CHECK(out.empty());
  // Under another number the arguments come whole and are compared: "{\"q\":\"abcd" is not their prefix.
  r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"abXde"}});
  r.growing = 8;
  calls.offer(r, out);
  CHECK(out.empty());
  CHECK(calls.held().growing == 7);
  r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"abcde\"}"}});
  r.growing = 8;
  calls.offer(r, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].arguments == "e\"}");
  CHECK(calls.held().growing == 8);
  std::vector<ChatToolCall> answer = {ChatToolCall{"x", "f", "{\"q\":\"abcde\"}"}};
  const sv::SettledCalls settled = calls.settle(answer);
  CHECK_FALSE(settled.mismatch);
  CHECK(settled.unsent.empty());
}

}  // namespace ORBIT_TEST_FILE
