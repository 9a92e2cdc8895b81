// The multi-process pipeline (engine/distributed.h): the control messages, the option checks,
// the one step path over CPU ranks (TCP between them; in CI): two and three processes give the
// logits of one bit for bit, and every state operation of rank 0's engine (fork, truncate,
// reset, release, batches in micro-batches) reaches the other ranks; the handshake's refusals;
// and on two GPUs (NCCL between them): two processes give the logits of one, and a rank that
// dies stops the other instead of hanging. The server over ranks: tests/node/server_pipeline.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/distributed.h"
#include "engine/distributed_control.h"
#include "error_util.h"
#include "fixture_util.h"
#include "format/npy.h"
#include "util/error.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

extern char** environ;

using namespace hs;
using namespace hs::dist;

namespace {

// Paths can be moved with the tree (e.g. onto a GPU machine): HS_CLI and HS_TEST_DATA override.
std::string cli() {
  const char* e = std::getenv("HS_CLI");
  return e ? e : HS_CLI_PATH;
}
std::string data(const std::string& name) {
  const char* e = std::getenv("HS_TEST_DATA");
  return std::string(e ? e : HS_TEST_DATA) + "/" + name;
}

// ---- control messages

TEST(Control, RoundTrip) {
  Message state;
  state.op = Op::State;
  state.n_tokens = 6;  // floats in all
  state.position = 2;  // the first one's index
  const float f[4] = {1.5f, -0.0f, 3e38f, -7.25f};
  state.payload.assign(reinterpret_cast<const char*>(f), sizeof f);
  std::vector<uint8_t> b = encode(state);
  EXPECT_EQ(b.size(), kHeaderBytes + 16);
  EXPECT_EQ(decode(b.data(), b.size()), state);

  Hello h{3, 4, 0xfeedfacecafebeefull, "cpu", "node-7", "model (hf, 43 layers)", 40123};
  EXPECT_EQ(decode_hello(encode_hello(h)), h);
  for (Op op : {Op::Hello, Op::Welcome, Op::Ready, Op::Go, Op::Shutdown, Op::Error, Op::StepPlan, Op::Outputs}) {
    Message m;
    m.op = op;
    m.seq_id = -1;
    m.payload = op == Op::Hello ? encode_hello(h) : std::string("payload \0 with a zero", 24);
    b = encode(m);
    EXPECT_EQ(decode(b.data(), b.size()), m) << op_name(op);
  }
}

TEST(Control, VersionMismatchAndGarbageRejected) {
  Message m;
  m.op = Op::Shutdown;
  m.seq_id = 9;
  std::vector<uint8_t> b = encode(m);
  std::vector<uint8_t> v2 = b;
  v2[4] = 2;  // the version field: a build whose ranks still stepped one sequence at a time
  EXPECT_ERROR(decode(v2.data(), v2.size()), "control protocol version 2 from the peer, this build speaks version 3");
  std::vector<uint8_t> magic = b;
  magic[0] = 'X';
  EXPECT_ERROR(decode(magic.data(), magic.size()), "bad magic");
  for (uint8_t bad : {uint8_t{99}, uint8_t{5}}) {  // (5: protocol 2's one-sequence step)
    std::vector<uint8_t> op = b;
    op[6] = bad;
    EXPECT_ERROR(decode(op.data(), op.size()), "unknown op " + std::to_string(bad));
  }
  EXPECT_ERROR(decode(b.data(), b.size() - 1), "shorter than the header");
  Message s;
  s.op = Op::Outputs;
  s.payload = "0123456";  // not whole floats
  b = encode(s);
  EXPECT_ERROR(decode(b.data(), b.size()), "outputs of 7 bytes, not whole floats");
  s.payload = "01234567";
  b = encode(s);
  EXPECT_ERROR(decode(b.data(), b.size() - 4), "the header says");
  EXPECT_ERROR(decode_hello("abc"), "truncated hello");
}

TEST(Control, Endpoints) {
  Endpoint e = parse_endpoint("10.1.2.3:29500");
  EXPECT_EQ(e.host, "10.1.2.3");
  EXPECT_EQ(e.port, 29500);
  EXPECT_EQ(parse_endpoint("[::1]:80").host, "::1");
  EXPECT_EQ(parse_endpoint("node-7.cluster:1").port, 1);
  EXPECT_ERROR(parse_endpoint("localhost"), "expected host:port");
  EXPECT_ERROR(parse_endpoint(":29500"), "expected host:port");
  EXPECT_ERROR(parse_endpoint("host:"), "expected host:port");
  EXPECT_ERROR(parse_endpoint("host:http"), "is not a number");
  EXPECT_ERROR(parse_endpoint("host:0"), "outside 1..65535");
  EXPECT_ERROR(parse_endpoint("host:70000"), "outside 1..65535");
}

// Messages over a real TCP connection, and a peer that goes away is noticed (not waited for).
TEST(Control, ConnectionNoticesAClosedPeer) {
  Listener l(0);
  const int port = l.port();
  std::thread client([port] {
    Connection c = Connection::connect({"127.0.0.1", port}, 10);
    Message m;
    m.op = Op::Hello;
    m.payload = encode_hello(Hello{1, 2, 42, "cuda:1", "h", "d"});
    c.send(m);
    Message back = c.recv();
    EXPECT_EQ(back.op, Op::Welcome);
    EXPECT_EQ(back.payload, "id");
  });  // the connection closes here
  Connection s = l.accept(10);
  Message m = s.recv();
  EXPECT_EQ(decode_hello(m.payload).config_hash, 42u);
  Message w;
  w.op = Op::Welcome;
  w.payload = "id";
  s.send(w);
  client.join();
  EXPECT_TRUE(s.readable(5000));  // EOF is readable
  EXPECT_THROW(s.recv(), PeerClosed);
  s.close();
  EXPECT_EQ(wait_readable({nullptr, &s}, 0), -1);  // closed connections are skipped
  // Nobody listens: connecting gives up after the timeout with a message naming the address.
  int dead = 0;
  {
    Listener tmp(0);
    dead = tmp.port();
  }
  EXPECT_ERROR(Connection::connect({"127.0.0.1", dead}, 0.3), "could not connect to the coordinator 127.0.0.1:");
}

// ---- options

TEST(Options, BadArguments) {
  auto d = [](int rank, int world, std::string coord) {
    DistributedOptions o;
    o.rank = rank;
    o.world = world;
    o.coordinator = std::move(coord);
    return o;
  };
  EngineOptions gpu;
  gpu.device = "cuda:1";
  EXPECT_NO_THROW(validate(d(1, 2, "localhost:29500"), gpu));
  EXPECT_ERROR(validate(d(0, 1, "h:1"), gpu), "--world 1: a pipeline of processes needs at least 2 ranks");
  EXPECT_ERROR(validate(d(2, 2, "h:1"), gpu), "--rank 2 is outside 0..1");
  EXPECT_ERROR(validate(d(-1, 2, "h:1"), gpu), "--rank -1 is outside 0..1");
  EXPECT_ERROR(validate(d(0, 2, ""), gpu), "need --coordinator host:port");
  EXPECT_ERROR(validate(d(0, 2, "h"), gpu), "--coordinator 'h': expected host:port");
  EXPECT_ERROR(validate(d(0, 2, "h:99999"), gpu), "outside 1..65535");
  EngineOptions cpu;  // CPU ranks: the state goes over TCP
  EXPECT_NO_THROW(validate(d(0, 2, "h:1"), cpu));
  EngineOptions tpu;
  tpu.device = "tpu:0";
  EXPECT_ERROR(validate(d(0, 2, "h:1"), tpu), "--device: unknown device 'tpu:0'");
  EngineOptions two = gpu;
  two.devices = {"cuda:0", "cuda:1"};
  EXPECT_ERROR(validate(d(0, 2, "h:1"), two), "--devices cannot be used with --rank");
  EngineOptions split = gpu;
  split.layer_split = {2, 3, 3};
  EXPECT_ERROR(validate(d(0, 2, "h:1"), split), "--layer-split 2,3,3 has 3 entries but --world is 2");

  EXPECT_EQ(rank_layer_split({}, 3, 8), (std::vector<int>{2, 3, 3}));
  EXPECT_EQ(rank_layer_split({5, 3}, 2, 8), (std::vector<int>{5, 3}));
  EXPECT_EQ(rank_layer_split({5, 4}, 2, 8), (std::vector<int>{4, 4}));  // shares: 4.44 / 3.56 layers
  EXPECT_ERROR(rank_layer_split({8, 0}, 2, 8), "every share must be positive");
  EXPECT_ERROR(rank_layer_split({}, 9, 8), "--world 9: 9 shards for 8 layers");
}

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  FILE* p = popen((cli() + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return r;
}

TEST(Options, CliRefusesBadValues) {
  const std::string m = data("small-bf16") + " --tokens /dev/null --out /tmp/x.npy ";
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"--rank 0 --world 2", "--coordinator is missing"},
           {"--world 2 --coordinator h:1 --device cuda:0", "--rank is missing"},
           {"--rank 2 --world 2 --coordinator h:1 --device cuda:0", "--rank 2 is outside 0..1"},
           {"--rank x --world 2 --coordinator h:1", "--rank"},
           {"--rank 0 --world 2 --coordinator h:0 --device cuda:0", "port 0 is outside 1..65535"},
           {"--rank 0 --world 2 --coordinator h:1 --device cuda:0 --layer-split 4,2,2",
            "has 3 entries but --world is 2"},
           {"--rank 0 --world 2 --coordinator h:1 --devices cuda:0,cuda:1", "--devices cannot be used with --rank"},
           {"--rank 0 --world 2 --coordinator h:1 --device tpu:0", "unknown device 'tpu:0'"},
           {"--dist-timeout 5", "--dist-timeout needs --rank"},
       }) {
    CliRun r = run_cli("logits " + m + c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.args << "\n" << r.out;
  }
}

// ---- the partial engine a rank builds: without its link it cannot step

TEST(PartialEngine, AloneItRefusesToStep) {
  EngineOptions o;
  o.devices = {"cpu", "cpu"};
  o.layer_split = {3, 5};
  o.only_shard = 0;
  Engine first(data("small-bf16"), o);
  ASSERT_EQ(first.n_shards(), 1);
  EXPECT_FALSE(first.complete());
  EXPECT_TRUE(first.shard(0).owns_embedding() && !first.shard(0).owns_output());
  auto s = first.new_sequence();
  const int32_t t = 1;
  std::vector<float> out(1);
  EXPECT_ERROR(first.step(*s, &t, 1, out.data()), "holds only shard 0 (layers [0, 3))");
}

TEST(PartialEngine, ConfigHashSeesModelNumericsSplitAndWorld) {
  auto tiny = ModelSource::open(data("tiny")), small = ModelSource::open(data("small-bf16"));
  const uint64_t h = config_hash(*small, Numerics::Reference, {4, 4}, 2);
  EXPECT_EQ(h, config_hash(*ModelSource::open(data("small-bf16")), Numerics::Reference, {4, 4}, 2));
  EXPECT_NE(h, config_hash(*tiny, Numerics::Reference, {4, 4}, 2));
  EXPECT_NE(h, config_hash(*small, Numerics::Model, {4, 4}, 2));
  EXPECT_NE(h, config_hash(*small, Numerics::Reference, {3, 5}, 2));
  EXPECT_NE(h, config_hash(*small, Numerics::Reference, {4, 4}, 3));
}

// ---- processes

struct Proc {
  pid_t pid = -1;
  std::string log;
  int status = -1;
  bool done = false;
};

int free_port() {
  Listener l(0);
  return l.port();
}

Proc spawn(const std::vector<std::string>& args, const std::string& log) {
  Proc p;
  p.log = log;
  std::vector<std::string> argv = {cli()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const int rc = posix_spawn(&p.pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) p.pid = -1;
  return p;
}

// Waits up to timeout_s for the process; true when it exited (status in p.status).
bool wait_for(Proc& p, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!p.done) {
    int st = 0;
    if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
      p.done = true;
      p.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void kill_if_running(Proc& p) {
  if (p.pid > 0 && !p.done) {
    kill(p.pid, SIGKILL);
    wait_for(p, 10);
  }
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tmp_dir() {
  const char* t = std::getenv("TMPDIR");
  return std::string(t ? t : "/tmp") + "/hs_dist_" + std::to_string(getpid());
}

void write_tokens(const std::string& path, const std::vector<int32_t>& t) {
  std::ofstream f(path);
  for (int32_t x : t) f << x << ' ';
}

// Two ranks started on different models: rank 0 refuses rank 1 before any weight is read,
// naming both models and hashes; both exit non-zero. And a GPU rank in a CPU pipeline.
TEST(Handshake, MismatchedRankIsRefused) {
  const std::string dir = tmp_dir();
  mkdir(dir.c_str(), 0755);
  const std::string toks = dir + "/t.txt";
  write_tokens(toks, {1, 2, 3});
  struct Case {
    std::string name, model1, device1;
    std::vector<std::string> needles0, needles1;
  };
  std::vector<Case> cases = {{"model", data("tiny"), "cpu",
                              {"rank 1 runs another model or configuration than rank 0", data("small-bf16") + " (hf",
                               data("tiny") + " ("},
                              {"rank 0 refused this rank"}}};
#ifdef HS_HAVE_NCCL
  // (Refused at the handshake, before rank 1 would touch a GPU: no GPU needed.)
  cases.push_back({"device", data("small-bf16"), "cuda:0",
                   {"rank 1 (", "runs on cuda:0, rank 0 on cpu: the ranks of a pipeline are all GPUs"},
                   {"rank 0 refused this rank"}});
#endif
  for (const Case& c : cases) {
    const std::string coord = "127.0.0.1:" + std::to_string(free_port());
    Proc r0 = spawn({"logits", data("small-bf16"), "--tokens", toks, "--out", dir + "/o.npy", "--rank", "0", "--world",
                     "2", "--coordinator", coord, "--device", "cpu", "--dist-timeout", "30"},
                    dir + "/mm0_" + c.name + ".log");
    Proc r1 = spawn({"logits", c.model1, "--rank", "1", "--world", "2", "--coordinator", coord, "--device", c.device1,
                     "--dist-timeout", "30"},
                    dir + "/mm1_" + c.name + ".log");
    ASSERT_GT(r0.pid, 0);
    ASSERT_GT(r1.pid, 0);
    const bool done0 = wait_for(r0, 40), done1 = wait_for(r1, 40);
    kill_if_running(r0);
    kill_if_running(r1);
    ASSERT_TRUE(done0 && done1) << slurp(r0.log) << slurp(r1.log);
    const std::string l0 = slurp(r0.log), l1 = slurp(r1.log);
    EXPECT_NE(r0.status, 0) << l0;
    EXPECT_NE(r1.status, 0) << l1;
    for (const auto& n : c.needles0) EXPECT_NE(l0.find(n), std::string::npos) << c.name << ": " << n << "\n" << l0;
    for (const auto& n : c.needles1) EXPECT_NE(l1.find(n), std::string::npos) << c.name << ": " << n << "\n" << l1;
  }
}

// ---- a pipeline of processes, on CPU ranks (TCP) or GPU ranks (NCCL)

std::vector<std::string> rank_args(int rank, const std::vector<std::string>& devices, const std::string& coord,
                                   const std::string& toks, const std::string& out, const std::string& chunks,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"logits", data("small-bf16"), "--tokens", toks, "--out", out, "--chunks", chunks,
                                "--rank", std::to_string(rank), "--world", std::to_string(devices.size()),
                                "--coordinator", coord, "--device", devices[static_cast<size_t>(rank)],
                                "--dist-timeout", "60", "--threads", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// One process per device writes the logits of the single-process run on devices[0]: the same
// kernels run, so bit for bit.
void processes_equal_one_process(const std::string& dir, const std::vector<std::string>& devices,
                                 const std::vector<std::string>& split) {
  test::Expected e = test::load_expected(data("small-bf16"));
  const std::string toks = dir + "/tokens.txt";
  write_tokens(toks, e.tokens);
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  const size_t W = devices.size();
  std::vector<std::string> extra;
  if (!split.empty()) extra = {"--layer-split", split[0]};
  struct Case {
    std::string name, chunks;
  };
  ASSERT_EQ(T, 160);  // (the fixture's chunks below)
  for (const Case& c : std::vector<Case>{{"one-chunk", std::to_string(T)}, {"decode", "1"},
                                         {"fixture-chunks", "37,1,1,50,2,3,64,1,1"}}) {
    const std::string tag = std::to_string(W) + "_" + c.name;
    const std::string ref = dir + "/ref_" + tag + ".npy", got = dir + "/got_" + tag + ".npy";
    CliRun single = run_cli("logits " + data("small-bf16") + " --tokens " + toks + " --out " + ref + " --device " +
                            devices[0] + " --threads 1 --chunks " + c.chunks);
    ASSERT_EQ(single.code, 0) << single.out;
    const std::string coord = "127.0.0.1:" + std::to_string(free_port());
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Proc> r(W);
    for (size_t k = W; k-- > 0;)  // (the others first: rank 0 waits for them)
      r[k] = spawn(rank_args(static_cast<int>(k), devices, coord, toks, got, c.chunks, extra),
                   dir + "/r" + std::to_string(k) + "_" + tag + ".log");
    bool ok = wait_for(r[0], 120);
    for (size_t k = 1; k < W; ++k) ok = wait_for(r[k], 30) && ok;
    for (Proc& p : r) kill_if_running(p);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string logs;
    for (const Proc& p : r) logs += slurp(p.log);
    ASSERT_TRUE(ok) << logs;
    for (const Proc& p : r) ASSERT_EQ(p.status, 0) << logs;
    npy::ArrayF32 a = npy::read_f32(got), b = npy::read_f32(ref);
    ASSERT_EQ(a.shape, b.shape);
    const double rel = test::rel_l2(a.data.data(), b.data.data(), a.data.size());
    std::string where;
    for (const auto& d : devices) where += (where.empty() ? "" : " | ") + d;
    std::printf("[distributed] %zu ranks (%s) %-15s rel_l2 vs 1 process %.3e, %s, %.1f s\n", W, where.c_str(),
                c.name.c_str(), rel, a.data == b.data ? "bit-identical" : "NOT bit-identical", secs);
    EXPECT_LE(rel, 1e-6) << c.name;
    EXPECT_EQ(a.data, b.data) << c.name;
    for (size_t k = 1; k < W; ++k) EXPECT_NE(slurp(r[k].log).find("shut down by rank 0"), std::string::npos) << logs;
  }
}

// A rank killed mid-run: the survivor exits non-zero within seconds, naming the lost rank.
void killed_rank_stops_the_other(const std::string& dir, const std::vector<std::string>& devices) {
  test::Expected e = test::load_expected(data("small-bf16"));
  std::vector<int32_t> many;
  while (many.size() < 4000) many.insert(many.end(), e.tokens.begin(), e.tokens.end());
  const std::string toks = dir + "/long.txt";
  write_tokens(toks, many);
  for (int victim : {1, 0}) {
    const std::string tag = "kill" + std::to_string(victim) + "_" + devices[0].substr(0, 3);
    const std::string coord = "127.0.0.1:" + std::to_string(free_port());
    Proc r[2];
    r[0] = spawn(rank_args(0, devices, coord, toks, dir + "/" + tag + ".npy", "1"), dir + "/" + tag + "_r0.log");
    r[1] = spawn(rank_args(1, devices, coord, toks, dir + "/" + tag + ".npy", "1"), dir + "/" + tag + "_r1.log");
    // Mid-run: both ranks are up (so decode steps are flowing), then the victim dies.
    const auto t0 = std::chrono::steady_clock::now();
    while (slurp(r[0].log).find("pipeline up") == std::string::npos ||
           slurp(r[1].log).find("pipeline up") == std::string::npos) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 60 || wait_for(r[0], 0) ||
          wait_for(r[1], 0))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int survivor = 1 - victim;
    ASSERT_FALSE(r[survivor].done) << "finished before the kill: " << slurp(r[0].log) << slurp(r[1].log);
    kill(r[victim].pid, SIGKILL);
    const auto tk = std::chrono::steady_clock::now();
    const bool exited = wait_for(r[survivor], 20);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - tk).count();
    kill_if_running(r[0]);
    kill_if_running(r[1]);
    const std::string log = slurp(r[survivor].log);
    std::printf("[distributed] %s: rank %d killed mid-run: rank %d %s with status %d after %.2f s\n",
                devices[0].c_str(), victim, survivor, exited ? "exited" : "did NOT exit (killed)", r[survivor].status,
                secs);
    ASSERT_TRUE(exited) << "rank " << survivor << " hangs after rank " << victim << " died:\n" << log;
    EXPECT_NE(r[survivor].status, 0) << log;
    EXPECT_LT(secs, 2.0);
    EXPECT_NE(log.find(victim == 1 ? "rank 1" : "rank 0"), std::string::npos) << log;
  }
}

class CpuRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_dir();
    mkdir(dir_.c_str(), 0755);
  }
  std::string dir_;
};

TEST_F(CpuRanks, TwoProcessesEqualOneProcess) { processes_equal_one_process(dir_, {"cpu", "cpu"}, {}); }
TEST_F(CpuRanks, ThreeProcessesEqualOneProcess) { processes_equal_one_process(dir_, {"cpu", "cpu", "cpu"}, {"3,2,3"}); }
TEST_F(CpuRanks, KilledRankStopsTheOther) { killed_rank_stops_the_other(dir_, {"cpu", "cpu"}); }

// Rank 0's engine as the scheduler uses it, against one whole engine doing the same: sequences
// made, stepped alone and in batches (cut into micro-batches over the two ranks), forked at and
// off a page boundary, truncated, reset and released; every logits row bit for bit. Rank 1 runs
// in a thread of this process.
TEST_F(CpuRanks, EngineOperationsReachEveryRank) {
  const std::string dir = data("small-bf16");
  test::Expected e = test::load_expected(dir);
  EngineOptions o;
  o.threads = 1;
  o.max_seqs = 6;
  DistributedOptions d;
  d.world = 2;
  d.coordinator = "127.0.0.1:" + std::to_string(free_port());
  d.timeout_s = 60;
  std::string rank1_error;
  std::thread rank1([&] {
    try {
      DistributedOptions d1 = d;
      d1.rank = 1;
      DistributedEngine r1(dir, o, d1);
      r1.serve_forever();
    } catch (const std::exception& x) {
      rank1_error = x.what();
    }
  });
  struct Join {  // (after r0 is gone: its shutdown, or its failure, ends rank 1)
    std::thread& t;
    ~Join() { t.join(); }
  } join{rank1};
  d.rank = 0;
  DistributedEngine r0(dir, o, d);
  Engine& piped = r0.local();
  Engine whole(dir, o);
  EXPECT_FALSE(piped.can_sample());
  EXPECT_EQ(piped.state_stats().slots_total, 6);
  const int64_t V = e.vocab;
  const int32_t* T = e.tokens.data();
  // The same script on both engines; every logits row compared.
  auto both = [&](auto&& script) {
    std::vector<std::vector<float>> a, b;
    script(piped, a);
    script(whole, b);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "output #" << i;
  };
  try {
  both([&](Engine& eng, std::vector<std::vector<float>>& out) {
    auto step = [&](std::vector<std::pair<Sequence*, std::pair<int64_t, int64_t>>> what, bool all = false) {
      std::vector<StepItem> items;
      std::vector<std::vector<float>> bufs;
      for (auto& [seq, r] : what) bufs.emplace_back(static_cast<size_t>((all ? r.second : 1) * V), -1.0f);
      for (size_t i = 0; i < what.size(); ++i)
        items.push_back({what[i].first, T + what[i].second.first, what[i].second.second, bufs[i].data(), all});
      eng.step_batch(items);
      for (auto& b : bufs) out.push_back(std::move(b));
    };
    auto a = eng.new_sequence(), unused = eng.new_sequence();
    step({{a.get(), {0, 9}}}, true);  // a prefill chunk, every row
    const int64_t page = eng.state_layout(0).page;
    ASSERT_LE(page, 16);
    for (int64_t p = 9; p < page + 4; ++p) step({{a.get(), {p, 1}}});
    auto b = eng.fork(*a, page + 2);  // off a page boundary
    auto c = eng.fork(*a, page);      // on one
    step({{a.get(), {30, 1}}, {b.get(), {40, 2}}, {c.get(), {50, 3}}});  // three sequences in two micro-batches
    eng.truncate(*a, page + 3);
    step({{a.get(), {60, 1}}, {c.get(), {61, 1}}});
    b->reset();
    step({{b.get(), {0, 4}}, {a.get(), {70, 1}}}, true);
    c.reset();  // (released)
    auto d2 = eng.new_sequence();
    step({{d2.get(), {80, 5}}, {b.get(), {90, 1}}});
    unused.reset();
  });
  } catch (const std::exception& x) {
    ADD_FAILURE() << x.what();
  }
  r0.shutdown();
  EXPECT_FALSE(r0.down());
  EXPECT_EQ(rank1_error, "");
}

class TwoGpus : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef HS_HAVE_NCCL
    GTEST_SKIP() << "no NCCL in this build";
#endif
    if (gpu_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << gpu_count();
    setenv("NCCL_NVLS_ENABLE", "0", 0);  // no NVLink multicast (not needed for send/recv)
    dir_ = tmp_dir();
    mkdir(dir_.c_str(), 0755);
  }
  std::string dir_;
};

TEST_F(TwoGpus, TwoProcessesEqualOneProcess) { processes_equal_one_process(dir_, {"cuda:0", "cuda:1"}, {}); }
TEST_F(TwoGpus, SplitProcessesEqualOneProcess) { processes_equal_one_process(dir_, {"cuda:0", "cuda:1"}, {"3,5"}); }
TEST_F(TwoGpus, KilledRankStopsTheOther) { killed_rank_stops_the_other(dir_, {"cuda:0", "cuda:1"}); }

}  // namespace
