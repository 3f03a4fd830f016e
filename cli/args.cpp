#include "args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <sys/stat.h>
#include <unistd.h>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"
#include "orbit/common/utf8.h"

namespace orbit::cli {

namespace {

// Whether `text` starts with white space, which strtoll and strtod skip: " 5" was taken and "5 " refused.
bool leading_space(const std::string& text) {
  return !text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0;
}

// Whether `text` is a hexadecimal number ("0x10", "-0X1p3"), which strtod reads too: "--temperature 0x10" was 16.
bool hexadecimal(const std::string& text) {
  const std::size_t first = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return text.size() > first + 1 && text[first] == '0' && (text[first + 1] == 'x' || text[first + 1] == 'X');
}

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty() || leading_space(text)) return false;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = value;
  return true;
}

// Whether `text` is written as a decimal integer (an optional '-', then digits), in range or not.
bool integer_text(const std::string& text) {
  const std::size_t first = !text.empty() && text[0] == '-' ? 1 : 0;
  return text.size() > first && text.find_first_not_of("0123456789", first) == std::string::npos;
}

std::string known_names(const ArgSpec& spec) {
  std::string out;
  for (const auto& name : spec.options) out += (out.empty() ? "" : ", ") + name + " VALUE";
  for (const auto& name : spec.flags) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Arguments that name a file or directory, whatever the command: empty, the path's own error said only ": no
// such file or directory". (--store and --remote say what leaving them out does, where they are read.)
bool names_a_path(const std::string& arg) {
  static const char* const kPaths[] = {"--model", "--tokenizer", "--trace", "--chat-template", "--api-key-file"};
  for (const char* p : kPaths) {
    if (arg == p) return true;
  }
  return false;
}

// Arguments that carry text to tokenize, whatever the command. The help says UTF-8: a value that is not was
// refused by a tokenizer.json naming its file, and split into byte tokens by a llama2.c tokenizer.
bool names_text(const std::string& arg) {
  static const char* const kTexts[] = {"--text", "--prompt", "--chunk-text", "--context-text", "--query-text"};
  for (const char* t : kTexts) {
    if (arg == t) return true;
  }
  return false;
}

}  // namespace

std::string help_text(const std::string& command, const ArgSpec& spec) {
  std::string out = spec.usage.empty() ? "usage: " + command + " [arguments]\n" : spec.usage;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "accepted arguments: " + known_names(spec) + ", --help\n";
  return out;
}

Args::Args(std::string command, const ArgSpec& spec, int argc, char** argv, int first) : command_(std::move(command)) {
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (spec.options.count(arg)) {
      ++i;  // a value, even one that reads "--help" (e.g. --text --help)
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(help_text(command_, spec).c_str(), stdout);
      std::exit(0);
    }
  }
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (spec.flags.count(arg)) {
      ORBIT_CHECK(flags_.insert(arg).second, command_ << ": argument '" << arg << "' given twice");
      continue;
    }
    ORBIT_CHECK(spec.options.count(arg),
                command_ << ": unknown argument '" << arg << "' (known: " << known_names(spec) << ")");
    ORBIT_CHECK(i + 1 < argc, command_ << ": argument '" << arg << "' needs a value");
    // A value that is one of this command's own argument names is a value left out (`--store --no-anticipate`
    // made a store directory named "--no-anticipate" and left anticipation on); "--help" still passes as text.
    const std::string next = argv[i + 1];
    ORBIT_CHECK(!spec.options.count(next) && !spec.flags.count(next),
                command_ << ": argument '" << arg << "' needs a value (the next argument, '" << next << "', is one of "
                         << command_ << "'s arguments)");
    ORBIT_CHECK(!values_.count(arg), command_ << ": argument '" << arg << "' given twice");
    ORBIT_CHECK(!next.empty() || !names_a_path(arg), command_ << ": argument '" << arg << "' is empty (give a path)");
    ORBIT_CHECK(!names_text(arg) || is_valid_utf8(next),
                command_ << ": argument '" << arg << "' is not valid UTF-8 (text arguments are UTF-8)");
    values_[arg] = argv[++i];
  }
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::required(const std::string& name) const {
  auto it = values_.find(name);
  ORBIT_CHECK(it != values_.end(), command_ << ": missing required argument '" << name << "'");
  return it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto value = get(name);
  if (!value) return fallback;
  int64_t out = 0;
  if (parse_int(*value, &out)) return out;
  ORBIT_CHECK(!integer_text(*value),
              command_ << ": argument '" << name << "' must be an integer in [-2^63, 2^63), got '" << *value << "'");
  ORBIT_FAIL(command_ << ": argument '" << name << "' must be an integer, got '" << *value << "'");
}

uint64_t Args::get_seed(const std::string& name, uint64_t fallback) const {
  auto value = get(name);
  if (!value) return fallback;
  const std::string& text = *value;
  errno = 0;
  char* end = nullptr;
  const unsigned long long seed = integer_text(text) && text[0] != '-' ? std::strtoull(text.c_str(), &end, 10) : 0;
  ORBIT_CHECK(end == text.c_str() + text.size() && errno == 0,
              command_ << ": argument '" << name << "' must be an integer in [0, 2^64), got '" << text << "'");
  return static_cast<uint64_t>(seed);
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min_value) const {
  const int64_t out = get_int(name, fallback);
  ORBIT_CHECK(out >= min_value, command_ << ": argument '" << name << "' must be >= " << min_value << ", got " << out);
  return out;
}

double Args::get_double(const std::string& name, double fallback) const {
  auto value = get(name);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  const double out = std::strtod(value->c_str(), &end);
  ORBIT_CHECK(
      !value->empty() && !leading_space(*value) && !hexadecimal(*value) && end == value->c_str() + value->size(),
      command_ << ": argument '" << name << "' must be a number, got '" << *value << "'");
  // ERANGE: a number past a double's range (1e999) is refused as one; one too small for it (1e-320, read
  // as a subnormal or 0) is the number it rounds to, which the option's own range check then judges.
  ORBIT_CHECK(errno != ERANGE || std::fabs(out) < 1.0,
              command_ << ": argument '" << name << "' is out of range (past a double's), got '" << *value << "'");
  return out;
}

namespace {

// In a sticky directory (/tmp) only the file's owner, the directory's or root may replace a file: the rename
// into place at the end of the run would fail with EPERM after all its work, so another user's file is refused now.
void check_replaceable_in_sticky_dir(const std::string& command, const std::string& name, const std::string& path,
                                     const std::string& dir) {
  struct stat d {};
  struct stat f {};
  if (::stat(dir.c_str(), &d) != 0 || (d.st_mode & S_ISVTX) == 0) return;
  if (::lstat(path.c_str(), &f) != 0) return;  // a new file: nothing to replace
  const uid_t me = ::geteuid();
  ORBIT_CHECK(me == 0 || f.st_uid == me || d.st_uid == me,
              command << ": argument '" << name << "': cannot replace " << path << ": it belongs to another user (uid "
                      << f.st_uid << ") in the sticky directory " << dir
                      << ", where only its owner may replace it; give another path");
}

}  // namespace

void check_output_argument(const std::string& command, const std::string& name, const std::string& path,
                           const std::string& what) {
  ORBIT_CHECK(!path.empty(),
              command << ": argument '" << name << "' is empty (give the path to write " << what << " to)");
  // "--json --" wrote a file named "--": a value that reads as an option is one left out by mistake.
  ORBIT_CHECK(path.rfind("--", 0) != 0, command << ": argument '" << name << "' is '" << path
                                                << "', which reads as an option (give ./" << path
                                                << " for a file of that name)");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    const std::filesystem::file_status status = std::filesystem::status(parent, error);
    ORBIT_CHECK(std::filesystem::exists(status), command << ": argument '" << name << "': the directory "
                                                         << parent.string() << " does not exist (" << what
                                                         << " is written in it)");
    ORBIT_CHECK(std::filesystem::is_directory(status),
                command << ": argument '" << name << "': " << parent.string() << " is not a directory");
  }
  check_output_or_stream(path, what + " (" + name + ")");  // names it as the write's own errors do
  // The file is written beside itself and renamed into place (write_file_atomically), after a run that may take
  // minutes: a directory this process cannot write in is refused now, not once the run is over.
  if (!is_stream_target(path)) {
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    ORBIT_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, command << ": argument '" << name << "': cannot write " << what
                                                                 << " in " << dir << ": " << std::strerror(errno));
    check_replaceable_in_sticky_dir(command, name, path, dir);
  }
}

void check_output_not_input(const std::string& command, const std::string& name, const std::string& path,
                            const std::vector<InputArgument>& inputs) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::exists(path, error)) return;  // a new file replaces nothing
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  for (const InputArgument& input : inputs) {
    if (input.path.empty() || !fs::exists(input.path, error)) continue;
    ORBIT_CHECK(!fs::equivalent(path, input.path, error),
                command << ": argument '" << name << "' (" << path << ") is the file given as " << input.name
                        << ": writing it would replace this run's input; give another path");
    ORBIT_CHECK(!(fs::is_directory(input.path, error) && fs::equivalent(parent, input.path, error)),
                command << ": argument '" << name << "' (" << path << ") is a file inside the directory given as "
                        << input.name << " (" << input.path
                        << "): writing it would replace part of this run's input; give another path");
  }
}

std::vector<InputArgument> model_inputs(const std::string& model, std::vector<InputArgument> others) {
  namespace fs = std::filesystem;
  others.push_back({"--model", model});
  std::error_code error;
  if (!fs::is_regular_file(model, error)) return others;
  const fs::path dir = fs::path(model).parent_path().empty() ? fs::path(".") : fs::path(model).parent_path();
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string file = entry.path().filename().string();
    const bool tokenizer = file == "tokenizer.bin" || (file.rfind("tok", 0) == 0 && file.size() > 7 &&
                                                       file.compare(file.size() - 4, 4, ".bin") == 0);
    if (tokenizer) others.push_back({"--model (the tokenizer beside it)", entry.path().string()});
  }
  return others;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(text)) {
    int64_t value = 0;
    if (!parse_int(item, &value)) {
      ORBIT_FAIL(what << ": item " << out.size() << " ('" << item << "') "
                      << (integer_text(item) ? "is out of range (past a 64-bit integer)"
                                             : "is not an integer (expected e.g. 1,5,9)"));
    }
    out.push_back(value);
  }
  return out;
}

}  // namespace orbit::cli
