#include "log.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpitrain::app {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  std::fclose(f);
  return text;
}

TEST(Log, ParsesMpitrainLogLevel) {
  EXPECT_EQ(parse_log_level(nullptr), LogLevel::info);
  EXPECT_EQ(parse_log_level(""), LogLevel::info);
  EXPECT_EQ(parse_log_level("error"), LogLevel::error);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::warn);
  EXPECT_EQ(parse_log_level("info"), LogLevel::info);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::debug);
  try {
    parse_log_level("verbose");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "MPITRAIN_LOG_LEVEL: expected one of error, warn, info, debug, got 'verbose'");
  }
}

TEST(Log, PrefixesTheRankAndFiltersByLevelErrorsAndWarningsToTheErrorStream) {
  for (LogLevel level : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug}) {
    std::FILE* out = std::tmpfile();
    std::FILE* err = std::tmpfile();
    ASSERT_TRUE(out && err);
    Log log(3, level, out, err);
    log.error("e {}", 1);
    log.warn("w {}", 2);
    log.info("i {}", std::string(600, 'x'));  // no fixed buffer cuts a long message
    log.debug("d {}", 4);
    const std::string o = contents(out), e = contents(err);
    std::string expected_err = "[rank 3] e 1\n";
    if (level >= LogLevel::warn) expected_err += "[rank 3] warning: w 2\n";
    std::string expected_out;
    if (level >= LogLevel::info) expected_out += "[rank 3] i " + std::string(600, 'x') + "\n";
    if (level >= LogLevel::debug) expected_out += "[rank 3] d 4\n";
    EXPECT_EQ(e, expected_err);
    EXPECT_EQ(o, expected_out);
  }
}

struct RecordingLine final : LiveLine {
  std::vector<std::string>* events;
  explicit RecordingLine(std::vector<std::string>* e) : events(e) {}
  void clear() override { events->push_back("clear"); }
  void redraw() override { events->push_back("redraw"); }
};

TEST(Log, ClearsTheLiveLineBeforeEachShownMessageAndRedrawsItAfter) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  std::vector<std::string> events;
  RecordingLine line(&events);
  Log log(0, LogLevel::info, out, out);
  log.set_live_line(&line);
  log.info("shown");
  log.debug("hidden");
  log.set_live_line(nullptr);
  log.info("after");
  EXPECT_EQ(events, (std::vector<std::string>{"clear", "redraw"}));
  EXPECT_EQ(contents(out), "[rank 0] shown\n[rank 0] after\n");
}

TEST(Log, AlertsFromAnotherThreadStartOnAFreshLineWithoutTouchingTheLiveLine) {
  std::FILE* err = std::tmpfile();
  ASSERT_NE(err, nullptr);
  std::vector<std::string> events;
  RecordingLine line(&events);
  Log log(1, LogLevel::error, stdout, err);
  log.set_live_line(&line);
  log.alert("trainer: rank 1: no progress for 3 s");
  log.set_live_line(nullptr);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(contents(err), "\n[rank 1] trainer: rank 1: no progress for 3 s\n");
}

}  // namespace
}  // namespace mpitrain::app
