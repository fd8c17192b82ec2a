#include "optim/param_groups.h"

#include <cctype>

namespace tessera {
namespace optim {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// "ln", "ln1", "ln_f": a layer norm's usual module names (but not "lnk" or "linear").
bool is_ln(const std::string& c) {
  return starts_with(c, "ln") && (c.size() == 2 || std::isdigit(static_cast<unsigned char>(c[2])) || c[2] == '_');
}

}  // namespace

bool no_weight_decay(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot = path.find('.'); ; dot = path.find('.', start)) {
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  const std::string& last = parts.back();
  for (const char* name : {"bias", "gamma", "beta", "gain"})
    if (last == name || starts_with(last, std::string(name) + "_")) return true;
  if (last == "g") return true;
  for (const std::string& c : parts)
    if (c.find("norm") != std::string::npos || starts_with(c, "emb") || c.find("_emb") != std::string::npos ||
        is_ln(c))
      return true;
  return false;
}

std::vector<ParamGroup> param_groups_default(const std::vector<graph::NamedParam>& params, double weight_decay) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (const graph::NamedParam& p : params) (no_weight_decay(p.name) ? no_decay : decay).params.push_back(p.tensor);
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

}  // namespace optim
}  // namespace tessera
