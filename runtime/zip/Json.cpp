#include "runtime/zip/Json.h"

#include <fmt/format.h>

#include <limits>
#include <set>
#include <stdexcept>

#include "runtime/FileLimits.h"
#include "runtime/Text.h"

namespace pstrain::zip {
namespace {

class JsonReader {
 public:
  JsonReader(std::string_view text, const Fail& fail) : s_(text), fail_(fail) {}

  JsonValue document() {
    JsonValue value = read(0);
    space();
    if (pos_ != s_.size()) bad("text after the document");
    return value;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail_(fmt::format("not JSON ({} at byte {})", what, pos_));
    throw std::logic_error("zip::Fail returned");
  }
  void space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char next() {
    space();
    if (pos_ >= s_.size()) bad("the end of the text");
    return s_[pos_];
  }
  void expect(char c) {
    if (next() != c) bad(fmt::format("'{}' expected", c));
    ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue read(int depth) {
    if (depth >= kMaxNesting) bad(fmt::format("values nested more than {} deep", kMaxNesting));
    const char c = next();
    JsonValue v;
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.text = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    if (literal("true") || literal("false")) {
      v.kind = JsonValue::Kind::Bool;
      v.boolean = s_[pos_ - 4] == 't';  // the last four letters read: "true" or "alse"
      return v;
    }
    if (literal("null")) return v;
    bad("a value expected");
  }

  JsonValue object(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::Object;
    ++pos_;
    if (next() == '}') {
      ++pos_;
      return v;
    }
    std::set<std::string> names;
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

  JsonValue array(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::Array;
    ++pos_;
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

  // RFC 8259's number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, kept as its literal.
  JsonValue number() {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == from) bad("a digit expected");
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') bad("a leading zero");
    } else {
      digits();
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    JsonValue v;
    v.kind = JsonValue::Kind::Number;
    v.text = std::string(s_.substr(start, pos_ - start));
    return v;
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
  // A string (at its opening quote), its escapes read; its raw bytes must be UTF-8.
  std::string string() {
    ++pos_;
    const std::size_t start = pos_;
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
    if (!validUtf8(s_.substr(start, pos_ - 1 - start))) {
      pos_ = start;
      bad("a string that is not UTF-8");
    }
    return out;
  }

  std::string_view s_;
  const Fail& fail_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::uint64_t> JsonValue::count() const {
  if (kind != Kind::Number || text.empty()) return std::nullopt;
  std::uint64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<unsigned>(c - '0');
    if (n > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    n = n * 10 + digit;
  }
  return n;
}

const JsonValue* JsonValue::member(std::string_view name) const {
  for (const auto& [key, value] : members) {
    if (key == name) return &value;
  }
  return nullptr;
}

JsonValue parseJson(std::string_view text, const Fail& fail) { return JsonReader(text, fail).document(); }

bool validUtf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int more = 0;
    std::uint32_t cp = 0, least = 0;
    if ((c & 0xE0) == 0xC0) more = 1, cp = c & 0x1F, least = 0x80;
    else if ((c & 0xF0) == 0xE0) more = 2, cp = c & 0x0F, least = 0x800;
    else if ((c & 0xF8) == 0xF0) more = 3, cp = c & 0x07, least = 0x10000;
    else return false;
    if (text.size() - i <= static_cast<std::size_t>(more)) return false;
    for (int k = 1; k <= more; ++k) {
      const auto b = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
    i += static_cast<std::size_t>(more) + 1;
  }
  return true;
}

}  // namespace pstrain::zip
