#!/usr/bin/python3
"""Checks a collective_bench --json file against DESIGN.md section 8.

  check_bench_json.py FILE --op OP --world-size N --type T [T ...] --algos A [A ...]
                      --min-bytes B --max-bytes B [--buffers private|shared] [--in-place]

Top level: exactly {"op", "world_size", "buffers", "in_place", "rows"}, buffers and in_place
as given (private and false by default); every row exactly {"size", "count", "type",
"redop", "algo", "time_us", "algbw", "busbw", "wrong", "vs_mpi"}; for every type, its sizes
double from min to max with one row per algorithm each, in the order given; size = count *
element bytes; algbw = size / time; busbw = algbw * the op's factor; vs_mpi = busbw / busbw
of the mpi row of the same type and size; wrong = 0 (the file must come from a --check run;
without --check "wrong" is null). With several types, rows come in groups of one element
count, ascending, the types of a group in the order given (collective_bench --dtype A,B).
"""
import argparse
import json
import math
import sys

ROW_KEYS = {"size", "count", "type", "redop", "algo", "time_us", "algbw", "busbw", "wrong",
            "vs_mpi"}
ELEMENT_BYTES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2}


def bus_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "allgather"):
        return (n - 1) / n
    return 1.0


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--op", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--type", nargs="+", required=True)
    p.add_argument("--algos", nargs="+", required=True)
    p.add_argument("--min-bytes", type=int, required=True)
    p.add_argument("--max-bytes", type=int, required=True)
    p.add_argument("--buffers", choices=["private", "shared"], default="private")
    p.add_argument("--in-place", action="store_true")
    a = p.parse_args()

    errors = []
    with open(a.file) as f:
        data = json.load(f)
    if set(data) != {"op", "world_size", "buffers", "in_place", "rows"}:
        errors.append(f"top-level keys {sorted(data)}")
    if data.get("buffers") != a.buffers:
        errors.append(f"buffers {data.get('buffers')!r}, expected {a.buffers!r}")
    if data.get("in_place") is not a.in_place:
        errors.append(f"in_place {data.get('in_place')!r}, expected {a.in_place!r}")
    if data.get("op") != a.op:
        errors.append(f"op {data.get('op')!r}, expected {a.op!r}")
    if data.get("world_size") != a.world_size:
        errors.append(f"world_size {data.get('world_size')}, expected {a.world_size}")
    rows = data.get("rows", [])
    sizes = []
    s = a.min_bytes
    while s <= a.max_bytes:
        sizes.append(s)
        s *= 2
    if len(rows) != len(sizes) * len(a.algos) * len(a.type):
        errors.append(f"{len(rows)} rows, expected {len(sizes) * len(a.algos) * len(a.type)}")
    good = [row for row in rows if set(row) == ROW_KEYS]
    for row in rows:
        if set(row) != ROW_KEYS:
            errors.append(f"row keys {sorted(row)}")
    mpi_busbw = {(row["type"], row["size"]): row["busbw"] for row in good if row["algo"] == "mpi"}

    # Per type: the doubling sizes, each with the algorithms in order.
    for t in a.type:
        mine = [row for row in good if row["type"] == t]
        if len(mine) != len(sizes) * len(a.algos):
            errors.append(f"{len(mine)} {t} rows, expected {len(sizes) * len(a.algos)}")
        for i, row in enumerate(mine):
            where = f"{t} row {i} ({row['size']} B, {row['algo']})"
            k = i // len(a.algos)
            if k >= len(sizes) or row["size"] != sizes[k]:
                errors.append(f"{where}: size not in the doubling sequence")
            if row["algo"] != a.algos[i % len(a.algos)]:
                errors.append(f"{where}: algo, expected {a.algos[i % len(a.algos)]}")
    # Across types: groups of one element count, ascending, types in the order given.
    order = [(row["count"], a.type.index(row["type"]) if row["type"] in a.type else -1)
             for row in good]
    if order != sorted(order):
        errors.append("rows are not grouped by ascending element count, types in --type order")

    factor = bus_factor(a.op, a.world_size)
    for i, row in enumerate(good):
        where = f"row {i} ({row['type']}, {row['size']} B, {row['algo']})"
        if row["type"] not in a.type or row["size"] != row["count"] * ELEMENT_BYTES[row["type"]]:
            errors.append(f"{where}: type/count/size inconsistent")
        if row["redop"] != ("sum" if a.op in ("allreduce", "reduce_scatter") else "none"):
            errors.append(f"{where}: redop {row['redop']}")
        if not (row["time_us"] > 0 and close(row["algbw"], row["size"] / row["time_us"] / 1e3)):
            errors.append(f"{where}: algbw != size / time")
        if not close(row["busbw"], row["algbw"] * factor):
            errors.append(f"{where}: busbw != algbw * {factor}")
        if row["wrong"] != 0:
            errors.append(f"{where}: wrong = {row['wrong']}")
        key = (row["type"], row["size"])
        if key not in mpi_busbw:
            errors.append(f"{where}: no mpi row of the same type and size")
        elif mpi_busbw[key] > 0 and not close(row["vs_mpi"], row["busbw"] / mpi_busbw[key]):
            errors.append(f"{where}: vs_mpi != busbw / busbw(mpi, same type and size)")
    for e in errors:
        print(f"{a.file}: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"{a.file}: {len(rows)} rows OK")


if __name__ == "__main__":
    main()
