#!/usr/bin/env python3
"""One line per kernel launch from Nsight Compute's CSV (`ncu --csv --page details`), as
gpu/profile.sh writes it: launch id, kernel, grid, duration and the Speed of Light / Occupancy
figures that say what bounds it (DRAM and SM throughput, the busiest memory unit, achieved and
theoretical occupancy, registers). ncu's own lines (==PROF==, ==WARNING==) are skipped.

    python3 ncu-summary.py ncu.csv
"""
import csv
import re
import sys

COLUMNS = [
    ("time", "Duration"),
    ("dram", "DRAM Throughput"),
    ("mem", "Memory Throughput"),
    ("sm", "Compute (SM) Throughput"),
    ("occ", "Achieved Occupancy"),
    ("occ max", "Theoretical Occupancy"),
    ("regs", "Registers Per Thread"),
]


def short_name(kernel):
    """The kernel's name without namespaces, template arguments kept, parameters dropped."""
    # ncu writes the anonymous namespace as "(anonymous namespace)", "<unnamed>" or "unnamed>".
    name = re.sub(r"\(anonymous namespace\)::|<?unnamed>::|loom::", "", kernel)
    depth, end = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            end = i
            break
    return name[:end].replace("void ", "")


def main(path):
    try:
        return summarise(path)
    except BrokenPipeError:  # piped into head
        return 0


def summarise(path):
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("==")]
    launches = {}
    for row in csv.DictReader(lines):
        key = (int(row["ID"]), row["Kernel Name"], row["Grid Size"], row["Block Size"])
        launches.setdefault(key, {})[row["Metric Name"]] = (row["Metric Value"], row["Metric Unit"])
    header = ["id", "kernel", "grid", "block"] + [c for c, _ in COLUMNS]
    print(" | ".join(header))
    for (lid, kernel, grid, block), m in sorted(launches.items()):
        cells = [str(lid), short_name(kernel)[-60:], grid.replace(" ", ""), block.replace(" ", "")]
        for _, metric in COLUMNS:
            value, unit = m.get(metric, ("-", ""))
            cells.append(value + ("%" if unit == "%" else "" if unit in ("", "register/thread") else " " + unit))
        print(" | ".join(cells))
    if not launches:
        print("no kernel in the profile (was the range empty, or ncu unable to read the counters?)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "ncu.csv"))
