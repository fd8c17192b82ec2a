// Checkpoints of a model (nn::Module) and its optimizer: what to save, and a validating restore.
//
//   io::CheckpointData ck = io::capture(model, &opt);    // then save before the next step:
//   ck.trainer.step = step;                              // ck holds the live tensors, not copies
//   ck.rng["dropout"] = gen.state();
//   io::save_checkpoint("run/ckpt.h5", ck, /*keep_last=*/3);
//
//   auto model2 = build_model(config, io::load_checkpoint(path).layouts);  // e.g. pruned layouts
//   io::CheckpointData back = io::restore("run/ckpt.h5", *model2, &opt2);
//   gen.set_state(back.rng.at("dropout"));
//
// Names: parameters by their named_parameters() path; layouts by the path of the module that
// owns them (nn::Module::layouts(): a BlockSparseLinear's block layout, a MultiHeadAttention's
// attention layout; "(root)" for a model that is one): one per module, also where modules
// share one layout object (TransformerLM's blocks all use one attention layout; the file has
// /layout/blocks.<l>.attn for each l); optimizer state /optimizer/<param path>/<state_names()[k]>
// holds state()[k * params().size() + i] of the parameter i with that path (see
// optim::Optimizer::state()).
//
// Layering: this is the model-level part of checkpoints, so it sits in models/, which sees
// layers/ and optim/; the file format itself (CheckpointData, save/load, the checks) is the
// engine's, core/io/checkpoint.h, which knows neither modules nor optimizers.
#pragma once

#include <map>
#include <string>

#include "core/io/checkpoint.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace tessera {
namespace io {

/// Module path of a root module's layout.
constexpr const char* kRootModulePath = "(root)";

/// Block layouts of every module in `model` (itself included) that has one (layouts().block:
/// the BlockSparseLinear layers), by module path.
std::map<std::string, LayoutPtr> collect_layouts(const nn::Module& model);

/// Attention layouts of every module in `model` (itself included) that has one
/// (layouts().attention: the MultiHeadAttention layers), by module path.
std::map<std::string, AttentionLayoutPtr> collect_attention_layouts(const nn::Module& model);

/// The model's parameters, its block and attention layouts and, with `opt`, the optimizer's name, step count,
/// hyperparameters and state by parameter path. The tensors are the live ones (no copies).
/// ValueError when an optimizer parameter is not a parameter of the model; NotImplementedError
/// when the optimizer has state that state_names() does not describe.
CheckpointData capture(const nn::Module& model, const optim::Optimizer* opt = nullptr);

/// Restores `model` (and `opt`) from the checkpoint at `path` and returns all of it (trainer,
/// rng, config). Everything is checked before any tensor changes, each problem as one error
/// naming the path, with a count of further problems:
///   - the optimizer type (IOError when /optimizer is missing or of another type);
///   - layouts: every module's block layout must equal /layout/<module path>, and the file
///     may hold no others (IOError naming both layouts); with `adopt_layouts`, a file layout of
///     the layer's sizes, block size and block count that differs is taken instead (the module's
///     set_block_layout, once everything is checked): a run whose layers switched layouts resumes;
///   - attention layouts: the same for every module's attention layout (same geometry and kept
///     blocks);
///     skipped for a file without any attention layout (written before they were saved);
///   - tensors: every parameter /model/<path> and optimizer state /optimizer/<path>/<state> with
///     the same shape and dtype (ShapeError / DTypeError naming both), none missing (IOError), and
///     nothing else under /model or (with `opt`) /optimizer (IOError).
/// Then parameters and state are copied and the optimizer's step count and lr set. Other
/// hyperparameters stay as the optimizer was built. Without `opt`, /optimizer is ignored.
/// The file is read once, without the optimizer part when `opt` is null.
CheckpointData restore(const std::string& path, nn::Module& model, optim::Optimizer* opt = nullptr,
                       bool adopt_layouts = false);

/// restore() from a checkpoint already read (load_checkpoint(path, parts) with the optimizer part
/// when `opt` is given); `path` names it in errors. The same checks, then the copies.
CheckpointData restore(CheckpointData loaded, const std::string& path, nn::Module& model,
                       optim::Optimizer* opt = nullptr, bool adopt_layouts = false);

}  // namespace io
}  // namespace tessera
