// Data-parallel training across processes (and machines) on MPI, as PyTorch's
// torch.distributed and DistributedDataParallel do it: every process (rank)
// holds the whole model, trains on its own share of each batch, and after
// backward() the ranks combine their gradients, so every rank takes the same
// optimizer step and the models stay identical.
//
//   int main(int argc, char** argv) {
//     tg::distributed::Session mpi(argc, argv);           // MPI_Init; MPI_Finalize at the end
//     tg::distributed::DistributedSampler sampler(split.train, {.seed = 0});
//     for (int epoch = 1; epoch <= epochs; ++epoch) {
//       sampler.set_epoch(epoch);                          // a new order, the same on every rank
//       for (const std::vector<int64_t>& idx : sampler.batches(batch / mpi.world_size())) {
//         tg::Tensor loss = ...mean loss over idx...;
//         opt.zero_grad();
//         loss.backward();
//         tg::distributed::sync_gradients(model.parameters());   // the mean over ranks
//         opt.step();
//       }
//     }
//   }
//
// and `mpirun -np 2 ./program` (docs/distributed.md: one machine, several).
//
// A model whose embedding table is the heavy part can split the table by rows
// instead, each rank holding some rows and taking every batch whole
// (distributed/shard.hpp: RowShard, sum_over_ranks).
//
// The library is built with MPI when meson is configured with -Dmpi=enabled
// (Debian: libopenmpi-dev). Without it these functions are still there and act
// as a world of one process (rank 0 of 1; sync_gradients leaves the gradients
// as they are), so a program compiles and runs the same either way;
// is_available() says which build this is.
//
// The averaging convention. Each rank's loss is the mean over its own rows.
// sync_gradients gives every rank (sum_r s_r * g_r) / (sum_r s_r), with g_r
// rank r's gradient and s_r the `samples` it passes (default 1: the plain mean
// over ranks, as DDP divides by the world size). With s_r = the rows in rank
// r's batch, that is exactly the gradient of the mean loss over the global
// batch; when every rank has the same number of rows (DistributedSampler sees
// to it) the default gives the same. So N processes with batch B/N each take
// the step one process takes with batch B, up to float rounding (the sums run
// in another order: about 1e-7 relative per step).
//
// Bits. For a fixed world size a run repeats bit for bit: dense gradients are
// summed by one MPI_Allreduce of one fused buffer (Open MPI picks its
// algorithm from the size and the world, so the order of the sum is fixed),
// and sparse rows are summed in rank order by this code. Every rank ends with
// the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../core/sparse_rows.hpp"
#include "../core/tensor.hpp"

namespace tg::distributed {

// True when the library was built with MPI (-Dmpi=enabled).
bool is_available();

// MPI_Init / MPI_Finalize (PyTorch: init_process_group / destroy_process_group).
// init may be called once per process; finalize after it, once. Without MPI
// both do nothing. init throws std::logic_error when called twice.
void init(int& argc, char**& argv);
void finalize();
bool is_initialized();  // between init and finalize

// This process's rank in [0, world_size()) and the number of processes; 0 and
// 1 before init and without MPI.
int rank();
int world_size();

// Stops every rank of the world (MPI_Abort) with this exit code. A rank that
// cannot go on calls it; the others, waiting in a collective, would wait for
// ever. Without MPI (or before init): std::exit(code).
[[noreturn]] void abort(int code);

// init() in the constructor, finalize() in the destructor. A Session destroyed
// while an exception propagates (a rank threw and nothing caught it) calls
// abort(1) instead, so the other ranks stop instead of hanging.
class Session {
 public:
  Session(int& argc, char**& argv) { init(argc, argv); }
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  int rank() const { return distributed::rank(); }
  int world_size() const { return distributed::world_size(); }
};

// Sums `values` over the ranks, in place, on every rank (PyTorch:
// dist.all_reduce(t, op=SUM)): losses and counts for a report.
void all_reduce(std::span<double> values);
// Every rank's `values` end to end, in rank order, on every rank (PyTorch:
// dist.all_gather; MPI_Allgatherv: the counts may differ); counts, when given,
// receives each rank's count. One process: a copy.
std::vector<float> all_gather(std::span<const float> values, std::vector<std::size_t>* counts = nullptr);
void barrier();

// What one sync_gradients call exchanged, for this rank.
struct SyncStats {
  std::size_t dense_values = 0;           // floats in the fused buffer that MPI_Allreduce sums
  std::size_t dense_bytes = 0;            // that buffer: 4 bytes each
  std::size_t sparse_bytes_sent = 0;      // this rank's rows: 8 bytes of id + cols x 4 bytes each
  std::size_t sparse_bytes_received = 0;  // the other ranks' rows, the same way
  std::size_t sparse_rows_sent = 0;       // rows this rank contributed
  std::size_t sparse_rows = 0;            // rows after merging (those the global batch touched)
  std::size_t header_bytes = 0;           // the per-rank description exchanged first
};

// After backward(), before the optimizer's step: every parameter's gradient
// becomes (sum_r samples_r * g_r) / (sum_r samples_r) on every rank (see the
// top of this file). Dense gradients are packed into one buffer and summed by
// one MPI_Allreduce; SparseRows gradients stay sparse: each rank's row ids and
// rows are gathered (MPI_Allgatherv), and rows that several ranks hold are
// summed in rank order, so lazy Adam still updates only the rows some rank
// touched. A parameter whose gradient is empty on some ranks counts zeros
// there (empty on every rank: it stays empty, and the optimizer skips it).
// Sparse on some ranks and dense on others: dense, as sparse + dense is.
// Every rank must pass the same parameters, in the same order, with the same
// shapes: otherwise every rank throws std::invalid_argument naming the first
// parameter that differs. samples < 0, or a sum of 0 with some gradient, throws.
SyncStats sync_gradients(const std::vector<Tensor>& parameters, double samples = 1);

// The rank-order merge sync_gradients uses, exposed for tests: parts[r] is
// rank r's rows (coalesced), scaled by weights[r]; the result lists the union
// of the rows, each the sum of its parts in rank order.
SparseRows merge_in_rank_order(const std::vector<SparseRows>& parts, const std::vector<float>& weights);

}  // namespace tg::distributed
