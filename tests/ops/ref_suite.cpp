#include "ref_suite.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace mmrt::test {

namespace {

std::vector<std::function<void(RefSuite&)>>& builders() {
  static std::vector<std::function<void(RefSuite&)>> b;
  return b;
}

template <typename T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

template <typename T>
std::vector<T> read_raw(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("reference output missing: " + p.string());
  f.seekg(0, std::ios::end);
  std::vector<T> v(static_cast<size_t>(f.tellg()) / sizeof(T));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  return v;
}

}  // namespace

Array f32_array(std::vector<int64_t> shape, std::vector<float> data) {
  Array a;
  a.dtype = "f32";
  a.shape = std::move(shape);
  a.f = std::move(data);
  return a;
}
Array i32_array(std::vector<int64_t> shape, std::vector<int32_t> data) {
  Array a;
  a.dtype = "i32";
  a.shape = std::move(shape);
  a.i = std::move(data);
  return a;
}
Array bf16_array(std::vector<int64_t> shape, std::vector<uint16_t> data) {
  Array a;
  a.dtype = "bf16";
  a.shape = std::move(shape);
  a.h = std::move(data);
  return a;
}

bool register_cases(std::function<void(RefSuite&)> builder) {
  builders().push_back(std::move(builder));
  return true;
}

void RefSuite::add(RefCase c) {
  std::string name = c.name;
  if (!cases_.emplace(name, std::move(c)).second)
    throw std::runtime_error("duplicate reference case " + name);
}

const RefCase& RefSuite::at(const std::string& name) const {
  auto it = cases_.find(name);
  if (it == cases_.end()) throw std::runtime_error("no reference case " + name);
  return it->second;
}

RefSuite& RefSuite::get() {
  static RefSuite* suite = [] {
    auto* s = new RefSuite;
    for (auto& b : builders()) b(*s);
    const fs::path dir = fs::temp_directory_path() / ("mmrt_ops_ref_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    nlohmann::json manifest;
    manifest["cases"] = nlohmann::json::array();
    for (auto& [name, c] : s->cases_) {
      nlohmann::json j;
      j["name"] = name;
      j["op"] = c.op;
      j["params"] = c.params;
      j["out"] = name + ".out";
      j["inputs"] = nlohmann::json::object();
      for (auto& [key, a] : c.inputs) {
        const std::string file = name + "." + key;
        if (a.dtype == "f32")
          write_raw(dir / file, a.f);
        else if (a.dtype == "i32")
          write_raw(dir / file, a.i);
        else
          write_raw(dir / file, a.h);
        j["inputs"][key] = {{"file", file}, {"dtype", a.dtype}, {"shape", a.shape}};
      }
      manifest["cases"].push_back(j);
    }
    std::ofstream(dir / "cases.json") << manifest.dump();
    const std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                            "/tests/reference/ops_ref.py " + dir.string();
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      fs::remove_all(dir);
      throw std::runtime_error("reference script failed (" + std::to_string(rc) + "): " + cmd);
    }
    for (auto& [name, c] : s->cases_) {
      if (c.op == "argmax") {
        c.out.dtype = "i32";
        c.out.i = read_raw<int32_t>(dir / (name + ".out"));
      } else {
        c.out.f = read_raw<float>(dir / (name + ".out"));
      }
    }
    fs::remove_all(dir);
    return s;
  }();
  return *suite;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<int32_t> randint(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> ud(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = ud(rng);
  return v;
}

double expect_close(const float* got, const float* ref, size_t n, double atol, double rtol,
                    const std::string& what) {
  double max_err = 0.0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    if (std::isnan(r) || std::isnan(g)) {
      if (std::isnan(r) != std::isnan(g) && ++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << g << ", reference " << r;
      continue;
    }
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r && ++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << g << ", reference " << r;
      continue;
    }
    const double err = std::fabs(g - r);
    max_err = std::max(max_err, err);
    if (err > atol + rtol * std::fabs(r) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", reference " << r << " (error "
                    << err << ", tolerance " << atol + rtol * std::fabs(r) << ")";
  }
  if (std::getenv("MMRT_SHOW_ERRORS"))
    std::printf("  %-50s max |err| %.3g\n", what.c_str(), max_err);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n
                     << " values outside tolerance; max error " << max_err;
  return max_err;
}

}  // namespace mmrt::test
