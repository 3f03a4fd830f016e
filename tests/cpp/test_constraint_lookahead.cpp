// Lookahead in `pattern` ((?=X) and (?!X), sdk/src/constrain/regex.h): against std::regex_search
// (ECMAScript) on random strings and random patterns, hand-written accepts and refusals, the characters a JSON
// string escapes and UTF-8, zod's patterns, and lookaheads that would take too long, refused by name.
// Links orbit_constrain and Catch only.
#include <catch2/catch.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "constraint_test_util.h"
#include "error_text.h"
#include "orbit/constraint.h"
#include "orbit/errors.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace constraint_test;
using Catch::Contains;

TEST_CASE("pattern: lookahead, positive and negative, against std::regex_search (ECMAScript)", "[constraint]") {
  // Each pattern is refused by a tree without lookahead; here each holds the same strings as std::regex on
  // random strings, and random walks under it end in strings std::regex matches.
  const std::vector<std::string> patterns{
      "a(?=b)",                       // positive, unanchored: an 'a' before a 'b' anywhere
      "a(?!b)",                       // negative: an 'a' not before a 'b' (or at the end)
      "^(?=.*\\d)(?=.*[a-c]).{3,}$",  // at the start: a password rule
      "(?=.*\\d)(?=.*[a-c])",         // the same unanchored: a digit and a letter, anywhere
      "^(?!$)a*b*$",                  // (?!$): not empty
      "^x(?!$)",                      // not at the end
      "^a(?=b|c$)",                   // '$' inside a lookahead: the end of the whole string
      "(?=a$)",                       // the string ends in 'a'
      "^(?:a(?=b)|b)*c?$",            // under '*'
      "^(?:(?=[ab])[a-c])+$",         // under '+', every character
      "^(?!.*(?:aa|bb)).*$",          // no double letter anywhere
      "x(?=(?!y)[yz])",               // nested: negative inside positive
      "^(a(?!a)|b)+$",                // in a group under '+'
      "^[a-c]{2}(?!00|01|99)\\d{2}",  // zod's iban shape
      "^(?:a|b(?!c))c?$",             // in an alternative
      "(?:a$|b)c",                    // '$' inside a group: the end
      "^a(?=.{2,3}$)",                // a length rule, as zod's hostname writes one
  };
  const std::string alphabet = "abcxyz019.-";
  std::string printable;
  for (char b = 0x20; b < 0x7F; ++b) printable += b;
  std::mt19937 rng(11);
  for (const std::string& p : patterns) {
    INFO("pattern " << p);
    const auto c = schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
    const std::regex re(p, std::regex::ECMAScript);
    int accepted = 0;
    for (int i = 0; i < 600; ++i) {
      const std::string s = random_string(rng, alphabet, 7);
      INFO("string \"" << s << "\"");
      const bool expected = std::regex_search(s, re);
      CHECK(c->matches(quote(s)) == expected);
      accepted += expected ? 1 : 0;
    }
    CHECK(accepted > 0);
    for (const std::string& text : random_walks(c, printable, 40, rng)) {
      const std::string s = nlohmann::json::parse(text).get<std::string>();
      INFO("walked \"" << s << "\"");
      CHECK(std::regex_search(s, re));
    }
  }
}

TEST_CASE("pattern: random patterns with lookaheads against std::regex_search (ECMAScript)", "[constraint]") {
  // Patterns drawn from literals, classes, '.', groups, alternation, quantifiers, '$' and lookaheads nested
  // in any of them, over a three-letter alphabet: the compiled pattern holds exactly the strings std::regex
  // finds a match in, for every string of up to 5 letters.
  std::mt19937 rng(17);
  std::function<std::string(int)> gen = [&](int depth) -> std::string {
    const unsigned pick = rng() % (depth > 0 ? 10u : 4u);
    switch (pick) {
      case 0: return std::string(1, "abc"[rng() % 3]);
      case 1: return rng() % 2 ? "[ab]" : "[^a]";
      case 2: return ".";
      case 3: return rng() % 4 == 0 ? "$" : std::string(1, "ab"[rng() % 2]);
      case 4: return gen(depth - 1) + gen(depth - 1);
      case 5: return "(?:" + gen(depth - 1) + "|" + gen(depth - 1) + ")";
      case 6: {
        const char* quantifiers[] = {"*", "+", "?", "{1,2}", "{2}"};
        return "(?:" + gen(depth - 1) + ")" + quantifiers[rng() % 5];
      }
      case 7:
      case 8: return std::string(rng() % 2 ? "(?=" : "(?!") + gen(depth - 1) + ")";
      default: return gen(depth - 1) + gen(depth - 1) + gen(depth - 1);
    }
  };
  std::vector<std::string> texts{""};
  for (std::size_t i = 0; i < texts.size() && texts[i].size() < 5; ++i) {
    for (char ch : std::string("abc")) texts.push_back(texts[i] + ch);
  }
  int compiled = 0;
  for (int n = 0; n < 300; ++n) {
    const std::string p = (rng() % 3 == 0 ? "^" : "") + gen(4);
    INFO("pattern " << p);
    std::shared_ptr<const Constraint> c;
    const std::string error = error_of([&] {
      c = schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
    });
    const std::regex re(p, std::regex::ECMAScript);
    if (c == nullptr) {  // refused: only as admitting nothing (then std::regex matches nothing either)
      CHECK_THAT(error, Contains("admits no value"));
      for (const std::string& s : texts) CHECK_FALSE(std::regex_search(s, re));
      continue;
    }
    ++compiled;
    for (const std::string& s : texts) {
      INFO("string \"" << s << "\"");
      CHECK(c->matches(quote(s)) == std::regex_search(s, re));
    }
  }
  CHECK(compiled > 200);
}

TEST_CASE("pattern: lookahead accepts and refuses strings as ECMA-262 reads it", "[constraint]") {
  const auto c = [](const std::string& p) {
    return schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
  };
  const auto positive = c("^a(?=b)");
  CHECK(positive->matches(R"("ab")"));
  CHECK(positive->matches(R"("abc")"));
  CHECK_FALSE(positive->matches(R"("a")"));
  CHECK_FALSE(positive->matches(R"("ac")"));
  const auto negative = c("^a(?!b)");
  CHECK(negative->matches(R"("a")"));
  CHECK(negative->matches(R"("ac")"));
  CHECK_FALSE(negative->matches(R"("ab")"));
  CHECK_FALSE(negative->matches(R"("abc")"));
  // At the very start of an anchored pattern, and (?!$): not the empty string.
  const auto start = c("^(?!$)(?=[^x]*$).*$");
  CHECK(start->matches(R"("ab")"));
  CHECK_FALSE(start->matches(R"("")"));
  CHECK_FALSE(start->matches(R"("axb")"));
  // At the end: (?!$) after everything admits nothing but a longer string; (?=$) is '$'.
  const auto not_end = c("^ab(?!$)");
  CHECK(not_end->matches(R"("abc")"));
  CHECK_FALSE(not_end->matches(R"("ab")"));
  const auto at_end = c("ab(?=$)");
  CHECK(at_end->matches(R"("xab")"));
  CHECK_FALSE(at_end->matches(R"("abx")"));
  // Nested in a group under '*': every 'a' followed by a 'b'.
  const auto starred = c("^(?:a(?=b)|b)*$");
  CHECK(starred->matches(R"("abbab")"));
  CHECK(starred->matches(R"("")"));
  CHECK_FALSE(starred->matches(R"("aab")"));
  CHECK_FALSE(starred->matches(R"("ba")"));
  // A quantified lookahead (ECMA-262 Annex B): (?=a)* asserts nothing, (?=a){2} once.
  CHECK(c("^(?=a)*b")->matches(R"("b")"));
  CHECK_FALSE(c("^(?=a){2}.")->matches(R"("b")"));
  CHECK(c("^(?=a){2}.")->matches(R"("a")"));
  // Lookaheads that can never hold, or always do.
  CHECK_THAT(error_of([&] { c("(?=[])a"); }), Contains("schema.pattern: admits no value"));
  CHECK(c("^(?![])a$")->matches(R"("a")"));
  CHECK_THAT(error_of([&] { c("^(?!a)a"); }), Contains("schema.pattern: admits no value"));
}

TEST_CASE("pattern: lookahead over the characters a JSON string escapes and UTF-8", "[constraint]") {
  const auto c = [](const std::string& p) {
    return schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
  };
  // The rest of the string is read as characters, however the JSON text writes them: "\n" and "\u000a" are
  // the same character, a multi-byte one is one character.
  const auto newline = c("^a(?=\\n|\\x01)");
  CHECK(newline->matches(R"("a\nb")"));
  CHECK(newline->matches(R"("a\u0001b")"));
  CHECK(newline->matches(R"("a\u0001")"));
  CHECK_FALSE(newline->matches(R"("a\u0002b")"));
  CHECK_FALSE(newline->matches(R"("a\tb")"));
  const auto not_control = c("^a(?![\\x01-\\x1f])");
  CHECK(not_control->matches(R"("ab")"));
  CHECK(not_control->matches(R"("a")"));
  CHECK_FALSE(not_control->matches(R"("a\u001F")"));
  CHECK_FALSE(not_control->matches(R"("a\u001f")"));
  CHECK_FALSE(not_control->matches(R"("a\n")"));
  const auto not_quote = c("^(?!.*\")");
  CHECK(not_quote->matches(R"("ab\\")"));
  CHECK_FALSE(not_quote->matches(R"("a\"b")"));
  const auto one_char = c("^(?=.$)");
  CHECK(one_char->matches("\"\xE2\x82\xAC\""));      // €: three bytes, one character
  CHECK(one_char->matches("\"\xF0\x9F\x98\x80\""));  // U+1F600: four bytes
  CHECK(one_char->matches(R"("\t")"));
  CHECK_FALSE(one_char->matches("\"\xE2\x82\xAC\xE2\x82\xAC\""));
  const auto no_euro = c("^(?!.*€)[^a]*$");
  CHECK(no_euro->matches("\"\xC3\xA9\\n\""));
  CHECK_FALSE(no_euro->matches("\"x\xE2\x82\xAC\""));
  // Random walks over bytes that spell escapes and UTF-8: the decoded strings hold the rule.
  std::mt19937 rng(5);
  for (const std::string& t : random_walks(c("^(?=.*[\\n€])(?!.*\\\\).{2,4}$"), "ab\\n\"u0A\xE2\x82\xAC", 80, rng)) {
    const std::u32string s = [&] {
      std::u32string out;
      const std::string bytes = nlohmann::json::parse(t).get<std::string>();
      for (std::size_t i = 0; i < bytes.size(); ++i) {
        const auto b = static_cast<unsigned char>(bytes[i]);
        if ((b & 0xC0) != 0x80) out += b < 0x80 ? static_cast<char32_t>(b) : U'?';
      }
      return out;
    }();
    INFO("walked " << t);
    CHECK((s.size() >= 2 && s.size() <= 4));
    CHECK((t.find("\\n") != std::string::npos || t.find("\\u000") != std::string::npos ||
           t.find("\xE2\x82\xAC") != std::string::npos));
    CHECK(t.find("\\\\") == std::string::npos);
  }
}

TEST_CASE("pattern: zod's ISO duration, with its format, served", "[constraint]") {
  // z.toJSONSchema(z.iso.duration()) in zod 4.6 (tests/node/node_modules/zod).
  const std::string zod = R"({"type":"string","format":"duration","pattern":)"
                          R"("^P(?:(\\d+W)|(?!.*W)(?=\\d|T\\d)(\\d+Y)?(\\d+M)?(\\d+D)?(T(?=\\d)(\\d+H)?(\\d+M)?)"
                          R"((\\d+([.,]\\d+)?S)?)?)$"})";
  const auto c = schema(zod);
  for (const char* ok : {"P1Y", "P3Y6M4DT12H30M5S", "P2W", "PT1M", "P1D", "PT36H", "P1M2D", "PT1H2S"}) {
    INFO(ok);
    CHECK(c->matches(quote(ok)));
  }
  // The format takes whole numbers, zod's pattern fractional seconds: together, whole numbers.
  for (const char* bad : {"P", "PT", "P1H", "1Y", "P1Y2W", "PW", "P1YT", "PT0.5S", "P1.5Y", "P1D1Y", "PT1S2H"}) {
    INFO(bad);
    CHECK_FALSE(c->matches(quote(bad)));
  }
  // The pattern alone, against std::regex on what it generates.
  const std::string pattern = nlohmann::json::parse(zod)["pattern"].get<std::string>();
  const auto alone = schema(nlohmann::json({{"type", "string"}, {"pattern", pattern}}).dump());
  CHECK(alone->matches(quote("PT0.5S")));
  CHECK(alone->matches(quote("PT1,25S")));
  CHECK_FALSE(alone->matches(quote("P1YT")));
  const std::regex re(pattern, std::regex::ECMAScript);
  std::mt19937 rng(13);
  for (const auto& rules : {c, alone}) {
    for (const std::string& text : random_walks(rules, "\"PTWYMDHS0123.,", 200, rng)) {
      const std::string s = nlohmann::json::parse(text).get<std::string>();
      INFO("walked \"" << s << "\"");
      CHECK(std::regex_search(s, re));
    }
  }
}

TEST_CASE("pattern: zod's lookahead patterns (hostname, iban, a password rule) served", "[constraint]") {
  const auto c = [](const std::string& p) {
    return schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
  };
  // z.hostname(): a length bound in a lookahead at the start, with the format beside it.
  const std::string hostname =
      "^(?=.{1,253}\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]{0,61}"
      "[0-9a-zA-Z])?)*\\.?$";
  const auto host = schema(nlohmann::json({{"type", "string"}, {"format", "hostname"}, {"pattern", hostname}}).dump());
  CHECK(host->matches(quote("example.com")));
  CHECK_FALSE(host->matches(quote("-example.com")));
  std::string long_name;
  for (int i = 0; i < 4; ++i) long_name += (i ? "." : "") + std::string(63, 'a');
  CHECK_FALSE(host->matches(quote(long_name)));  // 255 characters
  CHECK(host->matches(quote(long_name.substr(0, 253))));
  // zod's iban: no check digits 00, 01 or 99.
  const auto iban = c("^[A-Z]{2}(?!00|01|99)\\d{2}[A-Z0-9]{11,30}$");
  CHECK(iban->matches(quote("DE44500105175407324931")));
  CHECK_FALSE(iban->matches(quote("DE00500105175407324931")));
  CHECK_FALSE(iban->matches(quote("DE99500105175407324931")));
  // z.string().regex(/^(?=.*\d)(?=.*[a-z]).{8,}$/)
  const auto password = c("^(?=.*\\d)(?=.*[a-z]).{8,}$");
  CHECK(password->matches(quote("abcdefg1")));
  CHECK_FALSE(password->matches(quote("abcdefgh")));
  CHECK_FALSE(password->matches(quote("12345678")));
  CHECK_FALSE(password->matches(quote("abc1")));
}

TEST_CASE("pattern: lookaheads that would take too long are refused by name", "[constraint]") {
  const auto at = [](const std::string& p) {
    return error_of([&] { schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump()); });
  };
  // The n-th character from here is an 'a': its automaton grows exponentially.
  CHECK_THAT(at("^(?=[ab]*a[ab]{40}$)"),
             Contains("schema.pattern: the lookahead at character 2 of the pattern: too complex to constrain"));
  CHECK_THAT(at("x(?=[ab]*a[ab]{20}$)"),
             Contains("schema.pattern: the lookahead at character 2 of the pattern: too complex to constrain"));
  // Threads that each choose which lookahead to meet, at every character: refused, not built.
  CHECK(at("x(?:(?=[a-z]{0,40}1)[a-z]|(?=[a-z]{0,40}2)[a-z])*") ==
        "schema.pattern: too complex to constrain (its automaton takes too long to build)");
  // A pattern's lookaheads share one bound on the work their automata take (each alone is within it):
  // refused, naming the one that passes it, rather than held for the sum.
  std::string costly = "a";
  for (int i = 0; i < 32; ++i) costly += "(?=[ab]*a[ab]{13}$)";
  CHECK(at(costly + "z") ==
        "schema.pattern: the lookahead at character 40 of the pattern: too complex to constrain "
        "(its automaton takes too long to build)");
  std::string many;
  for (int i = 0; i < 33; ++i) many += "(?=a" + std::to_string(i % 10) + ")?";
  CHECK(at(many) == "schema.pattern: over 32 lookaheads at character 225 of the pattern");
  // Repeats of one lookahead build it once.
  CHECK(at("^(?:(?=a)a){1000}$") == "(no error)");
}

}  // namespace ORBIT_TEST_FILE
