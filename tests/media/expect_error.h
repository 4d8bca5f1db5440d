// expect_error<E>(f, parts): f throws E and its message holds every one of parts.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

namespace media_test {

template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace media_test
