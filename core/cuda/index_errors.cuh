// Out-of-range indices found by GPU kernels, reported without a wait per op.
//
// A kernel that meets a bad index (index_select's ids, index_select_backward's, cross_entropy's
// targets) keeps its defined behaviour (a NaN row, or the index left out) and also records the
// first one in its device's index-error record:
//
//   if (bad && first_thread_of_the_row) cuda::report_bad_index(rec, site, cuda::kBadIndex, r, n, R);
//
// `site` is the op's name, a host pointer passed in as a kernel argument and only carried as a
// number; what the value is comes as a code (a string literal in device code would have a
// device address, which the host cannot read).
//
// The host looks at the record whenever it waits for the device's stream anyway (device-to-host
// copies: to_vector(), item(), the loss a CompiledStep::run returns; cuda::synchronize(); after
// each op with TESSERA_CUDA_SYNC=1) and throws the ValueError the CPU kernel would have thrown,
// naming the op, the value, its position and the range; the record is then cleared. Nothing is
// added to the stream but a 40-byte copy before those waits, and captured CUDA graphs record too.
#pragma once

#include <cstdint>

namespace tessera {
namespace cuda {

/// What the bad value is (IndexErrorRecord::what).
enum BadValueKind : unsigned long long { kBadIndex = 0, kBadTarget = 1 };

struct IndexErrorRecord {
  unsigned long long site;  ///< 0: no error; else the host address of the reporting op's name (a string literal)
  unsigned long long what;  ///< a BadValueKind
  long long value;          ///< the bad value
  long long position;       ///< its position among the indices (the row, for targets)
  long long limit;          ///< the valid range is [0, limit)
};

/// The device address of `device`'s record (device memory made with the device's state).
IndexErrorRecord* index_error_record(int device);

#ifdef __CUDACC__
/// In a kernel: records the bad `value` at `position` (valid range [0, limit)) for op `site`,
/// unless an error is recorded already (the first one wins). `site` is a host string literal
/// passed in as a kernel argument, only carried as a number.
__device__ __forceinline__ void report_bad_index(IndexErrorRecord* rec, const char* site, BadValueKind what,
                                                 long long value, long long position, long long limit) {
  const auto id = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(site));
  if (atomicCAS(&rec->site, 0ull, id) == 0ull) {
    rec->what = what;
    rec->value = value;
    rec->position = position;
    rec->limit = limit;
  }
}
#endif

}  // namespace cuda
}  // namespace tessera
