// bench_text_stream: what TextStream::push (orbit/text_stream.h) costs per token, early in an answer and deep
// into a long one: nanoseconds per push over pushes [L - 100, L) of a stream of L tokens (L = 100, 2000 by
// default), for stories260K's llama2.c tokenizer and TinyStories-656K's tokenizer.json, without stop strings
// and with two ("\n\n", "The End."). The tokens are the encoding of story sentences repeated. The fastest of
// --reps runs is kept (on a shared machine, the least disturbed run). Not a test: absolute numbers depend on
// the machine and its load; compare two builds by running their binaries in turn, alternating.
//
//   bench_text_stream [--reps 7] [--lengths 100,2000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/text_stream.h"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kUsage =
    "usage: bench_text_stream [--reps 7] [--lengths 100,2000]\n"
    "  TextStream::push per token, early in an answer and deep into a long one (ns per push).\n"
    "  --reps N        runs per case (the fastest is kept)\n"
    "  --lengths L,..  answer lengths in tokens (the last 100 pushes of each are timed)\n";

const char* const kSentences[] = {
    "Once upon a time, there was a little girl named Lily. She liked to play outside in the sun.",
    "One day, Tom found a big red ball in the park. He was very happy and ran to show his mom.",
    "The cat sat by the window and watched the birds. It wanted to catch one, but the glass was in the way.",
    "Sue and Ben built a tall tower of blocks. When it fell down, they laughed and built it again.",
    "The old man gave the boy a shiny coin. \"Keep it safe,\" he said, and the boy put it in his pocket.",
};

// Nanoseconds per push over the last min(100, length) pushes of a stream of `length` tokens, fastest of reps.
double ns_per_push(const orbit::runtime::Tokenizer& tok, int64_t previous, const std::vector<int64_t>& tokens,
                   std::size_t length, const std::vector<std::string>& stops, int reps) {
  const std::size_t measured = std::min<std::size_t>(100, length);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    orbit::TextStream s([&](const std::vector<int64_t>& t) { return tok.decode(t, previous); }, stops);
    std::size_t sent = 0;
    for (std::size_t i = 0; i + measured < length; ++i) sent += s.push(tokens[i]).size();
    const auto start = Clock::now();
    for (std::size_t i = length - measured; i < length; ++i) sent += s.push(tokens[i]).size();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    ORBIT_CHECK(sent > 0 && !s.stopped(), "bench_text_stream: the stream released nothing or stopped");
    best = std::min(best, ns / static_cast<double>(measured));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) try {
  const orbit::cli::Args args("bench_text_stream", {{"--reps", "--lengths"}, {}, kUsage}, argc, argv, 1);
  const int reps = static_cast<int>(args.get_int("--reps", 7, 1));
  std::vector<std::size_t> lengths;
  for (const int64_t length : orbit::bench::parse_positive_list(args.get_or("--lengths", "100,2000"), "--lengths")) {
    lengths.push_back(static_cast<std::size_t>(length));
  }
  struct Named {
    const char* name;
    std::unique_ptr<orbit::runtime::Tokenizer> tok;
    int64_t previous;
  };
  std::vector<Named> tokenizers;
  tokenizers.push_back(
      {"stories260K", orbit::runtime::load_tokenizer(ORBIT_MODELS_DIR "/stories260K/tok512.bin", 512), 1});
  tokenizers.push_back({"tinystories-656k", orbit::runtime::load_tokenizer(ORBIT_MODELS_DIR "/tinystories-656k"), -1});
  const std::size_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::printf("%-18s %-6s %8s %12s\n", "tokenizer", "stops", "tokens", "ns/push");
  for (const Named& t : tokenizers) {
    std::string text;
    std::vector<int64_t> tokens;
    for (std::size_t i = 0; tokens.size() < longest; ++i) {
      text += std::string(i > 0 ? " " : "") + kSentences[i % (sizeof kSentences / sizeof kSentences[0])];
      tokens = t.tok->encode(text, false);
    }
    for (const bool with_stops : {false, true}) {
      const std::vector<std::string> stops =
          with_stops ? std::vector<std::string>{"\n\n", "The End."} : std::vector<std::string>{};
      for (const std::size_t length : lengths) {
        std::printf("%-18s %-6s %8zu %12.0f\n", t.name, with_stops ? "2" : "none", length,
                    ns_per_push(*t.tok, t.previous, tokens, length, stops, reps));
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
