// JSON text read as it grows, byte by byte, with the rules of the nlohmann parser that json_spans' cut_short
// and parse_json run on a whole text: a streamed tool call is read after every token (tool_call_open.h), and
// these answer for the text so far at the cost of the bytes that came, not of the text. Torch-free; no state
// beyond the objects made here; copyable.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace orbit::json_spans {

// The bytes of one JSON string after its opening quote, checked as nlohmann's lexer checks them: escapes
// (\uXXXX high surrogates followed by a low one), UTF-8 sequences (no overlong forms, no surrogates, at most
// U+10FFFF), no control characters.
class StringLexer {
 public:
  enum class Step {
    kInside,  // within a character or an escape
    kWhole,   // the byte ends a character or an escape: the string could close after it
    kClosed,  // the closing quote
    kBad,     // nlohmann's lexer stops at this byte with an error
  };
  Step step(unsigned char c);

 private:
  enum class At { kChar, kEscape, kHex, kBackslash, kU, kUtf8 };
  At at_ = At::kChar;
  int hex_digits_ = 0;  // kHex: read so far
  int hex_value_ = 0;
  bool low_ = false;      // kHex: the low half of a surrogate pair
  int utf8_left_ = 0;     // kUtf8: continuation bytes still to come
  unsigned char lo_ = 0;  // kUtf8: the range of the next one
  unsigned char hi_ = 0;
};

// Whether a growing JSON text is still the start of a document that ends past its end: cut_short(text so
// far), fed only the bytes that come. The parser reads a token, then says whether it fits; an error is where
// it stopped reading, so an unexpected token that runs to the end of the text makes a text cut short too:
//
//   the text so far       cut_short   why
//   {"a": [1, "x          true        every token fits; the string runs to the end
//   {"a": 1               true        the parser wants ',' or '}' past the end
//   {"a": 1e999           false       a whole number past double's range (error 406)
//   {"a" "b               true        a string where ':' goes: the parser fails reading past the end
//   {"a" 12               false       an unexpected whole number: the error is at its last byte
//   {"a": tx              false       an error at a byte of the text: the same in every longer text
//   {"a": 1}              false       a whole value (whole())
//   {"a": 1} "x           true        a string past the value: the parser fails reading past the end
//
// An error at a byte of the text is for good (broken()), but for those a number at the end makes: more
// digits may bring it back in range, or make it no whole number yet.
class JsonPrefix {
 public:
  // Reads `bytes`, which follow those fed before. A text that starts with a byte order mark (nlohmann skips
  // it) is read as one that does not.
  void feed(std::string_view bytes);
  // cut_short(text fed), for a text of at least one byte.
  bool cut_short() const;
  // The text fed starts with a whole value: parse_json of it is that value where only spaces follow, or a NUL
  // byte (nlohmann ends the text there), else an error.
  bool whole() const { return whole_; }
  // No text that starts with this one is cut short or parses.
  bool broken() const { return mode_ == Mode::kBroken; }

 private:
  enum class Mode {
    kFits,    // every token fits where it stands; the last may still be read
    kDoomed,  // the token being read does not fit where it stands: an error once it is read
    kBroken,
    kEnded,  // a whole value, then spaces and a NUL byte: nlohmann reads no further
  };
  enum class Expect { kValue, kValueOrClose, kKeyOrClose, kKey, kColon, kCommaOrClose, kEnd };
  enum class Token { kNone, kString, kNumber, kLiteral };
  enum class Number { kMinus, kZero, kInt, kDot, kFraction, kExponent, kExponentSign, kExponentDigits };

  void step(unsigned char c);
  void token_start(unsigned char c);
  void string_byte(unsigned char c);
  void literal_byte(unsigned char c);
  bool number_byte(unsigned char c);  // false: the number ended before `c`, which starts the next token
  void token_read();                  // the token read fits (kFits) or ends the text's chances (kDoomed)
  void value_read();
  void fail() { mode_ = Mode::kBroken; }

  Mode mode_ = Mode::kFits;
  bool whole_ = false;  // the first value was read
  Expect expect_ = Expect::kValue;
  std::vector<char> open_;  // the containers open, outermost first: '{' or '['
  Token token_ = Token::kNone;
  bool key_ = false;  // the string being read is an object's key
  StringLexer string_;
  Number number_ = Number::kMinus;
  std::string number_text_;     // the number being read, to check its range once whole
  std::string_view literal_;    // "true", "false" or "null"
  std::size_t literal_at_ = 0;  // its bytes read
};

}  // namespace orbit::json_spans
