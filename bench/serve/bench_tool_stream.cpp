// bench_tool_stream: what reading a streamed answer's tool calls costs per token (cli/serve/run/tool_stream.h),
// the calls read again from the whole text after every token against ToolCallReader (orbit/tool_calls.h),
// which keeps the complete calls and reads the one being written as it grows (only the token's bytes).
//
// Answers of --calls-list calls (default 1, 2, 4, 8) whose arguments are about --bytes-list bytes each
// (default 100, 1000, 4000), in the Hermes and Llama 3 formats, as Constraint::tool_calls writes them, cut
// into --token-bytes byte tokens (default 4: a JSON answer's tokens). Two ways, side by side in one run,
// alternating (each going first in turn) and the fastest of --reps runs kept (on a shared machine, the least
// disturbed run):
//   whole        per token, what ToolCallStream::push did before ToolCallReader: tool_call_free_prefix of the
//                text, then parse_tool_calls(text after the content, kCall)
//   incremental  per token, ToolCallStream::push (progressive: the content's prefix, the reader, the pieces)
// Printed: the mean microseconds per token of each, the last tenth of the answer's tokens alone (where the
// whole reading is longest), and whole / incremental. Not a test: absolute numbers depend on the machine and
// its load; the ratio is the figure.
//
//   bench_tool_stream [--calls-list 1,2,4,8] [--bytes-list 100,1000,4000] [--token-bytes 4] [--reps 5]
//                     [--json PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/tool_calls.h"
#include "serve/run/tool_stream.h"

namespace {

using orbit::ToolCallFormat;
using Clock = std::chrono::steady_clock;

// One call's JSON object with arguments of about `bytes` bytes: a string, numbers, a list.
std::string call_json(int index, std::size_t bytes, ToolCallFormat format) {
  std::string filler;
  for (std::size_t i = 0; filler.size() + 40 < bytes; ++i) filler += "word" + std::to_string(i % 97) + " ";
  const std::string args = "{\"query\": \"" + filler + "\", \"n\": " + std::to_string(index) + ", \"tags\": [1, 2, 3]}";
  const char* key = format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
  return "{\"name\": \"tool_" + std::to_string(index) + "\", \"" + key + "\": " + args + "}";
}

std::string answer(int calls, std::size_t bytes, ToolCallFormat format) {
  std::string text;
  for (int i = 0; i < calls; ++i) {
    if (format == ToolCallFormat::kHermes) {
      text += (i > 0 ? "\n" : "") + std::string("<tool_call>") + call_json(i, bytes, format) + "</tool_call>";
    } else {
      text += (i > 0 ? "; " : "") + call_json(i, bytes, format);
    }
  }
  return text;
}

struct Timing {
  double mean_us = 0;  // per token, over the answer
  double tail_us = 0;  // per token, over its last tenth
};

// Feeds `tokens` to `step` (one call per token), timing each; sink keeps the work from being optimized out.
template <typename Step>
Timing time_tokens(const std::vector<std::string>& tokens, Step step) {
  std::vector<double> us(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto t0 = Clock::now();
    step(tokens[i]);
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  Timing t;
  const std::size_t tail_from = tokens.size() - std::max<std::size_t>(1, tokens.size() / 10);
  for (std::size_t i = 0; i < us.size(); ++i) {
    t.mean_us += us[i] / static_cast<double>(us.size());
    if (i >= tail_from) t.tail_us += us[i] / static_cast<double>(us.size() - tail_from);
  }
  return t;
}

std::size_t g_sink = 0;

Timing run_whole(const std::vector<std::string>& tokens, ToolCallFormat format) {
  std::string text;
  return time_tokens(tokens, [&](const std::string& token) {
    text += token;
    const std::size_t free = orbit::tool_call_free_prefix(text, format);
    const orbit::ToolCallParse read =
        orbit::parse_tool_calls(std::string_view(text).substr(free), format, orbit::CutToolCall::kCall);
    g_sink += read.calls.size();
  });
}

Timing run_incremental(const std::vector<std::string>& tokens, ToolCallFormat format) {
  orbit::serve::ToolCallStream stream(format, true, true);
  return time_tokens(tokens, [&](const std::string& token) { g_sink += stream.push(token).calls.size(); });
}

}  // namespace

int main(int argc, char** argv) {
  orbit::cli::ArgSpec spec;
  spec.options = {"--calls-list", "--bytes-list", "--token-bytes", "--reps", "--json"};
  spec.usage =
      "bench_tool_stream [--calls-list 1,2,4,8] [--bytes-list 100,1000,4000] [--token-bytes 4] [--reps 5] "
      "[--json PATH]";
  const orbit::cli::Args args("bench_tool_stream", spec, argc, argv, 1);
  const std::vector<int64_t> calls_list =
      orbit::cli::parse_int_list(args.get_or("--calls-list", "1,2,4,8"), "--calls-list");
  const std::vector<int64_t> bytes_list =
      orbit::cli::parse_int_list(args.get_or("--bytes-list", "100,1000,4000"), "--bytes-list");
  const std::size_t token_bytes = static_cast<std::size_t>(args.get_int("--token-bytes", 4, 1));
  const int reps = static_cast<int>(args.get_int("--reps", 5, 1));
  const std::string json_path = args.get_or("--json", "");

  std::printf("%-7s %5s %6s %7s %7s | %10s %10s | %10s %10s | %7s %7s\n", "format", "calls", "bytes", "answer",
              "tokens", "whole us", "incr us", "whole tail", "incr tail", "mean x", "tail x");
  std::string json = "[";
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3}) {
    for (int64_t calls : calls_list) {
      for (int64_t bytes : bytes_list) {
        const std::string text = answer(static_cast<int>(calls), static_cast<std::size_t>(bytes), format);
        std::vector<std::string> tokens;
        for (std::size_t at = 0; at < text.size(); at += token_bytes) tokens.push_back(text.substr(at, token_bytes));
        Timing whole{1e30, 1e30}, incremental{1e30, 1e30};
        for (int rep = 0; rep < reps; ++rep) {
          const bool whole_first = rep % 2 == 0;
          for (int k = 0; k < 2; ++k) {
            const bool is_whole = (k == 0) == whole_first;
            const Timing t = is_whole ? run_whole(tokens, format) : run_incremental(tokens, format);
            Timing& best = is_whole ? whole : incremental;
            best.mean_us = std::min(best.mean_us, t.mean_us);
            best.tail_us = std::min(best.tail_us, t.tail_us);
          }
        }
        const char* name = orbit::tool_call_format_name(format);
        std::printf("%-7s %5lld %6lld %7zu %7zu | %10.2f %10.2f | %10.2f %10.2f | %7.1f %7.1f\n", name,
                    static_cast<long long>(calls), static_cast<long long>(bytes), text.size(), tokens.size(),
                    whole.mean_us, incremental.mean_us, whole.tail_us, incremental.tail_us,
                    whole.mean_us / incremental.mean_us, whole.tail_us / incremental.tail_us);
        char row[320];
        std::snprintf(row, sizeof row,
                      "%s{\"format\": \"%s\", \"calls\": %lld, \"bytes\": %lld, \"answer_bytes\": %zu, \"tokens\": "
                      "%zu, \"whole_us\": %.3f, \"incremental_us\": %.3f, \"whole_tail_us\": %.3f, "
                      "\"incremental_tail_us\": %.3f}",
                      json.size() > 1 ? ", " : "", name, static_cast<long long>(calls), static_cast<long long>(bytes),
                      text.size(), tokens.size(), whole.mean_us, incremental.mean_us, whole.tail_us,
                      incremental.tail_us);
        json += row;
      }
    }
  }
  json += "]\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  std::fprintf(stderr, "(%zu calls read)\n", g_sink);
  return 0;
}
