// Writes a small checkpoint for read_checkpoint.py (h5py) with every kind of string attribute a
// checkpoint has: root format/framework_version/config, a block and an attention layout (kind,
// generator), dtype on every dataset, the optimizer type, trainer strings (one non-ASCII, one
// empty). The script knows these values.
//   write_checkpoint <file.h5>
#include <cstdio>
#include <exception>
#include <vector>

#include "core/io/checkpoint.h"

namespace {

tessera::io::CheckpointData checkpoint() {
  using namespace tessera;
  io::CheckpointData d;
  d.config = R"({"model": {"type": "lstm", "hidden": 32, "name": "na\u00efve"}, "train": {"lr": 0.001}})";
  d.model["fc.weight"] = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  d.model["fc.bias"] = from_vector(std::vector<float>{0.5f, -0.25f, 0.125f}, {3});
  d.layouts["sparse"] = BlockLayout::from_mask(16, 24, 8, std::vector<uint8_t>{1, 0, 1, 1, 0, 1});
  d.attention_layouts["attn"] = AttentionLayout::strided(64, 8, 2, 3);
  d.optimizer.type = "adamw";
  d.optimizer.step = 2;
  d.optimizer.hyperparameters = {{"lr", 1e-3}};
  d.optimizer.state["fc.weight"]["exp_avg"] = zeros({2, 3});
  d.trainer.step = 2;
  d.trainer.strings["run"] = "tiny run";
  d.trainer.strings["note"] = "na\xC3\xAFve \xE2\x9C\x93";  // "naïve ✓"
  d.trainer.strings["empty"] = "";
  d.rng["data"] = Generator::State{42, 7};
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <file.h5>\n", argv[0]);
    return 2;
  }
  try {
    tessera::io::save_checkpoint(argv[1], checkpoint());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
