#include "models/checkpoint.h"

#include <cstdarg>
#include <cstdio>
#include <set>

#include "core/error.h"

namespace mmrt::models {

namespace {

// "N what (first: a, b, c)" or "" when the list is empty.
std::string summarize(const std::vector<std::string>& items, const char* what) {
  if (items.empty()) return "";
  constexpr size_t kShow = 5;
  std::string s = std::to_string(items.size()) + " " + what + " (";
  for (size_t i = 0; i < items.size() && i < kShow; ++i) {
    if (i) s += ", ";
    s += items[i];
  }
  if (items.size() > kShow) s += ", ...";
  return s + ")";
}

}  // namespace

void check_checkpoint_tensors(const io::SafeTensors& st,
                              const std::vector<ExpectedTensor>& expected,
                              const std::string& what) {
  std::vector<std::string> missing, unexpected, wrong_shape, bad_dtype;
  std::set<std::string> expected_names;
  for (const ExpectedTensor& e : expected) {
    expected_names.insert(e.name);
    if (!st.contains(e.name)) {
      missing.push_back(e.name);
      continue;
    }
    const io::TensorInfo& info = st.info(e.name);
    if (info.shape != e.shape)
      wrong_shape.push_back(e.name + " is " + shape_str(info.shape) + ", expected " +
                            shape_str(e.shape));
    if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16)
      bad_dtype.push_back(e.name + " is " + std::string(dtype_name(info.dtype)));
  }
  for (const auto& n : st.names())
    if (!expected_names.count(n)) unexpected.push_back(n);
  if (missing.empty() && unexpected.empty() && wrong_shape.empty() && bad_dtype.empty()) return;
  std::string msg = st.path() + ": checkpoint does not match its config.json (" + what + "):";
  for (const std::string& part :
       {summarize(missing, "missing"), summarize(unexpected, "unexpected"),
        summarize(wrong_shape, "with the wrong shape"),
        summarize(bad_dtype, "with an unsupported dtype (need F32, F16 or BF16)")})
    if (!part.empty()) msg += " " + part + ";";
  msg.pop_back();
  throw FormatError(msg);
}

std::string inspect_text(const char* fmt, ...) {
  char buf[320];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace mmrt::models
