// TracerPause: no tracer on this thread while it is alive (core/op.h's Tracer), so ops run
// concretely and are not recorded.
//
// For a constant that a layer makes once and caches, such as an index table moved to the layer's
// device. Made under a trace, its copy to the device would be a recorded op that reads a CPU
// tensor, and a compiled step on a GPU refuses values on two devices. Made under a TracerPause,
// the cached tensor is a captured constant on its device.
//
//   { TracerPause concrete; cache = from_vector<int32_t>(ids, shape).to(device); }
#pragma once

#include "core/op.h"

namespace tessera {

class TracerPause {
 public:
  TracerPause() : prev_(set_current_tracer(nullptr)) {}
  ~TracerPause() { set_current_tracer(prev_); }
  TracerPause(const TracerPause&) = delete;
  TracerPause& operator=(const TracerPause&) = delete;

 private:
  Tracer* prev_;
};

}  // namespace tessera
