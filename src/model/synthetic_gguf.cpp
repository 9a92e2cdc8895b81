// Writing a synthetic model as GGUF, streamed: gguf::Writer lays out the file with every
// tensor read from untouched anonymous pages (zeros, no memory), then the real bytes are made
// band by band on all cores and written in place. A Flash layer is ~7 GB of Q8_0; nothing
// close to that is ever held in memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "format/gguf.h"
#include "model/dspark_tensors.h"
#include "model/data/chat_template_v4.h"
#include "model/gguf_export.h"
#include "model/synthetic.h"
#include "model/synthetic_impl.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace hs {

namespace {

// Read-only anonymous pages: every read sees the kernel's shared zero page.
class ZeroPages {
 public:
  explicit ZeroPages(uint64_t n) : n_(std::max<uint64_t>(n, 1)) {
    p_ = ::mmap(nullptr, n_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    HS_CHECK(p_ != MAP_FAILED, "synthetic GGUF: cannot reserve ", n_,
             " bytes of address space: ", std::strerror(errno));
  }
  ~ZeroPages() { ::munmap(p_, n_); }
  ZeroPages(const ZeroPages&) = delete;
  ZeroPages& operator=(const ZeroPages&) = delete;
  const void* data() const { return p_; }

 private:
  uint64_t n_;
  void* p_;
};

class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CLOEXEC)) {
    HS_CHECK(fd_ >= 0, path, ": cannot open for writing: ", std::strerror(errno));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void pwrite_all(const uint8_t* p, uint64_t n, uint64_t off) const {
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, p, std::min<uint64_t>(n, uint64_t{1} << 30), static_cast<off_t>(off));
      if (w < 0 && errno == EINTR) continue;
      HS_CHECK(w > 0, path_, ": cannot write at offset ", off, ": ", std::strerror(errno));
      p += w, n -= static_cast<uint64_t>(w), off += static_cast<uint64_t>(w);
    }
  }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    HS_CHECK(::close(fd) == 0, path_, ": cannot close: ", std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_;
};

struct FloatTensor {
  std::string name;
  synth::TensorGen gen;
};

// Second pass: the real bytes of every float tensor, in batches of bands across the pool.
void fill_tensors(const std::string& path, const std::vector<FloatTensor>& tensors, const SyntheticProgress& progress) {
  std::vector<uint64_t> offsets;
  {
    const gguf::File f(path);
    for (const auto& t : tensors) {
      const gguf::TensorInfo* info = f.find_tensor(t.name);
      HS_CHECK(info && info->nbytes == t.gen.nbytes(), path, ": internal: tensor ", t.name,
               " not laid out as expected");
      offsets.push_back(f.data_offset() + info->offset);
    }
  }
  uint64_t total = 0, done = 0;
  for (const auto& t : tensors) total += t.gen.nbytes();
  OutFile out(path);
  ThreadPool pool;
  std::mutex mu;
  std::string error;  // the first failure inside a worker (exceptions must not leave them)
  for (size_t i = 0; i < tensors.size(); ++i) {
    const synth::TensorGen& g = tensors[i].gen;
    const uint64_t band_bytes = g.row_bytes() * synth::TensorGen::kBandRows;
    const int64_t per_batch = std::max<int64_t>(pool.size(), static_cast<int64_t>((uint64_t{64} << 20) / band_bytes));
    for (int64_t b0 = 0; b0 < g.n_bands(); b0 += per_batch) {
      const int64_t b1 = std::min(g.n_bands(), b0 + per_batch);
      pool.parallel_for(b1 - b0, 1, [&](int64_t lo, int64_t hi) {
        try {
          synth::BandScratch scratch;
          std::vector<uint8_t> buf;
          for (int64_t b = b0 + lo; b < b0 + hi; ++b) {
            buf.resize(static_cast<size_t>(g.row_bytes()) * static_cast<size_t>(g.band_rows(b)));
            g.band(b, nullptr, buf.data(), scratch);
            out.pwrite_all(buf.data(), buf.size(),
                           offsets[i] + static_cast<uint64_t>(g.band_first_row(b)) * g.row_bytes());
          }
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          if (error.empty()) error = e.what();
        }
      });
      HS_CHECK(error.empty(), error);
      done +=
          static_cast<uint64_t>(g.band_first_row(b1 - 1) + g.band_rows(b1 - 1) - g.band_first_row(b0)) * g.row_bytes();
      if (progress) progress(done, total);
    }
  }
  out.close();
}

}  // namespace

std::string_view synthetic_chat_template() { return synth_data::kDeepSeekV4ChatTemplate; }

void write_synthetic_metadata(const SyntheticSpec& spec, gguf::Writer& w) {
  const ModelConfig c = synthetic_config(spec);
  write_config_metadata(c, w, !spec.draft.empty() && spec.draft_layout == "nextn-counted");
  w.set_string("general.name", cat("DeepSeek-V4 synthetic ", spec.preset, " (", c.n_layers, " layers, ", spec.quant,
                                   ", seed ", spec.seed, ")"));
  make_synthetic_tokenizer(c.vocab_size).write_gguf_metadata(w);
  w.set_string("tokenizer.chat_template", std::string(synthetic_chat_template()));
}

void write_synthetic_gguf(const SyntheticSpec& spec, const std::string& path, const SyntheticProgress& progress) {
  const ModelConfig c = synthetic_config(spec);
  const synth::Quant quant = synth::parse_quant(spec.quant);
  gguf::Writer w;
  write_synthetic_metadata(spec, w);
  HS_CHECK(!spec.draft_only || !spec.draft.empty(), "synthetic model: a drafter-only file needs a drafter (draft mtp or dspark)");
  std::vector<TensorSpec> specs;
  if (!spec.draft_only) specs = model_tensor_specs(c, 0, c.n_layers, true, true);
  std::vector<std::string> names;  // GGUF names (values are generated from the canonical ones)
  for (const TensorSpec& s : specs) names.push_back(synth::gguf_name(s));
  const bool mtp0 = spec.draft_layout == "mtp0";
  if (spec.draft == "dspark")  // ds4's layout: mtp.<s>.* (dspark_gguf_names)
    for (TensorSpec& s : dspark_tensor_specs(c, c.dspark.stages)) {
      const std::string n = dspark_gguf_names(s.name, c.dspark.stages, false).at(0);
      const bool suffixed = n.ends_with(".weight") || n.ends_with(".bias");
      names.push_back(suffixed ? n : n + (n.ends_with("exp_probs_b") ? ".bias" : ".weight"));
      specs.push_back(std::move(s));
    }
  if (spec.draft == "mtp")
    for (TensorSpec& s : mtp_tensor_specs(c, !mtp0)) {
      // The name in the layout asked for (mtp_gguf_names: antirez's mtp.0.<x>, blk.<n>.<x>,
      // blk.<n>.nextn.<x>): llama.cpp's converter keeps the e/h norms, eh_proj, the head norm
      // (nextn.shared_head_norm) and the MTP's hc_head under nextn.
      const std::vector<std::string> alt = mtp_gguf_names(s.name, c.n_layers);
      const std::string x = s.name.substr(4);
      const bool nextn = x == "eh_proj" || x == "enorm" || x == "hnorm" || x == "norm" || x.rfind("hc_head", 0) == 0;
      const std::string suffix = x == "exp_probs_b" ? ".bias" : ".weight";
      names.push_back((mtp0 ? alt[0] : nextn ? alt[2] : alt[1]) + suffix);
      specs.push_back(std::move(s));
    }
  std::vector<FloatTensor> floats;
  std::vector<std::vector<int32_t>> tables;  // small: written with the layout
  uint64_t largest = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    if (s.role == TensorRole::TokenTable) continue;
    floats.push_back({names[i], synth::TensorGen(s, quant, spec.seed)});
    largest = std::max(largest, floats.back().gen.nbytes());
  }
  const ZeroPages zeros(std::max<uint64_t>(largest, 1));
  tables.reserve(specs.size());
  size_t next_float = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const std::vector<int64_t> ne(s.shape.rbegin(), s.shape.rend());
    if (s.role == TensorRole::TokenTable) {
      tables.push_back(synth::gen_token_table(s, c.n_experts, spec.seed));
      w.add_tensor(names[i], GgmlType::I32, ne, tables.back().data(), tables.back().size() * 4);
    } else {
      const synth::TensorGen& g = floats[next_float++].gen;
      w.add_tensor(names[i], g.storage().gguf, ne, zeros.data(), g.nbytes());
    }
  }
  const std::string partial = path + ".partial";
  try {
    w.write(partial);
    fill_tensors(partial, floats, progress);
    HS_CHECK(std::rename(partial.c_str(), path.c_str()) == 0, "cannot rename ", partial, " to ", path, ": ",
             std::strerror(errno));
  } catch (...) {
    std::remove(partial.c_str());
    throw;
  }
}

}  // namespace hs
