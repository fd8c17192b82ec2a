// The trainers' layout check: run after the model is built, before the optimizer.
//
//   examples::check_layouts(models::layout_report(model), "train_transformer",
//                           {"use --attn-layout dense ...", "use --density < 1 ..."});
//
// A user must never believe a run is sparse when it is not (models/layout_report.h says when a
// layout degenerates). So:
//   - an attention layout of a sparse kind that keeps every causal block (dense causal attention
//     under another name) throws ValueError, one line: the modules, the requested kind, the
//     effective layout and fixes.attention (the trainer prints it and exits 1);
//   - block-sparse weights that store every block are one warning line on `err` naming the
//     effective (dense) layout and fixes.weights: they train correctly, as dense weights in block
//     form, only slower, so the run goes on;
//   - then one line per group of like layouts on `out`, "<program>: layout <summary>", with the
//     real density of each (models::summarize_layouts).
#pragma once

#include <iostream>
#include <string>
#include <vector>

#include "models/layout_report.h"

namespace tessera {
namespace examples {

/// What the trainer's flags can do about a degenerate layout (appended to its line after "; ").
struct LayoutFixes {
  std::string attention;  ///< for a sparse attention kind that keeps every causal block
  std::string weights;    ///< for block-sparse weights that store every block
};

/// See the file comment. `program` prefixes the warning and the summary lines.
void check_layouts(const std::vector<models::LayoutInfo>& report, const std::string& program,
                   const LayoutFixes& fixes, std::ostream& out = std::cout, std::ostream& err = std::cerr);

}  // namespace examples
}  // namespace tessera
