// JSON text read as it grows (json_prefix.h). The cases follow nlohmann's lexer (scan_string, scan_number,
// scan_literal, scan) and parser (sax_parse_internal) state by state.
#include "text/json_prefix.h"

#include "text/json_spans.h"

namespace orbit::json_spans {

namespace {

bool is_hex(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

int hex_digit(unsigned char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

}  // namespace

StringLexer::Step StringLexer::step(unsigned char c) {
  switch (at_) {
    case At::kChar:
      if (c == '"') return Step::kClosed;
      if (c == '\\') {
        at_ = At::kEscape;
        return Step::kInside;
      }
      if (c < 0x20) return Step::kBad;
      if (c < 0x80) return Step::kWhole;
      // The first byte sets how many follow and the range of the next one (RFC 3629's table).
      utf8_left_ = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
      if (utf8_left_ == 0) return Step::kBad;
      lo_ = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
      hi_ = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
      at_ = At::kUtf8;
      return Step::kInside;
    case At::kUtf8:
      if (c < lo_ || c > hi_) return Step::kBad;
      lo_ = 0x80;
      hi_ = 0xBF;
      if (--utf8_left_ > 0) return Step::kInside;
      at_ = At::kChar;
      return Step::kWhole;
    case At::kEscape:
      if (c == 'u') {
        at_ = At::kHex;
        hex_digits_ = hex_value_ = 0;
        low_ = false;
        return Step::kInside;
      }
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') {
        return Step::kBad;
      }
      at_ = At::kChar;
      return Step::kWhole;
    case At::kHex:
      if (!is_hex(c)) return Step::kBad;
      hex_value_ = hex_value_ * 16 + hex_digit(c);
      if (++hex_digits_ < 4) return Step::kInside;
      if (low_) {
        if (hex_value_ < 0xDC00 || hex_value_ > 0xDFFF) return Step::kBad;
      } else if (hex_value_ >= 0xD800 && hex_value_ <= 0xDBFF) {
        at_ = At::kBackslash;  // a high surrogate: its low half must follow
        return Step::kInside;
      } else if (hex_value_ >= 0xDC00 && hex_value_ <= 0xDFFF) {
        return Step::kBad;
      }
      at_ = At::kChar;
      return Step::kWhole;
    case At::kBackslash:
      if (c != '\\') return Step::kBad;
      at_ = At::kU;
      return Step::kInside;
    case At::kU:
      if (c != 'u') return Step::kBad;
      at_ = At::kHex;
      hex_digits_ = hex_value_ = 0;
      low_ = true;
      return Step::kInside;
  }
  return Step::kBad;
}

void JsonPrefix::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (mode_ == Mode::kBroken || mode_ == Mode::kEnded) return;
    step(static_cast<unsigned char>(c));
  }
}

bool JsonPrefix::cut_short() const {
  if (mode_ == Mode::kBroken || mode_ == Mode::kEnded) return false;
  if (token_ == Token::kNone && expect_ == Expect::kEnd) return false;  // the value, then spaces: it parses
  const bool whole_number =
      token_ == Token::kNumber && (number_ == Number::kZero || number_ == Number::kInt ||
                                   number_ == Number::kFraction || number_ == Number::kExponentDigits);
  if (!whole_number) return true;  // the parser fails reading past the end
  // A whole number at the end: where it does not fit, the error is at its last byte; where it is the whole
  // text's value, the text parses (or the number is past double's range); else the parser wants the next
  // token past the end, unless the number is past double's range.
  return mode_ == Mode::kFits && !open_.empty() && !parse_json(number_text_).is_discarded();
}

void JsonPrefix::step(unsigned char c) {
  switch (token_) {
    case Token::kString: return string_byte(c);
    case Token::kLiteral: return literal_byte(c);
    case Token::kNumber:
      if (number_byte(c) || mode_ == Mode::kBroken) return;
      break;
    case Token::kNone: break;
  }
  token_start(c);
}

void JsonPrefix::token_start(unsigned char c) {
  if (is_space(static_cast<char>(c))) return;
  const bool value = expect_ == Expect::kValue || expect_ == Expect::kValueOrClose;
  bool fits = value;
  switch (c) {
    case '{':
    case '[':
      open_.push_back(static_cast<char>(c));
      if (!value || open_.size() > static_cast<std::size_t>(kMaxDepth)) return fail();
      expect_ = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
      return;
    case '}':
    case ']': {
      const bool empty = expect_ == (c == '}' ? Expect::kKeyOrClose : Expect::kValueOrClose);
      if (open_.empty() || open_.back() != (c == '}' ? '{' : '[') || (!empty && expect_ != Expect::kCommaOrClose)) {
        return fail();
      }
      open_.pop_back();
      return value_read();
    }
    case ':':
      if (expect_ != Expect::kColon) return fail();
      expect_ = Expect::kValue;
      return;
    case ',':
      if (expect_ != Expect::kCommaOrClose) return fail();
      expect_ = open_.back() == '{' ? Expect::kKey : Expect::kValue;
      return;
    case '"':
      token_ = Token::kString;
      string_ = StringLexer();
      key_ = expect_ == Expect::kKey || expect_ == Expect::kKeyOrClose;
      fits = value || key_;
      break;
    case 't':
    case 'f':
    case 'n':
      token_ = Token::kLiteral;
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      literal_at_ = 1;
      break;
    case '\0':  // the end of the text to nlohmann: where the value was read, what follows is not read
      if (expect_ != Expect::kEnd) return fail();
      mode_ = Mode::kEnded;
      return;
    default:
      if (c != '-' && !is_digit(c)) return fail();  // no token starts so
      token_ = Token::kNumber;
      number_ = c == '-' ? Number::kMinus : c == '0' ? Number::kZero : Number::kInt;
      number_text_.assign(1, static_cast<char>(c));
      break;
  }
  if (!fits) mode_ = Mode::kDoomed;
}

void JsonPrefix::string_byte(unsigned char c) {
  const StringLexer::Step s = string_.step(c);
  if (s == StringLexer::Step::kBad) return fail();
  if (s != StringLexer::Step::kClosed) return;
  if (key_ && mode_ == Mode::kFits) {
    token_ = Token::kNone;
    expect_ = Expect::kColon;
    return;
  }
  token_read();
}

void JsonPrefix::literal_byte(unsigned char c) {
  if (c != static_cast<unsigned char>(literal_[literal_at_])) return fail();
  if (++literal_at_ == literal_.size()) token_read();
}

bool JsonPrefix::number_byte(unsigned char c) {
  const bool digit = is_digit(c);
  const bool exponent = c == 'e' || c == 'E';
  bool more = true;  // `c` continues the number
  switch (number_) {
    case Number::kMinus:
      if (!digit) return fail(), true;
      number_ = c == '0' ? Number::kZero : Number::kInt;
      break;
    case Number::kZero:
    case Number::kInt:
      if (c == '.') {
        number_ = Number::kDot;
      } else if (exponent) {
        number_ = Number::kExponent;
      } else {
        more = digit && number_ == Number::kInt;
      }
      break;
    case Number::kDot:
      if (!digit) return fail(), true;
      number_ = Number::kFraction;
      break;
    case Number::kFraction:
      if (exponent) {
        number_ = Number::kExponent;
      } else {
        more = digit;
      }
      break;
    case Number::kExponent:
      if (!digit && c != '+' && c != '-') return fail(), true;
      number_ = digit ? Number::kExponentDigits : Number::kExponentSign;
      break;
    case Number::kExponentSign:
      if (!digit) return fail(), true;
      number_ = Number::kExponentDigits;
      break;
    case Number::kExponentDigits: more = digit; break;
  }
  if (more) {
    number_text_ += static_cast<char>(c);
    return true;
  }
  // The number ended before `c` (nlohmann's lexer puts `c` back): a value past double's range is an error.
  if (mode_ == Mode::kFits && parse_json(number_text_).is_discarded()) return fail(), true;
  token_read();
  return false;
}

void JsonPrefix::token_read() {
  token_ = Token::kNone;
  if (mode_ == Mode::kDoomed) return fail();  // read whole, it does not fit: the error is at its last byte
  value_read();
}

void JsonPrefix::value_read() {
  if (open_.empty()) {
    whole_ = true;
    expect_ = Expect::kEnd;  // nothing but spaces, or the end (a NUL byte)
  } else {
    expect_ = Expect::kCommaOrClose;
  }
}

}  // namespace orbit::json_spans
