// Error types thrown by tessera for caller mistakes and failed system calls.
//
//   try { add(a, b); } catch (const tessera::ShapeError& e) { std::cerr << e.what(); }
//
// Messages name the op and the shapes/dtypes/devices involved, on one line.
// The throwing source location is kept in file()/line() for debugging, out of what().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

/// Base of every error tessera throws on purpose.
class Error : public std::runtime_error {
 public:
  Error(const std::string& msg, const char* file = "", int line = 0)
      : std::runtime_error(msg), file_(file), line_(line) {}
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  const char* file_;
  int line_;
};

/// Shapes that do not fit an op (rank, sizes, broadcasting).
class ShapeError : public Error { using Error::Error; };
/// A dtype an op does not accept, or mismatched dtypes.
class DTypeError : public Error { using Error::Error; };
/// Tensors on different devices, or a device that is not available.
class DeviceError : public Error { using Error::Error; };
/// A bad argument value (negative probability, out-of-range index, ...).
class ValueError : public Error { using Error::Error; };
/// A device allocation that did not fit; the message says how much was asked and how much is
/// free. The process can go on (free memory, try smaller).
class OutOfMemoryError : public DeviceError { using DeviceError::DeviceError; };
/// File and stream failures.
class IOError : public Error { using Error::Error; };
/// A feature that is not there (yet): a missing kernel, an unsupported combination.
class NotImplementedError : public Error { using Error::Error; };

}  // namespace tessera

/// Throw `ErrType` with a streamed message: TS_THROW(ShapeError, "add: " << a << " vs " << b);
#define TS_THROW(ErrType, msg_stream)                                  \
  do {                                                                 \
    std::ostringstream ts_throw_os_;                                   \
    ts_throw_os_ << msg_stream;                                        \
    throw ::tessera::ErrType(ts_throw_os_.str(), __FILE__, __LINE__);  \
  } while (0)

/// Throw `ErrType` with the streamed message unless `cond` holds.
#define TS_CHECK(cond, ErrType, msg_stream) \
  do {                                      \
    if (!(cond)) TS_THROW(ErrType, msg_stream); \
  } while (0)
