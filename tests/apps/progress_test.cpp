#include "progress.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace mpitrain::app {
namespace {

// Returns everything written to `f` (a std::tmpfile) and closes it.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  std::fclose(f);
  return text;
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(Progress::format_duration(0), "0s");
  EXPECT_EQ(Progress::format_duration(59.4), "59s");
  EXPECT_EQ(Progress::format_duration(123), "2m03s");
  EXPECT_EQ(Progress::format_duration(3723), "1h02m03s");
  EXPECT_EQ(Progress::format_duration(-5), "0s");
}

TEST(Progress, FormatsRatesWithSiPrefixes) {
  EXPECT_EQ(Progress::format_rate(0), "0");
  EXPECT_EQ(Progress::format_rate(950), "950");
  EXPECT_EQ(Progress::format_rate(99774), "99.8k");
  EXPECT_EQ(Progress::format_rate(1148760), "1.15M");
}

TEST(Progress, ComposeFillsTheWidthLessOneDroppingFieldsBeforeTheBarAndNeverWraps) {
  // 30 columns: 29 characters; the fields that fit beside a bar of 10, the bar takes the rest.
  EXPECT_EQ(Progress::compose("ab ", 0.5, " 5/10", {" x", " ETA 3s"}, 30), "ab [#####.....] 5/10 x ETA 3s");
  EXPECT_EQ(Progress::compose("ab ", 0.5, " 5/10", {" x", " ETA 3s"}, 29), "ab [########........] 5/10 x");
  EXPECT_EQ(Progress::compose("ab ", 0.5, " 5/10", {" x", " ETA 3s"}, 40),
            "ab [##########..........] 5/10 x ETA 3s");
  // A field that does not fit ends the list: the less important ones after it go too.
  EXPECT_EQ(Progress::compose("ab ", 1.0, " 5/5", {" long field", " y"}, 22), "ab [############] 5/5");
  for (int columns : {1, 2, 10, 30, 60, 80, 120, 200}) {
    const std::string line = Progress::compose(
        "epoch 12 ", 0.37, " 1044/2345", {"  44%", " ETA 1m02s", " loss 0.3598", " 62.9k samples/s"}, columns);
    EXPECT_LE(line.size(), static_cast<std::size_t>(std::max(columns - 1, 1))) << columns << ": " << line;
    if (columns >= 60) {
      EXPECT_NE(line.find("] 1044/2345  44% ETA 1m02s loss 0.3598"), std::string::npos) << line;
    }
  }
  // Too narrow for a bar: the text alone, cut.
  EXPECT_EQ(Progress::compose("epoch 1 ", 1.0, " 10/10", {" loss 1.0"}, 12), "epoch 1  10");
}

TEST(Progress, PlainLinesEveryLogEveryStepsWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Log log(0, LogLevel::info, f, f);
    Progress p(10, 4, log, Progress::Display::plain);
    for (int step = 1; step <= 10; ++step) p.update(0, step, 1.0 / step, 100.0);
    p.begin_eval(0, 3);
    for (int batch = 1; batch <= 3; ++batch) p.update_eval(batch);
    p.end_eval();
    log.info("saved {}", "checkpoint_0");
    p.finish();
  }
  const std::string text = contents(f);
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no carriage returns in a log file";
  EXPECT_EQ(text.find("eval"), std::string::npos) << "no evaluation lines in a log file";
  EXPECT_NE(text.find("epoch 0 step 4/10 loss 0.2500"), std::string::npos) << text;
  EXPECT_NE(text.find("step 8/10"), std::string::npos) << text;
  EXPECT_NE(text.find("step 10/10"), std::string::npos) << "the last step is always shown";
  EXPECT_EQ(text.find("step 5/10"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 0] saved checkpoint_0\n"), std::string::npos);
}

// On a terminal, a message clears the live line, takes its place, and the line is drawn
// again below it with its current state; finish() leaves the final state on its own line.
TEST(Progress, MessagesClearTheLineAndTheFinalStateIsDrawnBeforeTheLastMessage) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Log log(0, LogLevel::info, f, f);
    Progress p(10, 4, log, Progress::Display::terminal, 60);
    for (int step = 1; step <= 10; ++step) p.update(0, step, 0.5, 100.0);
    p.begin_eval(0, 4);
    for (int batch = 1; batch <= 4; ++batch) p.update_eval(batch);
    p.end_eval();
    log.info("epoch 0: test accuracy 90.00%");
    p.finish();
    log.info("done");
  }
  const std::string text = contents(f);
  EXPECT_NE(text.find("\reval epoch 0 ["), std::string::npos) << text;
  EXPECT_NE(text.find("] 4/4 batches 100%"), std::string::npos) << text;
  // The message replaces the (cleared) line, then the training line comes back at 10/10.
  const std::string message = "\r\033[K[rank 0] epoch 0: test accuracy 90.00%\n\repoch 0 [";
  ASSERT_NE(text.find(message), std::string::npos) << text;
  const std::string tail = text.substr(text.find(message) + message.size());
  EXPECT_NE(tail.find("] 10/10 100% ETA 0s loss 0.5000"), std::string::npos) << tail;
  // The final state, then a newline, then the last message: never on the bar's line.
  const std::size_t done = text.find("[rank 0] done\n");
  ASSERT_NE(done, std::string::npos) << text;
  EXPECT_EQ(text[done - 1], '\n') << text;
  // Every drawn line fits in 59 columns.
  for (std::size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at + 1)) {
    const std::size_t end = text.find_first_of("\r\n\033", at + 1);
    EXPECT_LE(end - at - 1, 59u) << text.substr(at + 1, end - at - 1);
  }
}

}  // namespace
}  // namespace mpitrain::app
