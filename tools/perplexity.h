// The numerics of `zenmoe perplexity`, as llama.cpp's perplexity tool defines
// them, so figures and files carry over between the two: a text is cut into chunks of n_ctx
// tokens (the first of each replaced by BOS when the vocabulary adds one), and each chunk's
// second half is scored, position i predicting token i + 1 for i in [n_ctx/2, n_ctx - 1).
//
// The records of a log-probability file ("KL-divergence base", runtime/logprob_file.h) are
// written and read here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/logprob_file.h"

namespace zenmoe::tools::ppl {

using logprob::record_u16;
using logprob::scored_positions;

// -log softmax(logits)[tok], the sum of exponentials in double.
double nll(const float* logits, int n_vocab, int tok);

// Writes one record (record_u16(n_vocab) words) of `logits`; returns nll(logits, tok).
double encode_log_probs(const float* logits, int n_vocab, int tok, uint16_t* record);

// Sums over scored positions, of this engine's log-probabilities (q) against a file's (base).
struct KldSums {
  double nll = 0, nll2 = 0, nll_base = 0, nll_base2 = 0, nll_nll_base = 0;
  double kld = 0, kld2 = 0;
  double p_diff = 0, p_diff2 = 0, p_diff4 = 0;
  float max_p_diff = 0;
  size_t same_top = 0, count = 0;
};

// Adds one position: `logits` (this engine) against `record` (the base) for next token `tok`.
// *kld_out: KL(base || q) of the position; *p_diff_out: q's probability of tok less the base's.
void kld_accumulate(const float* logits, int n_vocab, const uint16_t* record, int tok, KldSums* sums,
                    float* kld_out, float* p_diff_out);

// A mean and its standard error, as llama.cpp reports them (no error below 11 values).
struct MeanErr {
  double mean = 0, err = 0;
};
MeanErr mean_and_error(double sum, double sum2, size_t count);

// The text statistics llama.cpp prints after a KL-divergence run, from the sums and each
// position's KL divergence and probability difference.
std::string kld_report(const KldSums& s, std::vector<float> klds, std::vector<float> p_diffs);

// One row of the per-chunk table: chunk number, PPL, ln(PPL(Q)/PPL(base)), KLD, RMS Δp, same top.
std::string kld_chunk_row(int chunk, const KldSums& s);

}  // namespace zenmoe::tools::ppl
