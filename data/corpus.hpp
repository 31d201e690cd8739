#pragma once
// Reading a corpus for word vectors as sentences of words: the Brown corpus's
// tagged files, or plain text.
//
// The Brown corpus (scripts/fetch-brown) comes as 500 files of tagged text: one
// sentence a line, each token `word/tag` ("The/at jury/nn said/vbd ./."),
// sentences separated by blank lines. read_tagged_sentences keeps the words
// (the text before each token's last '/') and drops the tags. Plain text is one
// sentence a line, words separated by spaces or tabs (what fastText and gensim's
// LineSentence read). Either reader lowercases ASCII letters unless told not to,
// and leaves every other byte as it is. Problems with a file throw FileError.

#include <string>
#include <vector>

#include "file_error.hpp"

namespace tg::data {

using Sentence = std::vector<std::string>;

struct CorpusOptions {
  bool lowercase = true;  // "The" and "the" are one word
};

// `path` is a tagged file or a directory of them, read in the order of their
// names. A token without a '/', or with nothing before it, throws FileError
// naming the file and line.
std::vector<Sentence> read_tagged_sentences(const std::string& path, const CorpusOptions& options = {});

// One sentence a line; blank lines are skipped.
std::vector<Sentence> read_text_sentences(const std::string& path, const CorpusOptions& options = {});

}  // namespace tg::data
