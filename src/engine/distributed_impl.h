// DistributedEngine's state, shared by distributed.cpp (start-up, control, the ranks' plans) and
// distributed_link.cpp (the data path: NCCL between GPU ranks, TCP between CPU ranks).
#pragma once
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/distributed.h"
#include "engine/distributed_control.h"
#include "engine/rank_link.h"

#ifdef HS_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace hs {

namespace dist {
using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace dist

struct DistributedEngine::Impl final : RankLink {
  DistributedOptions d;
  int device = -1;  // cuda:N; -1: a CPU rank (the data goes over TCP)
  std::vector<int> split;
  std::unique_ptr<Engine> eng;
  std::map<int64_t, std::unique_ptr<Sequence>> seqs;  // ranks > 0: rank 0's sequences, by id
  // rank 0: peers[r] is the connection to rank r (peers[0] unused); others: peers[0] is rank 0.
  std::vector<dist::Connection> peers;
  std::vector<dist::Hello> hellos;   // rank 0: what each rank said in the handshake
  std::deque<dist::Message> pending; // ranks > 0: messages read while waiting for data
  // CPU ranks: the HC state from the previous rank / to the next one.
  std::unique_ptr<dist::Listener> data_listener;
  dist::Connection data_in, data_out;
  std::vector<float> staging;  // CPU ranks: the floats of one send or receive
  std::atomic<bool> broken{false};
  bool shut = false;
  std::string failure;  // the first failure's message
  // rank 0 between steps (watch_when_idle): a thread polls the other ranks while no step runs;
  // a step holds step_mu from its plan to its end.
  std::mutex step_mu;
  std::unique_lock<std::mutex> step_lock{step_mu, std::defer_lock};
  std::thread watcher;
  std::atomic<bool> stop_watching{false};
#ifdef HS_HAVE_NCCL
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
#endif

  bool leader() const { return d.rank == 0; }
  bool gpu() const { return device >= 0; }
  std::string who(int r) const;

  // ---- control (distributed.cpp)
  [[noreturn]] void fatal(const std::string& msg);
  void abort_comm();
  void on_unexpected(size_t i);
  void watch(int timeout_ms);
  void send_all(const dist::Message& m);
  dist::Message next_from_leader();
  void handshake(const dist::Hello& mine);
  std::string exchange_id();
  void barrier_ready();
  void run_plan(const dist::StepPlan& p);
  void apply(const dist::StateOp& o);
  void require_up(const char* what) const;

  // ---- data (distributed_link.cpp)
  void connect_data(const std::string& next);  // CPU ranks, after the welcome
  // The next message on c (a data connection, or the last rank's control connection on rank 0),
  // watching the control connections meanwhile; `from` names the sender in errors.
  dist::Message wait_message(dist::Connection& c, const std::string& from);
  void send_floats(dist::Connection& c, dist::Op op, const float* host, int64_t count, const std::string& to);
  void recv_floats(dist::Connection& c, dist::Op op, float* host, int64_t count, const std::string& from);
#ifdef HS_HAVE_NCCL
  void wait_nccl(const std::string& what, bool stream_too);
  void check_nccl(ncclResult_t r, const std::string& what);
  void init_nccl(const std::string& id);
  void nccl_send(Ops& ops, const float* p, int64_t n, int peer, const std::string& what);
  void nccl_recv(float* p, int64_t n, int peer, const std::string& what);
  void close_comm();
#endif

  // ---- RankLink
  int rank() const override { return d.rank; }
  int world() const override { return d.world; }
  void send_plan(const dist::StepPlan& plan) override;
  void send_state(Ops& ops, const float* x, int64_t count) override;
  void recv_state(Ops& ops, float* x, int64_t count) override;
  void send_outputs(Ops& ops, const float* x, int64_t count) override;
  void recv_outputs(Ops& ops, float* x, int64_t count) override;
  [[noreturn]] void fail(const std::string& why) override;
  void end_step() override;
};

}  // namespace hs
