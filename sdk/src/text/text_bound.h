// Refusing text that cannot fit a model's positions before tokenizing it.
//
// Tokenizing costs memory in proportion to the text (tens of bytes per input byte), so a 100 MB text
// meant for a 512-position model would exhaust memory before the position check on its tokens ran. A
// token covers at most as many bytes as its longest piece (pieces spell out what they cover; byte-fallback
// pieces such as "<0x0A>" are longer than their byte), so a text longer than positions × that many bytes
// gives more tokens than the model has positions, and is refused up front.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "orbit/common/error.h"

namespace orbit::detail {

// Throws orbit::RefusedError naming `what` when `text` cannot tokenize to `positions` tokens or fewer.
// `longest_piece()` gives the most bytes a token covers (runtime::Tokenizer::longest_piece_bytes); it is
// called only for texts longer than `positions` bytes.
template <typename LongestFn>
void check_text_fits(std::string_view text, int64_t positions, LongestFn&& longest_piece, const std::string& what) {
  const auto bytes = static_cast<int64_t>(text.size());
  if (bytes <= positions) return;  // every token covers at least one byte: nothing to bound
  const int64_t longest = std::max<int64_t>(1, longest_piece());
  int64_t limit = 0;
  if (__builtin_mul_overflow(positions, longest, &limit)) return;
  ORBIT_REFUSE_UNLESS(bytes <= limit, what << ": the text is " << bytes << " bytes, more than the model's " << positions
                                           << " positions can hold (at most " << longest << " bytes per token)");
}

}  // namespace orbit::detail
