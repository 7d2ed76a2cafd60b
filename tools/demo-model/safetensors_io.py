"""Minimal safetensors writer/reader (the format is an 8-byte little-endian header length, a JSON
header, then raw little-endian tensor bytes), so the recipe needs no package beyond torch."""
import json
import struct

import torch

DTYPES = {torch.float32: 'F32', torch.bfloat16: 'BF16', torch.float16: 'F16'}
BY_NAME = {v: k for k, v in DTYPES.items()}


def save(tensors, path, metadata=None):
    """Write `{name: tensor}` in the given order, each tensor as stored (contiguous, its dtype)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {'dtype': DTYPES[t.dtype], 'shape': list(t.shape), 'data_offsets': [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header['__metadata__'] = metadata
    head = json.dumps(header, separators=(',', ':')).encode('utf-8')
    head += b' ' * (-len(head) % 8)  # keep the data 8-byte aligned
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        a, b = info['data_offsets']
        buf = bytearray(data[a:b])
        dtype = BY_NAME[info['dtype']]
        if dtype == torch.bfloat16:
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(buf, dtype=dtype)
        out[name] = t.reshape(info['shape']).clone()
    return out
