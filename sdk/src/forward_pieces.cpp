// orbit::ForwardPieces (orbit/forward_pieces.h): one thread-local pointer to the innermost scope.
#include "orbit/forward_pieces.h"

#include <utility>

namespace orbit {

namespace {
thread_local ForwardPieces* innermost_pieces = nullptr;
}  // namespace

ForwardPieces::ForwardPieces(int64_t tokens, std::function<void()> between)
    : tokens_(tokens), between_(std::move(between)), outer_(innermost_pieces) {
  innermost_pieces = this;
}

ForwardPieces::~ForwardPieces() { innermost_pieces = outer_; }

ForwardPieces* ForwardPieces::current() { return innermost_pieces; }

void ForwardPieces::between() {
  ++calls_;
  if (between_) between_();
}

}  // namespace orbit
