// PCRE2 and ICU behind the small interface of text.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "src/hf/text.h"

#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "orbit/common/error.h"

namespace orbit::runtime::hf {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

namespace {

std::unique_ptr<Regex::Impl> compile(const std::string& pattern, uint32_t flags, const std::string& what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto impl = std::make_unique<Regex::Impl>();
  impl->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), flags, &error, &offset, nullptr);
  if (impl->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    ORBIT_FAIL(what << ": regex '" << pattern << "' does not compile at offset " << offset << ": "
                    << reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation only: where it is unavailable the interpreter gives the same matches.
  (void)pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE);
  return impl;
}

// Runs one match at `start`; returns false when there is none. Invalid UTF-8 in the subject throws. PCRE2
// checks the whole subject's UTF-8 on every call unless told it was checked (`checked`): a loop over one
// subject checks it on its first call only, or matching a text would cost its length per match.
bool match_at(const pcre2_code* code, pcre2_match_data* data, std::string_view text, size_t start,
              bool checked = false) {
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             checked ? PCRE2_NO_UTF_CHECK : 0, data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  ORBIT_CHECK(rc >= 0, "tokenizer: regex match failed (PCRE2 error " << rc << "; is the text valid UTF-8?)");
  return true;
}

}  // namespace

Regex::Regex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Regex::Regex(const std::string& pattern, const std::string& what)
    : impl_(compile(pattern, PCRE2_UTF | PCRE2_UCP, what)) {}
Regex Regex::literal(const std::string& literal, const std::string& what) {
  return Regex(compile(literal, PCRE2_UTF | PCRE2_LITERAL, what));  // PCRE2_UCP does not combine with LITERAL
}
Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  size_t start = 0;
  bool checked = false;  // the first match checks the subject's UTF-8; later ones start at character boundaries
  try {
    while (start <= text.size() && match_at(impl_->code, data, text, start, checked)) {
      checked = true;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      if (ov[1] > ov[0]) {
        out.emplace_back(ov[0], ov[1]);
        start = ov[1];
      } else {
        if (ov[0] >= text.size()) break;
        start = ov[0] + utf8_length(static_cast<unsigned char>(text[ov[0]]));
      }
    }
  } catch (...) {
    pcre2_match_data_free(data);
    throw;
  }
  pcre2_match_data_free(data);
  return out;
}

bool Regex::search(std::string_view text) const {
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  bool found = false;
  try {
    found = match_at(impl_->code, data, text, 0);
  } catch (...) {
    pcre2_match_data_free(data);
    throw;
  }
  pcre2_match_data_free(data);
  return found;
}

std::string normalize_unicode(std::string_view text, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* norm = nullptr;
  switch (form) {
    case NormalForm::kNFC: norm = unorm2_getNFCInstance(&status); break;
    case NormalForm::kNFD: norm = unorm2_getNFDInstance(&status); break;
    case NormalForm::kNFKC: norm = unorm2_getNFKCInstance(&status); break;
    case NormalForm::kNFKD: norm = unorm2_getNFKDInstance(&status); break;
  }
  ORBIT_CHECK(U_SUCCESS(status), "tokenizer: ICU normalizer unavailable: " << u_errorName(status));
  // UTF-8 -> UTF-16 -> normalized UTF-16 -> UTF-8; each step sized by a preflight call.
  int32_t len16 = 0;
  status = U_ZERO_ERROR;
  u_strFromUTF8(nullptr, 0, &len16, text.data(), static_cast<int32_t>(text.size()), &status);
  std::u16string in(static_cast<size_t>(len16), u'\0');
  status = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), len16, &len16, text.data(), static_cast<int32_t>(text.size()),
                &status);
  ORBIT_CHECK(U_SUCCESS(status), "tokenizer: text is not valid UTF-8 (" << u_errorName(status) << ")");
  status = U_ZERO_ERROR;
  const int32_t out_len = unorm2_normalize(norm, reinterpret_cast<const UChar*>(in.data()), len16, nullptr, 0, &status);
  std::u16string out(static_cast<size_t>(out_len), u'\0');
  status = U_ZERO_ERROR;
  unorm2_normalize(norm, reinterpret_cast<const UChar*>(in.data()), len16, reinterpret_cast<UChar*>(out.data()),
                   out_len, &status);
  ORBIT_CHECK(U_SUCCESS(status), "tokenizer: Unicode normalization failed: " << u_errorName(status));
  int32_t len8 = 0;
  status = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &len8, reinterpret_cast<const UChar*>(out.data()), out_len, &status);
  std::string result(static_cast<size_t>(len8), '\0');
  status = U_ZERO_ERROR;
  u_strToUTF8(result.data(), len8, &len8, reinterpret_cast<const UChar*>(out.data()), out_len, &status);
  ORBIT_CHECK(U_SUCCESS(status), "tokenizer: Unicode normalization failed: " << u_errorName(status));
  return result;
}

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t consumed = 0;
    const size_t n = utf8_char_at(bytes, i, &consumed);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += consumed;
    }
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

std::vector<uint32_t> utf8_decode(std::string_view text) {
  std::vector<uint32_t> cps;
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t n = std::min(utf8_length(lead), text.size() - i);
    uint32_t cp = n == 1 ? lead : lead & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    cps.push_back(cp);
    i += n;
  }
  return cps;
}

}  // namespace orbit::runtime::hf
