// Names and sizes of dtypes and devices.
#include "core/dtype.h"

#include "core/error.h"

namespace tinyformer {

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 4;
    case DType::float64:
      return 8;
    case DType::int64:
      return 8;
    case DType::boolean:
      return 1;
    case DType::bfloat16:
      return 2;
  }
  fail("element_size: unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
    case DType::int64:
      return "int64";
    case DType::boolean:
      return "bool";
    case DType::bfloat16:
      return "bfloat16";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << dtype_name(dtype);
}

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, Device device) {
  return os << device.str();
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos && text.size() < 9) {
    return Device::cuda(std::stoi(text.substr(5)));
  }
  fail("parse_device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"", text, "\"");
}

}  // namespace tinyformer
