// The rendezvous file: how ranks without MPI share rank 0's NCCL unique id, through a filesystem
// they all see (--dist-init file:///shared/path). Ranks and world size come from the launcher's
// environment (world.h).
//
//   rank 0:  writes "tessera-rendezvous 1\nworld_size N\nid <256 hex digits>\n" to PATH.tmp.<pid>,
//            fsyncs it and renames it to PATH (readers never see half a file);
//   others:  wait for PATH (polling every 20 ms, at most TESSERA_DIST_TIMEOUT_S), read it, check
//            the world size;
//   rank 0 removes PATH once the group is up (nccl_process_group), so the path can serve the next
//   run; a file left by a run that died during start-up is refused by world size when it differs,
//   and otherwise makes the group's init time out: remove it, or use a path per run.
#pragma once

#include <array>
#include <string>

#include "core/distributed/world.h"

namespace tessera {
namespace dist {

/// An NCCL unique id's 128 bytes, made by rank 0 and shared with every rank.
struct NcclId {
  std::array<char, 128> bytes{};
};

/// Rank 0 writes `mine` to `path`; the other ranks return the id they read there (rank 0 returns
/// `mine`). ValueErrors, one line each, naming the path: a file written for another world size
/// (a stale file, or ranks started with different WORLD_SIZE), a file that is not a rendezvous
/// file, a wait past TESSERA_DIST_TIMEOUT_S (naming the rank); IOError when rank 0 cannot write.
NcclId rendezvous_exchange(const std::string& path, const WorldInfo& world, const NcclId& mine);

/// The path of a --dist-init value "file:///shared/path" ("file://" and an absolute path).
/// ValueError naming the value for anything else.
std::string rendezvous_path(const std::string& dist_init);

}  // namespace dist
}  // namespace tessera
