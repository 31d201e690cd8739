#include "safetensors.hpp"

#include <unistd.h>  // getpid

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "read_json.hpp"
#include "utf8.hpp"

namespace tg {

// The data section is copied byte for byte between the file and float arrays.
static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this code assumes a little-endian machine");

using json = nlohmann::json;

namespace {

// The same limit as the reference implementation: no real header is this big,
// and it stops a corrupt length from making us allocate gigabytes.
constexpr uint64_t max_header_bytes = 100'000'000;

struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin = 0, end = 0;  // within the data section
};

struct Header {
  std::vector<Entry> entries;
  Metadata metadata;
  uint64_t data_start = 0;  // file position of the data section
};

[[noreturn]] void fail(const std::string& path, const std::string& reason) {
  throw SafetensorsError(path, reason);
}

std::string offsets_str(const Entry& e) {
  return "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
}

// Parses the JSON text, refusing a name that appears twice (a plain parse
// would silently keep the last one).
json parse_header_json(const std::string& text, const std::string& path) {
  std::string duplicate;
  std::set<std::string> seen;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  std::string why;
  json j = detail::parse_json(text, why, on_event);
  if (j.is_discarded()) fail(path, "the header " + why);
  if (!duplicate.empty()) fail(path, "the header names '" + duplicate + "' twice");
  if (!j.is_object()) fail(path, "the header is not a JSON object");
  return j;
}

Metadata parse_metadata(const json& j, const std::string& path) {
  Metadata out;
  if (!j.is_object()) fail(path, "__metadata__ is not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) fail(path, "__metadata__ value for '" + key + "' is not a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// One tensor's entry, checked on its own: dtype, shape, offsets within the
// data section and exactly shape x 4 bytes long.
Entry parse_entry(const std::string& name, const json& j, uint64_t data_size, const std::string& path) {
  const std::string where = "tensor '" + name + "'";
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    fail(path, where + " needs \"dtype\", \"shape\" and \"data_offsets\"");
  const json &dtype = j["dtype"], &shape = j["shape"], &offsets = j["data_offsets"];
  if (!dtype.is_string()) fail(path, where + ": dtype is not a string");
  if (dtype != "F32")
    fail(path, where + " has dtype '" + dtype.get<std::string>() + "'; only F32 (float32) is supported");
  Entry e;
  e.name = name;
  if (!shape.is_array()) fail(path, where + ": shape is not an array");
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) fail(path, where + ": shape " + shape.dump() + " is not a list of sizes");
    e.shape.push_back(d.get<std::size_t>());
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(path, where + ": data_offsets " + offsets.dump() + " is not a pair of byte offsets");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin) fail(path, where + ": " + offsets_str(e) + " end before they begin");
  if (e.end > data_size)
    fail(path, where + ": " + offsets_str(e) + " run past the end of the data section (" +
                   std::to_string(data_size) + " bytes)");
  // Element count, saturating instead of overflowing on absurd shapes.
  uint64_t count = 1;
  for (std::size_t d : e.shape)
    count = (d != 0 && count > std::numeric_limits<uint64_t>::max() / d)
                ? std::numeric_limits<uint64_t>::max()
                : count * d;
  const uint64_t bytes = e.end - e.begin;
  if (count > bytes / 4 || count * 4 != bytes)
    fail(path, where + ": shape " + shape_str(e.shape) + " of F32 does not fit its " + offsets_str(e) + " (" +
                   std::to_string(bytes) + " bytes)");
  return e;
}

// The data ranges must tile the data section: no overlap (two tensors sharing
// bytes), no gap, nothing left over, as the reference implementation requires.
void check_tiling(std::vector<Entry> entries, uint64_t data_size, const std::string& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t pos = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos)
      fail(path, "tensors '" + previous->name + "' and '" + e.name + "' overlap (" + e.name + " has " +
                     offsets_str(e) + ")");
    if (e.begin > pos)
      fail(path, "bytes " + std::to_string(pos) + " to " + std::to_string(e.begin) +
                     " of the data section belong to no tensor");
    pos = e.end;
    previous = &e;
  }
  if (pos != data_size)
    fail(path, "the data section holds " + std::to_string(data_size) + " bytes but the tensors use " +
                   std::to_string(pos));
}

Header read_header(std::ifstream& in, const std::string& path) {
  if (!in) fail(path, "cannot open the file for reading");
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (!in || end < 0) fail(path, "cannot read the file (is it a directory?)");
  const uint64_t file_size = static_cast<uint64_t>(end);
  in.seekg(0);
  if (file_size < 8)
    fail(path, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];  // little-endian
  if (n > max_header_bytes)
    fail(path, "header length " + std::to_string(n) + " is larger than the limit of " +
                   std::to_string(max_header_bytes) + " bytes");
  if (n > file_size - 8)
    fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) fail(path, "could not read the header");

  Header h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  const json j = parse_header_json(text, path);
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__")
      h.metadata = parse_metadata(value, path);
    else
      h.entries.push_back(parse_entry(name, value, data_size, path));
  }
  check_tiling(h.entries, data_size, path);
  return h;
}

}  // namespace

StateDict load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const Header h = read_header(in, path);
  StateDict out;
  for (const Entry& e : h.entries) {
    Array a = xt::empty<float>(e.shape);
    in.seekg(static_cast<std::streamoff>(h.data_start + e.begin));
    in.read(reinterpret_cast<char*>(a.data()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) fail(path, "could not read the data of tensor '" + e.name + "'");
    out.emplace(e.name, std::move(a));
  }
  return out;
}

Metadata load_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return read_header(in, path).metadata;
}

// The header for `tensors` laid out one after another in name order, padded
// with spaces to a multiple of 8 bytes (as the reference writer does, so the
// data that follows is aligned).
static std::string make_header(const StateDict& tensors, const Metadata& metadata) {
  // The header is JSON, UTF-8 text: every name and metadata string must be UTF-8.
  auto check_utf8 = [](const char* what, const std::string& text) {
    if (const std::string bad = detail::invalid_utf8_at(text); !bad.empty())
      throw std::invalid_argument(std::string("save_safetensors: ") + what + " '" +
                                  detail::escape_invalid_utf8(text) + "' is not UTF-8 (" + bad +
                                  "); a safetensors header is JSON, UTF-8 text");
  };
  for (const auto& [name, a] : tensors) check_utf8("tensor name", name);
  for (const auto& [key, value] : metadata) {
    check_utf8("metadata key", key);
    check_utf8(("metadata value of '" + key + "',").c_str(), value);
  }
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, a] : tensors) {
    if (name == "__metadata__")
      throw std::invalid_argument("save_safetensors: '__metadata__' cannot name a tensor");
    const uint64_t bytes = a.size() * sizeof(float);
    header[name] = {{"dtype", "F32"},
                    {"shape", Shape(a.shape().begin(), a.shape().end())},
                    {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  const std::string header = make_header(tensors, metadata);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot create the temporary file " + tmp + ": " + std::strerror(errno));
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, a] : tensors)
      out.write(reinterpret_cast<const char*>(a.data()),
                static_cast<std::streamsize>(a.size() * sizeof(float)));
    out.close();  // flushes; a full disk shows up here at the latest
    if (out.fail()) {
      std::remove(tmp.c_str());
      fail(path, "writing " + tmp + " failed (disk full or file too large?); the old file is unchanged");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail(path, "cannot rename " + tmp + " over it: " + why);
  }
}

}  // namespace tg
