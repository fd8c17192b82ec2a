// Layout reports: every block and attention layout of a model (or a checkpoint file) by module
// path, with its real density, and the layouts that degenerate: a sparse kind that keeps every
// block, so the run is dense while its config says sparse.
//
//   const auto report = models::layout_report(model);               // TransformerLM, CharLSTMLM, any module
//   for (const std::string& l : models::summarize_layouts(report)) std::cout << l << "\n";
//   for (const std::string& p : models::degenerate_layouts(report)) std::cerr << p << "\n";
//
// Density (LayoutInfo::density = kept / total):
//   block layout      stored blocks / all blocks of the grid, nnz / ((C/bs)·(K/bs));
//   attention layout  kept blocks / causal blocks, nnz / (heads · nb(nb+1)/2) with nb = T/bs:
//                     the denominator is the lower triangle of the block grid, diagonal included
//                     (what dense causal attention computes), not nb², so dense causal is 1.
// Degenerate (LayoutInfo::degenerate):
//   attention  every causal block kept (the mask is dense_causal's) while the kind is not
//              dense_causal, e.g. strided(s) with s >= nb, or any kind with T == bs (nb = 1);
//   block      every block stored (density 1) in a weight meant to be sparse. Whether weights
//              are meant sparse is the caller's: a CharLSTMLM with layout "dense" asks for dense
//              weights in block form on purpose; a TransformerLM has no such setting, so its
//              block-sparse weights (linear_block > 0) are meant sparse.
// Grouping (summarize_layouts, degenerate_layouts): modules whose paths differ only in numeric
// components (blocks.0.attn, blocks.1.attn) with the same kind and geometry are one line, the
// paths written blocks.{0..3}.attn; modules sharing one layout object (TransformerLM's attention)
// say so.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sparse/attention_layout.h"
#include "core/sparse/block_layout.h"
#include "layers/module.h"

namespace tessera {
namespace models {

class TransformerLM;
class CharLSTMLM;

/// One layout of one module.
struct LayoutInfo {
  std::string path;             ///< module path; io::kRootModulePath for a root module
  LayoutPtr block;              ///< set for a block layout (a BlockSparseLinear's weight)
  AttentionLayoutPtr attention; ///< set for an attention layout (a MultiHeadAttention's)
  /// What was asked for: an attention layout's kind() ("strided(stride_blocks=2)"); for a block
  /// layout "block-sparse" (meant sparse) or "dense" (a dense weight in block form on purpose).
  std::string requested;
  int64_t kept = 0;      ///< attention: kept blocks over all heads; block: stored blocks
  int64_t total = 0;     ///< attention: causal blocks heads·nb(nb+1)/2; block: all blocks
  double density = 0;    ///< kept / total (see the file comment for the denominators)
  bool degenerate = false;  ///< a sparse request whose layout keeps every block
  /// The layout as it really is: "dense causal attention", "dense weight", or requested's
  /// sparse kind when it does not degenerate.
  std::string effective;

  bool is_attention() const { return attention != nullptr; }
  /// The layout's own description (its str()).
  std::string description() const { return attention ? attention->str() : block->str(); }
};

/// Every layout in the two maps (module path -> layout: io::CheckpointData::layouts and
/// attention_layouts, or io::collect_layouts / collect_attention_layouts of a model), block
/// layouts first, each by path. `sparse_weights`: whether block layouts are meant sparse.
std::vector<LayoutInfo> layout_report(const std::map<std::string, LayoutPtr>& block_layouts,
                                      const std::map<std::string, AttentionLayoutPtr>& attention_layouts,
                                      bool sparse_weights = true);
/// Every layout of `model` and its submodules (nn::Module::layouts()).
std::vector<LayoutInfo> layout_report(const nn::Module& model, bool sparse_weights = true);
/// A TransformerLM: its block-sparse weights (linear_block > 0) are meant sparse.
std::vector<LayoutInfo> layout_report(const TransformerLM& model);
/// A CharLSTMLM: its block weights are meant sparse unless its config's layout is "dense".
std::vector<LayoutInfo> layout_report(const CharLSTMLM& model);

/// Whether a config asks for sparse block weights: false only for a model config (or a run's
/// config.json, {"model": {...}}) whose "layout" is "dense" (CharLSTMLM's dense weights in block
/// form). For reports of checkpoint files, whose models are not built.
bool sparse_weights_requested(const nlohmann::json& config);

/// One line per layout, e.g.
///   "blocks.0.attn  attention strided(stride_blocks=2)  T=32 bs=32 heads=4  4/4 causal blocks,
///    density 1.000 of causal blocks (dense causal: degenerate)"            (one line)
///   "blocks.0.fc  block-sparse [64, 256] bs=16  32/64 blocks, density 0.500 of all blocks"
std::vector<std::string> format_layout_report(const std::vector<LayoutInfo>& report);

/// One line per group of like layouts (see the file comment), e.g.
///   "blocks.{0..3}.attn  attention strided(stride_blocks=2)  T=256 bs=32 heads=4  density 0.383 of
///    causal blocks (one layout shared by 4 modules)"                        (one line)
///   "blocks.{0..3}.fc  block-sparse [128, 512] bs=32  density 0.250 of all blocks"
/// (a range "0.246..0.254" when the group's densities differ).
std::vector<std::string> summarize_layouts(const std::vector<LayoutInfo>& report);

/// One line per group of degenerate layouts, naming the module paths, the requested kind and the
/// effective layout, e.g.
///   "blocks.{0..3}.attn: attention strided(stride_blocks=4) with T=32 and bs=32 (1 block per
///    sequence) keeps every causal block (1 of 1 per head): the effective layout is dense causal
///    attention"                                                             (one line)
///   "(root): block-sparse [64, 64] in 16x16 blocks stores all 16 blocks (density 1): the
///    effective layout is a dense [64, 64] weight"
/// Empty when none degenerates.
std::vector<std::string> degenerate_layouts(const std::vector<LayoutInfo>& report);

}  // namespace models
}  // namespace tessera
