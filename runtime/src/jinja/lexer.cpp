// The chat-template lexer: the same preprocessing and token rules as @huggingface/jinja's lexer.ts, so
// that whitespace (the part of a rendering most easily off by one byte) comes out identical.
#include "src/jinja/lexer.h"

#include <cctype>
#include <cstdint>
#include <string>

#include "orbit/common/error.h"
#include "orbit/common/utf8.h"

namespace orbit::runtime::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The value of `n` hex digits at text[at], or -1 when they are not all hex digits (or fewer are left).
int64_t hex_value(const std::string& text, std::size_t at, std::size_t n) {
  if (at + n > text.size()) return -1;
  int64_t v = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const char c = text[at + k];
    const int d = is_digit(c)              ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// HF's renderer options: drop one trailing newline; lstrip_blocks removes spaces and tabs from a line's
// start up to "{%", "{#" (and "{-"); trim_blocks removes the newline right after "%}", "#}" (and "-}").
std::string preprocess(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  std::string lstripped;
  lstripped.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const bool line_start = i == 0 || s[i - 1] == '\n';
    if (line_start) {
      std::size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        i = j;
      } else {
        lstripped.append(s, i, j - i);
        i = j;
        if (i >= s.size()) break;
      }
    }
    lstripped += s[i++];
  }
  std::string out;
  out.reserve(lstripped.size());
  for (std::size_t i = 0; i < lstripped.size(); ++i) {
    out += lstripped[i];
    const char c = lstripped[i];
    if ((c == '#' || c == '%' || c == '-') && i + 2 < lstripped.size() && lstripped[i + 1] == '}' &&
        lstripped[i + 2] == '\n') {
      out += '}';
      i += 2;  // skip '}' (appended) and the newline
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const std::string& origin) : src_(std::move(src)), origin_(origin) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      if (after_tag() && lex_text()) continue;
      if (starts("{#")) {
        lex_comment();
        continue;
      }
      if (starts("{%-") || starts("{{-")) {
        strip_trailing_text();
        push(src_[pos_ + 1] == '%' ? Token::Kind::kOpenStatement : Token::Kind::kOpenOutput, src_.substr(pos_, 2));
        pos_ += 3;
        continue;
      }
      while (pos_ < src_.size() && is_space(src_[pos_])) advance(1);
      if (pos_ >= src_.size()) break;
      if (starts("-%}") || starts("-}}")) {
        push(src_[pos_ + 1] == '%' ? Token::Kind::kCloseStatement : Token::Kind::kCloseOutput,
             src_.substr(pos_ + 1, 2));
        pos_ += 3;
        skip_leading_space();
        continue;
      }
      lex_code();
    }
    tokens_.push_back(Token{Token::Kind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { ORBIT_FAIL(origin_ << ": line " << line_ << ": " << what); }
  bool starts(const char* p) const { return src_.compare(pos_, std::char_traits<char>::length(p), p) == 0; }
  void advance(std::size_t n) {
    for (std::size_t k = 0; k < n && pos_ < src_.size(); ++k) line_ += src_[pos_++] == '\n' ? 1 : 0;
  }
  void push(Token::Kind kind, std::string text) { tokens_.push_back(Token{kind, std::move(text), line_}); }
  bool after_tag() const {
    if (tokens_.empty()) return true;
    const Token::Kind k = tokens_.back().kind;
    return k == Token::Kind::kCloseStatement || k == Token::Kind::kCloseOutput || comment_last_;
  }
  bool lex_text() {
    comment_last_ = false;
    const std::size_t begin = pos_;
    const int line = line_;
    while (pos_ < src_.size() && !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
                                   (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#'))) {
      advance(1);
    }
    if (pos_ == begin) return false;
    tokens_.push_back(Token{Token::Kind::kText, src_.substr(begin, pos_ - begin), line});
    return true;
  }
  void strip_trailing_text() {
    if (tokens_.empty() || tokens_.back().kind != Token::Kind::kText) return;
    std::string& t = tokens_.back().text;
    while (!t.empty() && is_space(t.back())) t.pop_back();
    if (t.empty()) tokens_.pop_back();
  }
  void skip_leading_space() {
    while (pos_ < src_.size() && is_space(src_[pos_])) advance(1);
  }
  void lex_comment() {
    advance(2);
    const bool strip_before = pos_ < src_.size() && src_[pos_] == '-';
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("a comment '{#' has no closing '#}'");
    const bool strip_after = end > pos_ && src_[end - 1] == '-';
    if (strip_before) strip_trailing_text();
    advance(end + 2 - pos_);
    if (strip_after) skip_leading_space();
    comment_last_ = true;
  }
  void lex_code();
  void lex_string(char quote);
  void lex_number(std::string sign);

  std::string src_;
  const std::string& origin_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool comment_last_ = false;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

void Lexer::lex_string(char quote) {
  advance(1);
  std::string out;
  while (true) {
    if (pos_ >= src_.size()) fail("a string literal is not closed");
    const char c = src_[pos_];
    if (c == quote) break;
    if (c != '\\') {
      out += c;
      advance(1);
      continue;
    }
    if (pos_ + 1 >= src_.size()) fail("a string literal ends in '\\'");
    const char e = src_[pos_ + 1];
    advance(2);
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'x':
      case 'u':
      case 'U': {
        // A code point in hex, as Python's string literals (and so Hugging Face's templates) write it: \xHH,
        // \uHHHH, \UHHHHHHHH. Surrogates and values past U+10FFFF are no character.
        const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const int64_t cp = hex_value(src_, pos_, digits);
        if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          fail(std::string("escape '\\") + e + "' in a string literal needs " + std::to_string(digits) +
               " hex digits of a character (not a surrogate, at most 10FFFF)");
        }
        append_utf8(out, static_cast<uint32_t>(cp));
        advance(digits);
        break;
      }
      default: fail(std::string("unsupported escape '\\") + e + "' in a string literal");
    }
  }
  advance(1);
  push(Token::Kind::kString, std::move(out));
}

void Lexer::lex_number(std::string sign) {
  std::string num = std::move(sign);
  while (pos_ < src_.size() && is_digit(src_[pos_])) num += src_[pos_++];
  const bool after_dot = !tokens_.empty() && tokens_.back().kind == Token::Kind::kPunct && tokens_.back().text == ".";
  if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
    num += src_[pos_++];
    while (pos_ < src_.size() && is_digit(src_[pos_])) num += src_[pos_++];
  }
  push(Token::Kind::kNumber, num);
}

void Lexer::lex_code() {
  const char c = src_[pos_];
  if (c == '-' || c == '+') {
    if (tokens_.empty() || tokens_.back().kind == Token::Kind::kText) fail(std::string("unexpected '") + c + "'");
    const Token& last = tokens_.back();
    const bool binary = last.kind == Token::Kind::kName || last.kind == Token::Kind::kNumber ||
                        last.kind == Token::Kind::kString ||
                        (last.kind == Token::Kind::kPunct && (last.text == ")" || last.text == "]"));
    if (!binary) {
      advance(1);
      if (pos_ < src_.size() && is_digit(src_[pos_])) return lex_number(std::string(1, c));
      push(Token::Kind::kOperator, c == '-' ? "neg" : "pos");
      return;
    }
  }
  static const char* const kTable[] = {"{%", "%}", "{{", "}}", "(", ")", "{", "}", "[",  "]", ",",  ".", ":", "|", "<=",
                                       ">=", "==", "!=", "<",  ">", "+", "-", "~", "**", "*", "//", "/", "%", "="};
  for (const char* seq : kTable) {
    const std::string s(seq);
    if (s == "}}" && curly_depth_ > 0) continue;
    if (!starts(seq)) continue;
    Token::Kind kind = Token::Kind::kOperator;
    if (s == "{%")
      kind = Token::Kind::kOpenStatement;
    else if (s == "%}")
      kind = Token::Kind::kCloseStatement;
    else if (s == "{{")
      kind = Token::Kind::kOpenOutput;
    else if (s == "}}")
      kind = Token::Kind::kCloseOutput;
    else if (s.size() == 1 && std::string("()[]{},.:|=").find(s) != std::string::npos)
      kind = Token::Kind::kPunct;
    if (kind == Token::Kind::kOpenOutput) curly_depth_ = 0;
    if (s == "{") ++curly_depth_;
    if (s == "}") --curly_depth_;
    push(kind, s);
    advance(s.size());
    return;
  }
  if (c == '\'' || c == '"') return lex_string(c);
  if (is_digit(c)) return lex_number("");
  if (is_word(c)) {
    const std::size_t begin = pos_;
    while (pos_ < src_.size() && is_word(src_[pos_])) ++pos_;
    push(Token::Kind::kName, src_.substr(begin, pos_ - begin));
    return;
  }
  fail(std::string("unexpected character '") + c + "'");
}

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& origin) {
  return Lexer(preprocess(source), origin).run();
}

}  // namespace orbit::runtime::jinja
