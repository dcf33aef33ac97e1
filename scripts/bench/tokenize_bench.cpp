// Encode and decode throughput of the tokenizer on a text file.
//
//   tokenize_bench --tokenizer DIR --text FILE [--repeat 3]
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cuda_agent/tokenizer/tokenizer.h"
#include "cuda_agent/util/file.h"

using namespace cuda_agent;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"tokenizer throughput"};
  std::string dir, text_path;
  int repeat = 3;
  app.add_option("--tokenizer", dir, "tokenizer.json or its directory")->required();
  app.add_option("--text", text_path, "text to encode")->required();
  app.add_option("--repeat", repeat, "timed passes (the best is reported)");
  CLI11_PARSE(app, argc, argv);
  auto tok = tokenizer::Tokenizer::Load(dir);
  if (!tok.ok()) return std::cerr << tok.status().ToString() << "\n", 1;
  auto text = ReadFile(text_path);
  if (!text.ok()) return std::cerr << text.status().ToString() << "\n", 1;
  double best_encode = 1e30, best_decode = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    auto ids = (*tok)->Encode(*text);
    auto t1 = Clock::now();
    std::string back = (*tok)->Decode(ids);
    auto t2 = Clock::now();
    tokens = ids.size();
    best_encode = std::min(best_encode, std::chrono::duration<double>(t1 - t0).count());
    best_decode = std::min(best_decode, std::chrono::duration<double>(t2 - t1).count());
  }
  double mb = static_cast<double>(text->size()) / 1e6;
  std::cout << nlohmann::json{{"bytes", text->size()},
                              {"tokens", tokens},
                              {"encode_mb_per_s", mb / best_encode},
                              {"decode_mb_per_s", mb / best_decode}}
                   .dump()
            << std::endl;
  return 0;
}
