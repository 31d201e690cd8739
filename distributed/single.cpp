// The distributed API in a build without MPI: a world of one process.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "collective.hpp"
#include "distributed.hpp"

namespace tg::distributed {

namespace {
bool initialized = false;
}

bool is_available() { return false; }

void init(int&, char**&) {
  if (initialized) throw std::logic_error("tg::distributed::init: called twice");
  initialized = true;
}
void finalize() { initialized = false; }
bool is_initialized() { return initialized; }
int rank() { return 0; }
int world_size() { return 1; }
void abort(int code) { std::exit(code); }

Session::~Session() { finalize(); }

void all_reduce(std::span<double>) {}
std::vector<std::byte> all_gather_bytes(std::span<const std::byte> mine, std::vector<std::size_t>* counts,
                                        const char*) {
  if (counts) counts->assign(1, mine.size());
  return {mine.begin(), mine.end()};
}
void barrier() {}

SyncStats sync_gradients(const std::vector<Tensor>&, double samples) {
  if (!(samples >= 0))
    throw std::invalid_argument("sync_gradients: samples must be >= 0, got " + std::to_string(samples));
  return {};
}

}  // namespace tg::distributed
