// Typed errors that library code throws and front ends turn into one clear line.
#pragma once

#include <stdexcept>
#include <string>

namespace squeeze {

// Any error caused by input: a file, a flag, a request. The message is meant for the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model or data file that is malformed, truncated or unsupported.
class FormatError : public Error {
 public:
  using Error::Error;
};

// A bad argument or option combination given by the user.
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace squeeze
