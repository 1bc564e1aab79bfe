#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, written from the published formats
(TFRecord framing with masked CRC-32C; tensorflow.Event and Summary protos), with no
TensorFlow or protobuf library: pstrain's writer is checked against it, not against itself.

    tfevents.py dump FILE...          prints every event
    tfevents.py check TRAIN_DIR       the run's event files against metrics.jsonl and eval.jsonl
"""
import csv
import glob
import json
import math
import os
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The data of every TFRecord in `path`; raises ValueError on a bad CRC or a torn record."""
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"{path}: torn header at byte {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if masked(crc32c(header)) != length_crc:
            raise ValueError(f"{path}: bad length CRC at byte {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or at + 16 + length > len(data):
            raise ValueError(f"{path}: torn record at byte {at}")
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked(crc32c(body)) != body_crc:
            raise ValueError(f"{path}: bad data CRC at byte {at}")
        yield body
        at += 16 + length


def varint(data, at):
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, at


def fields(message):
    """(field number, wire type, value) of a serialized proto message."""
    at = 0
    while at < len(message):
        key, at = varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(message, at)
        elif wire == 1:
            value, at = message[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(message, at)
            value, at = message[at:at + length], at + length
        elif wire == 5:
            value, at = message[at:at + 4], at + 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
        yield number, wire, value


def event(body):
    """A tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3,
    summary = 5 (Summary: repeated Value value = 1; Value: tag = 1, simple_value = 2 (float))."""
    out = {"wall_time": 0.0, "step": 0, "file_version": None, "scalars": {}}
    for number, wire, value in fields(body):
        if number == 1 and wire == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            out["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            for n, w, item in fields(value):
                assert n == 1 and w == 2, (n, w)
                tag, simple = None, None
                for vn, vw, v in fields(item):
                    if vn == 1 and vw == 2:
                        tag = v.decode()
                    elif vn == 2 and vw == 5:
                        simple = struct.unpack("<f", v)[0]
                out["scalars"][tag] = simple
    return out


def read(path):
    events = [event(body) for body in records(path)]
    if not events or events[0]["file_version"] != "brain.Event:2":
        raise ValueError(f"{path}: the first record is not file_version brain.Event:2")
    return events


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(stored, expected, what):
    """`stored` (a float32) is `expected` rounded to float32, give or take one float32 step
    (`expected` itself went through a 9-digit text form); NaN matches None (JSON's null)."""
    if expected is None or (isinstance(expected, float) and math.isnan(expected)):
        assert math.isnan(stored), (what, stored, expected)
        return
    want = as_float32(expected)
    assert abs(stored - want) <= abs(want) * 2 ** -23 + 1e-30, (what, stored, expected)


def check(train_dir):
    files = sorted(glob.glob(os.path.join(train_dir, "events.out.tfevents.*")))
    assert files, f"{train_dir}: no event files"
    train, test = {}, {}
    for path in files:
        for e in read(path)[1:]:
            assert e["wall_time"] > 1.5e9, e
            target = test if any(t.startswith("test/") for t in e["scalars"]) else train
            target.setdefault(e["step"], {}).update(e["scalars"])
    lines = [json.loads(l) for l in open(os.path.join(train_dir, "metrics.jsonl"))]
    assert sorted(train) == sorted(l["step"] for l in lines), (sorted(train), [l["step"] for l in lines])
    for line in lines:
        scalars = train[line["step"]]
        same(scalars["train/loss"], line["loss"], ("loss", line["step"]))
        same(scalars["train/lr"], line["lr"], ("lr", line["step"]))
        same(scalars["train/samples_per_s"], line["samples_per_s"], ("samples_per_s", line["step"]))
        same(scalars["time/exchange_s"], line["exchange_s"], ("exchange_s", line["step"]))
        same(scalars["wire/bytes_sent"], line["bytes_sent"], ("bytes_sent", line["step"]))
        same(scalars["rank0/cpu_s"], line["rank0_cpu_s"], ("rank0_cpu_s", line["step"]))
    evaluated = 0
    eval_path = os.path.join(train_dir, "eval.jsonl")
    if os.path.exists(eval_path):
        rows = {int(r["step"]): r for r in csv.DictReader(open(os.path.join(train_dir, "eval.csv")))}
        for line in (json.loads(l) for l in open(eval_path)):
            scalars = test[line["step"]]
            same(scalars["test/loss"], line["loss"], ("test loss", line["step"]))
            same(scalars["test/accuracy"], line["accuracy"], ("test accuracy", line["step"]))
            row = rows[line["step"]]  # eval.csv: 6 decimals
            assert abs(scalars["test/accuracy"] - float(row["accuracy"])) < 1e-6, (scalars, row)
            assert abs(scalars["test/loss"] - float(row["loss"])) < 1e-6 * max(1, abs(scalars["test/loss"])), (scalars, row)
            if "perplexity" in line:
                same(scalars["test/perplexity"], line["perplexity"], ("perplexity", line["step"]))
            evaluated += 1
        assert sorted(test) == sorted(rows), (sorted(test), sorted(rows))
    print(f"tfevents: {len(files)} file(s), all CRCs valid; {len(train)} training steps and "
          f"{evaluated} evaluated checkpoints equal to metrics.jsonl and eval.jsonl/eval.csv")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "dump":
        for path in sys.argv[2:]:
            for e in read(path):
                print(path, e)
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
