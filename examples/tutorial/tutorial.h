// What the tutorial's step programs share: named checks that set the exit status, the largest
// difference between two tensors, a small built-in English-like text, and figures drawn by
// gnuplot. Each step is one program in this folder (docs/tutorial/ explains them).
#pragma once

#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tutorial {

using namespace tinyformer;

// Every step states its claims as checks; one failed check makes the program exit with 1.
inline int& failures() {
  static int count = 0;
  return count;
}
inline void check(bool ok, const std::string& claim) {
  std::printf("%s %s\n", ok ? "  [ok]    " : "  [FAILED]", claim.c_str());
  if (!ok) ++failures();
}
// --smoke: the steps that train a model train for a few steps only, and the checks of what
// training achieves are reported as skipped; every other check runs. The sanitizer build's
// ctest uses it, where a full training would take minutes.
inline bool smoke(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--smoke") return true;
  return false;
}
// A claim about what training achieves: checked, or reported as skipped under --smoke.
inline void check_trained(bool smoke_run, bool ok, const std::string& claim) {
  if (smoke_run) {
    std::printf("  [skipped] %s (--smoke)\n", claim.c_str());
    return;
  }
  check(ok, claim);
}
inline int finish() {
  if (failures() > 0) std::printf("%d check(s) failed\n", failures());
  return failures() > 0 ? 1 : 0;
}

// max |a - b| over all elements, read as double.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  if (va.size() != vb.size()) return INFINITY;
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// A matrix as rows of numbers, for small tensors ([rows, cols], or the last two dims of the
// first element of a batch).
inline void print_matrix(const char* name, const Tensor& t) {
  Tensor m = t;
  while (m.dim() > 2) m = m.select(0, 0);
  const auto v = m.contiguous().to_vector<double>();
  const std::int64_t rows = m.size(0), cols = m.size(1);
  std::printf("%s [%lld x %lld]:\n", name, static_cast<long long>(rows),
              static_cast<long long>(cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    std::printf("   ");
    for (std::int64_t j = 0; j < cols; ++j) std::printf(" %7.4f", v[i * cols + j]);
    std::printf("\n");
  }
}

// The directory figures go to: --figures DIR, else the current directory.
inline std::string figure_dir(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--figures") return argv[i + 1];
  return ".";
}

// Draws `png` with gnuplot from `script` (the plot commands; the terminal, its size in pixels and
// the output are set here). Without gnuplot the figure is skipped with a note: the figure
// illustrates, the checks prove.
inline void plot(const std::string& png, const std::string& script, int width = 900,
                 int height = 560) {
  const std::string gp = png + ".gp";
  {
    std::ofstream out(gp);
    out << "set terminal pngcairo size " << width << "," << height << " font ',11' noenhanced\n"
        << "set output '" << png << "'\nset grid\n"
        << script;
  }
  const int status = std::system(("gnuplot '" + gp + "' 2>&1").c_str());
  std::filesystem::remove(gp);
  if (status != 0) {
    std::printf("  (no figure: gnuplot failed or is missing; apt-get install gnuplot-nox)\n");
  } else {
    std::printf("  figure: %s\n", png.c_str());
  }
}

// About 30 KB of simple English sentences, the same every time: enough for a tiny model to
// learn words and their order in seconds.
inline std::string tiny_corpus(int sentences = 800) {
  const std::vector<std::string> subjects = {"the cat",     "a dog",        "my friend",
                                             "the old man", "every child",  "our teacher",
                                             "the farmer",  "a little bird"};
  const std::vector<std::string> verbs = {"sees",   "likes", "finds",   "carries",
                                          "paints", "wants", "watches", "remembers"};
  const std::vector<std::string> objects = {"the red ball", "a small house", "the river",
                                            "an apple",     "the long road", "a green book",
                                            "the garden",   "a warm coat"};
  const std::vector<std::string> endings = {" in the morning", " at night", " again", "",
                                            " every day",      " with joy"};
  std::string text;
  std::uint32_t state = 12345;
  auto next = [&](std::size_t n) {
    state = state * 1664525u + 1013904223u;  // a linear congruential generator
    return static_cast<std::size_t>((state >> 16) % n);
  };
  for (int i = 0; i < sentences; ++i) {
    text += subjects[next(subjects.size())] + " " + verbs[next(verbs.size())] + " " +
            objects[next(objects.size())] + endings[next(endings.size())] + ".\n";
  }
  return text;
}

}  // namespace tutorial
