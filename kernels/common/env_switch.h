// A switch read from the environment (host code, every build): the kernels' lab and A/B switches,
// e.g. TESSERA_BSMM_DW_PAIR=0. One parser, so that every switch takes its two values and names
// itself and the value it got when the value is neither.
#pragma once

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tessera {

/// The environment variable `name` as a switch: `off` or `on` (unset: `fallback`); anything else
/// is a ValueError that names the variable and the value.
inline bool env_switch(const char* name, const char* off, const char* on, bool fallback) {
  const char* e = std::getenv(name);
  if (!e) return fallback;
  TS_CHECK(std::strcmp(e, off) == 0 || std::strcmp(e, on) == 0, ValueError,
           name << " must be " << off << " or " << on << ", not '" << e << "'");
  return std::strcmp(e, on) == 0;
}

}  // namespace tessera
