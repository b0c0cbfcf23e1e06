// Prints what hugepage memory this host gives bypass, and why.
#include <cstdio>

#include "hugepage/report.h"

int main() {
  bypass::hugepage::PrintHugepageReport(stdout);
  return 0;
}
