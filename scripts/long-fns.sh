#!/usr/bin/env bash
# Lists every function longer than 80 lines (from its `fn` line to its closing brace) in
# any crate's src/, and fails when there is one: the style rule is "functions < 80 lines".
# Usage: scripts/long-fns.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - "${1:-80}" <<'PY'
import pathlib, re, sys

limit = int(sys.argv[1])
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')

def code(line):
    """The line without its comment, strings and char literals, for counting braces."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split('//', 1)[0]

def end_of_body(lines, start):
    """The index of the line closing the body of the fn at `start`; None for a declaration."""
    depth, opened = 0, False
    for j in range(start, len(lines)):
        for ch in code(lines[j]):
            if ch == '{':
                depth, opened = depth + 1, True
            elif ch == '}':
                depth -= 1
            elif ch == ';' and not opened and depth == 0:
                return None
        if opened and depth == 0:
            return j
    return None

found = 0
for path in sorted(pathlib.Path('crates').glob('*/src/**/*.rs')):
    lines = path.read_text().split('\n')
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        end = end_of_body(lines, i)
        if end is not None and end - i + 1 > limit:
            found += 1
            print(f'{path}:{i + 1}: fn {m.group(7)} is {end - i + 1} lines (limit {limit})')
sys.exit(1 if found else 0)
PY
