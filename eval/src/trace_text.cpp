// StoryText (trace_text.h): word lists, sentence templates per role, and the assembly loop.
#include "trace_text.h"

#include <utility>

namespace orbit::trace_detail {

namespace {

// Words the bundled model's stories use often (so its tokenizer has pieces for them).
const char* const kNames[] = {"Lily", "Tom",  "Ben",  "Mia", "Sam", "Anna", "Max", "Sue",
                              "Tim",  "Lucy", "Jack", "Amy", "Bob", "Zoe",  "Mom", "Dad"};
const char* const kAnimals[] = {"dog",  "cat",   "bird",   "bunny", "frog",  "duck", "fish",
                                "bear", "puppy", "kitten", "mouse", "horse", "owl",  "fox"};
const char* const kThings[] = {"ball",   "box",   "toy",   "car", "kite",  "book",   "hat",  "cake",
                               "flower", "boat",  "rock",  "cup", "apple", "cookie", "doll", "drum",
                               "train",  "block", "stick", "key", "map",   "shell",  "bell", "tree"};
const char* const kPlaces[] = {"park",    "garden", "house", "school", "forest", "beach", "river", "shop",
                               "kitchen", "yard",   "room",  "hill",   "lake",   "farm",  "zoo",   "town"};
const char* const kAdjectives[] = {"big", "small", "red",    "blue",   "green", "shiny", "soft", "little", "old",
                                   "new", "funny", "pretty", "yellow", "dark",  "tall",  "warm", "bright", "round"};
const char* const kFeelings[] = {"happy", "sad",   "scared",    "excited", "proud",
                                 "tired", "angry", "surprised", "kind",    "curious"};
const char* const kPastVerbs[] = {"ran",    "jumped", "played", "looked", "smiled", "laughed",
                                  "walked", "sang",   "danced", "waited", "hid"};
const char* const kVerbs[] = {"play", "run",   "jump", "look", "share", "help",
                              "find", "build", "draw", "read", "clean", "fix"};

template <std::size_t N>
constexpr std::size_t size_of(const char* const (&)[N]) {
  return N;
}

}  // namespace

StoryText::StoryText(uint64_t seed, std::function<int64_t(const std::string&)> count)
    : rng_(seed * 0xbf58476d1ce4e5b9ull + 29), count_(std::move(count)) {}

int64_t StoryText::tokens(const std::string& text) const {
  return count_ ? count_(text) : static_cast<int64_t>(text.size()) + 1;
}

const char* StoryText::pick(const char* const* list, std::size_t n) {
  return list[static_cast<std::size_t>(rng_.below(static_cast<int64_t>(n)))];
}

#define ORBIT_PICK(list) pick(list, size_of(list))

std::string StoryText::sentence(TextRole role, const std::string& name, const std::string& thing,
                                const std::string& place) {
  const std::string adj = ORBIT_PICK(kAdjectives);
  const std::string animal = ORBIT_PICK(kAnimals);
  const std::string other = ORBIT_PICK(kNames);
  const std::string feeling = ORBIT_PICK(kFeelings);
  const std::string past = ORBIT_PICK(kPastVerbs);
  const std::string verb = ORBIT_PICK(kVerbs);
  const std::string thing2 = ORBIT_PICK(kThings);
  switch (role) {
    case TextRole::kSystem: {
      static const char* const kRules[] = {"You are a helper who reads stories and answers questions about them.",
                                           "Be kind and say what you saw.", "Use short words.",
                                           "If you do not know, say so.", "Look at the pages before you answer."};
      return kRules[system_line_++ % size_of(kRules)];
    }
    case TextRole::kAction:
      switch (rng_.below(3)) {
        case 0: return name + " opened the page about the " + thing + ".";
        case 1: return name + " looked down the page to find the " + adj + " " + thing2 + ".";
        default: return name + " clicked on the " + thing + " in the " + place + ".";
      }
    case TextRole::kObservation:
      switch (rng_.below(3)) {
        case 0: return "The page showed a " + adj + " " + thing2 + " next to a " + animal + ".";
        case 1: return "There was a " + animal + " and a " + adj + " " + thing + " by the " + place + ".";
        default: return "It said that the " + thing + " was " + adj + " and the " + animal + " was " + feeling + ".";
      }
    case TextRole::kToolCall:
      switch (rng_.below(3)) {
        case 0: return name + " asked the helper to look in the " + thing + " box.";
        case 1: return name + " asked to count the " + thing2 + "s in the " + place + ".";
        default: return name + " asked the helper to fix the " + adj + " " + thing + ".";
      }
    case TextRole::kQuestion:
      switch (rng_.below(4)) {
        case 0: return "What did " + name + " find in the " + place + "?";
        case 1: return "Why was the " + animal + " " + feeling + "?";
        case 2: return "Where did " + name + " put the " + thing + "?";
        default: return "Who played with the " + adj + " " + thing + "?";
      }
    case TextRole::kSubtask:
      switch (rng_.below(2)) {
        case 0: return name + " will " + verb + " the " + thing + " and tell the others.";
        default: return "Find out what the " + animal + " did with the " + thing + ".";
      }
    default: break;
  }
  switch (rng_.below(12)) {
    case 0: return name + " went to the " + place + " with " + other + ".";
    case 1: return name + " saw a " + adj + " " + thing + " near the " + thing2 + ".";
    case 2: return "The " + animal + " wanted to " + verb + " with the " + thing + ".";
    case 3: return "The " + animal + " was very " + feeling + ".";
    case 4: return name + " and " + other + " played with a " + adj + " " + thing2 + ".";
    case 5: return "\"Look at the " + thing + "!\" said " + name + ".";
    case 6: return "The " + thing + " was " + adj + " and " + ORBIT_PICK(kAdjectives) + ".";
    case 7: return name + " gave the " + thing + " to the " + animal + ".";
    case 8: return "Then the " + animal + " " + past + " to the " + place + ".";
    case 9: return name + " felt " + feeling + " and " + past + ".";
    case 10: return "\"Can I " + verb + " with your " + thing + "?\" asked " + other + ".";
    default: return "They " + past + " in the " + place + " all day.";
  }
}

std::string StoryText::make(TextRole role, int64_t target) {
  const std::string name = ORBIT_PICK(kNames);
  const std::string thing = ORBIT_PICK(kThings);
  const std::string place = ORBIT_PICK(kPlaces);
  const std::string adj = ORBIT_PICK(kAdjectives);
  std::string text;
  switch (role) {
    case TextRole::kPage: text = "This page is about the " + adj + " " + thing + " in the " + place + "."; break;
    case TextRole::kFile: text = "The list of " + thing + "s: the " + adj + " one is in the " + place + "."; break;
    case TextRole::kToolOutput: text = "The helper said: the " + thing + " is in the " + place + "."; break;
    case TextRole::kFrame:
      text = "In this picture, " + name + " is in the " + place + " with a " + adj + " " + thing + ".";
      break;
    case TextRole::kDocument:
      text = "Once upon a time, there was a " + adj + " " + thing + " in the " + place + ".";
      break;
    default: text = sentence(role, name, thing, place); break;
  }
  // Roles that are one sentence by nature (actions, questions, ...) grow with more of their own kind.
  const bool story = role == TextRole::kPage || role == TextRole::kFile || role == TextRole::kToolOutput ||
                     role == TextRole::kFrame || role == TextRole::kDocument || role == TextRole::kObservation;
  int guard = 0;
  while (tokens(text) < target && guard++ < 256) {
    text += " " + sentence(story ? TextRole::kDocument : role, name, thing, place);
  }
  return text;
}

#undef ORBIT_PICK

}  // namespace orbit::trace_detail
