#include "cuda_agent/util/status.h"

#include <gtest/gtest.h>

#include "cuda_agent/util/hash.h"

namespace cuda_agent {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

Status Chain(int x, int* out) {
  CA_ASSIGN_OR_RETURN(int h, Half(x));
  CA_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = InvalidArgument("bad key 'x'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: bad key 'x'");
  EXPECT_EQ(s.WithContext("a.yaml:3").message(), "a.yaml:3: bad key 'x'");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  int out = 0;
  EXPECT_TRUE(Chain(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Chain(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd value 3");
}

TEST(HashTest, Sha256MatchesKnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_NE(Hasher().Add("ab").Add("c").HexDigest(), Hasher().Add("a").Add("bc").HexDigest());
}

}  // namespace
}  // namespace cuda_agent
