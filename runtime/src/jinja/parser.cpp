// Recursive-descent parser for the chat-template subset, with @huggingface/jinja's precedence:
//   ternary < or < and < not < comparison (== != < > <= >= in, not in) < + - ~ < * / // % < ** < is
//   < | (filters) < unary sign < call, attribute, index < primary.
// Nesting is bounded (limits.h): the parser counts the blocks and sub-expressions it has open, and every
// expression node its height, so that neither parsing, nor evaluating, nor destroying the tree can
// overflow the stack.
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "orbit/common/error.h"
#include "src/jinja/ast.h"
#include "src/jinja/lexer.h"
#include "src/jinja/limits.h"

namespace orbit::runtime::jinja {

namespace {

using TK = Token::Kind;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin) : t_(std::move(tokens)), origin_(origin) {}

  Block parse_all() {
    Block out;
    while (!at(TK::kEnd)) {
      if (at(TK::kOpenStatement) && is_end_tag()) fail("'{% " + t_[pos_ + 1].text + " %}' without its opening tag");
      out.push_back(parse_node());
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(cur().line, what); }
  [[noreturn]] void fail_at(int line, const std::string& what) const {
    ORBIT_FAIL(origin_ << ": line " << line << ": " << what);
  }

  // One open block or sub-expression, for as long as it lives; refused past kMaxNesting.
  class Nested {
   public:
    explicit Nested(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) {
        p_.fail("nesting deeper than " + std::to_string(kMaxNesting) +
                " levels (if/for/set blocks, parentheses, brackets, braces, arguments, not, unary signs)");
      }
    }
    ~Nested() { --p_.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& p_;
  };

  // Sets a node's height (1 + its tallest operand's) and refuses one past kMaxNesting.
  ExprPtr sealed(ExprPtr e) const {
    int h = 0;
    for (const ExprPtr* operand : {&e->a, &e->b, &e->c, &e->d}) {
      if (*operand) h = std::max(h, (*operand)->height);
    }
    for (const ExprPtr& x : e->args) h = std::max(h, x->height);
    for (const auto& kv : e->kwargs) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > kMaxNesting) {
      fail_at(e->line, "an expression nests deeper than " + std::to_string(kMaxNesting) +
                           " levels (operators, filters, tests, attributes, indexes and calls applied in turn)");
    }
    return e;
  }
  // A whole number literal as an integer; refused past int64's range.
  Value integer_literal(const std::string& text) const {
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) fail("the integer " + text + " is out of the 64-bit range");
    return Value::integer(v);
  }
  const Token& cur() const { return t_[pos_]; }
  bool at(TK k) const { return cur().kind == k; }
  bool at(TK k, const char* text) const { return cur().kind == k && cur().text == text; }
  bool at_name(const char* name) const { return at(TK::kName, name); }
  void expect(TK k, const char* text, const char* what) {
    if (!at(k, text)) fail(std::string("expected ") + what + ", found '" + cur().text + "'");
    ++pos_;
  }
  std::string expect_name(const char* what) {
    if (!at(TK::kName)) fail(std::string("expected ") + what + ", found '" + cur().text + "'");
    return t_[pos_++].text;
  }
  bool is_end_tag() const {
    const Token& n = t_[pos_ + 1];
    return n.kind == TK::kName &&
           (n.text == "endif" || n.text == "endfor" || n.text == "endset" || n.text == "else" || n.text == "elif");
  }
  ExprPtr node(Expr::Kind kind) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = cur().line;
    return e;
  }

  StmtPtr parse_node();
  StmtPtr parse_statement();
  StmtPtr parse_if();
  StmtPtr parse_for();
  StmtPtr parse_set();
  Block parse_until(std::initializer_list<const char*> ends);

  ExprPtr expression();
  ExprPtr ternary();
  ExprPtr logical_or();
  ExprPtr logical_and();
  ExprPtr logical_not();
  ExprPtr comparison();
  ExprPtr additive();
  ExprPtr multiplicative();
  ExprPtr power();
  ExprPtr test();
  ExprPtr filter();
  ExprPtr unary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr primary();
  void call_args(Expr& e);
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = node(Expr::Kind::kBinary);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return sealed(std::move(e));
  }

  std::vector<Token> t_;
  std::size_t pos_ = 0;
  int depth_ = 0;  // blocks and sub-expressions open (Nested)
  const std::string& origin_;
};

StmtPtr Parser::parse_node() {
  auto s = std::make_unique<Stmt>();
  s->line = cur().line;
  if (at(TK::kText)) {
    s->kind = Stmt::Kind::kText;
    s->text = t_[pos_++].text;
    return s;
  }
  if (at(TK::kOpenOutput)) {
    ++pos_;
    s->kind = Stmt::Kind::kOutput;
    s->expr = expression();
    expect(TK::kCloseOutput, "}}", "'}}'");
    return s;
  }
  if (at(TK::kOpenStatement)) return parse_statement();
  fail("unexpected '" + cur().text + "'");
}

// Statements until one of `ends` (the opening "{%" of the end tag is left unconsumed).
Block Parser::parse_until(std::initializer_list<const char*> ends) {
  Block out;
  while (true) {
    if (at(TK::kEnd)) fail(std::string("the template ends inside a block (missing '{% ") + *ends.begin() + " %}')");
    if (at(TK::kOpenStatement) && t_[pos_ + 1].kind == TK::kName) {
      for (const char* e : ends) {
        if (t_[pos_ + 1].text == e) return out;
      }
    }
    out.push_back(parse_node());
  }
}

StmtPtr Parser::parse_statement() {
  ++pos_;  // {%
  const std::string word = expect_name("a statement");
  if (word == "if") return parse_if();
  if (word == "for") return parse_for();
  if (word == "set") return parse_set();
  if (word == "break" || word == "continue") {
    auto s = std::make_unique<Stmt>();
    s->kind = word == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    s->line = cur().line;
    expect(TK::kCloseStatement, "%}", "'%}'");
    return s;
  }
  fail("unsupported statement '{% " + word + " %}' (supported: if, elif, else, for, set, break, continue)");
}

StmtPtr Parser::parse_if() {
  const Nested level(*this);
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kIf;
  s->line = cur().line;
  s->expr = expression();
  expect(TK::kCloseStatement, "%}", "'%}'");
  s->body = parse_until({"endif", "elif", "else"});
  ++pos_;  // {%
  const std::string word = t_[pos_++].text;
  if (word == "elif") {
    s->otherwise.push_back(parse_if());
    return s;
  }
  if (word == "else") {
    expect(TK::kCloseStatement, "%}", "'%}'");
    s->otherwise = parse_until({"endif"});
    pos_ += 2;
  }
  expect(TK::kCloseStatement, "%}", "'%}' after endif");
  return s;
}

StmtPtr Parser::parse_for() {
  const Nested level(*this);
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kFor;
  s->line = cur().line;
  s->targets.push_back(expect_name("a loop variable"));
  while (at(TK::kPunct, ",")) {
    ++pos_;
    s->targets.push_back(expect_name("a loop variable"));
  }
  if (!at_name("in")) fail("expected 'in' in a for loop");
  ++pos_;
  ExprPtr iterable = expression();
  if (iterable->kind == Expr::Kind::kTernary && !iterable->c) {  // for x in items if cond
    s->cond = std::move(iterable->a);
    iterable = std::move(iterable->b);
  }
  s->expr = std::move(iterable);
  expect(TK::kCloseStatement, "%}", "'%}'");
  s->body = parse_until({"endfor", "else"});
  ++pos_;
  if (t_[pos_++].text == "else") {
    expect(TK::kCloseStatement, "%}", "'%}'");
    s->otherwise = parse_until({"endfor"});
    pos_ += 2;
  }
  expect(TK::kCloseStatement, "%}", "'%}' after endfor");
  return s;
}

StmtPtr Parser::parse_set() {
  const Nested level(*this);
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kSet;
  s->line = cur().line;
  s->targets.push_back(expect_name("a variable name"));
  if (at(TK::kPunct, ".")) {
    ++pos_;
    s->targets.push_back(expect_name("an attribute name"));
  } else if (at(TK::kPunct, ",")) {
    fail("unsupported: 'set' with several targets");
  }
  if (at(TK::kCloseStatement)) {  // {% set x %}...{% endset %}
    ++pos_;
    s->body = parse_until({"endset"});
    pos_ += 2;
    expect(TK::kCloseStatement, "%}", "'%}' after endset");
    return s;
  }
  expect(TK::kPunct, "=", "'=' in set");
  s->expr = expression();
  expect(TK::kCloseStatement, "%}", "'%}'");
  return s;
}

ExprPtr Parser::expression() { return ternary(); }

ExprPtr Parser::ternary() {
  const Nested level(*this);
  ExprPtr value = logical_or();
  if (!at_name("if")) return value;
  ++pos_;
  auto e = node(Expr::Kind::kTernary);
  e->a = logical_or();  // condition
  e->b = std::move(value);
  if (at_name("else")) {
    ++pos_;
    e->c = ternary();
  }
  return sealed(std::move(e));
}

ExprPtr Parser::logical_or() {
  ExprPtr left = logical_and();
  while (at_name("or")) {
    ++pos_;
    left = binary("or", std::move(left), logical_and());
  }
  return left;
}

ExprPtr Parser::logical_and() {
  ExprPtr left = logical_not();
  while (at_name("and")) {
    ++pos_;
    left = binary("and", std::move(left), logical_not());
  }
  return left;
}

ExprPtr Parser::logical_not() {
  if (!at_name("not")) return comparison();
  const Nested level(*this);
  auto e = node(Expr::Kind::kNot);
  ++pos_;
  e->a = logical_not();
  return sealed(std::move(e));
}

ExprPtr Parser::comparison() {
  ExprPtr left = additive();
  while (true) {
    std::string op;
    if (at_name("not") && t_[pos_ + 1].kind == TK::kName && t_[pos_ + 1].text == "in") {
      op = "not in";
      pos_ += 2;
    } else if (at_name("in")) {
      op = "in";
      ++pos_;
    } else if (at(TK::kOperator) && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
      op = t_[pos_++].text;
    } else {
      return left;
    }
    left = binary(op, std::move(left), additive());
  }
}

ExprPtr Parser::additive() {
  ExprPtr left = multiplicative();
  while (at(TK::kOperator) && (cur().text == "+" || cur().text == "-" || cur().text == "~")) {
    const std::string op = t_[pos_++].text;
    left = binary(op, std::move(left), multiplicative());
  }
  return left;
}

ExprPtr Parser::multiplicative() {
  ExprPtr left = power();
  while (at(TK::kOperator) && (cur().text == "*" || cur().text == "/" || cur().text == "//" || cur().text == "%")) {
    const std::string op = t_[pos_++].text;
    left = binary(op, std::move(left), power());
  }
  return left;
}

ExprPtr Parser::power() {
  ExprPtr left = test();
  while (at(TK::kOperator, "**")) {
    ++pos_;
    left = binary("**", std::move(left), test());
  }
  return left;
}

ExprPtr Parser::test() {
  ExprPtr operand = filter();
  while (at_name("is")) {
    ++pos_;
    auto e = node(Expr::Kind::kTest);
    if (at_name("not")) {
      e->negated = true;
      ++pos_;
    }
    e->name = expect_name("a test name after 'is'");
    e->a = std::move(operand);
    operand = sealed(std::move(e));
  }
  return operand;
}

ExprPtr Parser::filter() {
  ExprPtr operand = unary();
  while (at(TK::kPunct, "|")) {
    ++pos_;
    auto e = node(Expr::Kind::kFilter);
    e->name = expect_name("a filter name after '|'");
    e->a = std::move(operand);
    if (at(TK::kPunct, "(")) call_args(*e);
    operand = sealed(std::move(e));
  }
  return operand;
}

ExprPtr Parser::unary() {
  if (at(TK::kOperator, "neg") || at(TK::kOperator, "pos") || at(TK::kOperator, "-") || at(TK::kOperator, "+")) {
    const Nested level(*this);
    const bool neg = cur().text == "neg" || cur().text == "-";
    auto e = node(Expr::Kind::kNegate);
    ++pos_;
    e->a = unary();
    if (!neg) return std::move(e->a);
    return sealed(std::move(e));
  }
  return postfix(primary());
}

// (args, name=value ...) after '(' .
void Parser::call_args(Expr& e) {
  expect(TK::kPunct, "(", "'('");
  while (!at(TK::kPunct, ")")) {
    if (at(TK::kName) && t_[pos_ + 1].kind == TK::kPunct && t_[pos_ + 1].text == "=") {
      std::string key = t_[pos_].text;
      pos_ += 2;
      e.kwargs.emplace_back(std::move(key), expression());
    } else {
      if (!e.kwargs.empty()) fail("a positional argument after a keyword argument");
      e.args.push_back(expression());
    }
    if (!at(TK::kPunct, ",")) break;
    ++pos_;
  }
  expect(TK::kPunct, ")", "')'");
}

ExprPtr Parser::postfix(ExprPtr e) {
  while (true) {
    if (at(TK::kPunct, ".")) {
      ++pos_;
      auto a = node(Expr::Kind::kAttr);
      if (at(TK::kNumber)) {
        a->kind = Expr::Kind::kIndex;
        a->b = node(Expr::Kind::kLiteral);
        a->b->value = integer_literal(t_[pos_++].text);
      } else {
        a->name = expect_name("an attribute name after '.'");
      }
      a->a = std::move(e);
      e = sealed(std::move(a));
    } else if (at(TK::kPunct, "[")) {
      ++pos_;
      auto ix = node(Expr::Kind::kIndex);
      ExprPtr parts[3];
      int n = 0;
      bool slice = false;
      while (!at(TK::kPunct, "]")) {
        if (at(TK::kPunct, ":")) {
          slice = true;
          if (++n > 2) fail("a slice has at most three parts");
          ++pos_;
          continue;
        }
        parts[n] = expression();
      }
      ++pos_;
      if (slice) {
        ix->kind = Expr::Kind::kSlice;
        ix->b = std::move(parts[0]);
        ix->c = std::move(parts[1]);
        ix->d = std::move(parts[2]);
      } else {
        if (!parts[0]) fail("empty index '[]'");
        ix->b = std::move(parts[0]);
      }
      ix->a = std::move(e);
      e = sealed(std::move(ix));
    } else if (at(TK::kPunct, "(")) {
      auto c = node(Expr::Kind::kCall);
      call_args(*c);
      c->a = std::move(e);
      e = sealed(std::move(c));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::primary() {
  const Token tok = cur();
  if (tok.kind == TK::kNumber) {
    ++pos_;
    auto e = node(Expr::Kind::kLiteral);
    e->value = tok.text.find('.') != std::string::npos ? Value::floating(std::strtod(tok.text.c_str(), nullptr))
                                                       : integer_literal(tok.text);
    return e;
  }
  if (tok.kind == TK::kString) {
    std::string s;
    while (at(TK::kString)) s += t_[pos_++].text;  // adjacent literals concatenate
    auto e = node(Expr::Kind::kLiteral);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (tok.kind == TK::kName) {
    ++pos_;
    auto e = node(Expr::Kind::kLiteral);
    if (tok.text == "true" || tok.text == "True")
      e->value = Value::boolean(true);
    else if (tok.text == "false" || tok.text == "False")
      e->value = Value::boolean(false);
    else if (tok.text == "none" || tok.text == "None")
      e->value = Value::none();
    else {
      e->kind = Expr::Kind::kName;
      e->name = tok.text;
    }
    return e;
  }
  if (tok.kind == TK::kPunct && tok.text == "(") {
    ++pos_;
    ExprPtr inner = expression();
    if (at(TK::kPunct, ",")) {  // a tuple: evaluated as a list
      auto list = node(Expr::Kind::kList);
      list->args.push_back(std::move(inner));
      while (at(TK::kPunct, ",")) {
        ++pos_;
        if (at(TK::kPunct, ")")) break;
        list->args.push_back(expression());
      }
      inner = sealed(std::move(list));
    }
    expect(TK::kPunct, ")", "')'");
    return inner;
  }
  if (tok.kind == TK::kPunct && tok.text == "[") {
    ++pos_;
    auto e = node(Expr::Kind::kList);
    while (!at(TK::kPunct, "]")) {
      e->args.push_back(expression());
      if (!at(TK::kPunct, ",")) break;
      ++pos_;
    }
    expect(TK::kPunct, "]", "']'");
    return sealed(std::move(e));
  }
  if (tok.kind == TK::kPunct && tok.text == "{") {
    ++pos_;
    auto e = node(Expr::Kind::kDict);
    while (!at(TK::kPunct, "}")) {
      e->args.push_back(expression());
      expect(TK::kPunct, ":", "':' in a dict literal");
      e->args.push_back(expression());
      if (!at(TK::kPunct, ",")) break;
      ++pos_;
    }
    expect(TK::kPunct, "}", "'}'");
    return sealed(std::move(e));
  }
  fail("unexpected '" + tok.text + "' in an expression");
}

}  // namespace

Block parse(const std::string& source, const std::string& origin) {
  return Parser(tokenize(source, origin), origin).parse_all();
}

}  // namespace orbit::runtime::jinja
