#include "cuda_agent/util/json_lines.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace cuda_agent {
namespace {

TEST(JsonLinesTest, RoundTripAndDeadline) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  JsonLineChannel writer(-1, fds[1]);
  JsonLineChannel reader(fds[0], -1);
  ASSERT_TRUE(writer.Send({{"event", "ready"}, {"n", 3}}).ok());
  ASSERT_TRUE(writer.Send({{"event", "done"}}).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto a = reader.Receive(deadline);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)["n"], 3);
  auto b = reader.Receive(deadline);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)["event"], "done");
  auto late = reader.Receive(std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
  ::close(fds[1]);
  EXPECT_EQ(reader.Receive(deadline).status().code(), StatusCode::kUnavailable);
  ::close(fds[0]);
}

TEST(JsonLinesTest, MalformedLineIsAnError) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "not json\n", 9), 9);
  JsonLineChannel reader(fds[0], -1);
  auto m = reader.Receive(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(m.status().code(), StatusCode::kInternal);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace cuda_agent
