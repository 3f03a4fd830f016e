// The order in which a run's choices go out (decode.h). The choices of a run step together: the k-th token
// of every choice comes from the run's k-th step, and a choice that ends after T tokens has ended before any
// choice's token T is drawn. So the stream is ordered by
//
//   token k of choice i        key (k, 1, i)
//   end of choice i (T tokens) key (T, 0, i)     its finish goes out before anyone's later tokens
//
// an order that is a function of the choices' tokens alone, however the request's thread happens to see
// them arrive: an item goes out only once nothing that sorts before it can still arrive (every choice not
// yet ended has had a token past it).
//
// Example, n = 2, choice 1 ending after 2 tokens, choice 0 after 3:
//   0:t0  1:t0  0:t1  1:t1  1:end  0:t2  0:end
//
// Not thread-safe: one request's thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace orbit::serve {

class ChoiceOrder {
 public:
  struct Item {
    std::size_t choice = 0;
    bool end = false;  // false: the choice's next token (the oldest arrived and not yet returned)
  };

  explicit ChoiceOrder(std::size_t choices) : choices_(choices) {}

  // Choice `choice`'s next token arrived. Throws orbit::Error after its end.
  void token(std::size_t choice);
  // Choice `choice` ended: no token of it arrives any more. Throws orbit::Error on a second end.
  void end(std::size_t choice);

  // The items that may go out now, in the stream's order; each item is returned once.
  std::vector<Item> ready();
  bool ended(std::size_t choice) const { return choices_.at(choice).ended; }
  // Every choice's end has been returned by ready().
  bool finished() const;
  // The choice not yet ended that holds the stream back (the fewest tokens arrived, the lowest index of
  // those): the one to wait on. None once every choice ended.
  std::optional<std::size_t> laggard() const;

 private:
  struct State {
    int64_t arrived = 0;  // tokens arrived
    int64_t sent = 0;     // tokens returned by ready()
    bool ended = false;
    bool end_sent = false;
  };
  std::vector<State> choices_;
};

}  // namespace orbit::serve
