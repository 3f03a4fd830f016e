// What one rendering of a chat template may nest, loop over and build, and the running totals that hold it
// to that.
//
// A template and its variables come from outside the process (a model's tokenizer_config.json; a request's
// messages and tools). The parser and the interpreter recurse once per nesting level, and a template can
// loop and build strings and lists: unbounded, a hostile one overflows the stack or exhausts memory. Each
// limit sits orders of magnitude above what real chat templates use (test_chat_template_limits renders the
// templates of tests/data/templates over a conversation larger than `orbit serve` accepts, far inside
// them). Going past one is an orbit::Error naming the template, the line, what was exceeded and the limit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "orbit/common/error.h"

namespace orbit::runtime::jinja {

// Nesting, three ways, each at most this deep (real templates: under 10):
//   - while parsing: open if/for/set blocks plus open sub-expressions (parentheses, brackets, braces,
//     call arguments, `not`, unary signs, `else` branches);
//   - the height of an expression (operators, filters, tests, attributes, indexes and calls chained on one
//     value add a level each: `a + b + c` is 2 levels);
//   - the depth of a value a template builds (lists and dicts inside each other; a namespace counts as one
//     level whatever it holds), and of a value printed or passed to tojson (namespaces included, so a
//     namespace that holds itself is refused rather than printed forever).
inline constexpr int kMaxNesting = 256;
// Loop iterations in one rendering, every loop together (a `for ... if` counts each item it tests), and the
// most items one range() makes. Real templates loop over their messages and tools a few times.
inline constexpr int64_t kMaxIterations = 1000000;
// Statements run and expressions evaluated in one rendering: what bounds its time where loops do not (an
// expression of a thousand operators in a loop of a million). Real templates: 20 to 45 a message.
inline constexpr int64_t kMaxSteps = 10000000;
// The rendered text, and any one string a template builds: 64 MiB, some 16M tokens of text.
inline constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;
// Work in one rendering, in bytes, every step together: the strings it builds or copies, and the list items
// it builds, copies or scans (each counted as sizeof(Value) plus its string's length). Bounds a rendering's
// memory and time; a real one does a few times its input's size.
inline constexpr std::size_t kMaxWorkBytes = std::size_t{512} << 20;

// One rendering's totals against kMaxIterations, kMaxSteps and kMaxWorkBytes. One per rendering; not
// thread-safe.
// `where` is anything an error message can stream first (a Site: "<template>: line <n>").
class Budget {
 public:
  struct Totals {
    int64_t iterations = 0;
    int64_t steps = 0;
    std::size_t work_bytes = 0;
  };

  // Counts `n` loop iterations; throws orbit::Error past kMaxIterations in all.
  template <typename Where>
  void iterate(int64_t n, const Where& where) {
    totals_.iterations += n;
    if (totals_.iterations > kMaxIterations) {
      ORBIT_FAIL(where << ": loops ran more than " << kMaxIterations
                       << " iterations, the limit for one rendering of a chat template");
    }
  }
  // Counts one statement run or expression evaluated; throws orbit::Error past kMaxSteps in all.
  template <typename Where>
  void step(const Where& where) {
    if (++totals_.steps > kMaxSteps) {
      ORBIT_FAIL(where << ": the rendering ran more than " << kMaxSteps
                       << " steps (statements and expressions), the limit for one rendering of a chat template");
    }
  }
  // Counts `n` bytes of work; throws orbit::Error past kMaxWorkBytes in all.
  template <typename Where>
  void work(std::size_t n, const Where& where) {
    if (n > kMaxWorkBytes - totals_.work_bytes) {
      ORBIT_FAIL(where << ": the rendering built, copied or scanned more than " << kMaxWorkBytes
                       << " bytes of strings and lists, the limit for one rendering of a chat template");
    }
    totals_.work_bytes += n;
  }
  const Totals& totals() const { return totals_; }

 private:
  Totals totals_;
};

// Throws orbit::Error when `what` is about to build a string of `bytes` bytes, more than kMaxStringBytes.
template <typename Where>
void check_string_size(std::size_t bytes, const char* what, const Where& where) {
  if (bytes > kMaxStringBytes) {
    ORBIT_FAIL(where << ": " << what << " would make a string of " << bytes << " bytes, over the limit of "
                     << kMaxStringBytes << " bytes");
  }
}

}  // namespace orbit::runtime::jinja
