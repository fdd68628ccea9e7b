// Folder and file names of the checkpoint layout.

#include "mpitrain/checkpoint/checkpoint_layout.hpp"

#include <gtest/gtest.h>

namespace mpitrain::checkpoint {
namespace {

TEST(CheckpointLayout, FolderNamesParseExactly) {
  EXPECT_EQ(checkpoint_folder_name(12), "checkpoint_12");
  EXPECT_EQ(parse_checkpoint_folder_name("checkpoint_0"), 0);
  EXPECT_EQ(parse_checkpoint_folder_name("checkpoint_10"), 10);
  EXPECT_EQ(parse_checkpoint_folder_name("checkpoint_123456789012"), 123456789012);
  for (const char* bad : {"checkpoint_", "checkpoint_01", "checkpoint_-1", "checkpoint_1a",
                          "checkpoint_3.tmp-ab", "ckpt_1", "checkpoint_1234567890123456789"}) {
    EXPECT_FALSE(parse_checkpoint_folder_name(bad).has_value()) << bad;
  }
  EXPECT_EQ(rank_file_name(3), "rank_3.h5");
}

TEST(CheckpointLayout, TempFolderNames) {
  EXPECT_TRUE(is_temp_folder_name("checkpoint_3.tmp-0123abcd"));
  EXPECT_TRUE(is_temp_folder_name("final.tmp-1"));
  EXPECT_FALSE(is_temp_folder_name("checkpoint_3"));
  EXPECT_FALSE(is_temp_folder_name("checkpoint_3.tmp-"));
  EXPECT_FALSE(is_temp_folder_name(".tmp-abc"));
}

TEST(CheckpointLayout, CommitTempFolderNamesMatchExactlyWhatASaveWrites) {
  EXPECT_EQ(temp_folder_name("checkpoint_3", 0xdeadbeefULL), "checkpoint_3.tmp-00000000deadbeef");
  EXPECT_EQ(temp_folder_name("step_40", 0xfedcba9876543210ULL), "step_40.tmp-fedcba9876543210");
  for (const std::uint64_t id : {std::uint64_t{0}, std::uint64_t{0xdeadbeef}, ~std::uint64_t{0}}) {
    for (const char* target : {"checkpoint_3", "step_40", "final", "a.tmp-0123456789abcdef"}) {
      EXPECT_TRUE(is_commit_temp_folder_name(temp_folder_name(target, id))) << target << " " << id;
    }
  }
  for (const char* other : {"checkpoint_3", "checkpoint_3.tmp-", "final.tmp-1", ".tmp-0123456789abcdef",
                            "step_4.tmp-0123456789ABCDEF", "step_4.tmp-0123456789abcdeg",
                            "step_4.tmp-0123456789abcdef0", "step_4.tmp-0123456789abcde",
                            "step_4-0123456789abcdef0", "step_4.tmp_0123456789abcdef"}) {
    EXPECT_FALSE(is_commit_temp_folder_name(other)) << other;
  }
}

}  // namespace
}  // namespace mpitrain::checkpoint
