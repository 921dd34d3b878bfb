"""matplotlib's imread for 8-bit non-interlaced PNGs: floats in [0, 1], (h, w) or (h, w, c)."""
import struct
import zlib

import numpy as np

CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def imread(path):
    with open(path, "rb") as fh:
        data = fh.read()
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or interlace or color not in CHANNELS:
        raise NotImplementedError(f"{path}: only 8-bit non-interlaced PNGs")
    c = CHANNELS[color]
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * c)
    rows = _unfilter(raw[:, 0], raw[:, 1:].astype(np.int64), c)
    image = rows.reshape(height, width, c).astype(np.float32) / 255
    return image[:, :, 0] if c == 1 else image


def _unfilter(filters, rows, c):
    out = np.zeros_like(rows)
    for y, kind in enumerate(filters):
        line, prev = rows[y], out[y - 1] if y else np.zeros_like(rows[0])
        if kind in (0, 2):
            out[y] = (line + (prev if kind == 2 else 0)) % 256
            continue
        for x in range(len(line)):
            left = out[y, x - c] if x >= c else 0
            up_left = prev[x - c] if x >= c else 0
            if kind == 1:
                pred = left
            elif kind == 3:
                pred = (left + prev[x]) // 2
            else:
                p = left + prev[x] - up_left
                pa, pb, pc = abs(p - left), abs(p - prev[x]), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else (prev[x] if pb <= pc else up_left)
            out[y, x] = (line[x] + pred) % 256
    return out
