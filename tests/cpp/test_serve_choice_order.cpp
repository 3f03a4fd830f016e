// The order a run's choices go out in (cli/serve/run/choice_order.h): by step, a choice's end before any
// later token of the others, and the same order however the tokens and ends arrive.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit_catch.h"
#include "serve/run/choice_order.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

// An item as text: "1:t0" is choice 1's first token, "0:end" choice 0's end.
std::string name(const sv::ChoiceOrder::Item& item, std::vector<int>& sent) {
  const std::string choice = std::to_string(item.choice) + ":";
  return item.end ? choice + "end" : choice + "t" + std::to_string(sent[item.choice]++);
}

// The stream of choices with `lengths` tokens when the arrivals come in the order `arrivals` lists choices
// (each entry one token, or the end once the choice's tokens are all in), calling ready() after each.
std::vector<std::string> stream(const std::vector<int>& lengths, const std::vector<std::size_t>& arrivals) {
  sv::ChoiceOrder order(lengths.size());
  std::vector<int> arrived(lengths.size(), 0), sent(lengths.size(), 0);
  std::vector<std::string> out;
  for (std::size_t c : arrivals) {
    if (arrived[c] < lengths[c]) {
      order.token(c);
      ++arrived[c];
    } else {
      order.end(c);
    }
    for (const sv::ChoiceOrder::Item& item : order.ready()) out.push_back(name(item, sent));
  }
  CHECK(order.finished());
  return out;
}

// Arrivals as the decode batch posts them: step by step, every running choice one token, those that end
// at a step ending there; within a step in `rank`'s order.
std::vector<std::size_t> lockstep(const std::vector<int>& lengths, const std::vector<std::size_t>& rank) {
  std::vector<std::size_t> out;
  const int steps = *std::max_element(lengths.begin(), lengths.end());
  for (int step = 0; step <= steps; ++step) {
    for (std::size_t c : rank) {
      if (step <= lengths[c]) out.push_back(c);  // step == length: its end
    }
  }
  return out;
}

}  // namespace

TEST_CASE("choice order: a choice's end goes out before the others' later tokens", "[serve][choices]") {
  const std::vector<int> lengths{3, 2};
  const std::vector<std::string> want{"0:t0", "1:t0", "0:t1", "1:t1", "1:end", "0:t2", "0:end"};
  CHECK(stream(lengths, lockstep(lengths, {0, 1})) == want);
  CHECK(stream(lengths, lockstep(lengths, {1, 0})) == want);
  // Choice 1 seen to the end before any of choice 0: nothing of it goes out ahead of choice 0's tokens.
  CHECK(stream(lengths, {1, 1, 1, 0, 0, 0, 0}) == want);
}

TEST_CASE("choice order: a choice that writes no token ends before anyone's first", "[serve][choices]") {
  const std::vector<int> lengths{2, 0, 1};
  const std::vector<std::string> want{"1:end", "0:t0", "2:t0", "2:end", "0:t1", "0:end"};
  CHECK(stream(lengths, lockstep(lengths, {0, 1, 2})) == want);
  CHECK(stream(lengths, lockstep(lengths, {2, 1, 0})) == want);
}

TEST_CASE("choice order: the same stream whatever the arrivals' interleaving", "[serve][choices]") {
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    const std::size_t n = 1 + rng() % 5;
    std::vector<int> lengths(n);
    for (int& l : lengths) l = static_cast<int>(rng() % 6);
    std::vector<std::size_t> rank(n);
    for (std::size_t i = 0; i < n; ++i) rank[i] = i;
    const std::vector<std::string> want = stream(lengths, lockstep(lengths, rank));
    // Any interleaving that keeps each choice's own arrivals in order.
    std::vector<std::size_t> arrivals;
    for (std::size_t c = 0; c < n; ++c) arrivals.insert(arrivals.end(), static_cast<std::size_t>(lengths[c]) + 1, c);
    std::shuffle(arrivals.begin(), arrivals.end(), rng);
    INFO("round " << round);
    CHECK(stream(lengths, arrivals) == want);
    // The stream holds every item once: each choice's tokens in order, then its end.
    CHECK(want.size() == arrivals.size());
  }
}

TEST_CASE("choice order: the laggard is the choice that holds the stream back", "[serve][choices]") {
  sv::ChoiceOrder order(3);
  CHECK(order.laggard() == 0u);
  order.token(0);
  order.token(1);
  CHECK(order.laggard() == 2u);
  CHECK(order.ready().empty());  // choice 2 may still end before anyone's first token
  order.token(2);
  CHECK(order.ready().size() == 3);
  order.end(2);
  CHECK(order.laggard() == 0u);
  CHECK_THROWS_AS(order.token(2), orbit::Error);
  CHECK_THROWS_AS(order.end(2), orbit::Error);
  order.end(0);
  order.end(1);
  CHECK_FALSE(order.laggard().has_value());
  CHECK(order.ready().size() == 3);
  CHECK(order.finished());
}

}  // namespace ORBIT_TEST_FILE
