#!/usr/bin/env python3
"""Lists every C++ function longer than a limit (80 lines by default) in the given folders.

Returns (exit code) 0 when there is none, 1 after printing one line per long function:
  <file>:<first line>: <qualified name> is <n> lines (limit <limit>)
and 2 when it cannot run (no universal-ctags). A function's length counts from the line of
its name to the line of its closing brace, both included; the lambdas inside a function count
toward it and are not listed on their own (the rule is about what a reader must hold in their
head). Function bodies are found by universal-ctags (Debian package universal-ctags, installed
by scripts/install-deps.sh), which parses C++ well enough to give each definition's end line.

Usage: function_length.py [--max-lines N] [--root DIR] FOLDER...
  e.g. scripts/function_length.py apps engine collectives
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

SUFFIXES = {".hpp", ".h", ".cpp", ".cc"}


def cpp_files(folders: list[Path]) -> list[Path]:
    """Returns the C++ files under `folders` (subfolders included), sorted."""
    files = []
    for folder in folders:
        if folder.is_file():
            files.append(folder)
        elif folder.is_dir():
            files.extend(p for p in folder.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        else:
            sys.exit(f"function_length: no such folder: {folder}")
    return sorted(files)


def function_extents(ctags: str, files: list[Path]) -> list[dict]:
    """Returns ctags' function definitions of `files`: name, scope, path, line and end."""
    if not files:
        return []
    command = [ctags, "--languages=C++", "--language-force=C++", "--kinds-C++=f",
               "--fields=+neKS", "--output-format=json", "--sort=no", "-f", "-"]
    result = subprocess.run(command + [str(f) for f in files], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"function_length: {' '.join(command)} failed ({result.returncode}):\n"
                 f"{result.stderr}")
    tags = []
    for line in result.stdout.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or "end" not in tag:
            continue
        # A lambda inside a function is part of that function's length.
        if tag["name"].startswith("__anon") and tag.get("scopeKind") == "function":
            continue
        tags.append(tag)
    return tags


def qualified_name(tag: dict) -> str:
    """Returns "scope::name", without ctags' names for anonymous namespaces and lambdas."""
    parts = [p for p in tag.get("scope", "").split("::") if p and not p.startswith("__anon")]
    name = "(lambda)" if tag["name"].startswith("__anon") else tag["name"]
    return "::".join(parts + [name])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders (or files) to check")
    parser.add_argument("--max-lines", type=int, default=80,
                        help="longest allowed function, in lines (default 80)")
    parser.add_argument("--root", type=Path, default=None,
                        help="print paths relative to this folder (default: as given)")
    args = parser.parse_args()

    ctags = shutil.which("ctags-universal") or shutil.which("ctags")
    if ctags is None:
        print("function_length: universal-ctags is not installed (scripts/install-deps.sh)",
              file=sys.stderr)
        return 2
    version = subprocess.run([ctags, "--version"], capture_output=True, text=True).stdout
    if "Universal Ctags" not in version:
        print(f"function_length: {ctags} is not Universal Ctags", file=sys.stderr)
        return 2

    long_ones = []
    for tag in function_extents(ctags, cpp_files(args.folders)):
        length = tag["end"] - tag["line"] + 1
        if length > args.max_lines:
            path = Path(tag["path"])
            if args.root is not None:
                path = path.resolve().relative_to(args.root.resolve())
            long_ones.append((str(path), tag["line"], qualified_name(tag), length))

    for path, line, name, length in sorted(long_ones):
        print(f"{path}:{line}: {name} is {length} lines (limit {args.max_lines})")
    folders = " ".join(str(f) for f in args.folders)
    print(f"function_length: {len(long_ones)} function(s) longer than {args.max_lines} lines "
          f"in {folders}")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
