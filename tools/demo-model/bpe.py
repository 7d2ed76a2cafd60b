"""Byte-level BPE: training, encoding, and the tokenizer.json / tokenizer_config.json files that
Loom's loader (@huggingface/tokenizers) reads. Same format as testkit/src/tokenizer-builder.ts:
the 256 byte tokens (id = byte value), the learned merges, then the special tokens."""
import json
import os
import re
from collections import Counter, defaultdict

SPECIAL_TOKENS = ['<|bos|>', '<|eos|>', '<|system|>', '<|user|>', '<|assistant|>']
BOS, EOS = '<|bos|>', '<|eos|>'

# `<|bos|>` then, per message, `<|role|>\n{content}<|eos|>\n`, then `<|assistant|>\n` when a
# generation prompt is asked for. It writes bos_token itself, like Llama 3's template.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

# GPT-2's pre-tokenizer split, as the ByteLevel pre-tokenizer applies it. Python's `re` has no
# \p{L}/\p{N}: [^\W\d_] is "letter" and \d "number", exact for the ASCII corpora used here.
# `_` is neither letter nor number, so GPT-2 counts it as punctuation: `(?:[^\s\w]|_)`.
PRE_TOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


BYTE_CHAR = bytes_to_unicode()


def _symbols(word):
    return tuple(BYTE_CHAR[b] for b in word.encode('utf-8'))


def train_merges(texts, num_merges):
    """Learn `num_merges` merges from `texts`, deterministically: most frequent pair first, ties
    broken by the pair's text. Pair counts are updated incrementally, only for words that change."""
    counts = Counter()
    for text in texts:
        counts.update(PRE_TOKENIZE.findall(text))
    words = [list(_symbols(w)) for w in counts]
    freq = list(counts.values())
    pair_count = Counter()
    where = defaultdict(set)
    for i, syms in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += freq[i]
            where[(a, b)].add(i)
    merges = []
    while len(merges) < num_merges and pair_count:
        best = min(pair_count.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pair_count[best] <= 0:
            break
        merges.append(best)
        a, b = best
        for i in list(where[best]):
            syms = words[i]
            for x, y in zip(syms, syms[1:]):
                pair_count[(x, y)] -= freq[i]
            out, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += freq[i]
                where[(x, y)].add(i)
        for p in [p for p, c in pair_count.items() if c <= 0]:
            del pair_count[p]
            where.pop(p, None)
    return merges


class Tokenizer:
    """Encodes exactly as @huggingface/tokenizers does with the files `write` produces."""

    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.rank = {m: i for i, m in enumerate(self.merges)}
        self.vocab = {ch: i for i, ch in enumerate(BYTE_CHAR)}
        for a, b in self.merges:
            if a + b not in self.vocab:
                self.vocab[a + b] = len(self.vocab)
        self.special = {}
        for t in SPECIAL_TOKENS:
            self.special[t] = len(self.vocab) + len(self.special)
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.byte_of = {ch: b for b, ch in enumerate(BYTE_CHAR)}
        self.cache = {}
        self.special_re = re.compile('(' + '|'.join(re.escape(t) for t in SPECIAL_TOKENS) + ')')

    @property
    def vocab_size(self):
        return len(self.vocab) + len(self.special)

    @property
    def bos_id(self):
        return self.special[BOS]

    @property
    def eos_id(self):
        return self.special[EOS]

    def _bpe(self, word):
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        syms = list(_symbols(word))
        while len(syms) > 1:
            best, best_rank = None, None
            for j in range(len(syms) - 1):
                r = self.rank.get((syms[j], syms[j + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = j, r
            if best is None:
                break
            a, b = syms[best], syms[best + 1]
            out, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            syms = out
        ids = [self.vocab[s] for s in syms]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        """Token ids of `text`; special tokens written in the text become their ids. No BOS added."""
        ids = []
        for part in self.special_re.split(text):
            if not part:
                continue
            if part in self.special:
                ids.append(self.special[part])
                continue
            for word in PRE_TOKENIZE.findall(part):
                ids.extend(self._bpe(word))
        return ids

    def decode(self, ids):
        out, buf = [], []
        inv_special = {i: t for t, i in self.special.items()}
        for i in ids:
            if i in inv_special:
                if buf:
                    out.append(bytes(buf).decode('utf-8', errors='replace'))
                    buf = []
                continue  # skip_special_tokens, as the server decodes
            buf.extend(self.byte_of[ch] for ch in self.id_to_token[i])
        if buf:
            out.append(bytes(buf).decode('utf-8', errors='replace'))
        return ''.join(out)

    def write(self, folder, model_max_length):
        added = [
            {'id': i, 'content': t, 'single_word': False, 'lstrip': False, 'rstrip': False, 'normalized': False,
             'special': True}
            for t, i in self.special.items()
        ]
        bos_id = self.bos_id
        tokenizer_json = {
            'version': '1.0',
            'truncation': None,
            'padding': None,
            'added_tokens': added,
            'normalizer': None,
            'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True},
            'post_processor': {
                'type': 'TemplateProcessing',
                'single': [{'SpecialToken': {'id': BOS, 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}],
                'pair': [
                    {'SpecialToken': {'id': BOS, 'type_id': 0}},
                    {'Sequence': {'id': 'A', 'type_id': 0}},
                    {'SpecialToken': {'id': BOS, 'type_id': 1}},
                    {'Sequence': {'id': 'B', 'type_id': 1}},
                ],
                'special_tokens': {BOS: {'id': BOS, 'ids': [bos_id], 'tokens': [BOS]}},
            },
            'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
            'model': {
                'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': None,
                'end_of_word_suffix': None, 'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': False,
                'vocab': self.vocab,
                'merges': [f'{a} {b}' for a, b in self.merges],
            },
        }
        tokenizer_config = {
            'add_bos_token': True,
            'add_eos_token': False,
            'added_tokens_decoder': {str(a['id']): {k: v for k, v in a.items() if k != 'id'} for a in added},
            'bos_token': BOS,
            'eos_token': EOS,
            'pad_token': None,
            'clean_up_tokenization_spaces': False,
            'model_max_length': model_max_length,
            'tokenizer_class': 'PreTrainedTokenizerFast',
            'chat_template': CHAT_TEMPLATE,
        }
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, 'tokenizer.json'), 'w') as f:
            json.dump(tokenizer_json, f, ensure_ascii=False, indent=1)
        with open(os.path.join(folder, 'tokenizer_config.json'), 'w') as f:
            json.dump(tokenizer_config, f, ensure_ascii=False, indent=2)


def chat(messages, add_generation_prompt=False):
    """The chat template above, rendered in Python (training data and prompts use it)."""
    s = BOS
    for m in messages:
        s += f"<|{m['role']}|>\n{m['content']}{EOS}\n"
    if add_generation_prompt:
        s += '<|assistant|>\n'
    return s
