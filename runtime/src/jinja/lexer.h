// Tokens of a chat template, after HF's preprocessing (trim_blocks, lstrip_blocks, one trailing newline
// dropped) and whitespace control ({%- -%} {{- -}} {#- -#}). Mirrors @huggingface/jinja's lexer.
#pragma once

#include <string>
#include <vector>

namespace orbit::runtime::jinja {

struct Token {
  enum class Kind {
    kText,
    kNumber,
    kString,
    kName,
    kOpenStatement,   // {%
    kCloseStatement,  // %}
    kOpenOutput,      // {{
    kCloseOutput,     // }}
    kPunct,           // ( ) [ ] { } , . : | =
    kOperator,        // + - ~ * / // % ** == != < > <= >=
    kEnd
  };
  Kind kind = Kind::kEnd;
  std::string text;
  int line = 0;
};

// Throws orbit::Error naming `origin` and the line on a malformed template.
std::vector<Token> tokenize(const std::string& source, const std::string& origin);

}  // namespace orbit::runtime::jinja
