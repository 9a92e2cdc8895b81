#include "grammar/numbers.h"

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "grammar/regex.h"
#include "grammar/schema_error.h"

namespace hs::grammar {

namespace {

constexpr int64_t kIntLimit = 9999999999999999;  // 16 digits
constexpr int kDecimalDigits = 15;

std::string join(const std::vector<std::string>& v, const char* sep = "|") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string(1, lo);
  return std::string("[") + lo + "-" + hi + "]";
}

// Digit strings of one length L between x and y (x <= y, both of length L), as a regex.
std::string fixed_range(const std::string& x, const std::string& y) {
  const size_t L = x.size();
  if (L == 0) return "";
  if (x == y) return x;
  const std::string xr = x.substr(1), yr = y.substr(1);
  if (xr.find_first_not_of('0') == std::string::npos && yr.find_first_not_of('9') == std::string::npos)
    return digit_class(x[0], y[0]) + (L > 1 ? "[0-9]{" + std::to_string(L - 1) + "}" : "");
  if (x[0] == y[0]) return std::string(1, x[0]) + "(?:" + fixed_range(xr, yr) + ")";
  std::vector<std::string> alts;
  alts.push_back(std::string(1, x[0]) + "(?:" + fixed_range(xr, std::string(L - 1, '9')) + ")");
  if (x[0] + 1 <= y[0] - 1) alts.push_back(digit_class(static_cast<char>(x[0] + 1), static_cast<char>(y[0] - 1)) + "[0-9]{" + std::to_string(L - 1) + "}");
  alts.push_back(std::string(1, y[0]) + "(?:" + fixed_range(std::string(L - 1, '0'), yr) + ")");
  return join(alts);
}

// Canonical decimal integers in [a, b] (0 <= a <= b), as a regex.
std::string nonneg_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int64_t low = 0, high = 9;
  for (size_t L = 1; L <= 16; ++L) {
    const int64_t lo = std::max(a, low), hi = std::min(b, high);
    if (lo <= hi) alts.push_back(fixed_range(std::to_string(lo), std::to_string(hi)));
    low = high + 1;
    if (high > kIntLimit / 10) break;
    high = high * 10 + 9;
  }
  return join(alts);
}

Automaton anchored(const std::string& re) { return compile_pattern("^(?:" + re + ")$"); }

// A finite double as its exact shortest decimal: integer digits (no leading zeros, "0" when
// none) and fraction digits (no trailing zeros).
struct Decimal {
  bool neg = false;
  std::string ip, fp;
  int significant = 0;
};

Decimal to_decimal(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  Decimal d;
  if (!s.empty() && s[0] == '-') {
    d.neg = true;
    s.erase(0, 1);
  }
  int exp = 0;
  if (const size_t e = s.find_first_of("eE"); e != std::string::npos) {
    exp = std::stoi(s.substr(e + 1));
    s.resize(e);
  }
  std::string digits;
  int point = 0;
  if (const size_t dot = s.find('.'); dot != std::string::npos) {
    digits = s.substr(0, dot) + s.substr(dot + 1);
    point = static_cast<int>(dot);
  } else {
    digits = s;
    point = static_cast<int>(s.size());
  }
  point += exp;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) {
    d.ip = "0";
    d.neg = false;
    return d;
  }
  digits.erase(0, first);
  point -= static_cast<int>(first);
  digits.erase(digits.find_last_not_of('0') + 1);
  d.significant = static_cast<int>(digits.size());
  const int n = static_cast<int>(digits.size());
  if (point <= 0) {
    d.ip = "0";
    d.fp = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= n) {
    d.ip = digits + std::string(static_cast<size_t>(point - n), '0');
  } else {
    d.ip = digits.substr(0, static_cast<size_t>(point));
    d.fp = digits.substr(static_cast<size_t>(point));
  }
  return d;
}

const char* kFraction = "(?:\\.[0-9]+)?";

// Non-negative canonical decimals x with x >= B (x > B when strict), as a regex.
std::string ge_regex(const std::string& bi, const std::string& bf, bool strict) {
  const size_t n = bi.size();
  std::vector<std::string> alts;
  alts.push_back("[1-9][0-9]{" + std::to_string(n) + ",}" + kFraction);
  for (size_t k = 0; k < n; ++k)
    if (bi[k] < '9')
      alts.push_back(bi.substr(0, k) + digit_class(static_cast<char>(bi[k] + 1), '9') + "[0-9]{" + std::to_string(n - k - 1) + "}" + kFraction);
  std::vector<std::string> eq, frac;
  if (bf.empty() && !strict) eq.push_back("");
  for (size_t k = 0; k < bf.size(); ++k)
    if (bf[k] < '9') frac.push_back(bf.substr(0, k) + digit_class(static_cast<char>(bf[k] + 1), '9') + "[0-9]*");
  if (!strict) frac.push_back(bf.empty() ? "[0-9]+" : bf + "[0-9]*");
  else frac.push_back(bf + "0*[1-9][0-9]*");
  eq.push_back("\\.(?:" + join(frac) + ")");
  alts.push_back(bi + "(?:" + join(eq) + ")");
  return join(alts);
}

// Non-negative canonical decimals x with x <= B (x < B when strict), as a regex.
std::string le_regex(const std::string& bi, const std::string& bf, bool strict) {
  const size_t n = bi.size();
  std::vector<std::string> alts;
  if (n >= 2) alts.push_back("(?:0|[1-9][0-9]{0," + std::to_string(n - 2) + "})" + kFraction);
  for (size_t k = 0; k < n; ++k) {
    const char lo = k == 0 && n > 1 ? '1' : '0';
    if (bi[k] - 1 >= lo)
      alts.push_back(bi.substr(0, k) + digit_class(lo, static_cast<char>(bi[k] - 1)) + "[0-9]{" + std::to_string(n - k - 1) + "}" + kFraction);
  }
  std::vector<std::string> eq, frac;
  if (!bf.empty() || !strict) eq.push_back("");
  for (size_t k = 0; k < bf.size(); ++k)
    if (bf[k] > '0') frac.push_back(bf.substr(0, k) + digit_class('0', static_cast<char>(bf[k] - 1)) + "[0-9]*");
  for (size_t j = 1; j < bf.size(); ++j) frac.push_back(bf.substr(0, j));
  if (!strict) frac.push_back(bf.empty() ? "0+" : bf + "0*");
  if (!frac.empty()) eq.push_back("\\.(?:" + join(frac) + ")");
  if (!eq.empty()) alts.push_back(bi + "(?:" + join(eq) + ")");
  return alts.empty() ? "[]" : join(alts);
}

// Plain decimals -?I(.F)? of at most kDecimalDigits digits.
Automaton digit_cap() {
  std::vector<std::string> alts{"[0-9]{1," + std::to_string(kDecimalDigits) + "}"};
  for (int i = 1; i < kDecimalDigits; ++i)
    alts.push_back("[0-9]{" + std::to_string(i) + "}\\.[0-9]{1," + std::to_string(kDecimalDigits - i) + "}");
  return anchored("-?(?:" + join(alts) + ")");
}

Automaton both(const Automaton& a, const Automaton& b) { return intersect(a, b, 200000, "the number's bounds"); }

}  // namespace

Automaton union_of(const Automaton& a, const Automaton& b) {
  Automaton u;
  const int32_t e1 = embed(u, a, u.start);
  const int32_t e2 = embed(u, b, u.start);
  u.accept(e1);
  u.accept(e2);
  return trim(determinize(u, 200000, "a union"));
}

Automaton concat_literal(std::string_view prefix, const Automaton& a) {
  Automaton c;
  const int32_t s = add_literal(c, c.start, prefix);
  c.accept(embed(c, a, s));
  return trim(determinize(c, 200000, "a concatenation"));
}

Automaton integer_automaton(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  int64_t a = -kIntLimit, b = kIntLimit;
  auto check = [](double v, const char* what) {
    if (!std::isfinite(v)) throw SchemaError("", cat(what, " must be a finite number"));
  };
  if (lo) {
    check(lo->value, "the lower bound");
    const double v = std::floor(lo->value) == lo->value && lo->exclusive ? lo->value + 1 : std::ceil(lo->value);
    if (v > static_cast<double>(kIntLimit)) throw SchemaError("", "an integer lower bound above 16 digits is not supported");
    if (v > static_cast<double>(a)) a = static_cast<int64_t>(v);
  }
  if (hi) {
    check(hi->value, "the upper bound");
    const double v = std::floor(hi->value) == hi->value && hi->exclusive ? hi->value - 1 : std::floor(hi->value);
    if (v < -static_cast<double>(kIntLimit)) throw SchemaError("", "an integer upper bound below -16 digits is not supported");
    if (v < static_cast<double>(b)) b = static_cast<int64_t>(v);
  }
  if (a > b) throw SchemaError("", cat("no integer lies within the bounds (", a, " > ", b, ")"));
  std::vector<std::string> alts;
  if (a < 0) alts.push_back("-(?:" + nonneg_range(std::max<int64_t>(1, b < 0 ? -b : 1), -a) + ")");
  if (b >= 0) alts.push_back(nonneg_range(std::max<int64_t>(a, 0), b));
  return anchored(join(alts));
}

Automaton number_automaton(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  if (!lo && !hi) return anchored("-?(?:0|[1-9][0-9]{0,15})(?:\\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,2})?");
  auto decimal = [](const NumberBound& b) {
    if (!std::isfinite(b.value)) throw SchemaError("", "a numeric bound must be a finite number");
    Decimal d = to_decimal(b.value);
    if (d.significant > kDecimalDigits)
      throw SchemaError("", cat("the numeric bound ", b.value, " has more than 15 significant digits, which is not supported"));
    return d;
  };
  std::optional<Decimal> dl, dh;
  if (lo) dl = decimal(*lo);
  if (hi) dh = decimal(*hi);
  const bool lo_neg = dl && dl->neg, hi_neg = dh && dh->neg;
  const bool hi_zero = dh && dh->ip == "0" && dh->fp.empty();
  const Automaton cap = digit_cap();
  std::optional<Automaton> result;
  auto add = [&](Automaton a) {
    if (a.empty()) return;
    result = result ? union_of(*result, a) : std::move(a);
  };
  // x >= 0: exists unless hi < 0, or hi == 0 exclusive.
  if (!(hi_neg || (hi_zero && hi->exclusive))) {
    Automaton part = anchored("(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?");
    if (dl && !lo_neg) part = both(part, anchored(ge_regex(dl->ip, dl->fp, lo->exclusive)));
    if (dh) part = both(part, anchored(le_regex(dh->ip, dh->fp, hi->exclusive)));
    add(both(part, cap));
  }
  // x < 0, as "-" y with y > 0: exists unless lo >= 0.
  if (!dl || lo_neg) {
    Automaton part = anchored(ge_regex("0", "", true));
    if (dl) part = both(part, anchored(le_regex(dl->ip, dl->fp, lo->exclusive)));
    if (dh && hi_neg) part = both(part, anchored(ge_regex(dh->ip, dh->fp, hi->exclusive)));
    add(both(concat_literal("-", part), cap));
  }
  if (!result || result->empty()) throw SchemaError("", "no number lies within the bounds");
  return *result;
}

}  // namespace hs::grammar
