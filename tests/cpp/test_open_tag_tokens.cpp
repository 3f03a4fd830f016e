// The tokens that can keep a block's open string possible (sdk/src/window/open_tag_tokens.h), against the
// TriggerWatch itself: from every text that may still open the block, a token left out of the list always
// decides the text is the answer, at the text's start (TokenBytes::at_start's bytes) and after it.
#include "orbit_catch.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include "orbit/trigger_watch.h"
#include "window/open_tag_tokens.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

const std::string kOpen = "<think>";

// Every byte, pieces of the open string with whitespace and other bytes around them, and random strings
// over an alphabet rich in the open string's bytes.
std::shared_ptr<const TokenVocabulary> vocabulary() {
  std::set<std::string> seen;
  for (int b = 1; b < 256; ++b) seen.insert(std::string(1, static_cast<char>(b)));
  for (std::size_t i = 0; i < kOpen.size(); ++i) {
    for (std::size_t n = 1; i + n <= kOpen.size(); ++n) {
      const std::string piece = kOpen.substr(i, n);
      for (const char* around : {"", " ", "\n", "x", "\n\n", "{"}) {
        seen.insert(around + piece);
        seen.insert(piece + around);
      }
    }
  }
  std::mt19937 rng(3);
  const std::string alphabet = "<think>/ \n\t{x";
  while (seen.size() < 3000) {
    std::string s(1 + rng() % 6, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    seen.insert(s);
  }
  TokenBytes tb;
  for (const std::string& s : seen) tb.text.emplace_back(s);
  tb.text.emplace_back(std::nullopt);  // writes nothing: never listed
  // At the text's start, a few tokens lose their leading space (as llama2.c's decoder has it).
  for (int64_t id = 0; id < static_cast<int64_t>(tb.text.size()); ++id) {
    const std::optional<std::string>& t = tb.text[static_cast<std::size_t>(id)];
    if (t && t->size() > 1 && (*t)[0] == ' ') tb.at_start.emplace_back(id, t->substr(1));
  }
  return TokenVocabulary::from_bytes(tb);
}

}  // namespace

TEST_CASE("open tag tokens: a token left out decides the answer from every text that may still open the block",
          "[sampler][constraint]") {
  const auto v = vocabulary();
  const auto tokens = orbit::detail::open_tag_tokens(v, kOpen);
  CHECK(orbit::detail::open_tag_tokens(v, kOpen) == tokens);  // cached
  const TriggerBlock block{kOpen, "</think>"};
  const auto check = [&](const std::vector<std::pair<int64_t, std::string>>& listed, const std::string& held,
                         bool first) {
    std::set<int64_t> in;
    for (const auto& entry : listed) in.insert(entry.first);
    TriggerWatch at(std::string(), block);
    REQUIRE_FALSE(at.push(held));
    REQUIRE(at.may_open());
    int64_t kept = 0;
    for (int64_t id = 0; id < v->size(); ++id) {
      std::optional<std::string> bytes = v->bytes(id);
      for (const auto& [start_id, start_bytes] : v->at_start()) {
        if (first && start_id == id) bytes = start_bytes;
      }
      if (!bytes || bytes->empty()) {
        CHECK(in.count(id) == 0);
        continue;
      }
      TriggerWatch next = at;
      const bool decides = next.push(*bytes).has_value();
      if (!decides) ++kept;
      if (in.count(id) == 0) CHECK(decides);
    }
    CHECK(kept > 0);
    CHECK(listed.size() < static_cast<std::size_t>(v->size()) / 2);  // a short list, not the vocabulary
  };
  check(tokens->first, "", true);
  for (const char* held : {"", " ", "\n\n", "<", "<th", " \n<thin", "<think"}) check(tokens->later, held, false);
}

}  // namespace ORBIT_TEST_FILE
