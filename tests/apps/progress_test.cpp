#include "progress.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace mpitrain::app {
namespace {

std::string duration(double s) {
  char buf[32];
  Progress::format_duration(s, buf, sizeof buf);
  return buf;
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(duration(0), "0s");
  EXPECT_EQ(duration(59.4), "59s");
  EXPECT_EQ(duration(123), "2m03s");
  EXPECT_EQ(duration(3723), "1h02m03s");
  EXPECT_EQ(duration(-5), "0s");
}

TEST(Progress, PlainLinesEveryLogEveryStepsWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(10, 4, f);
    for (int step = 1; step <= 10; ++step) p.update(0, step, 1.0 / step, 100.0);
    p.message("saved checkpoint_0");
    p.finish();
  }
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  std::fclose(f);
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no carriage returns in a log file";
  EXPECT_NE(text.find("epoch 0 step 4/10 loss 0.2500"), std::string::npos) << text;
  EXPECT_NE(text.find("step 8/10"), std::string::npos) << text;
  EXPECT_NE(text.find("step 10/10"), std::string::npos) << "the last step is always shown";
  EXPECT_EQ(text.find("step 5/10"), std::string::npos) << text;
  EXPECT_NE(text.find("saved checkpoint_0\n"), std::string::npos);
}

}  // namespace
}  // namespace mpitrain::app
