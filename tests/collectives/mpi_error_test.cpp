// MpiError: the message names the call, the rank, the count and MPI's error string; codes MPI
// cannot describe are reported by number (without tripping MPI_COMM_WORLD's fatal handler);
// check_mpi throws exactly for codes other than MPI_SUCCESS.

#include "mpitrain/collectives/mpi_error.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace mpitrain {
namespace {

// Returns MPI's own description of `code`.
std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  EXPECT_EQ(MPI_Error_string(code, text, &len), MPI_SUCCESS);
  return std::string(text, static_cast<std::size_t>(len));
}

TEST(MpiError, MessageNamesCallRankCountAndMpisErrorString) {
  for (int code : {MPI_ERR_COUNT, MPI_ERR_TRUNCATE, MPI_ERR_ROOT, MPI_ERR_COMM, MPI_ERR_OTHER}) {
    SCOPED_TRACE("code " + std::to_string(code));
    const std::size_t count = 3000000000u;  // above 2^31 - 1: printed whole
    const MpiError e("MPI_Allreduce", 3, count, code, {});
    const std::string msg = e.what();
    EXPECT_EQ(msg, "MPI_Allreduce failed on rank 3 (count 3000000000): " + mpi_error_string(code));
    EXPECT_EQ(e.code(), code);
    EXPECT_FALSE(mpi_error_string(code).empty());
  }
}

TEST(MpiError, DetailFollowsTheErrorString) {
  const MpiError e("MPI_Bcast", 1, 7, MPI_ERR_ROOT, "root 9 is not a rank");
  EXPECT_EQ(std::string(e.what()), "MPI_Bcast failed on rank 1 (count 7): " +
                                       mpi_error_string(MPI_ERR_ROOT) + ": root 9 is not a rank");
  // Errors found before MPI was called carry code 0 and no error string.
  const MpiError before("MpiRuntime", -1, 0, MPI_SUCCESS, "MPI was already finalised");
  EXPECT_EQ(std::string(before.what()),
            "MpiRuntime failed on rank -1 (count 0): MPI was already finalised");
  EXPECT_EQ(before.code(), 0);
}

TEST(MpiError, CodesMpiCannotDescribeAreReportedByNumber) {
  // MPI_Error_string would hand these to MPI_COMM_WORLD's fatal handler (an abort).
  int* last = nullptr;
  int flag = 0;
  ASSERT_EQ(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag), MPI_SUCCESS);
  ASSERT_TRUE(flag);
  for (int code : {*last + 1, 123456, -5}) {
    const MpiError e("MPI_Waitall", 2, 5, code, {});
    EXPECT_EQ(std::string(e.what()),
              "MPI_Waitall failed on rank 2 (count 5): MPI error code " + std::to_string(code));
    EXPECT_EQ(e.code(), code);
  }
}

TEST(MpiError, CheckMpiThrowsForEveryCodeButSuccess) {
  EXPECT_NO_THROW(check_mpi(MPI_SUCCESS, "MPI_Barrier", 0, 0));
  try {
    check_mpi(MPI_ERR_TRUNCATE, "MPI_Recv", 1, 42);
    FAIL() << "check_mpi accepted MPI_ERR_TRUNCATE";
  } catch (const MpiError& e) {
    EXPECT_EQ(e.code(), MPI_ERR_TRUNCATE);
    EXPECT_EQ(std::string(e.what()),
              "MPI_Recv failed on rank 1 (count 42): " + mpi_error_string(MPI_ERR_TRUNCATE));
  }
  // An MpiError is a std::runtime_error: callers that know nothing of MPI catch it.
  EXPECT_THROW(check_mpi(MPI_ERR_OTHER, "MPI_Comm_dup", 0, 0), std::runtime_error);
}

}  // namespace
}  // namespace mpitrain
