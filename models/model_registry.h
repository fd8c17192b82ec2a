// Models from checkpoints: one call gives back a ready model, its vocabulary and its config.
//
//   models::LoadedModel m = models::load_model("runs/lstm/ckpt.h5");            // on the CPU
//   auto& lstm = m.as<models::CharLSTMLM>();                                   // the concrete type
//   Tensor ids = from_vector(m.vocab.encode("ROMEO:"), ...);
//   models::LoadedModel g = models::load_model(path, Device::cuda(0));         // on a GPU
//
// The built-in types are "char_lstm" (models::CharLSTMLM), "conv_lm" (models::ConvLM) and
// "transformer" (models::TransformerLM);
// a program registers its own model types by name before loading their checkpoints:
//
//   models::register_model_type("my_model", {
//       [](const nlohmann::json& model) { return std::make_shared<MyModel>(MyConfig::from_json(model)); },
//       [](const nlohmann::json& model) { return nlohmann::json{{"layer_norm_eps", 1e-5}}; }});
//
// The config attribute of a checkpoint (the root attribute `config`, JSON; docs/checkpoints.md):
//   {"model_type": "<registered name>",
//    "model": {...},        the model config its type's build function reads (from_json)
//    "constants": {...},    what defines the model besides its config: layer-norm eps, the attention
//                           scale, which projections have biases, the weight orientation, the qkv
//                           column order, gate order... (for readers outside tessera; not read back)
//    "train": {...}}        the training flags of the run (informational)
// Older files without model_type are recognized by their model fields ("hidden": char_lstm,
// "width": transformer). load_model reads the config, the layouts, the vocabulary and the
// parameters (not the optimizer state nor the trainer's tensors), restores every parameter after
// checking names, shapes, dtypes and layouts (io::restore's checks), and puts the model in eval
// mode on `device`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/error.h"
#include "data/text_dataset.h"
#include "layers/module.h"

namespace tessera {
namespace models {

/// How a model type is built from its config, and the constants a checkpoint records for it.
struct ModelType {
  /// The model of `model_config` (the "model" part of the checkpoint's config), on the CPU.
  std::function<std::shared_ptr<nn::Module>(const nlohmann::json& model_config)> build;
  /// The constants that define the model besides its config (may be empty: none recorded).
  std::function<nlohmann::json(const nlohmann::json& model_config)> constants;
};

/// Registers (or replaces) a model type. ValueError for an empty name or build function.
void register_model_type(const std::string& name, ModelType type);
/// Names of the registered model types, sorted (the built-in "char_lstm", "conv_lm", "transformer" and the program's).
std::vector<std::string> model_types();

/// The config attribute of a checkpoint of a `model_type` model: {"model_type", "model",
/// "constants", "train"} (see the file comment). ValueError for an unregistered type.
nlohmann::json checkpoint_config(const std::string& model_type, const nlohmann::json& model_config,
                                 const nlohmann::json& train = nlohmann::json::object());

/// A model rebuilt from a checkpoint.
struct LoadedModel {
  std::string type;                    ///< its model_type
  std::shared_ptr<nn::Module> module;  ///< in eval mode, on the device asked for
  data::Vocabulary vocab = data::Vocabulary::bytes();  ///< /trainer/vocabulary (bytes when absent)
  bool has_vocab = false;              ///< whether the file holds a vocabulary
  nlohmann::json config;               ///< the whole config attribute
  int64_t step = 0;                    ///< the training step it was saved at

  /// The module as its concrete type; ValueError naming both types when it is another.
  template <class M>
  M& as() const {
    M* m = dynamic_cast<M*>(module.get());
    TS_CHECK(m != nullptr, ValueError, "LoadedModel: the model is a '" << type << "', not the type asked for");
    return *m;
  }
};

/// The model of the checkpoint at `path` on `device` (see the file comment). IOError for a
/// missing or corrupt file, a file without a model config, a model_type that is not registered
/// (the message lists the registered ones); the config's own errors (ValueError naming the field);
/// the restore's checks (ShapeError / DTypeError / IOError naming the dataset); ValueError when the
/// model's token count differs from the vocabulary's.
LoadedModel load_model(const std::string& path, Device device = Device::cpu());

}  // namespace models
}  // namespace tessera
