// FI_THREAD_SAFE: several threads post sends and read completions on one
// endpoint while another thread receives, all through the same domain lock.
// Run under --config=tsan as well.
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

constexpr int kSenders = 3;
constexpr int kPerSender = 300;

TEST(ThreadSafeTest, ConcurrentSendersAndAReceiver) {
  Pair p;
  fi_info* hints = RdmHints();
  hints->domain_attr->threading = FI_THREAD_SAFE;
  p.Open(hints);
  fi_freeinfo(hints);
  ASSERT_EQ(p.a.info->domain_attr->threading, FI_THREAD_SAFE);

  std::atomic<int> send_completions{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> receiver_done{false};
  // One buffer per message, alive to the end: each stays untouched until
  // its completion (and its retransmissions) are done.
  std::vector<std::vector<std::array<uint64_t, 2>>> all(
      kSenders, std::vector<std::array<uint64_t, 2>>(kPerSender));
  std::vector<std::thread> threads;
  for (int t = 0; t < kSenders; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::array<uint64_t, 2>>& msgs = all[t];
      for (int i = 0; i < kPerSender && !failed; ++i) {
        uint64_t* payload = msgs[i].data();
        payload[0] = static_cast<uint64_t>(t);
        payload[1] = static_cast<uint64_t>(i);
        for (;;) {
          // Tag = sender, so each sender's messages stay in its order.
          const ssize_t r = fi_tsend(p.a.ep, payload, 2 * sizeof(uint64_t), nullptr, p.a.peer,
                                     static_cast<uint64_t>(t), nullptr);
          if (r == 0) break;
          if (r != -FI_EAGAIN) {
            ADD_FAILURE() << "fi_tsend: " << fi_strerror(static_cast<int>(-r));
            failed = true;
            return;
          }
          fi_cq_tagged_entry e;
          if (fi_cq_read(p.a.txcq, &e, 1) == 1) ++send_completions;
        }
        fi_cq_tagged_entry e;
        if (fi_cq_read(p.a.txcq, &e, 1) == 1) ++send_completions;
      }
    });
  }
  // The receiver: one receive at a time per sender's tag, checking order.
  std::thread receiver([&] {
    std::vector<int> next(kSenders, 0);
    std::vector<std::array<uint64_t, 2>> bufs(kSenders);
    for (int t = 0; t < kSenders; ++t) {
      if (fi_trecv(p.b.ep, bufs[t].data(), 16, nullptr, FI_ADDR_UNSPEC, t, 0,
                   reinterpret_cast<void*>(static_cast<uintptr_t>(t))) != 0) {
        failed = true;
      }
    }
    int received = 0;
    while (received < kSenders * kPerSender && !failed) {
      fi_cq_tagged_entry e;
      const ssize_t n = fi_cq_read(p.b.rxcq, &e, 1);
      if (n == -FI_EAGAIN) continue;
      if (n != 1) {
        fi_cq_err_entry err{};
        fi_cq_readerr(p.b.rxcq, &err, 0);
        ADD_FAILURE() << "fi_cq_read: " << n << " " << err.err << " "
                      << (err.err_data ? static_cast<const char*>(err.err_data) : "");
        failed = true;
        break;
      }
      const int t = static_cast<int>(reinterpret_cast<uintptr_t>(e.op_context));
      if (bufs[t][0] != static_cast<uint64_t>(t) || bufs[t][1] != static_cast<uint64_t>(next[t])) {
        ADD_FAILURE() << "sender " << t << " message " << bufs[t][1] << ", expected " << next[t];
        failed = true;
        break;
      }
      ++next[t];
      ++received;
      if (next[t] < kPerSender &&
          fi_trecv(p.b.ep, bufs[t].data(), 16, nullptr, FI_ADDR_UNSPEC, t, 0, e.op_context) != 0) {
        failed = true;
      }
    }
    receiver_done = true;
  });
  for (std::thread& t : threads) t.join();
  // The senders are done posting; this thread progresses their endpoint
  // (retransmissions, retries) until the receiver has everything, and
  // collects the rest of the send completions.
  fi_cq_tagged_entry e;
  while (!failed && (!receiver_done || send_completions < kSenders * kPerSender)) {
    if (fi_cq_read(p.a.txcq, &e, 1) == 1) {
      ++send_completions;
    } else {
      p.Pump();
    }
  }
  receiver.join();
  ASSERT_FALSE(failed);
  EXPECT_EQ(send_completions, kSenders * kPerSender);
  p.Close();
}

}  // namespace
}  // namespace bypass::fi::testing
