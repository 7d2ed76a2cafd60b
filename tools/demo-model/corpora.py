"""The three corpora under data/, split deterministically into train and held-out parts, and the
training samples built from them: plain-text windows and chat-formatted conversations."""
import os
import random
import re

import torch

from bpe import chat

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'data')


def _read(name):
    with open(os.path.join(DATA, name), encoding='utf-8') as f:
        return f.read()


def shakespeare():
    """Speeches (`NAME:\\n lines`), last 5% held out (the usual split of this corpus is by position)."""
    speeches = [s.strip('\n') for s in _read('tinyshakespeare.txt').split('\n\n') if s.strip()]
    cut = int(len(speeches) * 0.95)
    return speeches[:cut], speeches[cut:]


def kjv():
    """Chapters as lists of verses (numbers removed); every 20th chapter held out."""
    chapters, cur = [], None
    for line in _read('kjv.txt').split('\n'):
        m = re.match(r'^(\d+) (.*)$', line)
        if m and cur is not None:
            cur.append(m.group(2).strip())
        elif line.strip():
            cur = []
            chapters.append(cur)
    chapters = [c for c in chapters if c]
    train = [c for i, c in enumerate(chapters) if i % 20 != 7]
    held = [c for i, c in enumerate(chapters) if i % 20 == 7]
    return train, held


def devil():
    """Dictionary entries (`WORD, n.  Definition...`); every 10th entry held out."""
    text = _read('devils-dictionary.txt')
    # Verse quotations inside an entry are separated from it by blank lines: glue them back on.
    blocks = text.split('\n\n')
    entries, cur = [], None
    for b in blocks:
        if re.match(r"^[A-Z][A-Z'\- ]*, ", b):
            cur = b.strip('\n')
            entries.append(cur)
        elif entries and b.strip():
            entries[-1] += '\n\n' + b.strip('\n')
    train = [e for i, e in enumerate(entries) if i % 10 != 3]
    held = [e for i, e in enumerate(entries) if i % 10 == 3]
    return train, held


def as_text(kind, docs):
    """Plain running text of a split, as a reader would see it."""
    if kind == 'kjv':
        return '\n\n'.join('\n'.join(ch) for ch in docs) + '\n'
    return '\n\n'.join(docs) + '\n'


def chat_turns(kind, docs, rng):
    """One conversation's worth of (user, assistant) pairs drawn from consecutive material."""
    if kind == 'shakespeare':
        i = rng.randrange(len(docs) - 8)
        return [(docs[i + 2 * j], docs[i + 2 * j + 1]) for j in range(4)]
    if kind == 'kjv':
        ch = docs[rng.randrange(len(docs))]
        turns, j = [], rng.randrange(max(1, len(ch) - 4))
        while j + 1 < len(ch) and len(turns) < 4:
            n = rng.randint(1, 2)
            turns.append((ch[j], ' '.join(ch[j + 1:j + 1 + n])))
            j += 1 + n
        return turns
    turns = []
    for _ in range(4):
        e = docs[rng.randrange(len(docs))]
        word = e.split(',')[0].strip().lower()
        turns.append((word, e))
    return turns


class Corpus:
    """Encoded plain text of one split plus the token positions where a line starts."""

    def __init__(self, tok, kind, docs):
        self.tok, self.kind, self.docs = tok, kind, docs
        ids = tok.encode(as_text(kind, docs))
        self.ids = torch.tensor(ids, dtype=torch.long)
        nl = {i for t, i in tok.vocab.items() if t.endswith('\u010a')}  # tokens ending in "\n"
        self.starts = [0] + [i + 1 for i, t in enumerate(ids[:-1]) if t in nl]

    def window(self, rng, length):
        """`<|bos|>` + `length` tokens of running text from a random line start."""
        limit = len(self.ids) - length
        while True:
            s = self.starts[rng.randrange(len(self.starts))]
            if s <= limit:
                return torch.cat([torch.tensor([self.tok.bos_id]), self.ids[s:s + length]])

    def conversation(self, rng, length):
        """A chat-template conversation, cut or padded (loss-masked with -100) to `length + 1` tokens."""
        msgs = []
        for u, a in chat_turns(self.kind, self.docs, rng):
            msgs += [{'role': 'user', 'content': u}, {'role': 'assistant', 'content': a}]
        ids = self.tok.encode(chat(msgs))[:length + 1]
        out = torch.full((length + 1,), -100, dtype=torch.long)
        out[:len(ids)] = torch.tensor(ids)
        return out


def batch(corpus, rng, size, length, chat_fraction):
    """`[size, length + 1]` samples; padded positions hold -100 (ignored by the loss)."""
    rows = []
    for _ in range(size):
        if rng.random() < chat_fraction:
            rows.append(corpus.conversation(rng, length))
        else:
            rows.append(corpus.window(rng, length))
    return torch.stack(rows)


def eval_windows(corpus, count, length, seed):
    """A fixed set of held-out windows (same seed, same windows)."""
    rng = random.Random(seed)
    return torch.stack([corpus.window(rng, length) for _ in range(count)])
