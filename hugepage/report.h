// A human-readable report of the hugepage memory this host gives bypass.
#ifndef BYPASS_HUGEPAGE_REPORT_H_
#define BYPASS_HUGEPAGE_REPORT_H_

#include <cstdio>

namespace bypass::hugepage {

// Maps a 4 MiB test region (best = 1G hugetlb) and prints what it got, then
// the host's hugepage, THP, hugetlbfs and NUMA state, in aligned lines.
void PrintHugepageReport(std::FILE* out);

}  // namespace bypass::hugepage

#endif  // BYPASS_HUGEPAGE_REPORT_H_
