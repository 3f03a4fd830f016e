// StopFlag and StreamRoom (wake.h), and orbit._orbit._StreamRoom: the room a Window.stream's decode waits for
// (orbit/_stream.py, orbit/aio.py), woken at once by a cancel or a close.
#include "wake.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>

#include "bindings.h"
#include "cancel.h"
#include "convert.h"
#include "py_window.h"

namespace orbit_py {

void StopFlag::set() {
  flag_.store(true, std::memory_order_release);
  std::vector<std::weak_ptr<Waiter>> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters = waiters_;  // woken outside the lock: a waiter may watch another flag meanwhile
  }
  for (const auto& w : waiters) {
    if (auto alive = w.lock()) alive->wake();
  }
}

void StopFlag::watch(const std::shared_ptr<Waiter>& w) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters_.erase(
        std::remove_if(waiters_.begin(), waiters_.end(), [](const std::weak_ptr<Waiter>& x) { return x.expired(); }),
        waiters_.end());
    waiters_.push_back(w);
  }
  // A set() that copied the list before `w` was added set the flag before that copy, so it is seen here.
  if (is_set()) w->wake();
}

bool StreamRoom::take(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [this] { return stopped_ || free_ > 0; };
  constexpr double kForever = 1e9;  // seconds: longer waits are waits without a deadline
  if (timeout_s >= kForever) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0.0), ready)) {
    return false;
  }
  if (!stopped_) --free_;
  return true;
}

void StreamRoom::give(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_ += n;
  }
  cv_.notify_all();
}

void StreamRoom::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

bool StreamRoom::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

void StreamRoom::hold_reader() {
  const std::thread::id me = std::this_thread::get_id();
  ORBIT_CHECK(!readers_->reads(me),
              "Window.stream: a stream on this window is read on this thread already (this is its loop's body, or "
              "the event loop that reads its AsyncWindow.stream): its decode holds the window until it ends; "
              "start the new stream after the loop (or break out of it first)");
  const std::lock_guard<std::mutex> lock(mu_);
  ORBIT_CHECK(!holding_, "_StreamRoom.hold_reader: called twice");
  readers_->add(me);
  reader_ = me;
  holding_ = true;
}

void StreamRoom::release_reader() {
  const std::lock_guard<std::mutex> lock(mu_);
  if (!holding_) return;
  readers_->remove(reader_);
  holding_ = false;
}

namespace {

// A room stopped by `token` (or an ancestor) being cancelled, by `window` closing and by its engine closing. Its
// arguments are read as the public API reads them (to_int, to_float: numpy numbers taken, bools refused, each
// error naming the argument).
std::shared_ptr<StreamRoom> make_room(const IntArg& ahead_arg, const py::object& token, const py::object& window) {
  const int64_t ahead = ahead_arg.get("_StreamRoom: ahead");
  if (ahead < 1) throw py::value_error("_StreamRoom: ahead = " + std::to_string(ahead) + ": must be >= 1");
  const std::shared_ptr<const CancelToken> t = to_cancel_token(token, "_StreamRoom: token");
  if (!t) throw py::type_error("_StreamRoom: token must be an orbit.CancelToken, got None");
  if (!py::isinstance<PyWindow>(window))
    throw py::type_error("_StreamRoom: window must be a Window, got " + type_name(window));
  const PyWindow& w = window.cast<const PyWindow&>();
  auto room = std::make_shared<StreamRoom>(ahead, w.stream_readers);
  for (const CancelToken* at = t.get(); at != nullptr; at = at->parent.get()) at->flag.watch(room);
  w.closing.watch(room);
  if (w.decodes) w.decodes->closing().watch(room);
  return room;
}

// take()'s timeout: a float (an int or a numpy number too) that is not NaN; <= 0 waits not at all.
double timeout_seconds(const FloatArg& arg) {
  const double t = arg.get("_StreamRoom.take: timeout_s");
  if (std::isnan(t)) throw py::value_error("_StreamRoom.take: timeout_s is nan (seconds: a number)");
  return t;
}

// give()'s count: an int >= 1 (pieces the reader took).
int64_t given_pieces(const IntArg& arg) {
  const int64_t n = arg.get("_StreamRoom.give: n");
  if (n < 1) throw py::value_error("_StreamRoom.give: n = " + std::to_string(n) + ": must be >= 1");
  return n;
}

}  // namespace

void init_wake(py::module_& m) {
  py::class_<StreamRoom, std::shared_ptr<StreamRoom>>(
      m, "_StreamRoom",
      "Internal to Window.stream and orbit.aio: the gate a stream's decode waits at for its reader.\n"
      "_StreamRoom(ahead, token, window): the decode may run `ahead` pieces ahead; cancelling `token` (or an\n"
      "ancestor), closing `window` or closing its engine stops the room: a take() waiting returns at once.")
      .def(py::init(&make_room), py::arg("ahead"), py::arg("token"), py::arg("window"),
           "A room of `ahead` pieces, stopped by token (a CancelToken), window's close and its engine's close.")
      .def(
          "take",
          [](StreamRoom& r, const FloatArg& timeout_arg) {
            const double timeout_s = timeout_seconds(timeout_arg);
            const NativeCall release;
            return r.take(timeout_s);
          },
          py::arg("timeout_s"),
          "Waits (without the GIL) for a piece's room and takes it: True; True at once, taking nothing, once\n"
          "stopped; False when timeout_s passed first (the reader took no piece meanwhile). timeout_s: seconds, a\n"
          "float, an int or a numpy number (not a bool, not NaN); <= 0 does not wait.")
      .def(
          "give", [](StreamRoom& r, const IntArg& n) { r.give(given_pieces(n)); }, py::arg("n") = 1,
          "Gives back n pieces' room (the reader took n pieces; n >= 1, ValueError naming it otherwise).")
      .def_property_readonly("stopped", &StreamRoom::stopped,
                             "True once its token was cancelled or its window or engine began closing.")
      .def("hold_reader", &StreamRoom::hold_reader,
           "Registers the calling thread (the loop's) as the stream's reader until release_reader(): the window's\n"
           "calls made on it raise OrbitError at once instead of waiting for the decode. Raises OrbitError when\n"
           "this thread reads another stream on the window already.")
      .def("release_reader", &StreamRoom::release_reader,
           "Undoes hold_reader() (call it once the loop ended and its decode returned); idempotent, from any thread.");
}

}  // namespace orbit_py
