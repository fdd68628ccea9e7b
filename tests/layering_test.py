#!/usr/bin/env python3
"""Checks the layering of the source tree against docs/DESIGN.md section 1.

Returns (exit code) 0 when every rule holds, 1 after printing one line per breach as
"<file>:<line>: <rule>: <the include line>".

The table of which module may include which is read from docs/DESIGN.md (the lines between
"<!-- layering-table:begin -->" and "<!-- layering-table:end -->"), so the document and the
check cannot disagree. Rules, for every .hpp/.h/.cpp/.cc file under each folder the table
names (subfolders such as detail/ included):
  1. an include of "mpitrain/<module>/..." names the file's own module or one its row allows;
     the umbrella header (mpitrain/mpitrain.hpp) and relative includes that climb out of the
     folder ("../") are refused inside the tree;
  2. a header outside a detail/ folder includes no detail/ header: public headers are
     installed, detail/ headers are not, so such a header would expose internals and break
     for users;
  3. only collectives/ includes <mpi.h>.
A top-level folder with C++ sources that the table does not name fails too, so a new module
is added to the table when it is created.

Usage: layering_test.py [--source <repository root>]
"""

import argparse
import re
import sys
from pathlib import Path

SOURCE_SUFFIXES = {".hpp", ".h", ".cpp", ".cc"}
HEADER_SUFFIXES = {".hpp", ".h"}
# Folders at the root that are not modules: tests may include anything, the rest hold no
# C++ sources of the product.
NOT_MODULES = {"tests", "cmake", "scripts", "docs", "configs"}
TABLE_BEGIN = "<!-- layering-table:begin -->"
TABLE_END = "<!-- layering-table:end -->"
MPI_ONLY_IN = "collectives"

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
ROW = re.compile(r"^\|\s*`?([a-z_]+)/?`?\s*\|\s*(.*?)\s*\|")


def read_table(design: Path) -> dict[str, set[str]]:
    """Returns {module: modules it may include} from DESIGN.md's layering table."""
    text = design.read_text(encoding="utf-8")
    if TABLE_BEGIN not in text or TABLE_END not in text:
        sys.exit(f"{design}: no layering table between {TABLE_BEGIN} and {TABLE_END}")
    body = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    table: dict[str, set[str]] = {}
    for line in body.splitlines():
        match = ROW.match(line.strip())
        if not match or match.group(1) == "module":
            continue
        allowed = {name.strip(" `/") for name in match.group(2).split(",")}
        table[match.group(1)] = {name for name in allowed if re.fullmatch(r"[a-z_]+", name)}
    if not table:
        sys.exit(f"{design}: the layering table has no rows")
    for module, allowed in table.items():
        unknown = allowed - table.keys()
        if unknown:
            sys.exit(f"{design}: row '{module}' names unknown modules {sorted(unknown)}")
    return table


def is_build_tree(folder: Path) -> bool:
    """Returns whether `folder` is a CMake build folder (those may sit inside the source)."""
    return (folder / "CMakeCache.txt").exists()


def sources_of(folder: Path):
    """Yields the C++ files under `folder`, in a stable order."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in SOURCE_SUFFIXES:
            yield path


def in_detail(path: Path, root: Path) -> bool:
    """Returns whether `path` lies in a folder named detail/."""
    return "detail" in path.relative_to(root).parts[:-1]


def check_file(path: Path, root: Path, module: str, allowed: set[str]) -> list[str]:
    """Returns the breaches in one file, each as "<file>:<line>: <rule>: <include>"."""
    rel = path.relative_to(root)
    public_header = path.suffix in HEADER_SUFFIXES and not in_detail(path, root)
    breaches = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        match = INCLUDE.match(line)
        if not match:
            continue
        target = match.group(2).strip()
        where = f"{rel}:{number}"
        if target in ("mpi.h", "mpi.hpp") and module != MPI_ONLY_IN:
            breaches.append(f"{where}: only {MPI_ONLY_IN}/ may include <mpi.h>: {line.strip()}")
        if match.group(1) == '"' and target.startswith("../"):
            breaches.append(f"{where}: relative include out of the folder (write "
                            f"\"mpitrain/<module>/...\"): {line.strip()}")
        parts = target.split("/")
        if parts[0] != "mpitrain":
            continue
        if len(parts) == 2:
            breaches.append(f"{where}: the umbrella header is for users, not for {module}/: "
                            f"{line.strip()}")
            continue
        other = parts[1]
        if other != module and other not in allowed:
            may = ", ".join(sorted(allowed)) or "no other module"
            breaches.append(f"{where}: {module}/ may not include {other}/ (it may include "
                            f"{may}; docs/DESIGN.md section 1): {line.strip()}")
        if public_header and "detail" in parts[2:-1]:
            breaches.append(f"{where}: public header includes a detail/ header (detail/ is "
                            f"not installed; include it from a .cpp or a detail/ header): "
                            f"{line.strip()}")
    return breaches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root (default: the one holding this script)")
    args = parser.parse_args()
    root = args.source.resolve()
    table = read_table(root / "docs" / "DESIGN.md")

    breaches = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        name = folder.name
        if name.startswith(".") or name in NOT_MODULES or is_build_tree(folder):
            continue
        if name not in table:
            if any(True for _ in sources_of(folder)):
                breaches.append(f"{name}/: a folder of C++ sources that the layering table of "
                                f"docs/DESIGN.md section 1 does not name")
            continue
        for path in sources_of(folder):
            breaches.extend(check_file(path, root, name, table[name]))
    missing = sorted(m for m in table if not (root / m).is_dir())
    for module in missing:
        breaches.append(f"{module}/: named in the layering table but not in the tree")

    for breach in breaches:
        print(breach)
    checked = ", ".join(m for m in table if m not in missing)
    print(f"layering: {len(breaches)} breach(es) in {checked}")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
