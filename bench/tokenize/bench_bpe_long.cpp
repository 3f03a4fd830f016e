// bench_bpe_long: Hugging Face BPE on one long pre-tokenized word (hf/bpe.h), a word longer than the word
// cache keeps (BpeModel::kCachedWordBytes), so every encode merges it from its characters: what a tokenizer
// without a pre-tokenizer (TinyStories-656K's: a whole text is one word) pays for a long text, and what any
// tokenizer pays for a long run its pre-tokenizer keeps whole (GPT-2's: letters, digits or spaces).
//
// Per tokenizer under --tokenizers and text: microseconds per encode (the fastest of --reps), microseconds per
// kilobyte, the token count and an FNV-1a hash of the ids (old and new binaries must print the same ones).
// Texts: story sentences (--kb kilobytes, spaces included), --kb kilobytes of random lowercase letters, of
// digits, and of spaces; each at --kb and at 4 x --kb, so the per-kilobyte column shows how the merge scales.
//
//   bench_bpe_long [--kb 100] [--reps 5] [--tokenizers DIR]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/hf_tokenizer.h"

namespace {

std::string story(std::size_t bytes) {
  static const char* const kSentences[] = {
      "Once upon a time, there was a little girl named Lily. She liked to play outside in the sun. ",
      "One day, Tom found a big red ball in the park. He was very happy and ran to show his mom. ",
      "The cat sat by the window and watched the birds. It wanted to catch one, but the glass was in the way. ",
  };
  std::string text;
  for (std::size_t i = 0; text.size() < bytes; ++i) text += kSentences[i % 3];
  text.resize(bytes);
  return text;
}

std::string drawn(std::size_t bytes, char first, int span) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, span - 1);
  std::string text(bytes, first);
  for (char& c : text) c = static_cast<char>(first + pick(rng));
  return text;
}

uint64_t fnv1a(const std::vector<int64_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t id : ids) {
    h ^= static_cast<uint64_t>(id);
    h *= 1099511628211ull;
  }
  return h;
}

void measure(const orbit::runtime::HfTokenizer& t, const std::string& name, const char* what, const std::string& text,
             int64_t reps) {
  std::vector<int64_t> ids;
  double best = 1e300;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ids = t.encode(text, false);
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  const double kb = static_cast<double>(text.size()) / 1024.0;
  std::printf("%-18s %-8s %8.0f %10.0f %8.1f %8zu %016llx\n", name.c_str(), what, kb, best, best / kb, ids.size(),
              static_cast<unsigned long long>(fnv1a(ids)));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const orbit::cli::ArgSpec spec{
        {"--kb", "--reps", "--tokenizers"}, {}, "bench_bpe_long [--kb 100] [--reps 5] [--tokenizers DIR]"};
    const orbit::cli::Args args("bench_bpe_long", spec, argc, argv, 1);
    const int64_t kb = args.get_int("--kb", 100, 1);
    const int64_t reps = args.get_int("--reps", 5, 1);
    const std::string root = args.get_or("--tokenizers", ORBIT_TOKENIZERS_DIR);
    std::printf("%-18s %-8s %8s %10s %8s %8s %16s\n", "tokenizer", "text", "KiB", "us", "us/KiB", "tokens", "ids hash");
    for (const char* name : {"tinystories-656k", "gpt2", "minimind"}) {
      const auto t = orbit::runtime::load_hf_tokenizer(root + "/" + name);
      for (const int64_t scale : {int64_t{1}, int64_t{4}}) {
        const auto bytes = static_cast<std::size_t>(kb * scale * 1024);
        measure(*t, name, "story", story(bytes), reps);
        measure(*t, name, "letters", drawn(bytes, 'a', 26), reps);
        measure(*t, name, "digits", drawn(bytes, '0', 10), reps);
        measure(*t, name, "spaces", std::string(bytes, ' '), reps);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bpe_long: %s\n", e.what());
    return 1;
  }
}
