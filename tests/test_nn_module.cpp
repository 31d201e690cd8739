// Tests for nn::Module (named parameters, state dicts) and safetensors files:
// round trips, Python interop both ways, corrupt files, and atomic saves.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using nlohmann::json;
using tg::Array;
using tg::Indices;
using tg::Tensor;
namespace fs = std::filesystem;
namespace nn = tg::nn;

namespace {

struct TinyModel : nn::Module {
  Tensor scale;
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Linear> fc;
  explicit TinyModel(tg::Generator& gen) {
    scale = register_parameter("scale", tg::ones({1}));
    emb = register_module("emb", std::make_shared<nn::Embedding>(10, 4, nn::EmbeddingOptions{}, gen));
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 2, true, gen));
  }
  Tensor forward(const Indices& ids) { return fc->forward(emb->forward(ids)) * scale; }
};

using tg::test::TempDir;
using tg::test::write_file;

// The bytes of a safetensors file: header length (or `length` if given), header, data.
std::string file_bytes(const std::string& header, const std::string& data,
                       std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

bool same_state(const tg::StateDict& a, const tg::StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, value] : a)
    if (!b.count(name) || !(b.at(name) == value)) return false;  // shapes and values, exactly
  return true;
}

// A Python 3 that has numpy ("python3" first, then Debian's), or none.
std::optional<std::string> python_with_numpy() {
  for (const char* python : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(python) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return python;
  return std::nullopt;
}

// Runs tests/tools/safetensors_np.py; true when it succeeded.
bool run_tool(const std::string& python, const std::string& command, const std::string& src,
              const std::string& dst) {
  const std::string cmd = python + " " + tg::test::source_path("tests/tools/safetensors_np.py") + " " +
                          command + " '" + src + "' '" + dst + "'";
  return std::system(cmd.c_str()) == 0;
}

json tensor_json(const Array& a) {
  return {{"shape", tg::Shape(a.shape().begin(), a.shape().end())},
          {"data", std::vector<float>(a.begin(), a.end())}};
}

// Restores a resource limit and the SIGXFSZ handler when the test is done.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old);
    old_handler = ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
    rlimit small{bytes, old.rlim_max};
    setrlimit(RLIMIT_FSIZE, &small);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
  }
};

}  // namespace

TEST_SUITE("nn") {
  // ------------------------------------------------------------------ Module

  TEST_CASE("named parameters: own first, then submodules, with dotted names") {
    tg::Generator gen(0);
    TinyModel model(gen);
    std::vector<std::string> names;
    for (const auto& [name, t] : model.named_parameters()) names.push_back(name);
    CHECK(names == std::vector<std::string>{"scale", "emb.weight", "fc.weight", "fc.bias"});

    const std::vector<Tensor> params = model.parameters();
    REQUIRE(params.size() == 4);
    CHECK(params[1].is_same(model.emb->weight));  // handles, not copies
    CHECK(params[3].is_same(*model.fc->bias));
    for (const Tensor& p : params) CHECK(p.requires_grad());

    struct Outer : nn::Module {
      explicit Outer(tg::Generator& gen) { register_module("model", std::make_shared<TinyModel>(gen)); }
    } outer(gen);
    CHECK(outer.named_parameters()[2].first == "model.fc.weight");
    CHECK(outer.state_dict().count("model.emb.weight") == 1);
  }

  TEST_CASE("parameters carry their path as name(), for listings and errors") {
    tg::Generator gen(0);
    TinyModel model(gen);
    std::vector<std::string> names;
    for (const auto& [name, t] : model.named_parameters()) names.push_back(t.name());
    CHECK(names == std::vector<std::string>{"scale", "emb.weight", "fc.weight", "fc.bias"});

    struct Outer : nn::Module {
      std::shared_ptr<TinyModel> inner;
      explicit Outer(tg::Generator& gen) { inner = register_module("model", std::make_shared<TinyModel>(gen)); }
    } outer(gen);
    CHECK(outer.inner->fc->weight.name() == "model.fc.weight");
    nn::Sequential seq(nn::Linear(3, 2, true, gen), nn::Tanh());
    CHECK(seq.named_parameters()[0].second.name() == "0.weight");

    // A name the user gave stays.
    auto fc = std::make_shared<nn::Linear>(2, 2, false, gen);
    fc->weight.set_name("encoder");
    struct Holder : nn::Module {
      explicit Holder(std::shared_ptr<nn::Linear> fc) { register_module("fc", std::move(fc)); }
    } holder(fc);
    CHECK(fc->weight.name() == "encoder");

    // An in-place write between forward and backward names the parameter.
    Tensor loss = tg::sum(model.forward(Indices{1, 2}));
    {
      tg::NoGradGuard no_grad;
      model.fc->weight.value_mut()(0, 0) += 1.0f;
    }
    CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("'fc.weight' of shape [2, 4]"), std::logic_error);
  }

  TEST_CASE("registration errors, zero_grad, train and eval") {
    tg::Generator gen(1);
    TinyModel model(gen);
    using doctest::Contains;
    CHECK_THROWS_WITH_AS(model.register_parameter("scale", tg::ones({1})), Contains("'scale' already exists"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(model.register_module("fc", std::make_shared<nn::Linear>(1, 1)),
                         Contains("'fc' already exists"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(model.register_parameter("a.b", tg::ones({1})), Contains("no '.'"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(model.register_parameter("", tg::ones({1})), Contains("non-empty"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(model.register_module("none", std::shared_ptr<nn::Linear>()), Contains("is null"),
                         std::invalid_argument);
    CHECK(model.parameters().size() == 4);

    model.forward(Indices{1, 2}).backward(xt::ones<float>({2, 2}));
    CHECK(model.emb->weight.grad().is_sparse());
    CHECK(model.fc->weight.grad().is_dense());
    model.zero_grad();
    for (const Tensor& p : model.parameters()) CHECK(p.grad().empty());

    CHECK(model.is_training());
    model.eval();
    CHECK_FALSE(model.is_training());
    CHECK_FALSE(model.fc->is_training());  // recursive
    model.train();
    CHECK(model.emb->is_training());
  }

  TEST_CASE("a module registered inside itself or inside its own child is refused, naming both") {
    auto outer = std::make_shared<nn::Sequential>(nn::Linear(2, 2));
    auto inner = std::make_shared<nn::Sequential>(nn::Tanh());
    auto leaf = std::make_shared<nn::Linear>(2, 2);
    outer->push_back(inner);  // "1"
    inner->register_module("fc", leaf);
    CHECK_THROWS_WITH_AS(
        inner->register_module("back", outer),
        "Module: registering a tg::nn::Sequential as 'back' inside a tg::nn::Sequential would make "
        "a cycle: the tg::nn::Sequential holds that tg::nn::Sequential (as '1')",
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        leaf->register_module("top", outer),
        doctest::Contains("registering a tg::nn::Sequential as 'top' inside a tg::nn::Linear would make a "
                          "cycle: the tg::nn::Sequential holds that tg::nn::Linear (as '1.fc')"),
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(outer->register_module("self", outer),
                         "Module: a tg::nn::Sequential cannot be registered inside itself (as 'self')",
                         std::invalid_argument);
    // Nothing was added: the parameters are listed as before, without recursing forever.
    CHECK(outer->named_parameters().size() == 4);
    CHECK(inner->named_parameters().size() == 2);
    CHECK(leaf->named_parameters().size() == 2);
    // The same module in two places is not a cycle.
    CHECK_NOTHROW(outer->register_module("again", leaf));
    CHECK(outer->named_parameters().size() == 4);
  }

  TEST_CASE("state_dict copies values; load_state_dict copies them back") {
    tg::Generator gen(2);
    TinyModel a(gen), b(gen);
    tg::StateDict state = a.state_dict();
    CHECK(state.size() == 4);
    CHECK(state.at("fc.weight").shape()[0] == 2);
    state.at("scale")(0) = 5.0f;  // a copy: the model does not change
    CHECK(a.scale.item() == 1.0f);

    CHECK_FALSE(same_state(a.state_dict(), b.state_dict()));
    b.load_state_dict(a.state_dict());
    CHECK(same_state(a.state_dict(), b.state_dict()));
    CHECK(b.emb->weight.requires_grad());             // still parameters
    CHECK_FALSE(b.fc->weight.is_same(a.fc->weight));  // values copied, tensors distinct
  }

  TEST_CASE("load_state_dict lists every problem and changes nothing") {
    tg::Generator gen(3);
    TinyModel model(gen);
    const tg::StateDict before = model.state_dict();
    tg::StateDict bad = TinyModel(gen).state_dict();
    bad.erase("fc.bias");
    bad.erase("scale");
    bad["extra"] = xt::zeros<float>({3});
    bad["fc.weight"] = xt::zeros<float>({4, 2});  // transposed
    // emb.weight is fine and would be copied first if we did not check everything first.
    CHECK_THROWS_WITH_AS(
        model.load_state_dict(bad),
        doctest::Contains("missing: scale, fc.bias; unexpected: extra; wrong shape: fc.weight "
                          "(expected [2, 4], got [4, 2])"),
        std::invalid_argument);
    CHECK(same_state(model.state_dict(), before));

    // strict = false skips missing and unexpected names, but never a wrong shape.
    CHECK_THROWS_WITH_AS(model.load_state_dict(bad, /*strict=*/false),
                         doctest::Contains("wrong shape: fc.weight"), std::invalid_argument);
    CHECK(same_state(model.state_dict(), before));
    bad.erase("fc.weight");
    model.load_state_dict(bad, /*strict=*/false);
    CHECK(model.emb->weight.value() == bad.at("emb.weight"));
    CHECK(model.fc->weight.value() == before.at("fc.weight"));
  }

  // ------------------------------------------------------------- safetensors

  TEST_CASE("save and load: a model round-trips through a safetensors file") {
    tg::Generator gen(4);
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    TinyModel a(gen), b(gen);
    a.save(path);
    b.load(path);
    CHECK(same_state(a.state_dict(), b.state_dict()));
    uint64_t header_length = 0;
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header_length), 8);
    CHECK(header_length % 8 == 0);  // padded: the float data starts 8-byte aligned
    CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);  // no temp left

    // Edge shapes and metadata through the free functions.
    const tg::StateDict odd{
        {"scalar", Array(2.5f)}, {"empty", xt::zeros<float>({0, 3})}, {"vector", Array{1.0f, -2.0f, 3.0f}}};
    tg::save_safetensors(path, odd, {{"format", "np"}, {"note", "line\nbreak \"quoted\""}});
    CHECK(same_state(tg::load_safetensors(path), odd));
    CHECK(tg::load_safetensors_metadata(path) ==
          tg::Metadata{{"format", "np"}, {"note", "line\nbreak \"quoted\""}});
    CHECK_THROWS_WITH_AS(tg::save_safetensors(path, {{"__metadata__", Array{1.0f}}}),
                         doctest::Contains("'__metadata__' cannot name a tensor"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        tg::save_safetensors(path, {{"bad\xff", Array{1.0f}}}),
        "save_safetensors: tensor name 'bad\\xFF' is not UTF-8 (byte 4 is 0xFF); a safetensors "
        "header is JSON, UTF-8 text",
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        tg::save_safetensors(path, odd, {{"note", "caf\xe9"}}),
        doctest::Contains("metadata value of 'note', 'caf\\xE9' is not UTF-8 (byte 4 is 0xE9)"),
        std::invalid_argument);
    CHECK(tg::load_safetensors_metadata(path).at("format") == "np");  // the failed saves changed nothing
  }

  TEST_CASE("Python reads our files and we read Python's") {
    const auto python = python_with_numpy();
    if (!python) {
      MESSAGE("skipped: no python3 with numpy (scripts/setup.sh installs python3-numpy)");
      return;
    }
    tg::Generator gen(5);
    TempDir dir;
    TinyModel model(gen);
    tg::StateDict state = model.state_dict();
    state["scalar"] = Array(-0.5f);
    state["empty"] = xt::zeros<float>({0, 2});

    SUBCASE("tapegrad -> Python") {
      const std::string file = dir.file("ours.safetensors"), out = dir.file("ours.json");
      tg::save_safetensors(file, state, {{"format", "tapegrad"}});
      REQUIRE(run_tool(*python, "to-json", file, out));
      const json j = json::parse(std::ifstream(out));
      MESSAGE("read by Python's " << j["reader"].get<std::string>() << " reader");
      CHECK(j["metadata"] == json{{"format", "tapegrad"}});
      tg::StateDict read;
      for (const auto& [name, t] : j["tensors"].items()) read[name] = tg::test::to_array(t);
      CHECK(same_state(read, state));  // float32 -> JSON double -> float32 is exact
    }
    SUBCASE("Python -> tapegrad") {
      const std::string in = dir.file("theirs.json"), file = dir.file("theirs.safetensors");
      json j = {{"tensors", json::object()}, {"metadata", {{"source", "numpy"}}}};
      for (const auto& [name, a] : state) j["tensors"][name] = tensor_json(a);
      std::ofstream(in) << j.dump();
      REQUIRE(run_tool(*python, "from-json", in, file));
      CHECK(same_state(tg::load_safetensors(file), state));
      CHECK(tg::load_safetensors_metadata(file) == tg::Metadata{{"source", "numpy"}});

      // A model's weights written by Python load into a model here.
      json weights = {{"tensors", json::object()}};
      for (const auto& [name, a] : model.state_dict()) weights["tensors"][name] = tensor_json(a);
      std::ofstream(in) << weights.dump();
      REQUIRE(run_tool(*python, "from-json", in, file));
      TinyModel other(gen);
      other.load(file);
      CHECK(same_state(other.state_dict(), model.state_dict()));
    }
  }

  TEST_CASE("corrupt or hostile files are rejected with the file's name and the reason") {
    TempDir dir;
    const std::string path = dir.file("bad.safetensors");
    const std::string f32x2 = std::string(8, '\0');  // two floats of data
    auto rejects = [&](const std::string& bytes, const std::string& reason) {
      INFO("expecting: " << reason);
      write_file(path, bytes);
      CHECK_THROWS_WITH_AS(tg::load_safetensors(path), doctest::Contains(reason.c_str()),
                           tg::SafetensorsError);
      try {
        tg::load_safetensors(path);
      } catch (const tg::SafetensorsError& e) {
        CHECK(e.path == path);
        CHECK(std::string(e.what()).find("safetensors: " + path + ": ") == 0);
      }
    };
    auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                    const std::string& offsets) {
      return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
             ",\"data_offsets\":" + offsets + "}";
    };
    const std::string ok = "{" + entry("a", "F32", "[2]", "[0,8]") + "}";
    write_file(path, file_bytes(ok, f32x2));
    CHECK(tg::load_safetensors(path).at("a") == Array{0.0f, 0.0f});  // the well-formed baseline

    rejects("12345", "the file has 5 bytes, fewer than the 8-byte header length");
    rejects(file_bytes(ok, f32x2, 1000), "header length 1000 runs past the end of the file (" +
                                             std::to_string(8 + ok.size() + 8) + " bytes)");
    rejects(file_bytes(ok, f32x2, uint64_t(1) << 62), "is larger than the limit of 100000000 bytes");
    rejects(file_bytes("{\"a\": ", ""), "the header is not valid JSON");
    rejects(file_bytes("[1, 2]", ""), "the header is not a JSON object");
    rejects(file_bytes("{\"a\":{\"dtype\":\"F32\"}}", ""),
            "tensor 'a' needs \"dtype\", \"shape\" and \"data_offsets\"");
    rejects(file_bytes("{" + entry("a", "F64", "[1]", "[0,8]") + "}", f32x2),
            "tensor 'a' has dtype 'F64'; only F32 (float32) is supported");
    rejects(file_bytes("{" + entry("a", "F32", "[-2]", "[0,8]") + "}", f32x2), "is not a list of sizes");
    rejects(file_bytes("{" + entry("a", "F32", "[2]", "[0,-8]") + "}", f32x2),
            "is not a pair of byte offsets");
    rejects(file_bytes("{" + entry("a", "F32", "[2]", "[0,16]") + "}", f32x2),
            "tensor 'a': data_offsets [0, 16] run past the end of the data section (8 bytes)");
    rejects(file_bytes("{" + entry("a", "F32", "[0]", "[8,0]") + "}", f32x2), "end before they begin");
    rejects(file_bytes("{" + entry("a", "F32", "[3]", "[0,8]") + "}", f32x2),
            "tensor 'a': shape [3] of F32 does not fit its data_offsets [0, 8] (8 bytes)");
    rejects(file_bytes("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", "[0,8]") + "}", f32x2),
            "does not fit");  // the element count overflows 64 bits
    rejects(
        file_bytes("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}",
                   f32x2 + f32x2),
        "tensors 'a' and 'b' overlap");
    rejects(file_bytes("{" + entry("a", "F32", "[1]", "[4,8]") + "}", f32x2),
            "bytes 0 to 4 of the data section belong to no tensor");
    rejects(file_bytes(ok, f32x2 + f32x2), "the data section holds 16 bytes but the tensors use 8");
    rejects(
        file_bytes("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("a", "F32", "[2]", "[8,16]") + "}",
                   f32x2 + f32x2),
        "the header names 'a' twice");
    rejects(file_bytes("{\"__metadata__\":{\"k\":1}}", ""), "__metadata__ value for 'k' is not a string");
    rejects(file_bytes("{\"__metadata__\":[]}", ""), "__metadata__ is not a JSON object");
    rejects(file_bytes("{\"a\":{\"dtype\":7,\"shape\":[],\"data_offsets\":[0,4]}}", "1234"),
            "tensor 'a': dtype is not a string");
    rejects(file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", f32x2),
            "tensor 'a': shape is not an array");

    CHECK_THROWS_WITH_AS(tg::load_safetensors(dir.file("missing.safetensors")),
                         doctest::Contains("cannot open the file for reading"), tg::SafetensorsError);
    CHECK_THROWS_AS(tg::load_safetensors(dir.path.string()), tg::SafetensorsError);  // a directory

    // A module that fails to load from a bad file keeps its weights.
    tg::Generator gen(6);
    TinyModel model(gen);
    const tg::StateDict before = model.state_dict();
    CHECK_THROWS_AS(model.load(path), tg::SafetensorsError);
    CHECK(same_state(model.state_dict(), before));
  }

  TEST_CASE("a save that fails part-way leaves the old file loadable") {
    tg::Generator gen(7);
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    TinyModel model(gen);
    model.save(path);
    const tg::StateDict saved = model.state_dict();
    const tg::StateDict big{{"table", xt::ones<float>({20000, 16})}};  // 1.28 MB

    {
      // Let this process write at most 64 KB per file: like a disk filling up,
      // the write fails after part of the data is out.
      FileSizeLimit limit(64 * 1024);
      CHECK_THROWS_WITH_AS(tg::save_safetensors(path, big), doctest::Contains("the old file is unchanged"),
                           tg::SafetensorsError);
    }
    CHECK(same_state(tg::load_safetensors(path), saved));
    CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);  // temp removed

    // The temporary file cannot be created (its name is taken by a directory).
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    fs::create_directory(tmp);
    CHECK_THROWS_WITH_AS(tg::save_safetensors(path, big),
                         doctest::Contains("cannot create the temporary file"), tg::SafetensorsError);
    fs::remove(tmp);
    CHECK(same_state(tg::load_safetensors(path), saved));

    // The rename fails (the target is a directory): the temporary is removed.
    CHECK_THROWS_WITH_AS(tg::save_safetensors(dir.path.string(), saved), doctest::Contains("cannot rename"),
                         tg::SafetensorsError);
    CHECK_FALSE(fs::exists(dir.path.string() + ".tmp." + std::to_string(::getpid())));
  }
}
