// The one gather the shard functions are built on (not installed: distributed.hpp's
// all_gather is the public form, for floats).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace tg::distributed {

// Every rank's bytes end to end, in rank order, on every rank (MPI_Allgatherv:
// the counts may differ); counts, when given, receives each rank's count. One
// process: a copy. `caller` names the function in messages.
std::vector<std::byte> all_gather_bytes(std::span<const std::byte> mine, std::vector<std::size_t>* counts,
                                        const char* caller);

}  // namespace tg::distributed
