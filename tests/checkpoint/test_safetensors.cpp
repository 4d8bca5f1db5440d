// safetensors reader/writer: round trips, the reference header layout, one test per malformed
// header case (error type + message naming the file and the tensor/problem), sharded checkpoints.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace mmrt {
namespace {

using io::NamedTensors;
using io::SafeTensors;
using nlohmann::json;
namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::raw_safetensors;
using testing::TempDir;

// A tensor of random bytes.
Tensor random_tensor(DType dt, Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

NamedTensors sample_tensors() {
  NamedTensors ts;
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8,
                       DType::kU8,  DType::kI32, DType::kI64};
  const Shape shapes[] = {{}, {0}, {5}, {2, 3, 4}, {3, 0, 2}, {1, 1, 7}};
  uint32_t seed = 1;
  for (DType dt : all)
    for (const Shape& s : shapes) {
      std::string name = "t." + std::string(dtype_name(dt)) + "." + shape_str(s);
      ts.emplace_back(name, random_tensor(dt, s, seed++));
    }
  // Names out of order on purpose: the writer sorts them.
  std::swap(ts.front(), ts.back());
  return ts;
}

TEST(SafeTensors, RoundTripAllDtypesAndShapes) {
  TempDir dir;
  NamedTensors ts = sample_tensors();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "a \"quoted\" é"}};
  const std::string path = dir.file("x.safetensors");
  io::write_safetensors(path, ts, meta);
  SafeTensors st = SafeTensors::open(path);
  ASSERT_EQ(st.size(), ts.size());
  EXPECT_EQ(st.metadata(), meta);
  EXPECT_EQ(st.files(), std::vector<std::string>{path});
  uint64_t total = 0;
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(st.contains(name)) << name;
    const io::TensorInfo& info = st.info(name);
    EXPECT_EQ(info.dtype, t.dtype()) << name;
    EXPECT_EQ(info.shape, t.shape()) << name;
    EXPECT_EQ(info.end - info.begin, t.nbytes()) << name;
    EXPECT_TRUE(same_bytes(st.get(name), t)) << name;
    total += t.nbytes();
  }
  EXPECT_EQ(st.total_bytes(), total);
  std::vector<std::string> names = st.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_THAT(error_of<NotFound>([&] { st.get("nope"); }), HasSubstr("'nope'"));
}

TEST(SafeTensors, HeaderLayoutMatchesReferenceWriter) {
  TempDir dir;
  NamedTensors ts = {{"b", random_tensor(DType::kF32, {2, 2}, 1)},
                     {"a", random_tensor(DType::kBF16, {3}, 2)},
                     {"c", random_tensor(DType::kU8, {1}, 3)}};
  const std::string path = dir.file("x.safetensors");
  io::write_safetensors(path, ts, {{"format", "pt"}});
  const std::string bytes = testing::read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  ASSERT_EQ(n % 8, 0u) << "header not padded to a multiple of 8";
  std::string header = bytes.substr(8, n);
  // Compact JSON, metadata first, tensors sorted by name with consecutive offsets, space padding.
  const std::string expect =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},)"
      R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[6,22]},)"
      R"("c":{"dtype":"U8","shape":[1],"data_offsets":[22,23]}})";
  ASSERT_GE(header.size(), expect.size());
  EXPECT_EQ(header.substr(0, expect.size()), expect);
  EXPECT_EQ(header.substr(expect.size()), std::string(header.size() - expect.size(), ' '));
  EXPECT_EQ(bytes.size(), 8 + n + 23);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, ts[1].second.raw(), 6), 0);
}

TEST(SafeTensors, ViewsAreZeroCopyAndKeepTheMappingAlive) {
  TempDir dir;
  Tensor src = random_tensor(DType::kF32, {64, 64}, 7);
  const std::string path = dir.file("x.safetensors");
  io::write_safetensors(path, {{"w", src}});
  Tensor view;
  const void* p1 = nullptr;
  {
    SafeTensors st = SafeTensors::open(path);
    view = st.get("w");
    p1 = st.get("w").raw();
    EXPECT_EQ(view.raw(), p1) << "two get() calls should alias the same mapped bytes";
    EXPECT_NE(view.owner(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.raw()) % 4, 0u);
  }
  // The SafeTensors object is gone; the view still reads the mapped file.
  EXPECT_TRUE(same_bytes(view, src));
}

TEST(SafeTensors, MisalignedDataIsReturnedAsAlignedCopy) {
  TempDir dir;
  // Header padded so that 8 + its length is not a multiple of 4: the data is misaligned.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const float vals[2] = {1.5f, -2.25f};
  std::string data(reinterpret_cast<const char*>(vals), 8);
  std::string h = header;
  while ((8 + h.size()) % 4 == 0) h += ' ';  // make 8 + len not a multiple of 4
  const std::string path = dir.file("x.safetensors");
  testing::write_bytes(path, raw_safetensors(h, data));
  SafeTensors st = SafeTensors::open(path);
  Tensor t = st.get("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 4, 0u);
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[1], -2.25f);
}

TEST(SafeTensors, EmptyCheckpointRoundTrips) {
  TempDir dir;
  auto files = io::write_checkpoint(dir.path().string(), {}, 1000);
  EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(SafeTensors::open(dir.path().string()).size(), 0u);
}

TEST(SafeTensors, WriterRejectsDuplicateNames) {
  TempDir dir;
  NamedTensors ts = {{"a", random_tensor(DType::kF32, {1}, 1)},
                     {"a", random_tensor(DType::kF32, {1}, 2)}};
  EXPECT_THAT(error_of<InvalidArgument>([&] { io::write_safetensors(dir.file("x"), ts); }),
              HasSubstr("duplicate tensor name 'a'"));
}

// ---- malformed headers: one test per case ----------------------------------------------------

class Malformed : public ::testing::Test {
 protected:
  // Writes `bytes` as bad.safetensors and returns the FormatError message of opening it.
  std::string open_error(const std::string& bytes) {
    path_ = dir_.file("bad.safetensors");
    testing::write_bytes(path_, bytes);
    std::string msg = error_of<FormatError>([&] { SafeTensors::open(path_); });
    EXPECT_THAT(msg, HasSubstr(path_)) << "the message must name the file";
    return msg;
  }
  std::string entry_error(const std::string& entry, const std::string& data = std::string(8, 'x')) {
    return open_error(raw_safetensors(R"({"w":)" + entry + "}", data));
  }
  TempDir dir_;
  std::string path_;
};

TEST_F(Malformed, FileShorterThan8Bytes) {
  EXPECT_THAT(open_error("abc"), HasSubstr("shorter than the 8-byte header length"));
}

TEST_F(Malformed, HeaderLengthZero) {
  EXPECT_THAT(open_error(testing::le64(0) + "{}"), HasSubstr("header length is 0"));
}

TEST_F(Malformed, HeaderLengthOver100MB) {
  EXPECT_THAT(open_error(raw_safetensors("{}", "", 100'000'001)),
              HasSubstr("header length 100000001 exceeds the 100 MB limit"));
}

TEST_F(Malformed, HeaderLengthPastEndOfFile) {
  EXPECT_THAT(open_error(raw_safetensors("{}      ", "", 64)),
              HasSubstr("header length 64 runs past the end of the file"));
}

TEST_F(Malformed, HeaderNotValidJson) {
  EXPECT_THAT(open_error(raw_safetensors(R"({"w": {"dtype": )", "")),
              HasSubstr("header is not valid JSON"));
}

TEST_F(Malformed, HeaderNotAnObject) {
  EXPECT_THAT(open_error(raw_safetensors("[1, 2, 3]", "")),
              HasSubstr("header is not a JSON object (got array)"));
}

TEST_F(Malformed, EntryNotAnObject) {
  EXPECT_THAT(entry_error("[1,2]"), HasSubstr("tensor 'w': entry must be a JSON object"));
}

TEST_F(Malformed, EntryMissingDtype) {
  EXPECT_THAT(entry_error(R"({"shape":[2],"data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': missing \"dtype\""));
}

TEST_F(Malformed, EntryMissingShape) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': missing \"shape\""));
}

TEST_F(Malformed, EntryMissingDataOffsets) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[2]})"),
              HasSubstr("tensor 'w': missing \"data_offsets\""));
}

TEST_F(Malformed, DtypeWrongJsonType) {
  EXPECT_THAT(entry_error(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': \"dtype\" must be a string"));
}

TEST_F(Malformed, ShapeWrongJsonType) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': \"shape\" must be an array"));
}

TEST_F(Malformed, DataOffsetsWrongJsonType) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":["0","8"]})"),
              HasSubstr("tensor 'w': \"data_offsets\" must be non-negative integers"));
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"),
              HasSubstr("tensor 'w': \"data_offsets\" must be an array of 2 integers"));
}

TEST_F(Malformed, UnknownDtype) {
  EXPECT_THAT(entry_error(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': unknown dtype 'F8_E4M3'"));
}

TEST_F(Malformed, NegativeDimension) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': dimension 1 of \"shape\" is -1, not a non-negative integer"));
}

TEST_F(Malformed, NonIntegerDimension) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': dimension 0 of \"shape\" is 2.5, not a non-negative integer"));
}

TEST_F(Malformed, OffsetsBeginAfterEnd) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
              HasSubstr("tensor 'w': data_offsets [8, 0] have begin > end"));
}

TEST_F(Malformed, OffsetsEndPastDataSection) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"),
              HasSubstr("tensor 'w': data_offsets end 16 is past the end of the data section "
                        "(8 bytes)"));
}

TEST_F(Malformed, OverlappingRanges) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_THAT(open_error(raw_safetensors(h, std::string(12, 'x'))),
              HasSubstr("tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
}

TEST_F(Malformed, ShapeTimesDtypeSizeDiffersFromByteLength) {
  EXPECT_THAT(entry_error(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
              HasSubstr("tensor 'w': shape [3] x F32 is 12 bytes but data_offsets span 8 bytes"));
}

TEST_F(Malformed, DuplicateNameInOneHeader) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_THAT(open_error(raw_safetensors(h, std::string(8, 'x'))),
              HasSubstr("tensor 'a' appears twice in the header"));
}

TEST_F(Malformed, MetadataNotStrings) {
  EXPECT_THAT(open_error(raw_safetensors(R"({"__metadata__":{"n":1}})", "")),
              HasSubstr("\"__metadata__\" value for 'n' must be a string"));
}

// ---- sharded checkpoints ---------------------------------------------------------------------

NamedTensors shard_tensors() {
  NamedTensors ts;
  for (int i = 0; i < 10; ++i)
    ts.emplace_back("layer." + std::to_string(i) + ".w", random_tensor(DType::kBF16, {16, 16}, i));
  ts.emplace_back("empty", random_tensor(DType::kF32, {0, 3}, 99));
  return ts;
}

TEST(Sharded, RoundTripWithIndex) {
  TempDir dir;
  NamedTensors ts = shard_tensors();
  // 512 bytes per tensor, 1200-byte shards: two tensors per shard -> 5 shards.
  ThreadPool pool(2);
  auto files = io::write_checkpoint(dir.path().string(), ts, 1200, {{"format", "pt"}});
  ASSERT_EQ(files.size(), 6u);
  EXPECT_EQ(files[0], "model-00001-of-00005.safetensors");
  EXPECT_EQ(files[4], "model-00005-of-00005.safetensors");
  EXPECT_EQ(files[5], "model.safetensors.index.json");
  json idx = json::parse(testing::read_bytes(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), 10u * 512);
  EXPECT_EQ(idx["weight_map"].size(), ts.size());
  EXPECT_EQ(idx["weight_map"]["empty"], "model-00001-of-00005.safetensors");
  for (const std::string& p : {dir.path().string(), dir.file("model.safetensors.index.json")}) {
    SafeTensors st = SafeTensors::open(p);
    EXPECT_EQ(st.files().size(), 5u);
    EXPECT_EQ(st.size(), ts.size());
    EXPECT_EQ(st.metadata().at("format"), "pt");
    for (const auto& [name, t] : ts) {
      EXPECT_TRUE(same_bytes(st.get(name), t)) << name;
      EXPECT_EQ(st.info(name).file, dir.file(idx["weight_map"][name].get<std::string>())) << name;
    }
  }
}

TEST(Sharded, SingleFileWhenItFitsAndStaleShardsRemoved) {
  TempDir dir;
  NamedTensors ts = shard_tensors();
  io::write_checkpoint(dir.path().string(), ts, 1200);
  auto files = io::write_checkpoint(dir.path().string(), ts, 1 << 20);
  EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file("model-00001-of-00005.safetensors")));
  SafeTensors st = SafeTensors::open(dir.path().string());
  EXPECT_EQ(st.files().size(), 1u);
  for (const auto& [name, t] : ts) EXPECT_TRUE(same_bytes(st.get(name), t)) << name;
}

TEST(Sharded, StreamedWriterIsIndependentOfThreadCount) {
  std::vector<io::PendingTensor> ps;
  for (int i = 0; i < 3; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    ps.push_back({name, DType::kI32, {1000 + i, 700}, [i](void* dst, int64_t b, int64_t e) {
                    auto* d = static_cast<int32_t*>(dst);
                    for (int64_t k = b; k < e; ++k) d[k - b] = static_cast<int32_t>(k * 7 + i);
                  }});
  }
  TempDir a, b;
  ThreadPool one(1), two(2);
  io::write_checkpoint_streamed(a.path().string(), ps, 3'000'000, {}, &one);
  io::write_checkpoint_streamed(b.path().string(), ps, 3'000'000, {}, &two);
  EXPECT_EQ(testing::read_bytes(a.file("model-00002-of-00003.safetensors")),
            testing::read_bytes(b.file("model-00002-of-00003.safetensors")));
  SafeTensors st = SafeTensors::open(b.path().string());
  Tensor t = st.get("p2");
  EXPECT_EQ(t.data<int32_t>()[1001 * 700], 1001 * 700 * 7 + 2);
}

class ShardedBroken : public ::testing::Test {
 protected:
  void SetUp() override {
    io::write_checkpoint(dir_.path().string(), shard_tensors(), 1200);
    index_ = json::parse(testing::read_bytes(index_path()));
  }
  std::string index_path() const { return dir_.file("model.safetensors.index.json"); }
  void save_index() { testing::write_bytes(index_path(), index_.dump(2)); }
  std::string open_error() {
    return error_of<FormatError>([&] { SafeTensors::open(dir_.path().string()); });
  }
  TempDir dir_;
  json index_;
};

TEST_F(ShardedBroken, IndexPointsToMissingShard) {
  fs::remove(dir_.file("model-00003-of-00005.safetensors"));
  std::string msg = open_error();
  EXPECT_THAT(msg, HasSubstr(index_path()));
  EXPECT_THAT(msg, HasSubstr("shard 'model-00003-of-00005.safetensors'"));
  EXPECT_THAT(msg, HasSubstr("does not exist"));
}

TEST_F(ShardedBroken, TensorNotInTheShardTheIndexNames) {
  index_["weight_map"]["layer.0.w"] = "model-00004-of-00005.safetensors";
  save_index();
  std::string msg = open_error();
  EXPECT_THAT(msg, HasSubstr(index_path()));
  EXPECT_THAT(msg, HasSubstr("tensor 'layer.0.w' is mapped to shard "
                             "'model-00004-of-00005.safetensors' but that shard does not "
                             "contain it"));
}

TEST_F(ShardedBroken, TensorMissingFromIndex) {
  index_["weight_map"].erase("layer.5.w");
  save_index();
  EXPECT_THAT(open_error(), HasSubstr("tensor 'layer.5.w' is not listed in the weight_map"));
}

TEST_F(ShardedBroken, ShardNameEscapingTheFolder) {
  index_["weight_map"]["layer.0.w"] = "../model-00001-of-00005.safetensors";
  save_index();
  EXPECT_THAT(open_error(), HasSubstr("not a file name in the checkpoint folder"));
}

TEST(Sharded, DuplicateTensorNamesAcrossShards) {
  TempDir dir;
  io::write_safetensors(dir.file("s1.safetensors"), {{"x", random_tensor(DType::kF32, {2}, 1)}});
  io::write_safetensors(dir.file("s2.safetensors"), {{"x", random_tensor(DType::kF32, {2}, 2)},
                                                     {"y", random_tensor(DType::kF32, {2}, 3)}});
  json idx = {{"metadata", {{"total_size", 16}}},
              {"weight_map", {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}}}};
  testing::write_bytes(dir.file("model.safetensors.index.json"), idx.dump());
  std::string msg = error_of<FormatError>([&] { SafeTensors::open(dir.path().string()); });
  EXPECT_THAT(msg, HasSubstr(dir.file("s2.safetensors")));
  EXPECT_THAT(msg, HasSubstr("tensor 'x' is also in " + dir.file("s1.safetensors")));
  EXPECT_THAT(msg, HasSubstr("duplicate tensor name across shards"));
}

TEST(Sharded, FolderWithoutWeights) {
  TempDir dir;
  EXPECT_THAT(error_of<NotFound>([&] { SafeTensors::open(dir.path().string()); }),
              HasSubstr("neither model.safetensors nor model.safetensors.index.json"));
}

}  // namespace
}  // namespace mmrt
