// The pre-tokenised corpus every step runner reads, so that tapegrad, PyTorch and
// libtorch see the same documents in the same batch order.
//
// Layout (little-endian), written by export_ids and read by ids_file.hpp and
// step_pytorch.py:
//
//   char    magic[8]              "TGIDS01\n"
//   int64   vocab, classes, docs, ids
//   int64   offsets[docs + 1]     document d holds ids[offsets[d] .. offsets[d + 1])
//   int32   labels[docs]          class id of each document
//   int32   ids[ids]              token ids, sorted and unique within a document
//
// Documents are stored in training order: batch b is documents [b * B, b * B + B).
// Ids are unique within a document because the model reads multi-hot rows: a word
// counts once however often it occurs, so EmbeddingBag(sum) over the ids equals
// Linear over the 0/1 row, and no per-sample weights are needed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

inline constexpr char ids_magic[8] = {'T', 'G', 'I', 'D', 'S', '0', '1', '\n'};

struct Corpus {
  int64_t vocab = 0, classes = 0;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> labels;
  std::vector<int32_t> ids;

  int64_t docs() const { return static_cast<int64_t>(labels.size()); }
  // Full batches of `batch` documents; step s reads batch s % batches(batch).
  int64_t batches(int64_t batch) const { return docs() / batch; }
};

inline void write_corpus(const std::string& path, const Corpus& c) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  const int64_t header[4] = {c.vocab, c.classes, c.docs(), static_cast<int64_t>(c.ids.size())};
  bool ok = std::fwrite(ids_magic, 1, 8, f) == 8 && std::fwrite(header, sizeof(int64_t), 4, f) == 4 &&
            std::fwrite(c.offsets.data(), sizeof(int64_t), c.offsets.size(), f) == c.offsets.size() &&
            std::fwrite(c.labels.data(), sizeof(int32_t), c.labels.size(), f) == c.labels.size() &&
            std::fwrite(c.ids.data(), sizeof(int32_t), c.ids.size(), f) == c.ids.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw std::runtime_error("error writing " + path);
}

inline Corpus read_corpus(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path + " (make it with export_ids)");
  auto fail = [&](const std::string& why) {
    std::fclose(f);
    throw std::runtime_error(path + ": " + why);
  };
  char magic[8];
  int64_t header[4];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, ids_magic, 8) != 0) fail("not an ids file");
  if (std::fread(header, sizeof(int64_t), 4, f) != 4) fail("truncated header");
  Corpus c;
  c.vocab = header[0];
  c.classes = header[1];
  if (header[2] < 0 || header[3] < 0) fail("negative sizes in the header");
  c.offsets.resize(static_cast<std::size_t>(header[2]) + 1);
  c.labels.resize(static_cast<std::size_t>(header[2]));
  c.ids.resize(static_cast<std::size_t>(header[3]));
  if (std::fread(c.offsets.data(), sizeof(int64_t), c.offsets.size(), f) != c.offsets.size() ||
      std::fread(c.labels.data(), sizeof(int32_t), c.labels.size(), f) != c.labels.size() ||
      std::fread(c.ids.data(), sizeof(int32_t), c.ids.size(), f) != c.ids.size())
    fail("truncated");
  std::fclose(f);
  if (c.offsets.front() != 0 || c.offsets.back() != header[3]) fail("offsets do not cover the ids");
  for (std::size_t d = 0; d + 1 < c.offsets.size(); ++d)
    if (c.offsets[d + 1] < c.offsets[d]) fail("offsets decrease at document " + std::to_string(d));
  for (int32_t id : c.ids)
    if (id < 0 || id >= c.vocab) fail("token id " + std::to_string(id) + " outside the vocabulary");
  for (int32_t y : c.labels)
    if (y < 0 || y >= c.classes) fail("label " + std::to_string(y) + " outside the classes");
  return c;
}

}  // namespace bench
