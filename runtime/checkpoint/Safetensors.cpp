#include "runtime/checkpoint/Safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "runtime/Text.h"
#include "runtime/metrics/Json.h"

namespace pstrain::checkpoint {
namespace {

// The dtypes of the spec, and their sizes.
const std::pair<const char*, std::size_t> kSpecDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},  {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8},  {"U64", 8}};

// A JSON value, as far as the header has them: objects (their members in order), arrays,
// strings, non-negative integers; any other value is refused where it is read.
struct Json {
  enum class Kind { Object, Array, String, Integer };
  Kind kind = Kind::Object;
  std::string text;
  std::uint64_t integer = 0;
  std::vector<std::pair<std::string, Json>> members;
  std::vector<Json> items;
};

// A strict reader of the header's JSON (RFC 8259, as far as the header needs): at most
// kDepth deep, every string valid UTF-8 once its escapes are read.
class JsonReader {
 public:
  JsonReader(std::string_view text, const zip::Fail& fail) : s_(text), fail_(fail) {}

  Json document() {
    Json value = read(0);
    space();
    if (pos_ != s_.size()) bad("text after the header's object");
    return value;
  }

 private:
  static constexpr int kDepth = 8;

  [[noreturn]] void bad(const std::string& what) const {
    fail_(fmt::format("its header is not the JSON of the format ({} at byte {} of it)", what, pos_));
    throw std::logic_error("zip::Fail returned");
  }
  void space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char next() {
    space();
    if (pos_ >= s_.size()) bad("the end of the header");
    return s_[pos_];
  }
  void expect(char c) {
    if (next() != c) bad(fmt::format("'{}' expected", c));
    ++pos_;
  }

  Json read(int depth) {
    if (depth > kDepth) bad("nesting too deep");
    const char c = next();
    Json v;
    if (c == '{') {
      ++pos_;
      std::set<std::string> names;
      if (next() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        if (next() != '"') bad("a member's name expected");
        std::string name = string();
        if (!names.insert(name).second) bad(fmt::format("the name '{}' twice", printable(name)));
        expect(':');
        v.members.emplace_back(std::move(name), read(depth + 1));
        if (next() == '}') break;
        expect(',');
      }
      ++pos_;
      return v;
    }
    if (c == '[') {
      ++pos_;
      v.kind = Json::Kind::Array;
      if (next() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(read(depth + 1));
        if (next() == ']') break;
        expect(',');
      }
      ++pos_;
      return v;
    }
    if (c == '"') {
      v.kind = Json::Kind::String;
      v.text = string();
      return v;
    }
    if (c >= '0' && c <= '9') {
      v.kind = Json::Kind::Integer;
      if (c == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') bad("a leading zero");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        const unsigned digit = static_cast<unsigned>(s_[pos_++] - '0');
        if (v.integer > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) bad("an integer past 64 bits");
        v.integer = v.integer * 10 + digit;
      }
      if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) bad("a number that is not an integer");
      return v;
    }
    bad(c == '-' ? "a negative number" : "a value the header does not hold");
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) bad("a short \\u escape");
    unsigned n = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      n = n * 16 + static_cast<unsigned>(h >= '0' && h <= '9' ? h - '0'
                                         : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                         : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                                : (bad("a bad \\u escape"), 0));
    }
    return n;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | cp >> 6);
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | cp >> 12);
      out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | cp >> 18);
      out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
      out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  // A string (at its opening quote), its escapes read.
  std::string string() {
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) bad("an unterminated string");
      const char c = s_[pos_++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) bad("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) bad("an unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            if (s_.substr(pos_, 2) != "\\u") bad("a lone surrogate");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) bad("a lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            bad("a lone surrogate");
          }
          utf8(out, cp);
          break;
        }
        default: bad("an unknown escape");
      }
    }
    return out;
  }

  std::string_view s_;
  const zip::Fail& fail_;
  std::size_t pos_ = 0;
};

// One tensor's entry of the header, checked against the data's `size` bytes.
SafetensorsEntry entryOf(const std::string& name, const Json& v, std::uint64_t size, const zip::Fail& fail) {
  const auto bad = [&](const std::string& what) {
    fail(fmt::format("tensor '{}': {}", printable(name), what));
    throw std::logic_error("zip::Fail returned");
  };
  if (v.kind != Json::Kind::Object) bad("its entry is not an object");
  SafetensorsEntry e;
  e.name = name;
  bool dtype = false, shape = false, offsets = false;
  for (const auto& [key, field] : v.members) {
    if (key == "dtype" && field.kind == Json::Kind::String) {
      e.dtype = field.text;
      dtype = true;
    } else if (key == "shape" && field.kind == Json::Kind::Array) {
      for (const Json& d : field.items) {
        if (d.kind != Json::Kind::Integer || d.integer > (std::uint64_t(1) << 62)) bad("its shape is not of counts");
        e.shape.push_back(static_cast<std::int64_t>(d.integer));
      }
      shape = true;
    } else if (key == "data_offsets" && field.kind == Json::Kind::Array && field.items.size() == 2 &&
               field.items[0].kind == Json::Kind::Integer && field.items[1].kind == Json::Kind::Integer) {
      e.begin = field.items[0].integer;
      e.end = field.items[1].integer;
      offsets = true;
    } else {
      bad(fmt::format("its entry has '{}', which is not a dtype, a shape or data offsets of the format",
                      printable(key)));
    }
  }
  if (!dtype || !shape || !offsets) bad("its entry lacks a dtype, a shape or data offsets");
  const std::size_t element = safetensorsElementSize(e.dtype);
  if (element == 0) bad(fmt::format("dtype '{}' is not one of the format's", printable(e.dtype)));
  if (e.begin > e.end || e.end > size) {
    bad(fmt::format("its data offsets [{}, {}) are not within the {} bytes of data", e.begin, e.end, size));
  }
  unsigned __int128 bytes = element;
  for (std::int64_t d : e.shape) bytes = std::min<unsigned __int128>(bytes * static_cast<std::uint64_t>(d), ~std::uint64_t{0});
  if (bytes != e.end - e.begin) {
    bad(fmt::format("its shape [{}] of {} holds {} bytes, its data offsets {}", fmt::join(e.shape, ", "), e.dtype,
                    static_cast<std::uint64_t>(bytes), e.end - e.begin));
  }
  return e;
}

}  // namespace

std::size_t safetensorsElementSize(const std::string& dtype) {
  for (const auto& [name, size] : kSpecDtypes) {
    if (dtype == name) return size;
  }
  return 0;
}

SafetensorsHeader readSafetensorsHeader(std::string_view bytes, const zip::Fail& fail) {
  if (bytes.size() < 8) fail(fmt::format("{} bytes: shorter than a safetensors header's length", bytes.size()));
  const std::uint64_t n = zip::littleEndian(reinterpret_cast<const unsigned char*>(bytes.data()), 8);
  if (n > kMaxSafetensorsHeader) {
    fail(fmt::format("its header would be {} bytes, more than the format's {}", n, kMaxSafetensorsHeader));
  }
  if (n > bytes.size() - 8) fail(fmt::format("its header of {} bytes reaches past the file's end", n));
  const std::string_view text = bytes.substr(8, n);
  if (text.empty() || text[0] != '{') fail("its header does not begin with '{'");
  const Json top = JsonReader(text, fail).document();
  SafetensorsHeader header;
  header.dataStart = 8 + n;
  const std::uint64_t size = bytes.size() - header.dataStart;
  for (const auto& [name, value] : top.members) {
    if (name != "__metadata__") {
      header.tensors.push_back(entryOf(name, value, size, fail));
      continue;
    }
    if (value.kind != Json::Kind::Object) fail("its __metadata__ is not an object");
    for (const auto& [key, item] : value.members) {
      if (item.kind != Json::Kind::String) fail(fmt::format("its __metadata__ '{}' is not a string", printable(key)));
      header.metadata.emplace_back(key, item.text);
    }
  }
  // The data, covered whole: each tensor's bytes begin where the one before ends.
  std::vector<const SafetensorsEntry*> byOffset;
  for (const auto& e : header.tensors) byOffset.push_back(&e);
  std::sort(byOffset.begin(), byOffset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  for (const SafetensorsEntry* e : byOffset) {
    if (e->begin != covered) {
      fail(fmt::format("tensor '{}' begins at byte {} of the data, where {} (a gap or an overlap)",
                       printable(e->name), e->begin, covered == 0 ? "the data begin at 0" : fmt::format("the one before ends at {}", covered)));
    }
    covered = e->end;
  }
  if (covered != size) fail(fmt::format("its tensors cover {} of the {} bytes of data after the header", covered, size));
  return header;
}

std::string writeSafetensorsHeader(std::vector<SafetensorsEntry>& tensors,
                                   const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i) {
      json += (i ? "," : "") + metrics::jsonQuote(metadata[i].first) + ":" + metrics::jsonQuote(metadata[i].second);
    }
    json += "}";
  }
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SafetensorsEntry& e = tensors[i];
    std::uint64_t bytes = safetensorsElementSize(e.dtype);
    for (std::int64_t d : e.shape) bytes *= static_cast<std::uint64_t>(d);
    e.begin = at;
    e.end = at += bytes;
    json += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        i || !metadata.empty() ? "," : "", metrics::jsonQuote(e.name), e.dtype,
                        fmt::join(e.shape, ","), e.begin, e.end);
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(json.size() >> (8 * i) & 0xFF);
  return out + json;
}

}  // namespace pstrain::checkpoint
