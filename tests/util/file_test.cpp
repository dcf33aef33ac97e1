#include "cuda_agent/util/file.h"

#include <gtest/gtest.h>

namespace cuda_agent {
namespace {
namespace fs = std::filesystem;

TEST(FileTest, AtomicWriteThenRead) {
  auto dir = TempDir::Create(fs::temp_directory_path(), "file-test-");
  ASSERT_TRUE(dir.ok());
  fs::path p = dir->path() / "a" / "b.txt";
  ASSERT_TRUE(MakeDirs(p.parent_path()).ok());
  ASSERT_TRUE(WriteFileAtomic(p, "hello").ok());
  ASSERT_TRUE(WriteFileAtomic(p, "world").ok());
  auto text = ReadFile(p);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "world");
  EXPECT_EQ(ReadFile(dir->path() / "missing").status().code(), StatusCode::kNotFound);
}

TEST(FileTest, TempDirIsRemoved) {
  fs::path where;
  {
    auto dir = TempDir::Create(fs::temp_directory_path(), "file-test-");
    ASSERT_TRUE(dir.ok());
    where = dir->path();
    ASSERT_TRUE(WriteFileAtomic(where / "x", "1").ok());
  }
  EXPECT_FALSE(fs::exists(where));
}

TEST(FileTest, CopyTreeRefusesSymlinks) {
  auto dir = TempDir::Create(fs::temp_directory_path(), "file-test-");
  ASSERT_TRUE(dir.ok());
  fs::create_directories(dir->path() / "src");
  ASSERT_TRUE(WriteFileAtomic(dir->path() / "src" / "f", "x").ok());
  ASSERT_TRUE(CopyTree(dir->path() / "src", dir->path() / "dst").ok());
  EXPECT_TRUE(fs::exists(dir->path() / "dst" / "f"));
  fs::create_symlink("/etc/passwd", dir->path() / "src" / "link");
  Status s = CopyTree(dir->path() / "src", dir->path() / "dst2");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("symlink"), std::string::npos);
}

TEST(FileTest, TruncateMiddleKeepsBothEnds) {
  std::string text(1000, 'a');
  text[0] = 'B';
  text[999] = 'E';
  std::string t = TruncateMiddle(text, 100);
  EXPECT_LT(t.size(), 200u);
  EXPECT_EQ(t.front(), 'B');
  EXPECT_EQ(t.back(), 'E');
  EXPECT_NE(t.find("900 bytes cut"), std::string::npos);
  EXPECT_EQ(TruncateMiddle("short", 100), "short");
}

}  // namespace
}  // namespace cuda_agent
