// info: what bypass finds on this host: each device (opened to learn its
// capabilities, or the reason it cannot be), the hugepage state, and the
// fi_info entries the bypass libfabric provider returns. See --help.
#include <dirent.h>
#include <rdma/fabric.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "driver/device.h"
#include "hugepage/report.h"
#include "tools/pingpong/fi.h"

ABSL_FLAG(std::string, device, "",
          "probe only these device URIs, separated by ';' (URIs contain commas); default: "
          "loopback, memif, af_packet on each interface that is up, mlx5 on each RDMA device");
ABSL_FLAG(bool, verbose, false, "print every fi_info attribute (fi_tostr), like fi_info -v");

namespace bypass::tools {
namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Offloads(uint32_t o) {
  std::vector<std::string> names;
  if (o & driver::kOffloadRxIpChecksum) names.push_back("rx-ipv4-cksum");
  if (o & driver::kOffloadRxUdpChecksum) names.push_back("rx-udp-cksum");
  if (o & driver::kOffloadTxIpChecksum) names.push_back("tx-ipv4-cksum");
  if (o & driver::kOffloadTxUdpChecksum) names.push_back("tx-udp-cksum");
  return names.empty() ? "none" : absl::StrJoin(names, " ");
}

// Opens uri and prints its capabilities, or one line with why not. True if
// it opened.
bool Probe(const std::string& uri) {
  driver::DeviceOptions opts;
  opts.queues = 1;
  opts.ring_size = 256;
  auto dev = driver::OpenDevice(uri, opts);
  if (!dev.ok()) {
    std::printf("%s: cannot open: %s\n", uri.c_str(), std::string(dev.status().message()).c_str());
    return false;
  }
  const driver::DeviceInfo& i = (*dev)->info();
  std::printf("%s\n", uri.c_str());
  std::printf("    driver: %s\n", i.driver.c_str());
  std::printf("    mtu: %u (frames up to %u bytes)\n", i.mtu, i.max_frame());
  std::printf("    mac: %s\n", i.mac.ToString().c_str());
  std::printf("    ipv4: %s\n", i.ipv4.value == 0 ? "none (give ip=A in the URI)" : i.ipv4.ToString().c_str());
  std::printf("    queues: %u opened, ring %u descriptors\n", i.num_queues, i.ring_size);
  std::printf("    offloads: %s\n", Offloads(i.offloads).c_str());
  std::printf("    can_steer: %s\n", i.can_steer ? "yes (UDP port to queue)" : "no (software demultiplexing from queue 0)");
  std::printf("    link: %s\n", std::string(driver::LinkStateName((*dev)->link_state())).c_str());
  if (!i.owns_port) std::printf("    attached to an application's port\n");
  return true;
}

// The devices to probe when none is named.
std::vector<std::string> DefaultDevices(std::vector<std::string>* notes) {
  std::vector<std::string> uris = {
      "loopback:info",
      absl::StrCat("memif:/tmp/bypass-info-", getpid(), ".sock,role=server"),
  };
  int n = 0;
  for (const std::string& ifname : ListDir("/sys/class/net")) {
    if (ifname == "lo") continue;
    const std::string state = ReadLine("/sys/class/net/" + ifname + "/operstate");
    if (state != "up" && state != "unknown") {
      notes->push_back(absl::StrCat("interface ", ifname, " is ", state, ": not probed"));
      continue;
    }
    uris.push_back(absl::StrCat("dpdk:net_af_packet", n, ",iface=", ifname));
    notes->push_back(absl::StrCat("af_xdp on ", ifname, ": dpdk:net_af_xdp", n, ",iface=", ifname,
                                  " (not opened by default: it attaches an XDP program to the "
                                  "interface; probe it with --device)"));
    ++n;
  }
  const std::vector<std::string> rdma = ListDir("/sys/class/infiniband");
  if (rdma.empty()) {
    notes->push_back(
        "mlx5: no RDMA devices (/sys/class/infiniband, where ibverbs lists them, is empty or absent)");
  }
  for (const std::string& d : rdma) uris.push_back("mlx5:" + d);
  return uris;
}

void PrintFiInfo(bool verbose) {
  std::printf("\n== fi_info: the bypass provider ==\n");
  if (absl::Status s = PrepareProvider("bypass"); !s.ok()) {
    std::printf("the bypass provider (libbypass-fi.so) is not built: run bazel build "
                "//fabric/fi:libbypass-fi.so, or set FI_PROVIDER_PATH to its directory\n");
    return;
  }
  setenv("FI_PROVIDER", "bypass", 0);
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("bypass");
  hints->mode = ~0ULL;  // every mode bit: show everything the provider offers
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_ENDPOINT | FI_MR_RAW;
  fi_info* info = nullptr;
  const int r = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  const char* path = getenv("FI_PROVIDER_PATH");
  if (r != 0) {
    std::printf("fi_getinfo with FI_PROVIDER=bypass (FI_PROVIDER_PATH=%s) returned nothing: %s\n",
                path == nullptr ? "" : path, fi_strerror(-r));
    return;
  }
  for (fi_info* i = info; i != nullptr; i = i->next) {
    if (verbose) {
      std::printf("%s\n", fi_tostr(i, FI_TYPE_INFO));
      continue;
    }
    std::printf("provider: %s\n", i->fabric_attr->prov_name);
    std::printf("    fabric: %s\n", i->fabric_attr->name);
    std::printf("    domain: %s\n", i->domain_attr->name);
    std::printf("    version: %u.%u\n", FI_MAJOR(i->fabric_attr->prov_version),
                FI_MINOR(i->fabric_attr->prov_version));
    std::printf("    type: %s\n", fi_tostr(&i->ep_attr->type, FI_TYPE_EP_TYPE));
    std::printf("    protocol: %s\n", fi_tostr(&i->ep_attr->protocol, FI_TYPE_PROTOCOL));
  }
  fi_freeinfo(info);
}

}  // namespace
}  // namespace bypass::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "what bypass finds on this host: devices and their capabilities, hugepages, and the fi_info\n"
      "the bypass libfabric provider returns.\n"
      "  info                      every default device\n"
      "  info --device='URI[;URI]'  these devices only (exit status 1 if one cannot be opened)\n"
      "  info --verbose            every fi_info attribute");
  absl::ParseCommandLine(argc, argv);
  using namespace bypass::tools;
  std::vector<std::string> uris =
      absl::StrSplit(absl::GetFlag(FLAGS_device), ';', absl::SkipWhitespace());
  const bool named = !uris.empty();
  std::vector<std::string> notes;
  if (!named) uris = DefaultDevices(&notes);
  std::printf("== devices ==\n");
  int failed = 0;
  for (const std::string& uri : uris) {
    if (!Probe(uri)) ++failed;
  }
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  if (!named) {
    const std::string sock = absl::StrCat("/tmp/bypass-info-", getpid(), ".sock");
    unlink(sock.c_str());
    unlink((sock + ".lock").c_str());
  }
  std::printf("\n== hugepages ==\n");
  std::fflush(stdout);
  bypass::hugepage::PrintHugepageReport(stdout);
  PrintFiInfo(absl::GetFlag(FLAGS_verbose));
  return named && failed != 0 ? 1 : 0;
}
