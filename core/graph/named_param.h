// A parameter with its name: what modules list (nn::Module::named_parameters), what a traced
// step takes (core/graph/trace.h), and what checkpoints are keyed by ("/model/<name>").
// Its own header, so that layers and checkpoints need not include the tracer.
#pragma once

#include <string>

#include "core/tensor.h"

namespace tessera {
namespace graph {

/// A parameter and the name it has in graphs and outputs ("grad/<name>").
struct NamedParam {
  std::string name;
  Tensor tensor;
};

}  // namespace graph
}  // namespace tessera
