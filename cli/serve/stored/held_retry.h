// What both stores of `orbit serve` (chat_store.h, responses_store.h) do with their held writes
// (pending_writes.h) the same way: the retry of the held answers that are due, the drain at shutdown, and the
// stderr lines of a start that adopted a journal (held_journal.h). A store passes its PendingWrites, its
// GroupCommit (whose items are pointers to the held items) and `noun`, which names one answer on stderr
// ("chat completion", "response"); what a write of an item means stays the store's (GroupCommit::Writer).
//
// Thread-safety: as PendingWrites and GroupCommit; retry_held runs under the store's retry mutex (the caller
// holds it), drain_held takes it.
#pragma once

#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "serve/stored/group_commit.h"
#include "serve/stored/held_journal.h"
#include "serve/stored/pending_writes.h"

namespace orbit::serve {

// Writes the held items due now (`all`: every one) once the store's check passes: one check (when it fails
// nothing is tried and no backoff grows), then one submit_all of them all, so that one that fails while the
// check passed backs off alone. Each written is released and logged on stderr; one that another write
// released first (a response written as the link of one continuing it in the same retry) is counted stored
// and not logged again. Under the store's retry mutex.
template <class Item>
RetryResult retry_held(PendingWrites<Item>& pending, GroupCommit<const Item*>& group, bool all, const char* noun) {
  const auto now = PendingWrites<Item>::Clock::now();
  const std::vector<typename PendingWrites<Item>::Due> due = pending.due(now, all);
  RetryResult result;
  if (due.empty()) return result;
  if (const StoreWrite checked = group.check(); !checked) {
    result.check_error = checked.error;
    return result;
  }
  std::vector<const Item*> writes;
  writes.reserve(due.size());
  for (const auto& d : due) writes.push_back(&d.item);
  const std::vector<StoreWrite> out = group.submit_all(writes);
  result.attempted = due.size();
  for (std::size_t i = 0; i < due.size(); ++i) {
    if (!out[i]) {
      pending.missed(due[i].id, now, out[i].error);
      continue;
    }
    ++result.stored;
    if (!pending.landed(due[i].id)) continue;  // landed already, carried by another write of this retry
    std::fprintf(stderr, "orbit serve: %s %s is stored now, on attempt %d\n", noun, due[i].id.c_str(),
                 due[i].attempts + 1);
  }
  return result;
}

// At shutdown: every held item tried a last time (waiting for a retry in flight: takes `turn`, the store's
// retry mutex), then each still held let go, named on stderr with why: one in `journal` stays there for the
// next start, one held in memory only is lost. Returns how many were lost.
template <class Item>
std::size_t drain_held(std::mutex& turn, PendingWrites<Item>& pending, GroupCommit<const Item*>& group,
                       const HeldJournal* journal, const char* noun) {
  std::lock_guard<std::mutex> lock(turn);
  const RetryResult last = retry_held(pending, group, true, noun);
  std::size_t lost = 0;
  for (const auto& d : pending.due(PendingWrites<Item>::Clock::now(), true)) {
    const std::string& why = last.check_error.empty() ? d.error : last.check_error;
    if (pending.drop(d.id)) {  // only a journaled one stays: there is a journal
      std::fprintf(stderr,
                   "orbit serve: %s %s is not written at shutdown (%d attempts: %s): kept in the journal %s, the "
                   "next start writes it\n",
                   noun, d.id.c_str(), d.attempts, why.c_str(), journal->path().c_str());
      continue;
    }
    std::fprintf(stderr, "orbit serve: %s %s is lost at shutdown: not written in %d attempts: %s\n", noun, d.id.c_str(),
                 d.attempts, why.c_str());
    ++lost;
  }
  return lost;
}

// At start, before the adopted records are read: why `journal` cannot take records (held answers of the
// `plural` store, "chat completions" or "responses", are then held in memory only) and each problem of the
// journals it adopted, one stderr line each.
inline void report_journal(const HeldJournal& journal, const char* plural) {
  if (!journal.error().empty()) {
    std::fprintf(stderr, "orbit serve: %s whose write fails are held in memory only: %s\n", plural,
                 journal.error().c_str());
  }
  for (const std::string& problem : journal.adopted().problems)
    std::fprintf(stderr, "orbit serve: %s\n", problem.c_str());
}

// After the start's retry of the answers `recovered` from the adopted journals: one stderr line each, stored
// or held again with why (`result`, that retry's).
template <class Item>
void report_recovered(const PendingWrites<Item>& pending, const std::vector<std::string>& recovered,
                      const RetryResult& result, const char* noun) {
  for (const std::string& id : recovered) {
    if (!pending.holds(id)) {
      std::fprintf(stderr, "orbit serve: %s %s is recovered from the journal of held answers: stored\n", noun,
                   id.c_str());
      continue;
    }
    std::fprintf(stderr,
                 "orbit serve: %s %s is recovered from the journal of held answers, and held again: its write failed "
                 "(%s)\n",
                 noun, id.c_str(),
                 result.check_error.empty() ? "the store did not take it" : result.check_error.c_str());
  }
}

}  // namespace orbit::serve
