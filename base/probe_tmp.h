#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <algorithm>
namespace npuflow::probe {
inline std::int64_t Now() { return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
struct Steps {
  std::vector<std::array<std::int64_t, 8>> rows;
  std::array<std::int64_t, 8> cur{};
  ~Steps() {
    if (rows.size() < 10) return;
    const char* names[] = {"P0 step", "P1 ask", "P2 devstart", "P3 devend", "P4 woke", "P5 read", "P6 sampled", "P7"};
    for (int k = 1; k < 7; ++k) {
      std::vector<double> d;
      for (std::size_t i = rows.size() / 2; i + 1 < rows.size(); ++i) {
        auto& r = rows[i];
        double v = k < 7 ? (r[k] - r[k - 1]) / 1e3 : 0;
        if (k == 6) v = (r[6] - r[5]) / 1e3;
        d.push_back(v);
      }
      std::sort(d.begin(), d.end());
      std::fprintf(stderr, "probe %s - prev: median %.1f us\n", names[k], d[d.size() / 2]);
    }
    std::vector<double> d;
    for (std::size_t i = rows.size() / 2; i + 1 < rows.size(); ++i) d.push_back((rows[i + 1][0] - rows[i][6]) / 1e3);
    std::sort(d.begin(), d.end());
    std::fprintf(stderr, "probe next step - sampled: median %.1f us\n", d[d.size() / 2]);
    d.clear();
    for (std::size_t i = rows.size() / 2; i + 1 < rows.size(); ++i) d.push_back((rows[i][7] - rows[i][1]) / 1e3);
    std::sort(d.begin(), d.end());
    std::fprintf(stderr, "probe actor start - ask: median %.1f us\n", d[d.size() / 2]);
  }
};
inline Steps g;
inline void Mark(int k) { g.cur[k] = Now(); if (k == 6) g.rows.push_back(g.cur); }
}
