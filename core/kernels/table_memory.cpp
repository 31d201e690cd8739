// advise_huge_pages: 2 MB pages for large tables (Linux), a hint only.
#include "table_memory.hpp"

#include <cstdint>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace tg {

void advise_huge_pages(float* data, std::size_t count) {
#ifdef __linux__
  const std::uintptr_t huge = std::uintptr_t{2} << 20;
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(data + count) & ~(huge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // a hint
#else
  (void)data;
  (void)count;
#endif
}

}  // namespace tg
