// What a user's mistake does: the table of docs/errors.md ("What a mistake
// throws"), one test case per row.
//
// Each mistake must throw the documented exception type with a message that
// names the op (or the file and line), and must leave everything as it was. A
// model part-way through training (a Rig: Adam has state, a gradient is waiting
// for the next step) makes the mistake; a control Rig built the same way does
// not. Afterwards both must hold the same values and gradients, nothing may be
// left on the tape, and one more optimizer step and one more training step must
// give both the same values again (so Adam's moments and step counts agree too).
//
// The last test cases are about the long haul: a save that fails part-way, and
// memory that stays flat over 1,000 training steps (scripts/longrun runs 10,000).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <typeinfo>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;
namespace fs = std::filesystem;
namespace nn = tg::nn;
using tg::test::read_file;
using tg::test::TempDir;
using tg::test::write_file;

namespace {

// ------------------------------------------------------------ the patient

// Bag of words plus a per-document "kind" embedding, then a linear head:
// EmbeddingBag, Embedding and Linear all get gradients.
struct Net : nn::Module {
  std::shared_ptr<nn::EmbeddingBag> bag;
  std::shared_ptr<nn::Embedding> kind;
  std::shared_ptr<nn::Linear> head;
  Net() {
    tg::Generator gen(3);
    bag = register_module("bag", std::make_shared<nn::EmbeddingBag>(
                                     6, 3, nn::EmbeddingBagOptions{.mode = nn::EmbeddingBagMode::sum}, gen));
    kind = register_module("kind", std::make_shared<nn::Embedding>(4, 3, nn::EmbeddingOptions{}, gen));
    head = register_module("head", std::make_shared<nn::Linear>(3, 2, true, gen));
  }
  // [3 bags of words] -> [3, 2] logits
  Tensor forward(const Indices& words, const Indices& offsets, const Indices& kinds) {
    return head->forward(tg::tanh(bag->forward(words, offsets) + kind->forward(kinds)));
  }
};

const Indices words = {0, 2, 5, 1, 1, 3};  // three bags: {0, 2}, {5, 1}, {1, 3}
const Indices offsets = {0, 2, 4};
const Indices kinds = {1, 0, 3};
const Indices labels = {0, 1, 1};

// A model part-way through training: two Adam steps taken, and the gradient of
// a third batch waiting in the slots.
struct Rig {
  Net net;
  tg::optim::Adam opt{net.parameters(), {.lr = 0.05}};
  Rig() {
    for (int i = 0; i < 2; ++i) step();
    opt.zero_grad();
    loss().backward();
  }
  Tensor logits() { return net.forward(words, offsets, kinds); }
  Tensor loss() { return tg::cross_entropy(logits(), labels); }
  void step() {
    opt.zero_grad();
    loss().backward();
    opt.step();
  }
};

bool same_grad(const tg::Grad& a, const tg::Grad& b) {
  if (a.empty() || b.empty()) return a.empty() && b.empty();
  if (a.is_dense() != b.is_dense()) return false;
  if (a.is_dense()) return a.dense() == b.dense();
  return a.sparse().rows == b.sparse().rows && a.sparse().values == b.sparse().values &&
         a.sparse().num_rows == b.sparse().num_rows;
}

void check_same_values(Rig& rig, Rig& control, const char* when) {
  auto p = rig.net.named_parameters(), q = control.net.named_parameters();
  REQUIRE(p.size() == q.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    INFO(when << ": " << p[i].first);
    CHECK(p[i].second.value() == q[i].second.value());  // exact: same operations, same order
  }
}

// `rig` made a mistake and `control` did not: nothing may tell them apart.
void check_intact(Rig& rig, Rig& control) {
  CHECK(tg::Tape::current().live_count() == 0);
  check_same_values(rig, control, "values");
  auto p = rig.net.named_parameters(), q = control.net.named_parameters();
  for (std::size_t i = 0; i < p.size(); ++i) {
    INFO("gradient of " << p[i].first);
    CHECK(same_grad(p[i].second.grad(), q[i].second.grad()));
  }
  rig.opt.step();  // applies the waiting gradient with Adam's moments and step count
  control.opt.step();
  check_same_values(rig, control, "after the waiting step");
  rig.step();
  control.step();
  check_same_values(rig, control, "after one more training step");
}

// Runs f, which must throw E (or a type derived from it); returns what().
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw " << typeid(e).name() << " instead of " << typeid(E).name() << ": " << e.what());
  }
  FAIL("did not throw " << typeid(E).name());
  return "";
}

void check_mentions(const std::string& message, std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts)
    CHECK_MESSAGE(message.find(part) != std::string::npos, "\"" << part << "\" is not in: " << message);
}

}  // namespace

// EXPECT_ERROR(Type, expression, "fragment", ...): the expression throws Type
// and the message holds every fragment.
#define EXPECT_ERROR(E, expr, ...)                                       \
  do {                                                                   \
    INFO("expression: " #expr);                                          \
    check_mentions(message_of<E>([&] { (void)(expr); }), {__VA_ARGS__}); \
  } while (0)

namespace {

// ------------------------------------------------------------ files

// A safetensors file: 8-byte little-endian length (the header's, unless given), header, data.
std::string safetensors_bytes(const std::string& header, const std::string& data = "",
                              std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

// Files left in `dir` whose name starts with `stem`.tmp (a save's temporary).
std::size_t temporaries(const fs::path& dir, const std::string& stem) {
  std::size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    n += entry.path().filename().string().rfind(stem + ".tmp", 0) == 0;
  return n;
}

// Lowers the file size limit while it lives: a write past it fails with EFBIG,
// as on a full disk. SIGXFSZ is ignored meanwhile (its default ends the process).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small{bytes, old_.rlim_max};
    setrlimit(RLIMIT_FSIZE, &small);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

// ------------------------------------------------------------ memory

// Resident set size in bytes, from /proc/self/statm (0 where there is none).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// AddressSanitizer keeps freed memory in quarantine, so RSS grows there by design.
constexpr bool sanitized = tg::test::address_sanitizer;

}  // namespace

TEST_SUITE("errors") {
  TEST_CASE("the control works: two rigs built alike stay alike") {
    Rig rig, control;
    check_intact(rig, control);
  }

  TEST_CASE("shape mismatch: each op throws std::invalid_argument naming itself and the shapes") {
    Rig rig, control;
    using E = std::invalid_argument;
    const Tensor w = rig.net.head->weight;  // [2, 3], a parameter with a waiting gradient
    const Tensor v({1.0f, 2.0f, 3.0f, 4.0f});
    const Tensor x(xt::ones<float>({5, 4}));

    EXPECT_ERROR(E, w + v, "add: shapes [2, 3] and [4] cannot be broadcast together");
    EXPECT_ERROR(E, w - v, "sub", "[2, 3]", "[4]");
    EXPECT_ERROR(E, w * v, "mul", "[2, 3]", "[4]");
    EXPECT_ERROR(E, w / v, "div", "[2, 3]", "[4]");
    EXPECT_ERROR(E, tg::matmul(w, w), "matmul: shapes [2, 3] and [2, 3]", "inner dimensions differ (3 vs 2)");
    EXPECT_ERROR(E, tg::matmul(v, w), "matmul", "[4]", "[2, 3]");
    EXPECT_ERROR(E, tg::linear(x, w), "linear: input [5, 4] does not fit weight [2, 3]");
    EXPECT_ERROR(E, tg::linear(Tensor(xt::ones<float>({5, 3})), w, v), "linear: bias [4] for weight [2, 3]");
    EXPECT_ERROR(E, (*rig.net.head)(x), "linear", "[5, 4]", "[2, 3]");
    EXPECT_ERROR(E, tg::sum(w, 2), "sum: dim 2 out of range", "2 dims");
    EXPECT_ERROR(E, tg::mean(w, -3), "mean: dim -3");
    EXPECT_ERROR(E, tg::max(w, 5), "max: dim 5");
    EXPECT_ERROR(E, tg::softmax(w, 2), "softmax: dim 2");
    EXPECT_ERROR(E, tg::log_softmax(w, -3), "log_softmax: dim -3");
    EXPECT_ERROR(E, tg::transpose(w, 0, 2), "transpose: dim 2");
    EXPECT_ERROR(E, tg::mean(Tensor(xt::zeros<float>({0}))), "mean", "[0]", "empty");
    EXPECT_ERROR(E, tg::max(Tensor(xt::zeros<float>({0, 3})), 0), "max", "[0, 3]", "empty");
    EXPECT_ERROR(E, tg::reshape(w, {4, 2}), "reshape: shape [4, 2] does not fit the 6 elements of [2, 3]");
    EXPECT_ERROR(E, tg::reshape(w, {-1, -1}), "reshape", "only one -1");
    EXPECT_ERROR(E, tg::index_select(w, 1, Indices{0}), "index_select", "dim 1");
    EXPECT_ERROR(E, tg::index_select(w, 0, Indices(xt::zeros<int64_t>({1, 1}))),
                 "index_select: index must be 1-d", "[1, 1]");
    EXPECT_ERROR(E, tg::one_hot(Indices(xt::zeros<int64_t>({0})), -1), "one_hot", "num_classes -1");
    EXPECT_ERROR(E, tg::cross_entropy(v, labels), "cross_entropy: input must be [N, C]; got [4]");
    EXPECT_ERROR(E, tg::cross_entropy(rig.logits(), Indices{0, 1}), "cross_entropy: target must be [N] = [3]",
                 "got shape [2]");
    EXPECT_ERROR(E, tg::nll_loss(rig.logits(), Indices{{0, 1, 1}}), "nll_loss", "[1, 3]");
    EXPECT_ERROR(E, tg::mse_loss(w, v), "mse_loss: input [2, 3] and target [4]");
    EXPECT_ERROR(E, tg::data::accuracy(rig.logits(), Indices{0, 1}),
                 "accuracy: logits must be [N, C] and labels [N]; got [3, 2] and [2]");
    EXPECT_ERROR(E, tg::data::BatchSampler(10, {.batch_size = 0}),
                 "BatchSampler: batch_size must be > 0; got 0");
    EXPECT_ERROR(E, w.item(), "item", "[2, 3]", "6 elements");
    EXPECT_ERROR(E, rig.net.bag->forward(Indices{{0, 1}}, offsets), "EmbeddingBag", "1-D", "[1, 2]");
    EXPECT_ERROR(E, rig.net.bag->forward(words), "EmbeddingBag", "2-D", "[6]");
    {  // weight is a public member: a tensor that is not a table is refused (then put back)
      const Tensor table = rig.net.kind->weight;
      rig.net.kind->weight = Tensor(Array{1.0f, 2.0f, 3.0f}, true);
      EXPECT_ERROR(E, rig.net.kind->forward(kinds), "Embedding: weight must be 2-D [num, dim]; got [3]");
      rig.net.kind->weight = table;
    }
    EXPECT_ERROR(E, tg::maximum(w, v), "maximum: shapes [2, 3] and [4]");
    EXPECT_ERROR(E, tg::where(tg::gt(w, 0.0f), w, v), "where: shapes [2, 3] and [4]");
    EXPECT_ERROR(E, tg::cat({w, v}), "cat: tensor 1 has shape [4], tensor 0 has [2, 3]");
    EXPECT_ERROR(E, tg::stack({w, x}), "stack: tensor 1 has shape [5, 4], tensor 0 has [2, 3]");
    EXPECT_ERROR(E, tg::gather(w, 1, Indices{0, 1}), "gather: index of shape [2] does not fit input [2, 3]");
    EXPECT_ERROR(E, tg::layer_norm(w, {4}, std::nullopt, std::nullopt), "layer_norm: input [2, 3]", "[4]");
    EXPECT_ERROR(E, tg::argmax(w, 2), "argmax: dim 2");
    EXPECT_ERROR(E, tg::flatten(w, 1, 0), "flatten: start_dim 1 comes after end_dim 0");
    EXPECT_ERROR(E, tg::max(Tensor(xt::zeros<float>({0}))), "max", "[0]", "empty");
    {
      Tensor y = w * 2.0f;
      EXPECT_ERROR(E, y.backward(Array(xt::ones<float>({3}))), "backward: gradient of shape [3]", "[2, 3]");
    }
    {
      tg::NoGradGuard no_grad;
      Tensor p = rig.net.head->weight;
      EXPECT_ERROR(E, p.copy_(xt::zeros<float>({3, 2})), "copy_: source of shape [3, 2]", "[2, 3]");
    }
    Tensor p = rig.net.head->weight;
    EXPECT_ERROR(E, p.accumulate_grad(Array(xt::ones<float>({3}))), "accumulate_grad: gradient of shape [3]",
                 "[2, 3]");
    check_intact(rig, control);
  }

  TEST_CASE("index out of range or negative: std::out_of_range naming the op, the index and the size") {
    Rig rig, control;
    using E = std::out_of_range;
    nn::Embedding& kind = *rig.net.kind;
    nn::EmbeddingBag& bag = *rig.net.bag;
    const Tensor w = rig.net.head->weight;  // [2, 3]

    EXPECT_ERROR(E, kind(Indices{0, 4}), "Embedding: index 4 out of range for size 4");
    EXPECT_ERROR(E, kind(Indices{{1, -1}}), "Embedding: index -1 out of range for size 4");
    EXPECT_ERROR(E, bag(Indices{0, 6}, Indices{0}), "EmbeddingBag: index 6 out of range for size 6");
    EXPECT_ERROR(E, bag(Indices{-2, 1}, Indices{0}), "EmbeddingBag: index -2");
    EXPECT_ERROR(E, bag(Indices{{0, 9}}), "EmbeddingBag: index 9");
    EXPECT_ERROR(E, bag(tg::CsrBatch{{0, 2}, {1, -3}, {}}), "EmbeddingBag: index -3");
    EXPECT_ERROR(E, tg::index_select(w, 0, Indices{1, 2}), "index_select: index 2 out of range for size 2");
    EXPECT_ERROR(E, tg::index_select(w, 0, Indices{-1}), "index_select: index -1");
    EXPECT_ERROR(E, tg::one_hot(Indices{0, 3}, 3), "one_hot: index 3 out of range for size 3");
    EXPECT_ERROR(E, tg::one_hot(Indices{-1}, 3), "one_hot: index -1");
    EXPECT_ERROR(E, tg::gather(w, 1, Indices{{0, 3}, {1, 1}}), "gather: index 3 out of range for size 3");
    EXPECT_ERROR(E, tg::narrow(w, 1, 2, 2), "narrow: start 2 and length 2 do not fit dim 1 of shape [2, 3]");
    EXPECT_ERROR(E, tg::index_select(labels, 0, Indices{7}), "index_select: index 7");
    // A label out of range in the middle of a training step: the forward pass
    // was already recorded, and must be freed again as the exception unwinds.
    EXPECT_ERROR(E, tg::cross_entropy(rig.logits(), Indices{0, 2, 1}),
                 "cross_entropy: index 2 out of range for size 2");
    EXPECT_ERROR(E, tg::cross_entropy(rig.logits(), Indices{-1, 0, 0}), "cross_entropy: index -1");
    EXPECT_ERROR(E, tg::nll_loss(tg::log_softmax(rig.logits()), Indices{0, 0, 5}), "nll_loss: index 5");
    EXPECT_ERROR(E, tg::data::take(labels, Indices{0, 3}), "take: rows[1] = 3 out of range for 3 rows");
    EXPECT_ERROR(E, tg::data::accuracy(rig.logits(), Indices{0, 2, 1}),
                 "accuracy: index 2 out of range for size 2");
    check_intact(rig, control);
  }

  TEST_CASE("a probability out of range: dropout, Dropout, multinomial; the generator is untouched") {
    Rig rig, control;
    using E = std::invalid_argument;
    const Tensor w = rig.net.head->weight;
    tg::Generator gen(1);
    const std::string before = gen.state();
    EXPECT_ERROR(E, tg::dropout(w, 1.5f, true, gen), "dropout: probability has to be between 0 and 1, but got 1.5");
    EXPECT_ERROR(E, nn::Dropout(-0.5f), "Dropout: probability has to be between 0 and 1");
    EXPECT_ERROR(E, tg::multinomial(Tensor({0.5f, -1.0f}), 1, gen), "multinomial", "-1", "finite and >= 0");
    EXPECT_ERROR(E, tg::multinomial(Tensor({0.0f, 0.0f}), 1, true, gen), "multinomial: row 0", "sums to 0");
    EXPECT_ERROR(E, tg::multinomial(Tensor({0.5f, 0.5f}), 3, gen), "multinomial: cannot draw 3 samples");
    EXPECT_ERROR(E, tg::clamp(w, std::nullopt, std::nullopt), "clamp: give at least one of min and max");
    CHECK(gen.state() == before);
    check_intact(rig, control);
  }

  TEST_CASE("EmbeddingBag offsets not starting at 0, decreasing or past the end") {
    Rig rig, control;
    nn::EmbeddingBag& bag = *rig.net.bag;
    using Bad = std::invalid_argument;

    EXPECT_ERROR(Bad, bag(words, Indices{1, 2}), "EmbeddingBag: offsets[0] must be 0; got 1");
    EXPECT_ERROR(Bad, bag(words, Indices{-1, 0}), "EmbeddingBag: offsets[0] must be 0; got -1");
    EXPECT_ERROR(Bad, bag(words, Indices{0, 3, 2}),
                 "EmbeddingBag: offsets must not decrease; offsets[2] = 2 < offsets[1] = 3");
    EXPECT_ERROR(std::out_of_range, bag(words, Indices{0, 7}),
                 "EmbeddingBag: offsets[1] = 7 is past the end of the input (6 indices)");
    EXPECT_ERROR(Bad, bag(words, Indices{{0, 2}}), "EmbeddingBag: offsets must be 1-D; got shape [1, 2]");
    // CSR indptr follows the same rules, plus it must end at the number of indices.
    EXPECT_ERROR(Bad, bag(tg::CsrBatch{{1, 3}, {0, 1, 2}, {}}),
                 "EmbeddingBag: offsets[0] must be 0; got 1");
    EXPECT_ERROR(Bad, bag(tg::CsrBatch{{0, 3, 1, 3}, {0, 1, 2}, {}}), "offsets must not decrease");
    EXPECT_ERROR(Bad, bag(tg::CsrBatch{{0, 2}, {0, 1, 2}, {}}),
                 "CSR indptr must end at the number of indices (3); got 2");
    EXPECT_ERROR(Bad, bag(tg::CsrBatch{{}, {}, {}}), "CSR indptr", "empty indptr");
    // A batch from a vocabulary of another size than the table, even when every index fits.
    EXPECT_ERROR(Bad, bag(tg::data::to_csr({{0, 1}, {2}}, 5)),
                 "EmbeddingBag: a CSR batch of 5 columns for a table of 6 rows");
    {
      nn::EmbeddingBag last(6, 3, {.mode = nn::EmbeddingBagMode::sum, .include_last_offset = true});
      const Array before = last.weight.value();
      EXPECT_ERROR(Bad, last(words, Indices{0, 2}), "include_last_offset",
                   "must be the input's length 6; got 2");
      EXPECT_ERROR(Bad, last(words, Indices(xt::zeros<int64_t>({0}))),
                   "include_last_offset needs at least one offset");
      CHECK(last.weight.value() == before);
      CHECK(last.weight.grad().empty());
    }
    check_intact(rig, control);
  }

  TEST_CASE("per_sample_weights of the wrong length, or with a mode other than sum") {
    Rig rig, control;
    nn::EmbeddingBag& bag = *rig.net.bag;
    using E = std::invalid_argument;
    Tensor five(xt::ones<float>({5}), true);  // requires grad: it must not get one
    Tensor six(xt::ones<float>({6}), true);

    EXPECT_ERROR(E, bag(words, offsets, five),
                 "EmbeddingBag: per_sample_weights of shape [5] for input of shape [6]");
    EXPECT_ERROR(E, bag(Indices{{0, 1, 2}, {3, 4, 5}}, Tensor(xt::ones<float>({3, 2}))),
                 "per_sample_weights of shape [3, 2] for input of shape [2, 3]");
    EXPECT_ERROR(E, bag(tg::CsrBatch{{0, 3}, {0, 1, 2}, {1.0f, 2.0f}}),
                 "EmbeddingBag: CSR has 2 values for 3 indices");
    CHECK(five.grad().empty());

    for (auto mode : {nn::EmbeddingBagMode::mean, nn::EmbeddingBagMode::max}) {
      nn::EmbeddingBag other(6, 3, {.mode = mode});
      const Array before = other.weight.value();
      const char* name = mode == nn::EmbeddingBagMode::mean ? "'mean'" : "'max'";
      EXPECT_ERROR(E, other(words, offsets, six), "per_sample_weights are only supported for mode 'sum'",
                   name);
      EXPECT_ERROR(E, other(tg::CsrBatch{{0, 6}, {0, 1, 2, 3, 4, 5}, {1, 1, 1, 1, 1, 1}}),
                   "CSR values act as per-sample weights", name);
      CHECK(other.weight.value() == before);
    }
    CHECK(six.grad().empty());
    check_intact(rig, control);
  }

  TEST_CASE("backward twice, on a non-scalar, on a tensor without grad") {
    Rig rig, control;
    Tensor loss = rig.loss(), control_loss = control.loss();
    loss.backward();
    control_loss.backward();  // the control gets the same (legitimate) first backward

    EXPECT_ERROR(std::logic_error, loss.backward(), "backward: op 'nll_loss'",
                 "was already released by an earlier backward()", "retain_graph = true");
    EXPECT_ERROR(std::invalid_argument, rig.logits().backward(),
                 "backward: a gradient can only be implied for a one-element tensor", "[3, 2]",
                 "pass backward(gradient)");
    EXPECT_ERROR(std::logic_error, Tensor({1.0f}).backward(), "backward: the tensor does not require grad");
    {
      tg::NoGradGuard no_grad;
      Tensor evaluated = rig.loss();  // computed under NoGradGuard: no graph
      EXPECT_ERROR(std::logic_error, evaluated.backward(), "does not require grad", "NoGradGuard");
    }
    {  // the loss data_parallel returns: its backward already ran (into a model of its own here)
      Tensor w({1.0f, 2.0f}, true);
      const Tensor dp_loss = tg::nn::data_parallel(
          {w}, 2, [&](std::size_t b, std::size_t e) { return tg::narrow(w, 0, b, e - b); },
          [](const Tensor& y) { return tg::sum(y); });
      const Array w_grad = w.grad_dense();
      EXPECT_ERROR(std::logic_error, dp_loss.backward(),
                   "backward: nn::data_parallel returned this loss after running its backward pass",
                   "step the optimizer");
      CHECK(w.grad_dense() == w_grad);
    }
    loss = control_loss = Tensor();
    check_intact(rig, control);
  }

  TEST_CASE(
      "tg::grad of a non-leaf or a repeated input; data_parallel with the wrong rows or loss, or max_norm") {
    Rig rig, control;
    const std::vector<Tensor> params = rig.net.parameters();
    EXPECT_ERROR(std::invalid_argument, tg::grad(rig.loss(), {rig.logits()}),
                 "grad: input 0 (of shape [3, 2]) is not a leaf that requires grad");
    EXPECT_ERROR(std::invalid_argument, tg::grad(rig.loss(), {params[0], params[1], params[0]}), "grad: input 2",
                 "is input 0 again");
    tg::test::Threads two(2);
    auto whole_batch = [&](std::size_t, std::size_t) { return rig.logits(); };  // not the shard's rows
    auto loss = [&](const Tensor& logits) { return tg::cross_entropy(logits, labels); };
    EXPECT_ERROR(std::invalid_argument, tg::nn::data_parallel(params, 3, whole_batch, loss),
                 "data_parallel: forward(", "returned a tensor of shape [3, 2]", "its first dim must be those rows");
    auto rows = [&](std::size_t b, std::size_t e) { return tg::narrow(rig.logits(), 0, b, e - b); };
    EXPECT_ERROR(std::invalid_argument, tg::nn::data_parallel(params, 3, rows, [](const Tensor& y) { return y; }),
                 "data_parallel: loss(output) returned a tensor of shape [3, 2]", "it must be one value");
    EXPECT_ERROR(std::invalid_argument, tg::nn::data_parallel(params, 0, rows, loss),
                 "data_parallel: the batch has no rows");
    {
      tg::NoGradGuard no_grad;
      EXPECT_ERROR(std::logic_error, tg::nn::data_parallel(params, 3, rows, loss), "data_parallel: grad mode is off");
    }
    // A layer that writes its weight during forward (max_norm), in the shards.
    nn::Embedding renormed(4, 3, {.max_norm = 0.1f});
    const Array before = renormed.weight.value();
    auto lookup = [&](std::size_t b, std::size_t e) { return renormed(tg::narrow(kinds, 0, b, e - b)); };
    EXPECT_ERROR(
        std::logic_error,
        tg::nn::data_parallel({renormed.weight}, 3, lookup, [](const Tensor& y) { return tg::sum(y); }),
        "Embedding: max_norm rescales rows of the weight in place during forward",
        "nn::data_parallel cannot do at once", "tg::set_num_threads(1)");
    CHECK(renormed.weight.value() == before);
    CHECK(renormed.weight.grad().empty());
    check_intact(rig, control);
  }

  TEST_CASE("an in-place write between forward and backward: std::logic_error naming the op and versions") {
    Rig rig, control;
    Tensor loss = rig.loss();
    // The waiting gradient is applied between this forward and its backward; the
    // control takes the same step, so values and state stay comparable.
    rig.opt.step();
    control.opt.step();
    const uint64_t before = rig.net.head->weight.version() - 1;  // the step wrote it once
    EXPECT_ERROR(std::logic_error, loss.backward(), "input 1 of op 'linear'", "'head.weight' of shape [2, 3]",
                 "was modified in place after it was used by op 'linear'",
                 ("version " + std::to_string(before + 1) + ", expected " + std::to_string(before)).c_str());

    // The same values written back still count: a write is a write.
    loss = rig.loss();
    rig.net.load_state_dict(rig.net.state_dict());
    EXPECT_ERROR(std::logic_error, loss.backward(), "op 'linear'", "modified in place");

    // An output that a backward reads (tanh keeps its output), written in place.
    Tensor hidden = tg::tanh(rig.net.bag->forward(words, offsets));
    Tensor head_loss = tg::sum(hidden);
    hidden.value_mut()(0, 0) = 0.0f;
    EXPECT_ERROR(std::logic_error, head_loss.backward(), "the output of op 'tanh'", "version 1, expected 0");

    // A shape change through value_mut(), to a tensor whose op reads only its shape.
    Tensor x = tg::ones({2, 3}, true);
    Tensor total = tg::sum(x);
    x.value_mut() = xt::ones<float>({3, 2});
    EXPECT_ERROR(std::logic_error, total.backward(), "op 'sum'", "had shape [2, 3] when the op ran");
    CHECK(x.grad().empty());

    // ... or to an op's output: its backward would get a gradient of the new shape.
    Tensor z = tg::ones({2, 3}, true);
    Tensor doubled = z * 2.0f;
    doubled.value_mut() = xt::ones<float>({6});
    EXPECT_ERROR(std::logic_error, doubled.backward(Array(xt::ones<float>({6}))), "the output of op 'mul_scalar'",
                 "had shape [2, 3] when the op ran; an in-place write changed it to [6]");
    CHECK(z.grad().empty());

    // ... or to a leaf after a backward(): the gradient it holds has the old shape.
    Tensor leaf = tg::ones({2}, true);
    tg::sum(leaf * 2.0f).backward();
    leaf.value_mut() = xt::ones<float>({3});
    Tensor again = tg::sum(leaf * 2.0f);
    EXPECT_ERROR(std::logic_error, again.backward(), "op 'mul_scalar'", "a tensor of shape [3]",
                 "holds a gradient of shape [2]", "call zero_grad() first");
    CHECK(leaf.grad().dense() == Array({2.0f, 2.0f}));

    loss = hidden = head_loss = total = doubled = again = Tensor();
    check_intact(rig, control);
  }

  TEST_CASE("a module registered inside its own child; clone() of a subclass that does not override it") {
    Rig rig, control;
    auto holder = std::make_shared<nn::Sequential>();
    holder->push_back(rig.net.head);
    EXPECT_ERROR(
        std::invalid_argument, rig.net.head->register_module("up", holder),
        "Module: registering a tg::nn::Sequential as 'up' inside a tg::nn::Linear would make a cycle",
        "holds that tg::nn::Linear (as '0')");
    CHECK(rig.net.head->named_parameters().size() == 2);
    struct Scaled : nn::Linear {  // overrides forward, inherits Linear's clone()
      using nn::Linear::Linear;
      Tensor forward(const Tensor& x) const override { return nn::Linear::forward(x) * 3.0f; }
    } scaled(3, 2);
    EXPECT_ERROR(std::logic_error, scaled.clone(), "clone: this", "Scaled's clone() makes a tg::nn::Linear",
                 "give", "a clone() of its own");
    check_intact(rig, control);
  }

  TEST_CASE("an optimizer given the same parameter twice, a non-leaf, or a tensor without grad") {
    Rig rig, control;
    using E = std::invalid_argument;
    std::vector<Tensor> twice = rig.net.parameters();  // bag.weight, kind.weight, head.weight, head.bias
    twice.push_back(rig.net.bag->weight);

    EXPECT_ERROR(E, tg::optim::SGD(twice, {.lr = 0.1}),
                 "SGD: parameter 4 (shape [6, 3]) is the same tensor as parameter 0");
    EXPECT_ERROR(E, tg::optim::Adam(twice), "Adam: parameter 4", "same tensor as parameter 0");
    EXPECT_ERROR(E, tg::optim::AdamW(twice), "AdamW: parameter 4", "same tensor as parameter 0");
    {
      const Tensor doubled = rig.net.head->weight * 2.0f;
      EXPECT_ERROR(E, tg::optim::Adam({rig.net.head->weight, doubled}),
                   "Adam: parameter 1 (shape [2, 3]) is not a leaf");
    }
    EXPECT_ERROR(E, tg::optim::SGD({Tensor({1.0f})}, {.lr = 0.1}),
                 "SGD: parameter 0 (shape [1]) does not require grad");
    check_intact(rig, control);  // the model's own optimizer is untouched
  }

  TEST_CASE("load_state_dict with missing, unexpected or wrong-shape entries loads nothing") {
    Rig rig, control;
    tg::StateDict state = rig.net.state_dict();
    for (auto& [name, value] : state) value.fill(7.0f);  // a partial load would show
    state.erase("head.bias");
    state["head.scale"] = xt::ones<float>({1});
    state["bag.weight"] = xt::ones<float>({5, 3});

    const std::string all = message_of<std::invalid_argument>([&] { rig.net.load_state_dict(state); });
    check_mentions(all, {"load_state_dict: the state does not fit the module", "missing: head.bias",
                         "unexpected: head.scale", "wrong shape: bag.weight (expected [6, 3], got [5, 3])"});
    // strict = false forgives names but never shapes.
    const std::string lax = message_of<std::invalid_argument>([&] { rig.net.load_state_dict(state, false); });
    check_mentions(lax, {"wrong shape: bag.weight"});
    CHECK(lax.find("missing") == std::string::npos);

    TempDir dir;
    nn::Linear other(3, 3);
    other.save(dir.file("other.safetensors"));
    EXPECT_ERROR(std::invalid_argument, rig.net.load(dir.file("other.safetensors")), "missing: bag.weight",
                 "unexpected: bias, weight");
    check_intact(rig, control);
  }

  TEST_CASE("an optimizer or scheduler state that does not fit, a bad learning rate: nothing changes") {
    Rig rig, control;
    using E = std::invalid_argument;
    tg::optim::StateDict state = rig.opt.state_dict();
    state.tensors["state.2.exp_avg"] = xt::zeros<float>({3, 2});  // head.weight is [2, 3]
    EXPECT_ERROR(
        E, rig.opt.load_state_dict(state),
        "Adam.load_state_dict: tensor 'state.2.exp_avg' has shape [3, 2] but parameter 2 has shape [2, 3]");
    state = rig.opt.state_dict();
    state.metadata["state.0.step"] = "-1";
    EXPECT_ERROR(E, rig.opt.load_state_dict(state), "'state.0.step' is \"-1\", not a step count >= 1");
    tg::optim::SGD sgd(Net().parameters(), {.lr = 0.1});
    EXPECT_ERROR(E, rig.opt.load_state_dict(sgd.state_dict()),
                 "Adam.load_state_dict: the state is SGD's, this optimizer is Adam");
    tg::optim::Adam fewer({rig.net.bag->weight});
    EXPECT_ERROR(E, fewer.load_state_dict(rig.opt.state_dict()),
                 "param group 0 holds parameters [0,1,2,3] in the state but [0] here");
    EXPECT_ERROR(E, rig.opt.set_lr(-0.1), "Adam.set_lr: invalid learning rate -0.1");
    EXPECT_ERROR(E, rig.opt.set_lr(3, 0.1), "Adam.set_lr: param group 3 out of range (1 groups)");
    {
      TempDir dir;
      sgd.save(dir.file("sgd.safetensors"));
      EXPECT_ERROR(E, rig.opt.load(dir.file("sgd.safetensors")),
                   dir.file("sgd.safetensors") + ": Adam.load_state_dict");
    }

    // A scheduler: bad settings throw before the optimizer is touched; a state that does not fit loads
    // nothing.
    EXPECT_ERROR(E, tg::optim::StepLR(rig.opt, {.step_size = 0}), "StepLR: step_size must be >= 1; got 0");
    EXPECT_ERROR(E, tg::optim::LinearLR(rig.opt, {.start_factor = 2}),
                 "LinearLR: start_factor must be in (0, 1]; got 2");
    CHECK(!rig.opt.initial_lr(0));
    tg::optim::CosineAnnealingLR sched(rig.opt, {.T_max = 10}), control_sched(control.opt, {.T_max = 10});
    tg::Metadata bad = sched.state_dict();
    bad["base_lrs"] = "[0.1, 0.2]";
    EXPECT_ERROR(
        E, sched.load_state_dict(bad),
        "CosineAnnealingLR.load_state_dict: \"base_lrs\" has 2 entries for an optimizer with 1 param groups");
    EXPECT_ERROR(E, sched.load_state_dict(tg::optim::StepLR(sgd, {.step_size = 2}).state_dict()),
                 "the state is StepLR's, this scheduler is CosineAnnealingLR");
    CHECK(sched.state_dict() == control_sched.state_dict());
    check_intact(rig, control);
  }

  TEST_CASE(
      "load_checkpoint of a file that is not a checkpoint, lacks a part or does not fit: nothing changes") {
    Rig rig, control;
    TempDir dir;
    tg::Generator gen(11), control_gen(11);
    tg::Checkpoint into{
        .model = &rig.net, .optimizer = &rig.opt, .generator = &gen, .metadata = {{"epoch", "4"}}};
    auto expect = [&](const std::string& path, const std::string& fragment) {
      EXPECT_ERROR(std::invalid_argument, tg::load_checkpoint(path, into), "load_checkpoint: " + path + ": ",
                   fragment);
    };
    rig.net.save(dir.file("model.safetensors"));
    expect(dir.file("model.safetensors"), "not a tapegrad checkpoint");
    Net other;
    tg::save_checkpoint(dir.file("model_only.ckpt"), {.model = &other});
    expect(dir.file("model_only.ckpt"), "the checkpoint holds no optimizer (it holds [\"model\"])");
    // The model fits, the optimizer does not: the model must not have been loaded either.
    tg::optim::SGD sgd(other.parameters(), {.lr = 0.1});
    tg::save_checkpoint(dir.file("sgd.ckpt"), {.model = &other, .optimizer = &sgd, .generator = &gen});
    expect(dir.file("sgd.ckpt"), "Adam.load_state_dict: the state is SGD's");
    nn::Linear small(3, 2);
    tg::save_checkpoint(dir.file("small.ckpt"), {.model = &small});
    expect(dir.file("small.ckpt"), "load_state_dict: the state does not fit the module; missing: bag.weight");
    EXPECT_ERROR(tg::SafetensorsError, tg::load_checkpoint(dir.file("missing.ckpt"), into),
                 "safetensors: " + dir.file("missing.ckpt") + ": cannot open the file");
    CHECK(into.metadata == tg::Metadata{{"epoch", "4"}});
    CHECK(gen.state() == control_gen.state());
    check_intact(rig, control);
  }

  TEST_CASE("a bad CSV: FileError naming the file and the line") {
    TempDir dir;
    auto expect = [&](const std::string& name, const std::string& content, int64_t line,
                      const std::string& reason, tg::data::CsvOptions options = {}) {
      CAPTURE(name);
      const std::string path = dir.file(name);
      write_file(path, content);
      try {
        tg::data::read_csv(path, options);
        FAIL("read_csv accepted " << name);
      } catch (const tg::data::FileError& e) {
        const std::string where = line > 0 ? path + ":" + std::to_string(line) : path;
        CHECK(std::string(e.what()) == "csv: " + where + ": " + reason);
        CHECK(e.path() == path);
        CHECK(e.line() == line);
      }
    };
    expect("short_row.csv", "1,2,0\n3,4,1\n5,1\n", 3, "2 fields, but the first data line has 3");
    expect("not_a_number.csv", "1,2,0\n3,x4,1\n", 2, "column 2: 'x4' is not a finite number");
    expect("header.csv", "a,b,y\n1,2,0\n", 1,
           "column 1: 'a' is not a finite number; if the first line names the columns, pass header = true");
    expect("named.csv", "a,b,y\n1,2,0\n3,,1\n", 3, "column 2 (b): '' is not a finite number",
           {.header = true});
    expect("nan.csv", "1,2,0\n1,nan,0\n", 2, "column 2: 'nan' is not a finite number");
    expect("label.csv", "1,2,0\n1,2,1.5\n", 2, "column 3: label '1.5' is not a class id (an integer >= 0)");
    expect("negative_label.csv", "-1,2,3\n", 1, "column 1: label '-1' is not a class id (an integer >= 0)",
           {.label_column = 0});
    expect("one_column.csv", "1\n2\n", 1,
           "found 1 column; a CSV here needs feature columns and a label column (delimiter ',')");
    expect("label_column.csv", "1,2,3\n", 1, "label_column 5 is outside the 3 columns", {.label_column = 5});
    expect("empty.csv", "", 0, "empty file");
    expect("header_only.csv", "a,b,y\n\n", 0, "no data rows (2 lines)", {.header = true});
    expect("skipped_all.csv", "1,2,0\n3,4,1\n", 0, "no data rows (2 lines)", {.skip_rows = 2});
    // After a header, the data rows set the number of fields; line numbers stay the file's.
    expect("short_after_header.csv", "n,m\n1,2,0\n3,4\n", 3, "2 fields, but the first data line has 3",
           {.header = true});
    expect("after_skipped.csv", "title\n\nx,y\n1,q\n", 4, "column 2 (y): 'q' is not a finite number",
           {.header = true, .skip_rows = 2});
    EXPECT_ERROR(tg::data::FileError, tg::data::read_csv(dir.file("missing.csv")),
                 "csv: " + dir.file("missing.csv") + ": cannot open file for reading");
  }

  TEST_CASE("a truncated, corrupt or hostile safetensors file: SafetensorsError naming the file") {
    Rig rig, control;
    TempDir dir;
    const std::string good = dir.file("good.safetensors");
    rig.net.save(good);
    const std::string bytes = read_file(good);
    const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":)";

    struct Case {
      const char* name;
      std::string bytes;
      std::string reason;
    };
    const std::vector<Case> cases = {
        {"short", bytes.substr(0, 5), "the file has 5 bytes, fewer than the 8-byte header length"},
        {"cut_in_header", bytes.substr(0, 40), "runs past the end of the file (40 bytes)"},
        {"cut_in_data", bytes.substr(0, bytes.size() - 4), "run past the end of the data section"},
        {"huge_length", safetensors_bytes("{}", "", uint64_t{1} << 40),
         "is larger than the limit of 100000000 bytes"},
        {"length_past_end", safetensors_bytes("{}", "", 3),
         "header length 3 runs past the end of the file (10 bytes)"},
        {"not_json", safetensors_bytes("{\"a\": [1, 2"), "the header is not valid JSON"},
        {"not_object", safetensors_bytes("[1, 2]"), "the header is not a JSON object"},
        {"missing_field", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", floats({1})),
         "tensor 'a' needs \"dtype\", \"shape\" and \"data_offsets\""},
        {"offsets_out_of_range", safetensors_bytes(R"({"a":)" + f32x2 + "[0,4000]}}", floats({1, 2})),
         "tensor 'a': data_offsets [0, 4000] run past the end of the data section (8 bytes)"},
        {"offsets_reversed", safetensors_bytes(R"({"a":)" + f32x2 + "[8,0]}}", floats({1, 2})),
         "data_offsets [8, 0] end before they begin"},
        {"negative_offset", safetensors_bytes(R"({"a":)" + f32x2 + "[-8,0]}}", floats({1, 2})),
         "is not a pair of byte offsets"},
        {"unknown_dtype",
         safetensors_bytes(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd"),
         "tensor 'a' has dtype 'F16'; only F32 (float32) is supported"},
        {"overlap",
         safetensors_bytes(R"({"a":)" + f32x2 + R"([0,8]},"b":)" + f32x2 + "[4,12]}}", floats({1, 2, 3})),
         "tensors 'a' and 'b' overlap"},
        {"gap", safetensors_bytes(R"({"a":)" + f32x2 + "[4,12]}}", floats({1, 2, 3})),
         "bytes 0 to 4 of the data section belong to no tensor"},
        {"wrong_size",
         safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2})),
         "shape [3] of F32 does not fit its data_offsets [0, 8] (8 bytes)"},
        {"huge_shape",
         safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                           floats({1, 2})),
         "does not fit"},
        {"negative_shape",
         safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2})),
         "tensor 'a': shape [-2] is not a list of sizes"},
        {"nested_shape",
         safetensors_bytes(R"({"a":{"dtype":"F32","shape":)" + std::string(50, '[') + std::string(50, ']') +
                               R"(,"data_offsets":[0,8]}})",
                           floats({1, 2})),
         "is not a list of sizes"},
        {"deep_nesting",
         safetensors_bytes(R"({"a":{"dtype":"F32","shape":)" + std::string(200000, '[') +
                               std::string(200000, ']') + R"(,"data_offsets":[0,8]}})",
                           floats({1, 2})),
         "the header nests deeper than 128 levels"},
        {"duplicate_name",
         safetensors_bytes(R"({"a":)" + f32x2 + R"([0,8]},"a":)" + f32x2 + "[0,8]}}", floats({1, 2})),
         "the header names 'a' twice"},
        {"bad_metadata", safetensors_bytes(R"({"__metadata__":{"k":1}})"),
         "__metadata__ value for 'k' is not a string"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      const std::string path = dir.file(std::string(c.name) + ".safetensors");
      write_file(path, c.bytes);
      const std::string msg = message_of<tg::SafetensorsError>([&] { tg::load_safetensors(path); });
      CHECK(msg.rfind("safetensors: " + path + ": ", 0) == 0);
      check_mentions(msg, {c.reason});
      // Through the module: refused as a whole, the model keeps its weights.
      CHECK_THROWS_AS(rig.net.load(path), tg::SafetensorsError);
    }
    EXPECT_ERROR(tg::SafetensorsError, tg::load_safetensors(dir.file("missing.safetensors")),
                 "missing.safetensors: cannot open the file for reading");
    EXPECT_ERROR(tg::SafetensorsError, tg::load_safetensors(dir.path.string()),
                 "safetensors: " + dir.path.string() + ": ");
    try {
      tg::load_safetensors(dir.file("missing.safetensors"));
    } catch (const tg::SafetensorsError& e) {
      CHECK(e.path == dir.file("missing.safetensors"));
    }
    check_intact(rig, control);
  }

  TEST_CASE("a name that is not UTF-8: write_html and save_safetensors name it, and write nothing") {
    Rig rig, control;
    TempDir dir;
    tg::Tensor bias = *rig.net.head->bias;
    bias.set_name("caf\xE9.bias");  // Latin-1
    EXPECT_ERROR(
        std::invalid_argument, tg::write_html(rig.loss(), dir.file("page.html")),
        "write_html: the name of a tensor in the graph, 'caf\\xE9.bias' (a leaf of shape [2]), is not "
        "UTF-8 (byte 4 is 0xE9)",
        "set_name()");
    CHECK(!fs::exists(dir.file("page.html")));
    bias.set_name("head.bias");
    tg::StateDict state = rig.net.state_dict();
    state["caf\xE9"] = Array{1.0f};
    EXPECT_ERROR(std::invalid_argument, tg::save_safetensors(dir.file("m.safetensors"), state),
                 "save_safetensors: tensor name 'caf\\xE9' is not UTF-8 (byte 4 is 0xE9)");
    CHECK(!fs::exists(dir.file("m.safetensors")));
    check_intact(rig, control);
  }

  TEST_CASE("a malformed TSV line, an empty corpus, invalid UTF-8: FileError naming file and line") {
    TempDir dir;
    // what() is exactly "tsv: <path>:<line>: <reason>", and path() and line() say the same.
    auto expect = [&](const std::string& name, const std::string& content, int64_t line,
                      const std::string& reason, tg::data::TsvOptions options = {}) {
      CAPTURE(name);
      const std::string path = dir.file(name);
      write_file(path, content);
      try {
        tg::data::read_tsv(path, options);
        FAIL("read_tsv accepted " << name);
      } catch (const tg::data::FileError& e) {
        const std::string where = line > 0 ? path + ":" + std::to_string(line) : path;
        CHECK(std::string(e.what()) == "tsv: " + where + ": " + reason);
        CHECK(e.path() == path);
        CHECK(e.line() == line);
      }
    };
    expect("no_tab.tsv", "ham\thello\nspam\tbuy\nthis line has no tab\n", 3,
           "no TAB separating label and text");
    expect("empty_label.tsv", "ham\thello\n\tno label\n", 2, "empty label before the TAB");
    tg::data::TsvOptions given, skip, strict_utf8;
    given.label_names = {"ham", "spam"};
    skip.bad_lines = tg::data::BadLinePolicy::skip;
    strict_utf8.invalid_utf8 = tg::data::Utf8Policy::error;
    expect("unknown_label.tsv", "ham\thello\neggs\tbacon\n", 2,
           "label 'eggs' is not one of the 2 given label names", given);
    expect("crlf_no_tab.tsv", "ham\thello\r\nbroken\r\n", 2, "no TAB separating label and text");
    expect("empty.tsv", "", 0, "empty file");
    expect("blank.tsv", "\n\r\n\n", 0, "no usable lines (3 lines, 0 skipped)");
    expect("all_bad.tsv", "a\nb\n", 0, "no usable lines (2 lines, 2 skipped)", skip);
    expect("utf8.tsv", "ham\tok\nspam\tcaf\xc3\xa9 \xff bad\n", 2, "invalid UTF-8 at byte 12 of the line",
           strict_utf8);
    expect("truncated_utf8.tsv", "ham\tcut \xe2\x82\n", 1, "invalid UTF-8 at byte 9 of the line",
           strict_utf8);

    EXPECT_ERROR(tg::data::FileError, tg::data::read_tsv(dir.file("missing.tsv")),
                 "tsv: " + dir.file("missing.tsv") + ": cannot open file for reading");
    EXPECT_ERROR(tg::data::FileError, tg::data::read_tsv(dir.path.string()), "is a directory, not a file");
    write_file(dir.file("vocab.txt"), "not a vocabulary\n<unk>\n");
    EXPECT_ERROR(tg::data::FileError, tg::data::Vocabulary::load(dir.file("vocab.txt")),
                 "vocabulary: " + dir.file("vocab.txt") + ":1: ");
  }

  TEST_CASE("NaN loss under anomaly mode: AnomalyError naming the op; the step never happens") {
    Rig rig, control;
    {
      tg::DetectAnomalyGuard anomaly;
      // log of a negative number: the loss would be NaN.
      EXPECT_ERROR(tg::AnomalyError, tg::mean(tg::log(rig.logits() - 10.0f)), "anomaly: op 'log' (tape entry",
                   "produced NaN or Inf in its forward value [3, 2]");
      // NaN in the data: a per-sample weight (a broken tf-idf value, say).
      Tensor weights(Array{1, 1, std::numeric_limits<float>::quiet_NaN(), 1, 1, 1});
      EXPECT_ERROR(tg::AnomalyError, rig.net.bag->forward(words, offsets, weights),
                   "anomaly: op 'embedding_bag' (tape entry", "NaN or Inf in its forward value [3, 3]");
    }
    check_intact(rig, control);
  }

  TEST_CASE("anomaly mode: an Inf born in backward names the op") {
    // d sqrt(x)/dx at x = 0 is Inf, while the forward value is a finite 0.
    Tensor x({0.0f, 4.0f}, true);
    tg::DetectAnomalyGuard anomaly;
    Tensor loss = tg::sum(tg::pow(x, 0.5f));
    EXPECT_ERROR(tg::AnomalyError, loss.backward(), "anomaly: backward of op 'pow' (tape entry",
                 "NaN or Inf in the gradient of its input 0");
  }

  TEST_CASE("a save that fails part-way leaves the previous file loadable") {
    Rig rig, control;
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    rig.net.save(path);
    const tg::StateDict saved = rig.net.state_dict();
    const std::size_t size = fs::file_size(path);
    rig.step();  // new values the failed saves below try to write
    control.step();

    SUBCASE("the disk fills up half-way through the data") {
      FileSizeLimit limit(size / 2);
      EXPECT_ERROR(tg::SafetensorsError, rig.net.save(path), "safetensors: " + path + ": writing",
                   "failed (disk full or file too large?); the old file is unchanged");
    }
    SUBCASE("the target is a directory, so the final rename fails") {
      const std::string taken = dir.file("taken");
      fs::create_directories(fs::path(taken) / "inside");
      EXPECT_ERROR(tg::SafetensorsError, rig.net.save(taken), "cannot rename");
      CHECK(fs::is_directory(fs::path(taken) / "inside"));
      CHECK(temporaries(dir.path, "taken") == 0);
    }
    SUBCASE("the directory disappeared") {
      const fs::path gone = dir.path / "gone";
      fs::create_directories(gone);
      fs::remove(gone);
      EXPECT_ERROR(tg::SafetensorsError, rig.net.save((gone / "model.safetensors").string()),
                   "cannot create the temporary file");
    }
    // The previous checkpoint is whole and loads into a fresh model.
    CHECK(temporaries(dir.path, "model.safetensors") == 0);
    CHECK(fs::file_size(path) == size);
    Net fresh;
    fresh.load(path);
    for (const auto& [name, value] : fresh.state_dict()) {
      CAPTURE(name);
      CHECK(value == saved.at(name));
    }
    check_intact(rig, control);
  }

  TEST_CASE("a thousand training steps with evaluation outside NoGradGuard: no tape growth, flat memory") {
    // Bag-of-words both ways on synthetic documents: EmbeddingBag over ids and
    // Linear over multi-hot rows, Adam, and an evaluation forward every 10 steps
    // whose result is dropped without NoGradGuard (its graph must free itself).
    constexpr std::size_t vocab = 300, dim = 16, batch = 16, steps = 1000;
    tg::Generator gen(5);
    nn::EmbeddingBag bag(vocab, dim, {.mode = nn::EmbeddingBagMode::sum}, gen);
    nn::Linear proj(vocab, dim, false, gen), head_a(dim, 2, true, gen), head_b(dim, 2, true, gen);
    std::vector<Tensor> pa = {bag.weight, head_a.weight, *head_a.bias};
    std::vector<Tensor> pb = {proj.weight, head_b.weight, *head_b.bias};
    tg::optim::Adam opt_a(pa, {.lr = 0.01}), opt_b(pb, {.lr = 0.01});
    std::uniform_int_distribution<int64_t> word(0, static_cast<int64_t>(vocab) - 1);

    std::size_t rss_at_100 = 0, max_slots = 0;
    for (std::size_t step = 1; step <= steps; ++step) {
      Indices ids = xt::zeros<int64_t>({batch * 8}), offs = xt::zeros<int64_t>({batch}),
              y = xt::zeros<int64_t>({batch});
      Array multi_hot = xt::zeros<float>({batch, vocab});
      for (std::size_t d = 0; d < batch; ++d) {
        offs(d) = static_cast<int64_t>(d * 8);
        for (std::size_t k = 0; k < 8; ++k) {
          ids(d * 8 + k) = word(gen);
          multi_hot(d, ids(d * 8 + k)) += 1.0f;
        }
        y(d) = ids(d * 8) % 2;  // learnable: the label is the parity of the first word
      }
      for (int model = 0; model < 2; ++model) {
        tg::optim::Adam& opt = model == 0 ? opt_a : opt_b;
        auto logits = [&] {
          return model == 0 ? head_a(tg::tanh(bag(ids, offs))) : head_b(tg::tanh(proj(Tensor(multi_hot))));
        };
        Tensor loss = tg::cross_entropy(logits(), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (step % 10 == 0) {
          const float eval_loss = tg::cross_entropy(logits(), y).item();  // recorded, then dropped
          REQUIRE(std::isfinite(eval_loss));
        }
      }
      max_slots = std::max(max_slots, tg::Tape::current().slots());  // before live_count(), which prunes
      REQUIRE(tg::Tape::current().live_count() == 0);
      if (step == 100) rss_at_100 = resident_bytes();
    }
    const std::size_t rss_at_end = resident_bytes();
    // A few dozen entries per step at most; without pruning this would be tens of thousands.
    CHECK(max_slots < 200);
    MESSAGE("RSS at step 100: " << rss_at_100 / 1024 << " KiB, at step " << steps << ": " << rss_at_end / 1024
                                << " KiB");
    if (!sanitized && rss_at_100 > 0)
      CHECK(static_cast<double>(rss_at_end) < 1.05 * static_cast<double>(rss_at_100));
  }
}
