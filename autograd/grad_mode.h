// Grad mode: whether ops record the graph. NoGradGuard turns recording off for a scope.
#pragma once

namespace tinyformer {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// While alive, ops build no graph (inference, optimizer updates, the backward pass itself).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tinyformer
