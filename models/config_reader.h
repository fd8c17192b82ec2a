// Reading model configs from JSON with errors that name the bad field.
//
//   ConfigReader r(json, "TransformerLM");
//   cfg.layers = r.get<int64_t>("layers", 4);               // optional, with a default
//   cfg.vocab = r.require<int64_t>("vocab");                // required
//   r.check(cfg.layers > 0, "layers", "must be positive");
//   r.finish();                                             // unknown fields are errors too
//
// Every problem is a ValueError like: TransformerLM config: field "layers": must be positive (got -1).
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.h"

namespace tessera {
namespace models {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    TS_CHECK(j_.is_object(), ValueError, what_ << " config: expected a JSON object, got " << j_.type_name());
  }

  /// The field's value, or `fallback` when absent; ValueError when present with the wrong type.
  template <class T>
  T get(const std::string& key, T fallback) {
    seen_.insert(key);
    if (!j_.contains(key)) return fallback;
    return convert<T>(key);
  }

  /// The field's value; ValueError when absent or of the wrong type.
  template <class T>
  T require(const std::string& key) {
    seen_.insert(key);
    TS_CHECK(j_.contains(key), ValueError, what_ << " config: field \"" << key << "\" is required");
    return convert<T>(key);
  }

  /// ValueError naming `key` unless `cond`.
  void check(bool cond, const std::string& key, const std::string& message) const {
    TS_CHECK(cond, ValueError,
             what_ << " config: field \"" << key << "\": " << message
                   << (j_.contains(key) ? " (got " + j_.at(key).dump() + ")" : std::string()));
  }

  /// ValueError naming the first field that no get()/require() asked for (a typo, usually).
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      TS_CHECK(seen_.count(it.key()), ValueError, what_ << " config: unknown field \"" << it.key() << "\"");
  }

 private:
  template <class T>
  T convert(const std::string& key) const {
    const nlohmann::json& v = j_.at(key);
    bool ok = true;
    if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
    else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
    else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
    else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
    TS_CHECK(ok, ValueError, what_ << " config: field \"" << key << "\" has the wrong type (got " << v.dump() << ")");
    return v.get<T>();
  }

  const nlohmann::json& j_;
  std::string what_;
  std::set<std::string> seen_;
};

}  // namespace models
}  // namespace tessera
