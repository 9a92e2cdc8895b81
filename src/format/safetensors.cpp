#include "format/safetensors.h"

#include <dirent.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace hs::st {

namespace {

struct DTypeName {
  const char* name;
  DType t;
  int size;
};
constexpr DTypeName kDTypes[] = {
    {"F32", DType::F32, 4},         {"F16", DType::F16, 2},         {"BF16", DType::BF16, 2},
    {"F8_E4M3", DType::F8_E4M3, 1}, {"F8_E8M0", DType::F8_E8M0, 1}, {"I8", DType::I8, 1},
    {"U8", DType::U8, 1},           {"I16", DType::I16, 2},         {"I32", DType::I32, 4},
    {"I64", DType::I64, 8},         {"F64", DType::F64, 8},         {"BOOL", DType::BOOL, 1},
};


}  // namespace

const char* dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}

int dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.size;
  return 0;
}

int64_t Tensor::n_elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

File::File(const std::string& path) : map_(path) {
  const uint64_t fsize = map_.size();
  HS_CHECK(fsize >= 8, path, ": not a safetensors file (", fsize, " bytes, need at least an 8-byte header length)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | map_.data()[i];
  HS_CHECK(hlen <= fsize - 8, path, ": header length ", hlen, " exceeds the file size ", fsize,
           " (truncated or not safetensors)");
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = fsize - data_start;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(map_.data() + 8, map_.data() + 8 + hlen);
  } catch (const std::exception& e) {
    fail(path, ": header is not valid JSON: ", e.what());
  }
  HS_CHECK(h.is_object(), path, ": header is not a JSON object");
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& e = *it;
    HS_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"), path,
             ": tensor ", name, ": entry needs dtype, shape and data_offsets");
    HS_CHECK(e["dtype"].is_string(), path, ": tensor ", name, ": dtype is not a string");
    Tensor t;
    t.name = name;
    t.file = path;
    std::string dt = e["dtype"].get<std::string>();
    bool known = false;
    for (const auto& d : kDTypes)
      if (dt == d.name) {
        t.dtype = d.t;
        known = true;
      }
    HS_CHECK(known, path, ": tensor ", name, ": unsupported dtype ", dt);
    HS_CHECK(e["shape"].is_array(), path, ": tensor ", name, ": shape is not an array");
    int64_t n = 1;
    for (const auto& d : e["shape"]) {
      HS_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < (int64_t{1} << 40), path,
               ": tensor ", name, ": bad dimension ", d.dump());
      t.shape.push_back(d.get<int64_t>());
      HS_CHECK(n <= (int64_t{1} << 50) / std::max<int64_t>(1, d.get<int64_t>()), path, ": tensor ", name,
               ": shape too large");
      n *= d.get<int64_t>();
    }
    const auto& off = e["data_offsets"];
    HS_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), path,
             ": tensor ", name, ": data_offsets must be two unsigned integers");
    uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    HS_CHECK(b <= en && en <= data_size, path, ": tensor ", name, ": data [", b, ", ", en,
             ") lies outside the data section of ", data_size, " bytes (file truncated?)");
    t.nbytes = en - b;
    uint64_t expect = static_cast<uint64_t>(n) * dtype_size(t.dtype);
    HS_CHECK(t.nbytes == expect, path, ": tensor ", name, ": ", t.nbytes, " bytes of data, expected ", expect,
             " for shape and dtype ", dt);
    t.data = map_.data() + data_start + b;
    tensors_.emplace(name, std::move(t));
  }
}

Collection::Collection(const std::string& dir_or_file) {
  std::vector<std::string> paths;
  if (!is_directory(dir_or_file)) {
    paths.push_back(dir_or_file);
  } else {
    const std::string dir = dir_or_file;
    const std::string index = dir + "/model.safetensors.index.json";
    if (file_exists(index)) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(read_file(index));
      } catch (const nlohmann::json::exception& e) {
        fail(index, ": invalid JSON: ", e.what());
      }
      HS_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), index, ": missing object 'weight_map'");
      std::map<std::string, std::vector<std::string>> by_file;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        HS_CHECK(it->is_string(), index, ": weight_map entry ", it.key(), " is not a file name");
        by_file[it->get<std::string>()].push_back(it.key());
      }
      for (const auto& [file, names] : by_file) {
        HS_CHECK(file.find('/') == std::string::npos, index, ": shard name ", file, " must be a plain file name");
        files_.push_back(std::make_unique<File>(dir + "/" + file));
        for (const auto& n : names) {
          auto t = files_.back()->tensors().find(n);
          HS_CHECK(t != files_.back()->tensors().end(), index, ": tensor ", n, " is mapped to ", file,
                   " but that shard does not contain it");
        }
      }
    } else if (file_exists(dir + "/model.safetensors")) {
      paths.push_back(dir + "/model.safetensors");
    } else {
      DIR* d = opendir(dir.c_str());
      HS_CHECK(d, "cannot read directory ", dir);
      while (auto* ent = readdir(d)) {
        std::string n = ent->d_name;
        if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") paths.push_back(dir + "/" + n);
      }
      closedir(d);
      std::sort(paths.begin(), paths.end());
      HS_CHECK(!paths.empty(), dir, ": no model.safetensors, no model.safetensors.index.json, no *.safetensors");
    }
  }
  for (const auto& p : paths) files_.push_back(std::make_unique<File>(p));
  for (const auto& f : files_)
    for (const auto& [n, t] : f->tensors()) {
      auto [it, inserted] = index_.emplace(n, &t);
      HS_CHECK(inserted, "tensor ", n, " appears in both ", it->second->file, " and ", t.file);
    }
}

const Tensor* Collection::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const Tensor& Collection::get(const std::string& name) const {
  const Tensor* t = find(name);
  HS_CHECK(t, "missing tensor ", name);
  return *t;
}

std::vector<std::string> Collection::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : index_) out.push_back(n);
  return out;
}

}  // namespace hs::st
