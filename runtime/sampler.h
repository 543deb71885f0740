// Next-token sampling with llama.cpp's semantics and order of operations:
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw.
// Filters run on the temperature-1 distribution, as in llama.cpp's default chain.
// Draws use std::mt19937_64 and our own uniform conversion, so a seed gives the same tokens
// on every standard library.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "kernels/status.h"

namespace zenmoe {

struct SamplerParams {
  float temp = 0.8f;            // <= 0: greedy (argmax after the penalty)
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; divides positive / multiplies negative logits
  int repeat_last_n = 64;       // window of accepted tokens the penalty looks at; 0: off
  uint64_t seed = 0;            // PRNG seed
};

// Checks ranges (temperature finite, top-p / min-p in [0, 1], penalty > 0, window >= 0).
Status check_sampler_params(const SamplerParams& p);

class Sampler {
 public:
  Sampler(const SamplerParams& params, int n_vocab);

  // Picks the next token from one row of n_vocab logits. Does not record it: call accept().
  int32_t sample(const float* logits);
  // Records a token (prompt or generated) in the repetition-penalty window.
  void accept(int32_t token);
  // Clears the window and re-seeds the generator.
  void reset();

  struct Candidate {
    int32_t id;
    float logit;
  };
  // The candidates that survive penalties and filters, sorted by logit descending (ties by id),
  // with temperature applied; exposed for tests. Empty for greedy.
  std::vector<Candidate> filtered(const float* logits) const;

 private:
  void apply_penalty(std::vector<float>& logits) const;
  double uniform();  // [0, 1) from the top 53 bits of one 64-bit draw

  SamplerParams p_;
  int n_vocab_;
  std::deque<int32_t> recent_;
  std::mt19937_64 rng_;
};

}  // namespace zenmoe
