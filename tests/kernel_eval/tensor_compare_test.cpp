#include "cuda_agent/kernel_eval/tensor_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace cuda_agent::kernel_eval {
namespace {

HostTensor Make(std::vector<double> v, std::string dtype = "float32") {
  return HostTensor::FromValues(std::move(dtype), {static_cast<int64_t>(v.size())}, v);
}

HostTensor Half(uint16_t bits) {
  return HostTensor::FromBytes("float16", {1}, std::string(reinterpret_cast<const char*>(&bits), 2)).value();
}

TEST(TensorCompareTest, ToleranceIsAtolPlusRtolTimesReference) {
  CompareOptions o;  // atol = rtol = 1e-2
  // |b - a| <= 0.01 + 0.01 * |a|: at a = 10 the bound is 0.11.
  EXPECT_TRUE(CompareTensors(Make({10.0}), Make({10.109}), o).passed);
  auto r = CompareTensors(Make({10.0}), Make({10.111}), o);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_NEAR(r.max_abs_error, 0.111, 1e-6);  // float32 storage
  EXPECT_NE(r.message.find("element 0 is 10.111, expected 10"), std::string::npos) << r.message;
}

TEST(TensorCompareTest, DtypeAndShapeMustMatchExactly) {
  CompareOptions o;
  EXPECT_NE(CompareTensors(Make({1}), Half(0x3c00), o).message.find("dtype float16, expected float32"),
            std::string::npos);
  HostTensor a = Make({1, 2, 3, 4});
  HostTensor b = HostTensor::FromValues("float32", {2, 2}, {1, 2, 3, 4});
  EXPECT_NE(CompareTensors(a, b, o).message.find("shape (2, 2), expected (4,)"), std::string::npos);
  o.check_dtype = false;
  EXPECT_TRUE(CompareTensors(Make({1}), Make({1}, "float64"), o).passed);
}

TEST(TensorCompareTest, NanPolicy) {
  double nan = std::nan(""), inf = INFINITY;
  CompareOptions match;
  EXPECT_TRUE(CompareTensors(Make({nan, inf, 1}), Make({nan, inf, 1}), match).passed);
  EXPECT_FALSE(CompareTensors(Make({nan}), Make({0}), match).passed);
  EXPECT_FALSE(CompareTensors(Make({1}), Make({nan}), match).passed);
  EXPECT_FALSE(CompareTensors(Make({inf}), Make({-inf}), match).passed);
  CompareOptions forbid;
  forbid.nan_policy = NanPolicy::kForbid;
  EXPECT_FALSE(CompareTensors(Make({nan}), Make({nan}), forbid).passed);
}

TEST(TensorFileTest, HalfPrecisionDecodes) {
  EXPECT_EQ(Half(0x3c00)[0], 1.0);                   // 1.0
  EXPECT_EQ(Half(0xc000)[0], -2.0);                  // -2.0
  EXPECT_EQ(Half(0x0001)[0], std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(Half(0x7c00)[0]));
  EXPECT_TRUE(std::isnan(Half(0x7e00)[0]));
  auto bf = HostTensor::FromBytes("bfloat16", {1}, std::string("\x80\x3f", 2));  // 0x3f80 = 1.0
  ASSERT_TRUE(bf.ok());
  EXPECT_EQ((*bf)[0], 1.0);
}

TEST(TensorFileTest, RoundTripAndCorruption) {
  auto path = std::filesystem::temp_directory_path() / "tensor-file-test.t";
  HostTensor t = HostTensor::FromValues("float32", {1, 3}, {1.5, -2.25, 3});
  ASSERT_TRUE(WriteTensorFile(path, t).ok());
  auto back = ReadTensorFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->dtype(), "float32");
  EXPECT_EQ(back->shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(back->bytes(), t.bytes());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 2);
  auto bad = ReadTensorFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("payload is"), std::string::npos);
}

}  // namespace
}  // namespace cuda_agent::kernel_eval
