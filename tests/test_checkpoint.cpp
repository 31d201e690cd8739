// Checkpoints (optim/checkpoint.hpp): one call saves a run, one call loads it,
// a bad file changes nothing, and a run resumed in a new process ends bit for
// bit where the uninterrupted run ends.
#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <string>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;
using tg::test::read_file;
using tg::test::run_command;
using tg::test::TempDir;
namespace nn = tg::nn;
namespace optim = tg::optim;

namespace {

struct Net : nn::Module {
  std::shared_ptr<nn::EmbeddingBag> bag;
  std::shared_ptr<nn::Linear> head;
  explicit Net(uint32_t seed) {
    tg::Generator gen(seed);
    bag = register_module("bag", std::make_shared<nn::EmbeddingBag>(
                                     10, 4, nn::EmbeddingBagOptions{.mode = nn::EmbeddingBagMode::sum}, gen));
    head = register_module("head", std::make_shared<nn::Linear>(4, 2, true, gen));
  }
  Tensor forward(const Indices& words, const Indices& offsets) {
    return head->forward(tg::tanh(bag->forward(words, offsets)));
  }
};

// A model, an optimizer with two groups, a scheduler and a generator; `steps`
// training steps on batches drawn with the generator.
struct Run {
  Net net;
  optim::Adam adam;
  optim::StepLR sched;
  tg::Generator gen;
  explicit Run(uint32_t seed, int steps = 0)
      : net(seed),
        adam({{.params = net.bag->parameters(), .lr = 0.1}, {.params = net.head->parameters()}},
             {.lr = 0.01, .amsgrad = true}),
        sched(adam, {.step_size = 2, .gamma = 0.5}),
        gen(seed) {
    for (int i = 0; i < steps; ++i) step();
  }
  void step() {
    Indices words = xt::zeros<int64_t>({6});
    for (auto& w : words) w = static_cast<int64_t>(gen() % 10);
    const Tensor loss = tg::cross_entropy(net.forward(words, Indices{0, 3}), Indices{0, 1});
    adam.zero_grad();
    loss.backward();
    adam.step();
    sched.step();
  }
  tg::Checkpoint parts() {
    return {.model = &net, .optimizer = &adam, .scheduler = &sched, .generator = &gen};
  }
};

// Nothing tells a and b apart: model, optimizer, scheduler, generator, and one more step.
void check_same(Run& a, Run& b) {
  CHECK(a.net.state_dict() == b.net.state_dict());
  const optim::StateDict x = a.adam.state_dict(), y = b.adam.state_dict();
  CHECK(x.metadata == y.metadata);
  CHECK(x.tensors == y.tensors);
  CHECK(a.sched.state_dict() == b.sched.state_dict());
  CHECK(a.gen.state() == b.gen.state());
  a.step();
  b.step();
  CHECK(a.net.state_dict() == b.net.state_dict());
}

std::string resume_train() {
  return std::string(TAPEGRAD_BUILD_DIR) + "/tests/resume_train";
}

}  // namespace

TEST_SUITE("train") {
  TEST_CASE("save_checkpoint and load_checkpoint: every part comes back, and training goes on the same") {
    TempDir dir;
    const std::string path = dir.file("run.ckpt");
    Run run(1, 5);
    tg::Checkpoint saved = run.parts();
    saved.metadata = {{"epoch", "5"}, {"note", "lr halves every 2 steps"}};
    saved.tensors = {{"mean", Array{0.5, 1.5}}};
    tg::save_checkpoint(path, saved);

    Run other(2);  // other weights, no state, another generator
    CHECK(other.net.state_dict() != run.net.state_dict());
    tg::Checkpoint into = other.parts();
    tg::load_checkpoint(path, into);
    CHECK(into.metadata == saved.metadata);
    CHECK(into.tensors == saved.tensors);
    CHECK(other.adam.lr(0) == 0.1 * 0.25);  // 5 steps of StepLR(2, 0.5): two halvings
    CHECK(other.sched.last_epoch() == 5);
    const tg::StateDict saved_model = run.net.state_dict();
    check_same(run, other);

    // Only the parts asked for are loaded; the rest of the file is ignored.
    Run third(3);
    const auto before = third.adam.state_dict().tensors;
    tg::Checkpoint model_only{.model = &third.net};
    tg::load_checkpoint(path, model_only);
    CHECK(third.net.state_dict() == saved_model);
    CHECK(third.adam.state_dict().tensors == before);
    CHECK(model_only.metadata.at("epoch") == "5");
  }

  TEST_CASE("a checkpoint is a safetensors file with named parts") {
    TempDir dir;
    const std::string path = dir.file("run.ckpt");
    Run run(1, 3);
    tg::save_checkpoint(
        path,
        {.model = &run.net, .optimizer = &run.adam, .generator = &run.gen, .metadata = {{"epoch", "1"}}});
    const tg::StateDict tensors = tg::load_safetensors(path);
    const tg::Metadata meta = tg::load_safetensors_metadata(path);
    CHECK(tensors.at("model.head.weight") == run.net.head->weight.value());
    CHECK(tensors.count("optimizer.state.0.exp_avg") == 1);
    CHECK(tensors.count("optimizer.state.2.max_exp_avg_sq") == 1);
    CHECK(meta.at("format") == "tapegrad checkpoint 1");
    CHECK(meta.at("contents") == R"(["model","optimizer","generator"])");
    CHECK(meta.at("optimizer.type") == "Adam");
    CHECK(meta.at("optimizer.state.0.step") == "3");
    CHECK(meta.at("user.epoch") == "1");
    CHECK(meta.count("scheduler.type") == 0);
  }

  TEST_CASE("load_checkpoint checks every part before it loads any: a bad file changes nothing") {
    TempDir dir;
    Run source(1, 4);
    const std::string good = dir.file("good.ckpt");
    tg::save_checkpoint(good, source.parts());

    Run run(5, 2), control(5, 2);
    auto expect = [&](const std::string& path, const std::string& fragment, bool safetensors = false) {
      CAPTURE(fragment);
      tg::Checkpoint into = run.parts();
      into.metadata = {{"kept", "yes"}};
      try {
        tg::load_checkpoint(path, into);
        FAIL("loaded " << path);
      } catch (const tg::SafetensorsError& e) {
        CHECK(safetensors);
        CHECK(std::string(e.what()).find(fragment) != std::string::npos);
      } catch (const std::invalid_argument& e) {
        CHECK(!safetensors);
        const std::string what = e.what();
        CHECK(what.rfind("load_checkpoint: " + path + ": ", 0) == 0);
        CHECK_MESSAGE(what.find(fragment) != std::string::npos, what);
      }
      CHECK(into.metadata == tg::Metadata{{"kept", "yes"}});
    };

    const std::string plain = dir.file("model.safetensors");
    source.net.save(plain);
    expect(plain, "not a tapegrad checkpoint");

    const std::string no_optimizer = dir.file("no_optimizer.ckpt");
    tg::save_checkpoint(no_optimizer, {.model = &source.net, .generator = &source.gen});
    expect(no_optimizer, "the checkpoint holds no optimizer (it holds [\"model\",\"generator\"])");

    // Each of these fits up to its last part, which must not leave the earlier ones loaded.
    nn::Linear small(4, 2);
    const std::string other_model = dir.file("other_model.ckpt");
    tg::save_checkpoint(other_model, {.model = &small});
    expect(other_model, "load_state_dict: the state does not fit the module; missing: bag.weight");

    Tensor p = tg::zeros({4}, true);
    optim::SGD sgd(std::vector<optim::ParamGroup>{{.params = {p}}, {.params = {}}, {.params = {}}},
                   {.lr = 0.1});
    const std::string other_optimizer = dir.file("other_optimizer.ckpt");
    tg::save_checkpoint(other_optimizer, {.model = &source.net, .optimizer = &sgd});
    expect(other_optimizer, "Adam.load_state_dict: the state is SGD's");

    optim::CosineAnnealingLR cosine(source.adam, {.T_max = 4});
    const std::string other_scheduler = dir.file("other_scheduler.ckpt");
    tg::save_checkpoint(
        other_scheduler,
        {.model = &source.net, .optimizer = &source.adam, .scheduler = &cosine, .generator = &source.gen});
    expect(other_scheduler, "StepLR.load_state_dict: the state is CosineAnnealingLR's");

    tg::StateDict tensors = tg::load_safetensors(good);
    tg::Metadata meta = tg::load_safetensors_metadata(good);
    const std::string bad_generator = dir.file("bad_generator.ckpt");
    meta["generator"] = meta["generator"].substr(0, 100);
    tg::save_safetensors(bad_generator, tensors, meta);
    expect(bad_generator, "\"generator\" is not a state this library's std::mt19937 wrote");

    const std::string truncated = dir.file("truncated.ckpt");
    std::ofstream(truncated, std::ios::binary) << read_file(good).substr(0, 200);
    expect(truncated, "safetensors: " + truncated, /*safetensors=*/true);
    expect(dir.file("missing.ckpt"), "cannot open the file", /*safetensors=*/true);

    check_same(run, control);
  }

  TEST_CASE("JSON nested 200,000 levels deep in a file is refused with the reason, not a stack overflow") {
    TempDir dir;
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    const std::string fragment = "nests deeper than 128 levels";

    // A safetensors header: a tensor whose shape is nested lists.
    const std::string header = R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    const std::string file = dir.file("deep.safetensors");
    std::ofstream(file, std::ios::binary) << bytes << header;
    CHECK_THROWS_WITH_AS(tg::load_safetensors(file),
                         ("safetensors: " + file + ": the header " + fragment).c_str(), tg::SafetensorsError);

    // A checkpoint's metadata: the list of parts, the optimizer's groups and
    // options, the scheduler's learning rates.
    Run source(1, 2);
    const std::string good = dir.file("good.ckpt");
    tg::save_checkpoint(good, source.parts());
    const tg::StateDict tensors = tg::load_safetensors(good);
    const tg::Metadata meta = tg::load_safetensors_metadata(good);
    Run run(5, 2), control(5, 2);
    for (const std::string key :
         {"contents", "optimizer.param_groups", "optimizer.options", "scheduler.base_lrs"}) {
      CAPTURE(key);
      REQUIRE(meta.count(key) == 1);
      tg::Metadata hostile = meta;
      hostile[key] =
          key == "optimizer.param_groups" ? R"([{"lr":0.1,"weight_decay":0,"params":)" + deep + "}]" : deep;
      const std::string path = dir.file("deep.ckpt");
      tg::save_safetensors(path, tensors, hostile);
      tg::Checkpoint into = run.parts();
      try {
        tg::load_checkpoint(path, into);
        FAIL("loaded " << key);
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        CHECK(what.rfind("load_checkpoint: " + path + ": ", 0) == 0);
        CHECK_MESSAGE(what.find(fragment) != std::string::npos, what.substr(0, 300));
        CHECK(what.size() < 1000);  // the text is not quoted whole
      }
    }
    check_same(run, control);
  }

  TEST_CASE("3 epochs, or 2 epochs + save + a new process that loads and runs 1: the same bits") {
    TempDir dir;
    for (const std::string model : {"dense", "sparse", "sparse_sgd"}) {
      CAPTURE(model);
      const std::string run = resume_train() + " " + model + " ";
      const std::string full = dir.file(model + "_full.ckpt"), half = dir.file(model + "_half.ckpt"),
                        resumed = dir.file(model + "_resumed.ckpt");
      for (const std::string& command :
           {run + "3 " + full, run + "2 " + half, run + "1 " + resumed + " --load " + half}) {
        const tg::test::CommandResult r = run_command(command);
        INFO(command << "\n" << r.output);
        REQUIRE(r.status == 0);
      }
      // The whole files are equal byte for byte: weights, moments, step counts,
      // learning rates, scheduler and generator states, the epoch.
      const std::string a = read_file(full), b = read_file(resumed);
      CHECK(a.size() > 1000);
      CHECK(a == b);
      CHECK(tg::load_safetensors_metadata(resumed).at("user.epoch") == "3");
      const std::string weight = model == "dense" ? "model.fc1.weight" : "model.bag.weight";
      CHECK(tg::load_safetensors(half).at(weight) !=
            tg::load_safetensors(full).at(weight));  // epoch 3 did something

      // The test can tell: leave out the optimizer's state or the generator's and the runs part.
      for (const std::string part : {"optimizer", "generator"}) {
        const std::string partial = dir.file(model + "_without_" + part + ".ckpt");
        const tg::test::CommandResult r =
            run_command(run + "1 " + partial + " --load " + half + " --skip " + part);
        INFO(r.output);
        REQUIRE(r.status == 0);
        const tg::StateDict x = tg::load_safetensors(full), y = tg::load_safetensors(partial);
        std::size_t differ = 0;
        for (const auto& [name, value] : x)
          if (name.rfind("model.", 0) == 0) differ += value != y.at(name);
        CHECK_MESSAGE(differ > 0, "without the " << part << "'s state the resumed run still matched");
      }
    }
  }
}
