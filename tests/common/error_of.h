// error_of<E>(fn): runs fn, expecting it to throw exactly error type E; returns the message, or ""
// after failing the calling test (another exception type, or no exception at all).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>

namespace mmrt::testing {

template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong error type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace mmrt::testing
