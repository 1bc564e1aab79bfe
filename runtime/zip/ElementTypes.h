#pragma once
// The element types of the files pstrain reads and writes, one row each: safetensors' code,
// torch.save's storage type, torch's dtype names and libtorch's c10::ScalarType (by its
// value: this header is torch-free; checkpoint/Tensors.cpp asserts that the values hold).
#include <cstddef>
#include <string_view>

namespace pstrain::zip {

struct ElementType {
  const char* code;     // safetensors': "F32"; "" where the format has none
  const char* storage;  // torch.save's storage type: "FloatStorage"; "" where torch has none
  const char* dtype;    // torch's name: "float32" (torch.float32); "" where torch has none
  const char* alias;    // torch's other name: "float" (torch.float); "" where none
  std::size_t bytes;    // of one element
  int scalarType;       // c10::ScalarType's value; -1 where libtorch has no such type
  bool weights;         // pstrain reads and writes tensors of it as weights
};

inline constexpr ElementType kElementTypes[] = {
    {"F32", "FloatStorage", "float32", "float", 4, 6, true},
    {"F64", "DoubleStorage", "float64", "double", 8, 7, true},
    {"F16", "HalfStorage", "float16", "half", 2, 5, true},
    {"BF16", "BFloat16Storage", "bfloat16", "", 2, 15, true},
    {"I64", "LongStorage", "int64", "long", 8, 4, true},
    {"I32", "IntStorage", "int32", "int", 4, 3, true},
    {"I16", "ShortStorage", "int16", "short", 2, 2, true},
    {"I8", "CharStorage", "int8", "", 1, 1, true},
    {"U8", "ByteStorage", "uint8", "", 1, 0, true},
    {"BOOL", "BoolStorage", "bool", "", 1, 11, true},
    {"", "ComplexHalfStorage", "complex32", "chalf", 4, 8, false},
    {"", "ComplexFloatStorage", "complex64", "cfloat", 8, 9, false},
    {"", "ComplexDoubleStorage", "complex128", "cdouble", 16, 10, false},
    {"", "QInt8Storage", "qint8", "", 1, 12, false},
    {"", "QUInt8Storage", "quint8", "", 1, 13, false},
    {"", "QInt32Storage", "qint32", "", 4, 14, false},
    {"", "QUInt4x2Storage", "quint4x2", "", 1, 16, false},
    {"", "QUInt2x4Storage", "quint2x4", "", 1, 17, false},
    {"U16", "", "", "", 2, -1, false},
    {"U32", "", "", "", 4, -1, false},
    {"U64", "", "", "", 8, -1, false},
    {"F8_E5M2", "", "", "", 1, -1, false},
    {"F8_E4M3", "", "", "", 1, -1, false},
};

// The row whose `field` is `name` (never matching an empty name); null for none.
template <typename Field>
const ElementType* elementTypeBy(Field field, std::string_view name) {
  if (name.empty()) return nullptr;
  for (const ElementType& t : kElementTypes) {
    if (name == t.*field) return &t;
  }
  return nullptr;
}
inline const ElementType* elementTypeOfCode(std::string_view code) { return elementTypeBy(&ElementType::code, code); }
inline const ElementType* elementTypeOfStorage(std::string_view s) { return elementTypeBy(&ElementType::storage, s); }
// torch.<name>: a dtype's name or its alias.
inline const ElementType* elementTypeOfDtype(std::string_view name) {
  const ElementType* t = elementTypeBy(&ElementType::dtype, name);
  return t ? t : elementTypeBy(&ElementType::alias, name);
}
inline const ElementType* elementTypeOfScalar(int scalarType) {
  for (const ElementType& t : kElementTypes) {
    if (t.scalarType == scalarType && scalarType >= 0) return &t;
  }
  return nullptr;
}

}  // namespace pstrain::zip
