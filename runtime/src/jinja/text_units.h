// Strings as a chat template sees them: sequences of code points, as Python's str (Jinja2 in transformers'
// apply_chat_template) and, for the Basic Multilingual Plane, JavaScript's (@huggingface/jinja). Here they are
// UTF-8; indexing, slicing, iterating, stripping, splitting and changing case work on code points, never on
// bytes (a byte split out of a character is invalid UTF-8 in the rendered prompt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace orbit::runtime::jinja {

// Byte offsets where each code point of `s` begins, then s.size(): n + 1 entries for n code points. A byte
// that does not begin a well-formed UTF-8 sequence counts as one code point of its own.
std::vector<std::size_t> code_point_starts(const std::string& s);

// The byte after the code point that begins at byte `i` of `s` (i < s.size()).
std::size_t code_point_end(const std::string& s, std::size_t i);

// How many code points `s` holds (code_point_starts(s).size() - 1, without building the list).
std::size_t count_code_points(const std::string& s);

// The byte span [begin, end) of code point `k` of `s`, counted from the end when negative (as Python indexes);
// nullopt past either end. `scanned` gets the bytes read to find it (k's own for k >= 0, all of `s` for k < 0),
// for the caller to charge: an index inside a loop must not cost a whole scan unaccounted.
std::optional<std::pair<std::size_t, std::size_t>> code_point_at(const std::string& s, int64_t k, std::size_t* scanned);

// Whether code point `c` is whitespace as Python's str.isspace() says (ASCII's six, U+001C..U+001F, U+0085,
// NBSP, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_space(char32_t c);

// `s` less the leading (`left`) and trailing (`right`) code points found in `chars`, or whitespace when
// `chars` is null: str.strip / lstrip / rstrip, and the trim filter.
std::string strip_code_points(const std::string& s, const std::string* chars, bool left, bool right);
// hay.find(needle, from), in time linear in both (Knuth-Morris-Pratt past a few bytes of needle): std::string's
// find compares the needle at every place its first byte occurs, |hay| x |needle| at worst, which a template's
// `in`, replace or split on long strings would reach. npos when none.
std::size_t find_text(const std::string& hay, const std::string& needle, std::size_t from = 0);

// The [begin, end) byte spans of the parts of `s` between runs of whitespace (str.split() with no separator).
std::vector<std::pair<std::size_t, std::size_t>> whitespace_parts(const std::string& s);

// Python's full case mappings (ICU's, root locale): str.upper, str.lower, str.capitalize (the first code point
// in title case, the rest lower case) and str.title (title case after a code point without case, lower case
// after one with).
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);
// Jinja's title filter (not str.title(): "it's" stays "It's"): each run between separators ('-', whitespace, '(',
// '{', '[', '<') capitalized.
std::string title_words(const std::string& s);

}  // namespace orbit::runtime::jinja
