#pragma once
// Small messages between two ranks: a trivially copyable value sent whole, and received only
// at exactly its size. Blocking, one at a time (the servers' lead messages, exchanges/LeadMessages.h).
#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "runtime/Errors.h"
#include "runtime/comm/Communicator.h"

namespace pstrain::comm {

// Throws CommError unless a message of `got` bytes from `rank` (a `what`) is the `expected` size.
inline void expectBytes(std::size_t got, std::size_t expected, int rank, const char* what, const std::string& context) {
  if (got != expected) {
    throw CommError(fmt::format("{}: rank {} sent a {} of {} bytes, where one is {}", context, rank, what, got, expected));
  }
}

template <typename T>
void sendValue(Communicator& comm, const T& value, int to, const std::string& context) {
  static_assert(std::is_trivially_copyable_v<T>, "a value travels as its bytes");
  comm.send(&value, sizeof value, to, context);
}

template <typename T>
T receiveValue(Communicator& comm, int from, const std::string& context) {
  static_assert(std::is_trivially_copyable_v<T>, "a value travels as its bytes");
  T value;
  expectBytes(comm.receive(&value, sizeof value, from, context).bytes, sizeof value, from, "lead message", context);
  return value;
}

}  // namespace pstrain::comm
