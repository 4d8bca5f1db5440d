#include "io/npy.h"

#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace mmrt::io {

namespace {

const char* descr_of(DType t) {
  switch (t) {
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kI8:
      return "|i1";
    case DType::kU8:
      return "|u1";
    case DType::kI32:
      return "<i4";
    case DType::kI64:
      return "<i8";
    case DType::kBF16:
      break;
  }
  return nullptr;
}

DType dtype_of_descr(std::string_view d, const std::string& path) {
  for (DType t : {DType::kF32, DType::kF16, DType::kI8, DType::kU8, DType::kI32, DType::kI64}) {
    std::string_view mine = descr_of(t);
    if (d == mine || (mine[0] == '|' && d.substr(1) == mine.substr(1) && d[0] == '<')) return t;
  }
  throw Unimplemented(path + ": unsupported .npy dtype '" + std::string(d) + "'");
}

// The value text after "'key':" in the header dict (trimmed at the next top-level comma).
std::string_view dict_value(std::string_view h, std::string_view key, const std::string& path) {
  std::string pat(1, '\'');
  pat.append(key).append("':");
  size_t at = h.find(pat);
  if (at == std::string_view::npos) throw FormatError(path + ": .npy header has no " + pat);
  std::string_view v = h.substr(at + pat.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  size_t end = v.front() == '(' ? v.find(')') + 1 : v.find_first_of(",}");
  return v.substr(0, end);
}

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  const char* descr = descr_of(t.dtype());
  if (!descr)
    throw InvalidArgument("write_npy: numpy has no " + std::string(dtype_name(t.dtype())));
  Tensor c = t.contiguous();
  std::string shape = "(";  // numpy's spelling: (), (n,), (a, b)
  for (int i = 0; i < c.rank(); ++i) shape += (i ? ", " : "") + std::to_string(c.dim(i));
  shape += c.rank() == 1 ? ",)" : ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw NotFound("cannot create " + path);
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(c.raw()), static_cast<std::streamsize>(c.nbytes()));
  if (!f) throw Unavailable("write failed: " + path);
}

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw NotFound(".npy file not found: " + path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw FormatError(path + ": not a .npy file");
  uint32_t hlen = 0;
  unsigned char lb[4] = {0, 0, 0, 0};
  if (magic[6] == 1) {
    f.read(reinterpret_cast<char*>(lb), 2);
    hlen = lb[0] | (lb[1] << 8);
  } else {
    f.read(reinterpret_cast<char*>(lb), 4);
    hlen = lb[0] | (lb[1] << 8) | (lb[2] << 16) | (static_cast<uint32_t>(lb[3]) << 24);
  }
  if (!f || hlen > (1u << 20)) throw FormatError(path + ": bad .npy header length");
  std::string h(hlen, '\0');
  if (!f.read(h.data(), hlen)) throw FormatError(path + ": truncated .npy header");
  std::string_view descr = dict_value(h, "descr", path);
  if (descr.size() < 2) throw FormatError(path + ": bad descr");
  DType dt = dtype_of_descr(descr.substr(1, descr.size() - 2), path);
  if (dict_value(h, "fortran_order", path) != "False")
    throw Unimplemented(path + ": Fortran-order .npy files are not supported");
  std::string_view sv = dict_value(h, "shape", path);
  Shape shape;
  for (size_t i = 1; i < sv.size();) {
    while (i < sv.size() && (sv[i] == ' ' || sv[i] == ',' || sv[i] == ')')) ++i;
    if (i >= sv.size()) break;
    int64_t v = 0;
    bool any = false;
    while (i < sv.size() && sv[i] >= '0' && sv[i] <= '9') v = v * 10 + (sv[i++] - '0'), any = true;
    if (!any) throw FormatError(path + ": bad shape " + std::string(sv));
    shape.push_back(v);
  }
  Tensor t = Tensor::empty(dt, shape);
  if (!f.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes())))
    throw FormatError(path + ": truncated .npy data");
  return t;
}

}  // namespace mmrt::io
