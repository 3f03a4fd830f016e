// bench_bpe_cache: Hugging Face BPE tokenization with the word cache (hf/bpe.h) against without it, side by
// side in one run (ratios; not a test: absolute numbers depend on the machine and its load).
//
//   1. chat      a conversation of --messages story messages, tokenized again as each message is added, as
//                Window::sync tokenizes a rendering at every request: the whole text, then each message's
//                text alone (to find where the messages' tokens start);
//   2. cold      text whose every word is new (random letters): the cache's cost where it never hits (the
//                cache starts empty at every rep).
// Each figure is megabytes of text per second, the fastest of --reps runs (the two sides interleaved), for
// each tokenizer.json under --tokenizers (the bundled TinyStories-656K's, GPT-2's, MiniMind's). Both sides
// must give the same ids. The uncached side is a tokenizer loaded with ORBIT_BPE_CACHE_WORDS=0.
//
//   bench_bpe_cache [--messages 40] [--reps 5] [--tokenizers DIR] [--json PATH]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/hf_tokenizer.h"

namespace {

using orbit::runtime::HfTokenizer;

const char* const kSentences[] = {
    "Once upon a time, there was a little girl named Lily. She liked to play outside in the sun.",
    "One day, Tom found a big red ball in the park. He was very happy and ran to show his mom.",
    "The cat sat by the window and watched the birds. It wanted to catch one, but the glass was in the way.",
    "Sue and Ben built a tall tower of blocks. When it fell down, they laughed and built it again.",
    "The old man gave the boy a shiny coin. \"Keep it safe,\" he said, and the boy put it in his pocket.",
};

std::vector<std::string> chat_texts(int64_t messages) {
  std::vector<std::string> texts, rendered;
  std::string conversation;
  for (int64_t i = 0; i < messages; ++i) {
    std::string message = i % 2 == 0 ? "user: " : "assistant: ";
    message += kSentences[i % 5];
    message += " (message " + std::to_string(i) + ")\n";
    rendered.push_back(message);
    conversation += message;
    texts.push_back(conversation);
    texts.insert(texts.end(), rendered.begin(), rendered.end());
  }
  return texts;
}

std::vector<std::string> cold_texts(int64_t words) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> letter('a', 'z'), length(3, 9);
  std::string text;
  for (int64_t i = 0; i < words; ++i) {
    for (int n = length(rng); n > 0; --n) text += static_cast<char>(letter(rng));
    text += ' ';
  }
  return {text};
}

std::unique_ptr<HfTokenizer> load(const std::string& dir, bool cached) {
  if (cached) {
    unsetenv("ORBIT_BPE_CACHE_WORDS");
  } else {
    setenv("ORBIT_BPE_CACHE_WORDS", "0", 1);
  }
  auto t = orbit::runtime::load_hf_tokenizer(dir);
  unsetenv("ORBIT_BPE_CACHE_WORDS");
  return t;
}

struct Side {
  double best_seconds = 1e300;
  std::vector<std::vector<int64_t>> ids;
};

// Tokenizes every text once on a freshly loaded tokenizer (an empty cache); the wall time.
double run_once(const std::string& dir, bool cached, const std::vector<std::string>& texts, Side& side) {
  const std::unique_ptr<HfTokenizer> tokenizer = load(dir, cached);
  std::vector<std::vector<int64_t>> ids;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& text : texts) ids.push_back(tokenizer->encode(text, false));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  side.ids = std::move(ids);
  return seconds;
}

nlohmann::json measure(const std::string& dir, const char* workload, const std::vector<std::string>& texts,
                       int64_t reps) {
  Side cached, plain;
  for (int64_t r = 0; r < reps; ++r) {
    const bool cached_first = r % 2 == 0;
    for (const bool c : {cached_first, !cached_first}) {
      Side& side = c ? cached : plain;
      side.best_seconds = std::min(side.best_seconds, run_once(dir, c, texts, side));
    }
  }
  ORBIT_CHECK(cached.ids == plain.ids, dir << ": the cached tokenizer gave other ids on " << workload);
  double bytes = 0;
  for (const std::string& t : texts) bytes += static_cast<double>(t.size());
  const double mb = bytes / 1e6;
  const nlohmann::json row = {{"tokenizer", dir},
                              {"workload", workload},
                              {"megabytes", mb},
                              {"cached_mb_per_s", mb / cached.best_seconds},
                              {"uncached_mb_per_s", mb / plain.best_seconds},
                              {"speedup", plain.best_seconds / cached.best_seconds}};
  std::printf("%-40s %-6s %8.2f %12.2f %12.2f %8.2fx\n", dir.c_str(), workload, mb, mb / plain.best_seconds,
              mb / cached.best_seconds, plain.best_seconds / cached.best_seconds);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const orbit::cli::ArgSpec spec{{"--messages", "--reps", "--tokenizers", "--json"},
                                   {},
                                   "bench_bpe_cache [--messages 40] [--reps 5] [--tokenizers DIR] [--json PATH]"};
    const orbit::cli::Args args("bench_bpe_cache", spec, argc, argv, 1);
    const int64_t messages = args.get_int("--messages", 40, 1);
    const int64_t reps = args.get_int("--reps", 5, 1);
    const std::string root = args.get_or("--tokenizers", ORBIT_TOKENIZERS_DIR);
    const std::vector<std::string> chat = chat_texts(messages), cold = cold_texts(20000);
    std::printf("%-40s %-6s %8s %12s %12s %9s\n", "tokenizer", "text", "MB", "uncached MB/s", "cached MB/s", "speedup");
    nlohmann::json rows = nlohmann::json::array();
    for (const char* name : {"tinystories-656k", "gpt2", "minimind"}) {
      const std::string dir = root + "/" + name;
      rows.push_back(measure(dir, "chat", chat, reps));
      rows.push_back(measure(dir, "cold", cold, reps));
    }
    if (const auto path = args.get("--json")) std::ofstream(*path) << rows.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bpe_cache: %s\n", e.what());
    return 1;
  }
}
