#!/bin/sh
# Both of `make install`'s paths end in the same environment: builds two venvs in a temporary folder with this
# checkout's Makefile, `make install INSTALLER=uv` and `make install INSTALLER=pip`, diffs their `pip freeze --all`
# (name==version of every distribution, pip and the editable visionbench included), then every installed file's
# sha256 as the distributions' RECORDs list them (the same version from another wheel, say py3-none-any instead of
# manylinux, shows there), and runs tests/test_install.py in each (the venv is requirements.lock exactly).
# Exit status 0 when they agree.
#
#   scripts/compare_installs.sh          # about 2 minutes on a 2-core CPU with warm caches
#   KEEP=1 scripts/compare_installs.sh   # keep the two venvs (their path is printed)
#
# uv comes from PATH or the Makefile's .venv-uv/; UV_CACHE_DIR and pip's configuration apply as for `make install`.
# docs/layout.md#the-locked-environment
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare_installs.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT

for installer in uv pip; do
    echo "== make install INSTALLER=$installer VENV=$tmp/$installer"
    make --no-print-directory install INSTALLER=$installer VENV="$tmp/$installer"
    "$tmp/$installer/bin/pip" freeze --all > "$tmp/$installer.freeze"
    echo "   $(wc -l < "$tmp/$installer.freeze") distributions"
done

status=0
if diff -u "$tmp/uv.freeze" "$tmp/pip.freeze"; then
    echo "same environment: pip freeze --all agrees line for line ($(wc -l < "$tmp/uv.freeze") distributions)"
else
    echo "DIFFERENT environments (diff above: - uv, + pip)"; status=1
fi
# per distribution, each file and its sha256 from RECORD, less what differs by installer (INSTALLER, RECORD itself,
# uv's cache notes, bytecode, the bin/ scripts' paths) and the editable finder (it names the venv's checkout path)
records='import csv, glob, os, sys
skip = ("INSTALLER", "RECORD", "REQUESTED", "direct_url.json", "uv_cache.json", "uv_build.json")
for rec in sorted(glob.glob(os.path.join(sys.argv[1], "lib", "python*", "site-packages", "*.dist-info", "RECORD"))):
    dist = os.path.basename(os.path.dirname(rec))
    for row in sorted(r for r in csv.reader(open(rec)) if r):
        path = row[0]
        if path.startswith("..") or "__pycache__" in path or path.endswith(".pyc") or path.split("/")[-1] in skip:
            continue
        print(dist, path, "" if "__editable__" in path else row[1])'
for installer in uv pip; do python3 -c "$records" "$tmp/$installer" > "$tmp/$installer.records"; done
if diff -u "$tmp/uv.records" "$tmp/pip.records" > "$tmp/records.diff"; then
    echo "same files: $(wc -l < "$tmp/uv.records") installed files, each with the same sha256"
else
    head -n 40 "$tmp/records.diff"; echo "DIFFERENT files (diff above: - uv, + pip)"; status=1
fi
for installer in uv pip; do
    "$tmp/$installer/bin/python" -m pytest -q -p no:cacheprovider -o addopts= tests/test_install.py \
        || { echo "tests/test_install.py failed in the $installer venv"; status=1; }
done
[ -z "${KEEP:-}" ] || echo "kept: $tmp"
exit $status
