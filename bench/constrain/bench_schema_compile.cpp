// bench_schema_compile: what building a Constraint from a JSON schema costs (Constraint::json_schema, public API
// only), per schema: the first build in the process, the median and the fastest of `reps` builds. Ordinary
// schemas (objects with enums, patterns without lookahead, arrays, formats) and zod's hostname pattern, whose
// lookahead takes over a hundred milliseconds to build: what orbit/constraint_cache.h saves a loop that sends
// it again; and wide objects whose fields repeat one language, built once per process. Links orbit_constrain alone, so
// it also builds against an older tree's objects to compare commits (a schema that tree refuses prints its error); its
// arguments go through orbit_args (cli/args.h), which needs only orbit::common. Not a test: the figures depend on the
// machine.
//
//   bench_schema_compile [--reps 15]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/constraint.h"

namespace {

const char* const kUsage =
    "usage: bench_schema_compile [--reps 15]\n"
    "  Constraint::json_schema per schema: the first build in the process, the median and the fastest.\n"
    "  --reps N   builds per schema (at least 1)\n";

}  // namespace

int main(int argc, char** argv) try {
  const orbit::cli::Args args("bench_schema_compile", {{"--reps"}, {}, kUsage}, argc, argv, 1);
  const int reps = static_cast<int>(args.get_int("--reps", 15, 1));
  std::vector<std::pair<std::string, std::string>> schemas = {
      {"object_enums",
       R"({"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit","kelvin"]},"city":{"type":"string"},)"
       R"("days":{"type":"integer","minimum":1,"maximum":14},"kind":{"enum":["a","b","c","d","e","f"]}},)"
       R"("required":["unit","city"],"additionalProperties":false})"},
      {"pattern_plain", R"({"type":"string","pattern":"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"})"},
      {"pattern_phone", R"({"type":"string","pattern":"^\\+?[1-9][0-9]{7,14}$"})"},
      {"pattern_slug", R"({"type":"string","pattern":"^[a-z0-9]+(?:-[a-z0-9]+)*$","maxLength":64})"},
      {"array_items",
       R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array",)"
       R"("items":{"type":"string","maxLength":20},"maxItems":5}},"required":["id"]},"maxItems":50})"},
      {"date_time", R"({"type":"string","format":"date-time"})"},
      {"email", R"({"type":"string","format":"email"})"},
      {"uuid", R"({"type":"string","format":"uuid"})"},
      {"ipv6", R"({"type":"string","format":"ipv6"})"},
      {"hostname_format", R"({"type":"string","format":"hostname"})"},
      {"zod_hostname_lookahead",
       R"({"type":"string","format":"hostname","pattern":"^(?=.{1,253}\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]{0,61}[0-9a-zA-Z])?)*\\.?$"})"},
  };
  // Wide objects whose fields repeat one language (a pattern, integer bounds): each language is built once per
  // process (constrain/dfa_memo.h), not once per field. Their languages are used by no other row, so every
  // row's first build builds its own.
  const auto wide = [](const std::string& field, int n) {
    std::string text = R"({"type":"object","properties":{)";
    for (int i = 0; i < n; ++i) text += (i ? ",\"f" : "\"f") + std::to_string(i) + "\":" + field;
    return text + "}}";
  };
  schemas.emplace_back("integers_x1000", wide(R"({"type":"integer","minimum":0,"maximum":1000000})", 1000));
  schemas.emplace_back("patterns_x300",
                       wide(R"({"type":"string","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$"})", 300));
  std::printf("%-24s %10s %10s %10s\n", "schema", "first_ms", "median_ms", "min_ms");
  for (const auto& [name, text] : schemas) {
    std::vector<double> ms;
    std::string error;
    for (int i = 0; i < reps && error.empty(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const auto c = orbit::Constraint::json_schema(text);
      } catch (const orbit::Error& e) {
        error = e.what();
      }
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!error.empty()) {
      std::printf("%-24s refused: %.80s\n", name.c_str(), error.c_str());
      continue;
    }
    const double first = ms.front();
    std::sort(ms.begin(), ms.end());
    std::printf("%-24s %10.3f %10.3f %10.3f\n", name.c_str(), first, ms[ms.size() / 2], ms.front());
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
