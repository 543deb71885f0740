#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace zenmoe::tools::ppl {
namespace {

struct MaxSum {
  float max;
  int argmax;
  float log_sum_exp;  // log sum exp(logit - max)
};

MaxSum max_and_log_sum_exp(const float* logits, int n_vocab) {
  MaxSum m{logits[0], 0, 0};
  for (int i = 1; i < n_vocab; ++i)
    if (logits[i] > m.max) {
      m.max = logits[i];
      m.argmax = i;
    }
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - m.max);
  m.log_sum_exp = static_cast<float>(std::log(sum));
  return m;
}

// printf of one or two doubles (arguments the format does not use are ignored).
std::string format(const char* fmt, double a, double b = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

// Linear interpolation between the sorted values around `fraction` of the way through.
float percentile(const std::vector<float>& sorted, float fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const float p = fraction * static_cast<float>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(p);
  const float t = p - static_cast<float>(i);
  return (1 - t) * sorted[i] + t * sorted[std::min(i + 1, sorted.size() - 1)];
}

float median(const std::vector<float>& sorted) {
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5f * (sorted[n / 2] + sorted[n / 2 - 1]);
}

double covariance(double sum_a, double sum_b, double sum_ab, size_t count) {
  if (count < 10) return 0;
  const double n = static_cast<double>(count);
  return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

struct PplLine {
  MeanErr q, base;
  double cov = 0;
  double ratio_err() const { return std::sqrt(q.err * q.err + base.err * base.err - 2 * cov); }
};

PplLine ppl_line(const KldSums& s) {
  return {mean_and_error(s.nll, s.nll2, s.count), mean_and_error(s.nll_base, s.nll_base2, s.count),
          covariance(s.nll, s.nll_base, s.nll_nll_base, s.count)};
}

}  // namespace

double nll(const float* logits, int n_vocab, int tok) {
  const MaxSum m = max_and_log_sum_exp(logits, n_vocab);
  return static_cast<double>(m.max) + m.log_sum_exp - logits[tok];
}

double encode_log_probs(const float* logits, int n_vocab, int tok, uint16_t* record) {
  const MaxSum m = max_and_log_sum_exp(logits, n_vocab);
  float lo = *std::min_element(logits, logits + n_vocab);
  lo = std::max(lo, m.max - 16);
  const float min_log_prob = lo - m.max - m.log_sum_exp;
  const float scale = (m.max - lo) / 65535.f;
  std::memcpy(record, &scale, sizeof scale);
  std::memcpy(record + 2, &min_log_prob, sizeof min_log_prob);
  uint16_t* codes = record + 4;
  std::fill(codes, record + record_u16(n_vocab), uint16_t{0});
  if (scale != 0) {
    const float inv = 1 / scale;
    for (int i = 0; i < n_vocab; ++i)
      if (logits[i] > lo) codes[i] = static_cast<uint16_t>(std::nearbyint(inv * (logits[i] - lo)));
  }
  return static_cast<double>(m.max) + m.log_sum_exp - logits[tok];
}

void kld_accumulate(const float* logits, int n_vocab, const uint16_t* record, int tok, KldSums* s,
                    float* kld_out, float* p_diff_out) {
  const MaxSum m = max_and_log_sum_exp(logits, n_vocab);
  float scale, min_log_prob;
  std::memcpy(&scale, record, sizeof scale);
  std::memcpy(&min_log_prob, record + 2, sizeof min_log_prob);
  const uint16_t* codes = record + 4;

  const float nll_q = m.max + m.log_sum_exp - logits[tok];
  const float nll_base = -(scale * codes[tok] + min_log_prob);
  s->nll += nll_q;
  s->nll2 += static_cast<double>(nll_q) * nll_q;
  s->nll_base += nll_base;
  s->nll_base2 += static_cast<double>(nll_base) * nll_base;
  s->nll_nll_base += static_cast<double>(nll_q) * nll_base;

  const float log_norm = m.max + m.log_sum_exp;  // log_q(i) = logits[i] - log_norm
  double kld = 0;
  int argmax_base = 0;
  float best_base = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const float lp_base = scale * codes[i] + min_log_prob;
    if (i == 0 || lp_base > best_base) {
      best_base = lp_base;
      argmax_base = i;
    }
    if (lp_base > -16.f) kld += std::exp(lp_base) * (lp_base - logits[i] + log_norm);
  }
  s->kld += kld;
  s->kld2 += kld * kld;
  ++s->count;
  if (m.argmax == argmax_base) ++s->same_top;

  const float p_diff = std::exp(-nll_q) - std::exp(-nll_base);
  const double d2 = static_cast<double>(p_diff) * p_diff;
  s->p_diff += p_diff;
  s->p_diff2 += d2;
  s->p_diff4 += d2 * d2;
  s->max_p_diff = std::max(s->max_p_diff, std::fabs(p_diff));
  *kld_out = static_cast<float>(kld);
  *p_diff_out = p_diff;
}

MeanErr mean_and_error(double sum, double sum2, size_t count) {
  if (count < 1) return {};
  const double n = static_cast<double>(count);
  const double f = sum / n;
  const double var = sum2 / n - f * f;
  return {f, var > 0 && count > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

std::string kld_chunk_row(int chunk, const KldSums& s) {
  const PplLine p = ppl_line(s);
  const double ppl = std::exp(p.q.mean);
  const MeanErr kld = mean_and_error(s.kld, s.kld2, s.count);
  const MeanErr mse = mean_and_error(s.p_diff2, s.p_diff4, s.count);
  const double rms = std::sqrt(mse.mean);
  const double top = static_cast<double>(s.same_top) / static_cast<double>(s.count);
  const double top_err = s.count > 1 ? std::sqrt(top * (1 - top) / static_cast<double>(s.count - 1)) : 0.0;
  char head[16];
  std::snprintf(head, sizeof head, "%4d", chunk);
  return head + format("    %9.4f ± %9.4f", ppl, ppl * p.q.err) +
         format("    %10.5f ± %10.5f", p.q.mean - p.base.mean, p.ratio_err()) +
         format("    %10.5f ± %10.5f", kld.mean, kld.err) +
         format("    %6.3f ± %6.3f %%", 100 * rms, rms > 0 ? 100 * 0.5 / rms * mse.err : 0.0) +
         format("    %6.3f ± %6.3f %%", 100 * top, 100 * top_err) + "\n";
}

std::string kld_report(const KldSums& s, std::vector<float> klds, std::vector<float> p_diffs) {
  if (s.count == 0 || klds.empty() || p_diffs.empty()) return "";
  std::sort(klds.begin(), klds.end());
  std::sort(p_diffs.begin(), p_diffs.end());
  const PplLine p = ppl_line(s);
  const double ppl = std::exp(p.q.mean), ppl_base = std::exp(p.base.mean);
  const double ppl_err = ppl * p.q.err, ppl_base_err = ppl_base * p.base.err;
  const double ratio = p.q.mean - p.base.mean, ratio_err = p.ratio_err();
  const double denom = p.q.err * p.base.err;
  std::string r = "====== Perplexity statistics ======\n";
  r += format("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl_err);
  r += format("Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_base, ppl_base_err);
  r += format("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", denom > 0 ? 100 * p.cov / denom : 0.0);
  r += format("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", ratio, ratio_err);
  r += format("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", std::exp(ratio), std::exp(ratio) * ratio_err);
  const double ppl_cov = ppl * ppl_base * p.cov;
  const double diff_var = ppl_err * ppl_err + ppl_base_err * ppl_base_err - 2 * ppl_cov;
  r += format("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", ppl - ppl_base,
              std::sqrt(std::max(diff_var, 0.0)));

  const MeanErr kld = mean_and_error(s.kld, s.kld2, s.count);
  r += "\n====== KL divergence statistics ======\n";
  r += format("Mean    KLD: %10.6f ± %10.6f\n", kld.mean, kld.err);
  struct Cut {
    const char* label;
    float fraction;
  };
  const auto line = [&r](const char* label, double v, const char* fmt) {
    char buf[96];
    std::snprintf(buf, sizeof buf, fmt, label, v);
    r += buf;
  };
  line("Maximum", klds.back(), "%-7s KLD: %10.6f\n");
  for (Cut c : {Cut{"99.9%", 0.999f}, Cut{"99.0%", 0.99f}, Cut{"95.0%", 0.95f}, Cut{"90.0%", 0.9f}})
    line(c.label, percentile(klds, c.fraction), "%-7s KLD: %10.6f\n");
  line("Median", median(klds), "%-7s KLD: %10.6f\n");
  for (Cut c : {Cut{"10.0%", 0.1f}, Cut{" 5.0%", 0.05f}, Cut{" 1.0%", 0.01f}, Cut{" 0.1%", 0.001f}})
    line(c.label, percentile(klds, c.fraction), "%-7s KLD: %10.6f\n");
  line("Minimum", klds.front(), "%-7s KLD: %10.6f\n");

  const MeanErr pd = mean_and_error(s.p_diff, s.p_diff2, s.count);
  r += "\n====== Token probability statistics ======\n";
  r += format("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * pd.mean, 100 * pd.err);
  line("Maximum", 100.0 * p_diffs.back(), "%-7s Δp: %6.3f%%\n");
  for (Cut c : {Cut{"99.9%", 0.999f}, Cut{"99.0%", 0.99f}, Cut{"95.0%", 0.95f}, Cut{"90.0%", 0.9f},
                Cut{"75.0%", 0.75f}})
    line(c.label, 100.0 * percentile(p_diffs, c.fraction), "%-7s Δp: %6.3f%%\n");
  line("Median", 100.0 * median(p_diffs), "%-7s Δp: %6.3f%%\n");
  for (Cut c : {Cut{"25.0%", 0.25f}, Cut{"10.0%", 0.1f}, Cut{" 5.0%", 0.05f}, Cut{" 1.0%", 0.01f},
                Cut{" 0.1%", 0.001f}})
    line(c.label, 100.0 * percentile(p_diffs, c.fraction), "%-7s Δp: %6.3f%%\n");
  line("Minimum", 100.0 * p_diffs.front(), "%-7s Δp: %6.3f%%\n");
  const MeanErr mse = mean_and_error(s.p_diff2, s.p_diff4, s.count);
  const double rms = std::sqrt(mse.mean);
  r += format("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, rms > 0 ? 100 * 0.5 / rms * mse.err : 0.0);
  const double top = static_cast<double>(s.same_top) / static_cast<double>(s.count);
  r += format("Same top p: %6.3f ± %5.3f %%\n", 100 * top,
              s.count > 1 ? 100 * std::sqrt(top * (1 - top) / static_cast<double>(s.count - 1)) : 0.0);
  return r;
}

}  // namespace zenmoe::tools::ppl
