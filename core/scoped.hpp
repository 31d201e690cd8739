// ScopedSetting: the one pattern behind every guard (NoGradGuard, the
// inspector's TraceBackwardGuard, DetectAnomalyGuard, RetainAllGradsGuard, ...).
#pragma once

#include <utility>

namespace tg {

// While one lives, a per-thread setting holds `value`; when it dies (also when
// an exception unwinds past it) the setting gets back the value it had, so
// guards nest. `then`, when given, runs after each change (the inspector
// attaches or detaches its step hook there). A guard is this with a name:
//
//   class NoGradGuard : ScopedSetting<bool> { public: NoGradGuard(); };
//   NoGradGuard::NoGradGuard() : ScopedSetting(grad_enabled, false) {}
template <class T>
class ScopedSetting {
 public:
  ScopedSetting(T& setting, T value, void (*then)() = nullptr)
      : setting_(setting), previous_(std::exchange(setting, std::move(value))), then_(then) {
    if (then_) then_();
  }
  ~ScopedSetting() {
    setting_ = std::move(previous_);
    if (then_) then_();
  }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T& setting_;
  T previous_;
  void (*then_)();
};

}  // namespace tg
