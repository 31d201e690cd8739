// Any byte string as a safetensors file.
//
// Promises checked (io/safetensors.hpp):
//   - load_safetensors either returns or throws SafetensorsError whose what()
//     starts with "safetensors: <path>: "; nothing else escapes, nothing crashes;
//   - the metadata loader agrees with it (both fail or both succeed);
//   - what loads, saves and loads again to the same names, shapes and bytes;
//   - loading it into a module either fits or throws std::invalid_argument.
#include <cstring>

#include "io/safetensors.hpp"
#include "fuzz_common.hpp"
#include "nn/linear.hpp"

namespace {

const std::string& input_path() {
  static const std::string p = fuzz::scratch_path("input.safetensors");
  return p;
}
const std::string& copy_path() {
  static const std::string p = fuzz::scratch_path("copy.safetensors");
  return p;
}

bool same_bytes(const tg::Array& a, const tg::Array& b) {
  // memcmp, not ==: NaN payloads must survive too. (A zero-size array may have no buffer.)
  return a.shape() == b.shape() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void check_message(const tg::SafetensorsError& e) {
  const std::string prefix = "safetensors: " + input_path() + ": ";
  FUZZ_EXPECT(std::string(e.what()).rfind(prefix, 0) == 0, e.what());
  FUZZ_EXPECT(e.path == input_path(), e.what());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::write_file(input_path(), data, size);

  tg::StateDict state;
  bool loaded = false;
  try {
    state = tg::load_safetensors(input_path());
    loaded = true;
  } catch (const tg::SafetensorsError& e) {
    check_message(e);
  } catch (const std::exception& e) {
    fuzz::broken(std::string("load_safetensors threw something other than SafetensorsError: ") + e.what());
  }

  tg::Metadata metadata;
  try {
    metadata = tg::load_safetensors_metadata(input_path());
    FUZZ_EXPECT(loaded, "the metadata loads from a file whose tensors do not");
  } catch (const tg::SafetensorsError& e) {
    check_message(e);
    FUZZ_EXPECT(!loaded, std::string("the tensors load but the metadata does not: ") + e.what());
  }
  if (!loaded) return 0;

  // Round trip: save what was read, read it back, compare byte for byte.
  try {
    tg::save_safetensors(copy_path(), state, metadata);
  } catch (const std::exception& e) {
    fuzz::broken(std::string("saving a state that loaded failed: ") + e.what());
  }
  const tg::StateDict again = tg::load_safetensors(copy_path());
  FUZZ_EXPECT(tg::load_safetensors_metadata(copy_path()) == metadata, "metadata changed in a round trip");
  FUZZ_EXPECT(again.size() == state.size(), "tensor count changed in a round trip");
  for (const auto& [name, a] : state) {
    auto it = again.find(name);
    FUZZ_EXPECT(it != again.end() && same_bytes(a, it->second),
                "tensor '" + name + "' changed in a round trip");
  }

  // Into a module: fits (names "weight", "bias" of the right shapes) or is refused whole.
  tg::Generator gen(0);
  tg::nn::Linear fc(2, 1, true, gen);
  const tg::Array before = fc.weight.value();
  try {
    fc.load_state_dict(state);
  } catch (const std::invalid_argument&) {
    FUZZ_EXPECT(fc.weight.value() == before, "a refused load_state_dict changed the weight");
  }
  return 0;
}
