#include "models/train/run_folder.h"

#include <filesystem>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/logging/svg_plot.h"

namespace fs = std::filesystem;

namespace tessera {
namespace train {

namespace {

// `text` into `path` atomically (io::atomic_write: the old file stays whole when this fails).
void write_text_atomic(const std::string& path, const std::string& text) {
  io::atomic_write(path, [&](const std::string& tmp) { io::write_file(tmp, text.data(), text.size()); });
}

void prepare_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TS_CHECK(!ec, IOError, "cannot create run folder '" << dir << "': " << ec.message());
  const fs::path probe = fs::path(dir) / ".write_probe";
  {
    std::ofstream f(probe);
    TS_CHECK(f.good(), IOError, "run folder '" << dir << "' is not writable");
  }
  fs::remove(probe, ec);
}

}  // namespace

RunFolder::RunFolder(const std::string& dir, const nlohmann::json& config, int64_t start_step) : dir_(dir) {
  prepare_dir(dir_);
  write_text_atomic(path("config.json"), config.dump(2) + "\n");
  const std::string metrics = path("metrics.jsonl");
  if (start_step > 0) {  // keep the rows up to the checkpoint's step; they go back into the curves
    std::ifstream in(metrics);
    std::string line, kept;
    while (in && std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= start_step) {
        kept += line + "\n";
        add_to_curves(j);
      }
    }
    in.close();
    write_text_atomic(metrics, kept);
  }
  events_ = std::make_unique<logging::EventWriter>(dir_);
  metrics_.open(metrics, start_step > 0 ? std::ios::app : std::ios::trunc);
  TS_CHECK(metrics_.good(), IOError, "cannot write '" << metrics << "'");
  if (start_step == 0) write_text_atomic(path("samples.txt"), "");
}

std::string RunFolder::path(const std::string& file) const { return (fs::path(dir_) / file).string(); }

void RunFolder::add_to_curves(const nlohmann::json& row) {
  const int64_t s = row["step"].get<int64_t>();
  if (row.contains("train_loss") && row["train_loss"].is_number())
    train_curve_.push_back({s, row["train_loss"].get<double>()});
  if (row.contains("val_loss") && row["val_loss"].is_number()) val_curve_.push_back({s, row["val_loss"].get<double>()});
}

void RunFolder::log(const nlohmann::json& row) {
  metrics_ << row.dump() << "\n" << std::flush;
  TS_CHECK(metrics_.good(), IOError, "cannot write '" << path("metrics.jsonl") << "'");
  const double wall = logging::EventWriter::now();
  const int64_t step = row["step"].get<int64_t>();
  for (const char* key : {"train_loss", "val_loss", "lr", "tokens_per_s", "grad_norm"})
    if (row.contains(key) && row[key].is_number()) events_->add_scalar(key, row[key].get<double>(), step, wall);
  add_to_curves(row);
}

void RunFolder::add_sample(int64_t step, double val_loss, const std::string& text) {
  std::ofstream s(path("samples.txt"), std::ios::app);
  s.setf(std::ios::fixed);
  s.precision(4);
  s << "=== step " << step << " (val_loss " << val_loss << ") ===\n" << text << "\n\n";
  TS_CHECK(s.good(), IOError, "cannot write '" << path("samples.txt") << "'");
}

void RunFolder::flush() {
  events_->flush();
  logging::write_loss_svg(path("loss.svg"), {{"train", train_curve_}, {"val", val_curve_}}, logging::PlotOptions());
}

}  // namespace train
}  // namespace tessera
