// The launcher's environment (see world.h).
#include "core/distributed/world.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace tessera {
namespace dist {
namespace {

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
};

constexpr Launcher kLaunchers[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"env", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

/// The whole number in `value` (the variable `name`'s), or a ValueError naming both.
int whole_number(const char* name, const char* value) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  TS_CHECK(*value != '\0' && end && *end == '\0' && errno == 0 && v >= std::numeric_limits<int>::min() &&
               v <= std::numeric_limits<int>::max(),
           ValueError, "distributed: " << name << "='" << value << "' is not a whole number");
  return static_cast<int>(v);
}

}  // namespace

WorldInfo detect_world(const std::function<const char*(const char*)>& lookup) {
  for (const Launcher& l : kLaunchers) {
    const char* rank = lookup(l.rank);
    const char* size = lookup(l.size);
    if (!rank && !size) continue;
    TS_CHECK(rank && size, ValueError,
             "distributed: " << (rank ? l.rank : l.size) << " is set but " << (rank ? l.size : l.rank)
                             << " is not (a " << l.name << " launch gives both)");
    WorldInfo w;
    w.launcher = l.name;
    w.rank = whole_number(l.rank, rank);
    w.size = whole_number(l.size, size);
    TS_CHECK(w.size >= 1, ValueError, "distributed: " << l.size << "=" << w.size << " is not a process count");
    TS_CHECK(w.rank >= 0 && w.rank < w.size, ValueError,
             "distributed: " << l.rank << "=" << w.rank << " is outside 0.." << w.size - 1 << " (" << l.size
                             << "=" << w.size << ")");
    const char* local = lookup(l.local_rank);
    w.local_rank = local ? whole_number(l.local_rank, local) : -1;
    TS_CHECK(w.local_rank >= -1 && w.local_rank < w.size, ValueError,
             "distributed: " << l.local_rank << "=" << w.local_rank << " is outside 0.." << w.size - 1);
    return w;
  }
  return WorldInfo{};
}

WorldInfo detect_world() {
  return detect_world([](const char* name) { return std::getenv(name); });
}

double timeout_seconds() {
  const char* e = std::getenv("TESSERA_DIST_TIMEOUT_S");
  if (!e || *e == '\0') return 600.0;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  TS_CHECK(end && *end == '\0' && v > 0, ValueError,
           "TESSERA_DIST_TIMEOUT_S='" << e << "' is not a positive number of seconds");
  return v;
}

}  // namespace dist
}  // namespace tessera
