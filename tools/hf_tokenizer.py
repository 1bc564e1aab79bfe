"""Hugging Face's tokenizer.json, in Python's standard library alone: the ids that the hub's
tokenizers give (the tests compare them with Hugging Face's own tokenizers.js).

    from hf_tokenizer import Tokenizer
    tok = Tokenizer.from_folder("HUB_DIR")       # its tokenizer.json and tokenizer_config.json
    ids = tok.encode("Hello world")              # with the post-processor's special tokens

The two kinds of BPE the hub's causal LMs use:
  - byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM): a Split of the text by its regex, each
    piece's bytes as GPT-2's printable characters, merged by rank;
  - SentencePiece-style BPE with byte fallback (Llama 2, TinyLlama, Mistral): spaces as
    "▁" (a Prepend and Replace normalizer, or the Metaspace pre-tokenizer), merged by rank,
    a character the vocabulary lacks as its bytes' <0xNN> tokens.
Added tokens are split out of the text first (special or not); the post-processor's
template adds its special tokens (Llama 2's <s>). Anything else in a tokenizer.json (another
model type, normalizer, pre-tokenizer, split behaviour or post-processor) raises
Unsupported naming it: it is never silently tokenized otherwise.
"""
import heapq
import json
import os
import re
import sys
import unicodedata


class Unsupported(Exception):
    """A tokenizer.json this module does not tokenize as Hugging Face does."""


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


_CATEGORY_RANGES = {}


def _category_class(prefix):
    """A regex class body ("a-zA-Z...") of every code point whose Unicode category starts
    with `prefix` ("L", "N", "Lu" ...), computed once."""
    if prefix not in _CATEGORY_RANGES:
        ranges, start, last = [], None, None
        for cp in range(sys.maxunicode + 1):
            if unicodedata.category(chr(cp)).startswith(prefix):
                if start is None:
                    start = cp
                last = cp
            elif start is not None:
                ranges.append((start, last))
                start = None
        if start is not None:
            ranges.append((start, last))
        _CATEGORY_RANGES[prefix] = "".join(
            re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return _CATEGORY_RANGES[prefix]


def translate_regex(pattern):
    """An Oniguruma pattern of the hub's pre-tokenizers as a Python one: \\p{X} (inside a
    class or not) becomes the class of Unicode category X; \\P{X} outside one its negation."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and pattern[i + 1] in "pP" and pattern[i + 2:i + 3] == "{":
            end = pattern.index("}", i)
            body = _category_class(pattern[i + 3:end])
            negated = pattern[i + 1] == "P"
            if in_class:
                if negated:
                    raise Unsupported(f"regex {pattern!r}: \\P{{...}} inside a class")
                out.append(body)
            else:
                out.append(f"[{'^' if negated else ''}{body}]")
            i = end + 1
            continue
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return re.compile("".join(out))


# GPT-2's pre-tokenizer regex (ByteLevel's use_regex).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class BPE:
    def __init__(self, model):
        if model.get("type") != "BPE":
            raise Unsupported(f"model type {model.get('type')!r} (this module reads BPE)")
        if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
            raise Unsupported("a BPE with a continuing_subword_prefix or end_of_word_suffix")
        if model.get("dropout"):
            raise Unsupported("BPE dropout")
        self.vocab = model["vocab"]
        self.ranks = {}
        for rank, merge in enumerate(model["merges"]):
            a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
            self.ranks[(a, b)] = rank
        self.unk = model.get("unk_token")
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.fuse_unk = bool(model.get("fuse_unk"))
        self.ignore_merges = bool(model.get("ignore_merges"))
        self.cache = {}

    def _symbols(self, word):
        """The word's characters as the vocabulary has them: each a symbol, or its bytes'
        <0xNN> tokens (byte fallback), or the unknown token."""
        symbols = []
        for ch in word:
            if ch in self.vocab:
                symbols.append(ch)
            elif self.byte_fallback and all(f"<0x{b:02X}>" in self.vocab for b in ch.encode()):
                symbols.extend(f"<0x{b:02X}>" for b in ch.encode())
            elif self.unk is not None:
                if not (self.fuse_unk and symbols and symbols[-1] is None):
                    symbols.append(None)  # the unknown token, fused with one before it
            else:
                raise Unsupported(f"a character {ch!r} outside the vocabulary, with no unk_token nor byte fallback")
        return symbols

    def word(self, word):
        """The ids of one pre-tokenized word."""
        if word in self.cache:
            return self.cache[word]
        if self.ignore_merges and word in self.vocab:
            ids = [self.vocab[word]]
        else:
            ids = [self.vocab[s] if s is not None else self.vocab[self.unk] for s in self._merge(self._symbols(word))]
        if len(self.cache) < 100000:
            self.cache[word] = ids
        return ids

    def _merge(self, symbols):
        """Merges by rank, lowest first (leftmost among equals), as Hugging Face's BPE does."""
        n = len(symbols)
        if n < 2:
            return symbols
        prev, nxt = list(range(-1, n - 1)), list(range(1, n + 1))
        alive = [True] * n
        heap = []

        def push(i):
            j = nxt[i]
            if j < n:
                rank = self.ranks.get((symbols[i], symbols[j]))
                if rank is not None:
                    heapq.heappush(heap, (rank, i, symbols[i], symbols[j]))

        for i in range(n - 1):
            push(i)
        while heap:
            rank, i, a, b = heapq.heappop(heap)
            j = nxt[i] if alive[i] else n
            if j >= n or not alive[j] or symbols[i] != a or symbols[j] != b:
                continue  # stale: one of the pair merged since
            symbols[i] = a + b
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prev[nxt[j]] = i
            if prev[i] >= 0:
                push(prev[i])
            push(i)
        return [s for s, keep in zip(symbols, alive) if keep]


class Tokenizer:
    def __init__(self, spec, config=None):
        self.spec, self.config = spec, config or {}
        self.model = BPE(spec["model"])
        self.added = sorted(spec.get("added_tokens") or [], key=lambda t: -len(t["content"]))
        self.added_ids = {t["content"]: t["id"] for t in self.added}
        self.byte_map = bytes_to_unicode()
        self.normalize = self._normalizer(spec.get("normalizer"))
        self.pre_tokenize = self._pre_tokenizer(spec.get("pre_tokenizer"))
        self.template = self._post_processor(spec.get("post_processor"))

    @classmethod
    def from_folder(cls, folder):
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            spec = json.load(f)
        config = {}
        path = os.path.join(folder, "tokenizer_config.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        return cls(spec, config)

    # --- the pipeline's parts, each one of Hugging Face's components ---------------------
    def _normalizer(self, spec):
        if spec is None:
            return lambda s: s
        kind = spec.get("type")
        if kind == "Sequence":
            parts = [self._normalizer(n) for n in spec["normalizers"]]

            def run(s):
                for p in parts:
                    s = p(s)
                return s
            return run
        if kind == "Prepend":
            return lambda s: spec["prepend"] + s if s else s
        if kind == "Replace" and "String" in spec["pattern"]:
            return lambda s: s.replace(spec["pattern"]["String"], spec["content"])
        if kind in ("NFC", "NFD", "NFKC", "NFKD"):
            return lambda s: unicodedata.normalize(kind, s)
        if kind == "Lowercase":
            return lambda s: s.lower()
        raise Unsupported(f"normalizer {json.dumps(spec)[:120]}")

    def _pre_tokenizer(self, spec):
        """A function of a text to its pieces, each already in the model's alphabet."""
        if spec is None:
            return lambda s: [s]
        kind = spec.get("type")
        if kind == "Sequence":
            parts = [self._pre_tokenizer(p) for p in spec["pretokenizers"]]

            def run(s):
                pieces = [s]
                for p in parts:
                    pieces = [q for piece in pieces for q in p(piece)]
                return pieces
            return run
        if kind == "Split":
            if spec.get("behavior") != "Isolated" or spec.get("invert"):
                raise Unsupported(f"Split {spec.get('behavior')} (invert {spec.get('invert')})")
            pattern = spec["pattern"]
            regex = translate_regex(pattern["Regex"]) if "Regex" in pattern else re.compile(re.escape(pattern["String"]))
            return lambda s: split_isolated(regex, s)
        if kind == "ByteLevel":
            regex = translate_regex(GPT2_PATTERN) if spec.get("use_regex", True) else None
            prefix = spec.get("add_prefix_space", False)

            def run(s):
                if prefix and not s.startswith(" "):
                    s = " " + s
                pieces = split_isolated(regex, s) if regex else [s]
                return ["".join(self.byte_map[b] for b in p.encode("utf-8")) for p in pieces]
            return run
        if kind == "Metaspace":
            replacement = spec.get("replacement", "▁")
            scheme = spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never")
            split = spec.get("split", True)

            def run(s):
                s = s.replace(" ", replacement)
                if scheme == "always" or (scheme == "first" and self._first):
                    if not s.startswith(replacement):
                        s = replacement + s
                if not split:
                    return [s]
                pieces, start = [], 0
                for i in range(1, len(s)):
                    if s[i] == replacement:
                        pieces.append(s[start:i])
                        start = i
                pieces.append(s[start:])
                return [p for p in pieces if p]
            return run
        if kind == "Digits":
            regex = re.compile(r"[0-9]" if spec.get("individual_digits") else r"[0-9]+")
            return lambda s: split_isolated(regex, s)
        raise Unsupported(f"pre_tokenizer {json.dumps(spec)[:120]}")

    def _post_processor(self, spec):
        """The special tokens' ids to put before and after a single sequence."""
        if spec is None or spec.get("type") == "ByteLevel":
            return [], []
        if spec.get("type") == "Sequence":
            before, after = [], []
            for p in spec["processors"]:
                b, a = self._post_processor(p)
                before, after = before + b, after + a
            return before, after
        if spec.get("type") == "TemplateProcessing":
            before, after, seen = [], [], False
            for piece in spec["single"]:
                if "Sequence" in piece:
                    seen = True
                    continue
                ids = spec["special_tokens"][piece["SpecialToken"]["id"]]["ids"]
                (after if seen else before).extend(ids)
            return before, after
        raise Unsupported(f"post_processor {spec.get('type')}")

    # --- encoding -----------------------------------------------------------------------------
    def _split_added(self, text):
        """The text cut at its added tokens (longest first, leftmost): [(text, False) or (id, True)]."""
        out, i, start = [], 0, 0
        contents = [t["content"] for t in self.added if t["content"]]
        while i < len(text):
            hit = next((c for c in contents if text.startswith(c, i)), None)
            if hit is None:
                i += 1
                continue
            token = next(t for t in self.added if t["content"] == hit)
            left, right = i, i + len(hit)
            if token.get("lstrip"):
                while left > start and text[left - 1].isspace():
                    left -= 1
            if token.get("rstrip"):
                while right < len(text) and text[right].isspace():
                    right += 1
            if left > start:
                out.append((text[start:left], False))
            out.append((token["id"], True))
            i = start = right
        if start < len(text):
            out.append((text[start:], False))
        return out

    def encode(self, text, special=True):
        """The ids of `text`, with the post-processor's special tokens unless `special` is False."""
        ids = []
        self._first = True
        for part, is_token in self._split_added(text):
            if is_token:
                ids.append(part)
            else:
                for piece in self.pre_tokenize(self.normalize(part)):
                    if piece:
                        ids.extend(self.model.word(piece))
            self._first = False
        if special:
            before, after = self.template
            ids = before + ids + after
        return ids

    def token_id(self, token):
        """The id of a token's text (an added token's, or the vocabulary's); None if neither."""
        if token in self.added_ids:
            return self.added_ids[token]
        return self.model.vocab.get(token)

    def special(self, name):
        """tokenizer_config.json's bos_token / eos_token as (text, id); (None, None) if unset."""
        value = self.config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if value is None:
            return None, None
        return value, self.token_id(value)


def split_isolated(regex, s):
    """The Split "Isolated" behaviour: every match a piece, and every gap between matches."""
    pieces, last = [], 0
    for m in regex.finditer(s):
        if m.start() == m.end():
            continue
        if m.start() > last:
            pieces.append(s[last:m.start()])
        pieces.append(m.group())
        last = m.end()
    if last < len(s):
        pieces.append(s[last:])
    return pieces


if __name__ == "__main__":  # hf_tokenizer.py HUB_DIR TEXT...: each text's ids, one line of JSON each
    tok = Tokenizer.from_folder(sys.argv[1])
    for text in sys.argv[2:]:
        print(json.dumps(tok.encode(text)))
