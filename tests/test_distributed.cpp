// The multi-process pipeline (engine/distributed.h): the control messages, the option checks,
// the partial engines it is built from (CPU), the handshake's refusal of a mismatched rank
// (processes, no GPU needed), and on two GPUs: two processes give the logits of one, and a
// rank that dies stops the other instead of hanging.
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
  Message step;
  step.op = Op::Step;
  step.flags = kFlagAllPositions;
  step.seq_id = 0x1234567890ll;
  step.n_tokens = 3;
  step.position = 77;
  step.tokens = {5, 0, 2147483647};
  std::vector<uint8_t> b = encode(step);
  EXPECT_EQ(b.size(), kHeaderBytes + 12);
  EXPECT_EQ(decode(b.data(), b.size()), step);

  Hello h{3, 4, 0xfeedfacecafebeefull, "cuda:3", "node-7", "model (hf, 43 layers)"};
  EXPECT_EQ(decode_hello(encode_hello(h)), h);
  for (Op op : {Op::Hello, Op::Welcome, Op::Ready, Op::Go, Op::NewSequence, Op::Reset, Op::Release, Op::Shutdown,
                Op::Error}) {
    Message m;
    m.op = op;
    m.seq_id = -1;
    m.payload = op == Op::Hello ? encode_hello(h) : std::string("payload \0 with a zero", 21);
    b = encode(m);
    EXPECT_EQ(decode(b.data(), b.size()), m) << op_name(op);
  }
}

TEST(Control, VersionMismatchAndGarbageRejected) {
  Message m;
  m.op = Op::Reset;
  m.seq_id = 9;
  std::vector<uint8_t> b = encode(m);
  std::vector<uint8_t> v1 = b;
  v1[4] = 1;  // the version field: a build before step plans
  EXPECT_ERROR(decode(v1.data(), v1.size()), "control protocol version 1 from the peer, this build speaks version 2");
  std::vector<uint8_t> magic = b;
  magic[0] = 'X';
  EXPECT_ERROR(decode(magic.data(), magic.size()), "bad magic");
  std::vector<uint8_t> op = b;
  op[6] = 99;
  EXPECT_ERROR(decode(op.data(), op.size()), "unknown op 99");
  EXPECT_ERROR(decode(b.data(), b.size() - 1), "shorter than the header");
  Message s;
  s.op = Op::Step;
  s.n_tokens = 2;
  s.tokens = {1, 2};
  b = encode(s);
  EXPECT_ERROR(decode(b.data(), b.size() - 4), "the header says");
  b[20] = 3;  // n_tokens 3 with 8 bytes of ids
  EXPECT_ERROR(decode(b.data(), b.size()), "step of 3 tokens with a payload of 8 bytes");
  s.n_tokens = 5;
  EXPECT_ERROR(encode(s), "step of 5 tokens carries 2 token ids");
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
  EngineOptions cpu;
  EXPECT_ERROR(validate(d(0, 2, "h:1"), cpu), "--device 'cpu': a pipeline rank needs a cuda:N device");
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
           {"--rank 0 --world 2 --coordinator h:1", "needs a cuda:N device"},
           {"--dist-timeout 5", "--dist-timeout needs --rank"},
       }) {
    CliRun r = run_cli("logits " + m + c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.args << "\n" << r.out;
  }
}

// ---- the partial engines a rank builds (CPU): shard k of a split alone, driven piece by piece
// as the ranks do, equals the whole engine bit for bit.

TEST(PartialEngine, PiecesEqualTheWhole) {
  const std::string dir = data("small-bf16");
  test::Expected e = test::load_expected(dir);
  Engine whole(dir, EngineOptions{});
  EngineOptions o;
  o.devices = {"cpu", "cpu"};
  o.layer_split = {3, 5};
  o.only_shard = 0;
  Engine first(dir, o);
  o.only_shard = 1;
  Engine second(dir, o);
  ASSERT_EQ(first.n_shards(), 1);
  EXPECT_EQ(second.shard(0).layer_begin(), 3);
  EXPECT_FALSE(first.complete());
  EXPECT_TRUE(first.shard(0).owns_embedding() && !first.shard(0).owns_output());
  EXPECT_TRUE(second.shard(0).owns_output() && !second.shard(0).owns_embedding());
  auto s1 = first.new_sequence(), s2 = second.new_sequence();
  std::vector<float> out(1);
  EXPECT_ERROR(first.step(*s1, e.tokens.data(), 1, out.data()), "holds only shard 0 (layers [0, 3))");
  const int64_t per = first.config().hc_mult * first.config().dim, V = e.vocab;
  for (const auto& sp : {test::splits_for(e)[0], test::splits_for(e)[2]}) {
    s1->reset();
    s2->reset();
    std::vector<float> got(e.tokens.size() * static_cast<size_t>(V));
    int64_t pos = 0;
    for (int64_t n : sp.chunks) {
      const int32_t* t = e.tokens.data() + pos;
      Ops& a = first.shard(0).ops();
      Ops& b = second.shard(0).ops();
      const size_t ma = a.mark(), mb = b.mark();
      HcState X{a.alloc(n * per), n, per, &a};
      first.shard(0).embed(t, n, X.data);
      X = first.forward_shards(*s1, t, n, X);
      HcState Y{b.alloc(n * per), n, per, &b};  // what NCCL carries
      std::vector<float> wire(static_cast<size_t>(n * per));
      a.download(wire.data(), X.data, n * per);
      b.upload(Y.data, wire.data(), n * per);
      Y = second.forward_shards(*s2, t, n, Y);
      float* L = b.alloc(n * V);
      second.shard(0).logits(Y.data, n, L);
      b.download(got.data() + pos * V, L, n * V);
      a.release_to(ma);
      b.release_to(mb);
      pos += n;
    }
    EXPECT_EQ(got, test::run(whole, e, sp.chunks)) << sp.name;
  }
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
// naming both models and hashes; both exit non-zero. No GPU needed.
TEST(Handshake, MismatchedModelIsRefused) {
#ifndef HS_HAVE_NCCL
  GTEST_SKIP() << "no NCCL in this build";
#endif
  const std::string dir = tmp_dir();
  mkdir(dir.c_str(), 0755);
  const std::string coord = "127.0.0.1:" + std::to_string(free_port());
  const std::string toks = dir + "/t.txt";
  write_tokens(toks, {1, 2, 3});
  Proc r0 = spawn({"logits", data("small-bf16"), "--tokens", toks, "--out", dir + "/o.npy", "--rank", "0", "--world",
                   "2", "--coordinator", coord, "--device", "cuda:0", "--dist-timeout", "30"},
                  dir + "/mm0.log");
  Proc r1 = spawn({"logits", data("tiny"), "--rank", "1", "--world", "2", "--coordinator", coord, "--device",
                   "cuda:1", "--dist-timeout", "30"},
                  dir + "/mm1.log");
  ASSERT_GT(r0.pid, 0);
  ASSERT_GT(r1.pid, 0);
  const bool done0 = wait_for(r0, 40), done1 = wait_for(r1, 40);
  kill_if_running(r0);
  kill_if_running(r1);
  ASSERT_TRUE(done0 && done1) << slurp(r0.log) << slurp(r1.log);
  const std::string l0 = slurp(r0.log), l1 = slurp(r1.log);
  EXPECT_NE(r0.status, 0) << l0;
  EXPECT_NE(r1.status, 0) << l1;
  EXPECT_NE(l0.find("rank 1 runs another model or configuration than rank 0"), std::string::npos) << l0;
  EXPECT_NE(l0.find(data("small-bf16") + " (hf"), std::string::npos) << l0;
  EXPECT_NE(l0.find(data("tiny") + " ("), std::string::npos) << l0;
  EXPECT_NE(l1.find("rank 0 refused this rank"), std::string::npos) << l1;
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
  std::vector<std::string> rank_args(int rank, const std::string& coord, const std::string& toks,
                                     const std::string& out, const std::string& chunks,
                                     const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {"logits", data("small-bf16"), "--tokens", toks, "--out", out, "--chunks", chunks,
                                  "--rank", std::to_string(rank), "--world", "2", "--coordinator", coord,
                                  "--device", "cuda:" + std::to_string(rank), "--dist-timeout", "60"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::string dir_;
};

// Two processes (layers split over cuda:0 and cuda:1, NCCL between them) write the logits of
// the single-process run on cuda:0: the same kernels run, so bit for bit.
TEST_F(TwoGpus, TwoProcessesEqualOneProcess) {
  test::Expected e = test::load_expected(data("small-bf16"));
  const std::string toks = dir_ + "/tokens.txt";
  write_tokens(toks, e.tokens);
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  struct Case {
    std::string name, chunks;
    std::vector<std::string> extra;
  };
  for (const Case& c : std::vector<Case>{{"one-chunk", std::to_string(T), {}},
                                         {"decode", "1", {}},
                                         {"fixture-split-3,5", "37,1,1,50,2,3,64,1,1", {"--layer-split", "3,5"}}}) {
    const std::string ref = dir_ + "/ref_" + c.name + ".npy", got = dir_ + "/got_" + c.name + ".npy";
    CliRun single = run_cli("logits " + data("small-bf16") + " --tokens " + toks + " --out " + ref +
                         " --device cuda:0 --chunks " + c.chunks);
    ASSERT_EQ(single.code, 0) << single.out;
    const std::string coord = "127.0.0.1:" + std::to_string(free_port());
    const auto t0 = std::chrono::steady_clock::now();
    Proc r1 = spawn(rank_args(1, coord, toks, got, c.chunks, c.extra), dir_ + "/r1_" + c.name + ".log");
    Proc r0 = spawn(rank_args(0, coord, toks, got, c.chunks, c.extra), dir_ + "/r0_" + c.name + ".log");
    const bool ok0 = wait_for(r0, 120), ok1 = wait_for(r1, 30);
    kill_if_running(r0);
    kill_if_running(r1);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(ok0 && ok1) << slurp(r0.log) << slurp(r1.log);
    ASSERT_EQ(r0.status, 0) << slurp(r0.log) << slurp(r1.log);
    ASSERT_EQ(r1.status, 0) << slurp(r1.log);
    npy::ArrayF32 a = npy::read_f32(got), b = npy::read_f32(ref);
    ASSERT_EQ(a.shape, b.shape);
    const double rel = test::rel_l2(a.data.data(), b.data.data(), a.data.size());
    std::printf("[distributed] 2 ranks (cuda:0 | cuda:1) %-18s rel_l2 vs 1 process %.3e, %s, %.1f s\n",
                c.name.c_str(), rel, a.data == b.data ? "bit-identical" : "NOT bit-identical", secs);
    EXPECT_LE(rel, 1e-6) << c.name;
    EXPECT_EQ(a.data, b.data) << c.name;
    EXPECT_NE(slurp(r1.log).find("shut down by rank 0"), std::string::npos) << slurp(r1.log);
  }
}

// A rank killed mid-run: the survivor exits non-zero within seconds, naming the lost rank.
TEST_F(TwoGpus, KilledRankStopsTheOther) {
  test::Expected e = test::load_expected(data("small-bf16"));
  std::vector<int32_t> many;
  while (many.size() < 4000) many.insert(many.end(), e.tokens.begin(), e.tokens.end());
  const std::string toks = dir_ + "/long.txt";
  write_tokens(toks, many);
  for (int victim : {1, 0}) {
    const std::string tag = "kill" + std::to_string(victim);
    const std::string coord = "127.0.0.1:" + std::to_string(free_port());
    Proc r[2];
    r[0] = spawn(rank_args(0, coord, toks, dir_ + "/" + tag + ".npy", "1"), dir_ + "/" + tag + "_r0.log");
    r[1] = spawn(rank_args(1, coord, toks, dir_ + "/" + tag + ".npy", "1"), dir_ + "/" + tag + "_r1.log");
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
    std::printf("[distributed] rank %d killed mid-run: rank %d %s with status %d after %.2f s\n", victim, survivor,
                exited ? "exited" : "did NOT exit (killed)", r[survivor].status, secs);
    ASSERT_TRUE(exited) << "rank " << survivor << " hangs after rank " << victim << " died:\n" << log;
    EXPECT_NE(r[survivor].status, 0) << log;
    EXPECT_LT(secs, 10.0);
    EXPECT_NE(log.find(victim == 1 ? "rank 1" : "rank 0"), std::string::npos) << log;
  }
}

}  // namespace
