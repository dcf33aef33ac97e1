// Philox4x32-10 (src/model/philox.h) against the known-answer vectors that
// Salmon et al. publish with their Random123 library (kat_vectors).
#include "philox.h"

#include <gtest/gtest.h>

namespace cuda_agent::model {
namespace {

void ExpectWords(const PhiloxWords& got, const PhiloxWords& want) {
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.w[i], want.w[i]) << "word " << i;
}

TEST(PhiloxTest, MatchesThePublishedKnownAnswers) {
  ExpectWords(Philox4x32({{0, 0, 0, 0}}, 0, 0), {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  ExpectWords(Philox4x32({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
              {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  ExpectWords(Philox4x32({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
              {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

}  // namespace
}  // namespace cuda_agent::model
