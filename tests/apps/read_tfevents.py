#!/usr/bin/env python3
"""Reads a TensorBoard events file without TensorFlow or protobuf, as a second, independent
implementation for tests/apps/tensorboard_writer_test.cpp. Checks both masked CRC-32C of every
TFRecord (CRC computed bit by bit here, not with a table) and prints the events as JSON:
  [{"wall_time": .., "step": .., "file_version": ..?, "scalars": [[tag, value], ..]}, ..]
When the `tensorboard` package is importable its own loader reads the file too, and the scalars
must agree; the output then has "tensorboard": true at the top level.
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(raw):
    at = 0
    while at < len(raw):
        if len(raw) - at < 12:
            raise SystemExit("truncated record header at byte %d" % at)
        length_bytes = raw[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", raw[at + 8:at + 12])
        if masked(crc32c(length_bytes)) != length_crc:
            raise SystemExit("length CRC mismatch at byte %d" % at)
        data = raw[at + 12:at + 12 + length]
        if len(data) != length or len(raw) < at + 16 + length:
            raise SystemExit("truncated record at byte %d" % at)
        (data_crc,) = struct.unpack("<I", raw[at + 12 + length:at + 16 + length])
        if masked(crc32c(data)) != data_crc:
            raise SystemExit("data CRC mismatch at byte %d" % at)
        yield data
        at += 16 + length


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """(field number, wire type, raw value) for each field of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise SystemExit("unsupported wire type %d" % wire)
        yield field, wire, value


def decode_event(buf):
    event = {"step": 0, "scalars": []}
    for field, wire, value in fields(buf):
        if field == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif field == 2 and wire == 0:
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif field == 3 and wire == 2:
            event["file_version"] = value.decode()
        elif field == 5 and wire == 2:
            for vf, vw, v in fields(value):
                if vf != 1 or vw != 2:
                    continue
                tag, simple = None, None
                for f, w, x in fields(v):
                    if f == 1 and w == 2:
                        tag = x.decode()
                    elif f == 2 and w == 5:
                        simple = struct.unpack("<f", x)[0]
                event["scalars"].append([tag, simple])
    return event


def tensorboard_scalars(path):
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    out = []
    for e in LegacyEventFileLoader(path).Load():
        for v in e.summary.value:
            out.append([e.step, v.tag, v.simple_value])
    return out


def main():
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    events = [decode_event(r) for r in records(raw)]
    result = {"events": events, "tensorboard": False}
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        pass
    else:
        ours = [[e["step"], t, v] for e in events for t, v in e["scalars"]]
        if tensorboard_scalars(sys.argv[1]) != ours:
            raise SystemExit("tensorboard's reader disagrees")
        result["tensorboard"] = True
    print(json.dumps(result))


if __name__ == "__main__":
    main()
