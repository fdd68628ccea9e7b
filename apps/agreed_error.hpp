#pragma once
// AgreedError: a runtime failure that every rank found the same way (after a collective that
// agreed on it), so the trainer prints it once (rank 0) and every rank exits 1, without the
// MPI_Abort that a failure of one rank alone needs. The message of a rank other than 0 is
// not shown.

#include <stdexcept>

namespace mpitrain::app {

class AgreedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mpitrain::app
