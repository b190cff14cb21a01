#!/usr/bin/env bash
# `make install`: requirements.lock, every package at its exact version, into the venv $VENV, then visionbench itself,
# editable and without dependencies (docs/layout.md#the-locked-environment).
#
#   INSTALLER=auto  uv when it can be had (default): `uv` on PATH, else uv==$UV_VERSION from PyPI into $UV_BOOT/
#                   (git-ignored, reused); if uv cannot be had or fails, one line says so and pip installs the lock
#   INSTALLER=pip   pip only (the path the project had first)
#   INSTALLER=uv    uv, or an error
#
# uv installs into a venv made without pip: `uv pip sync --compile-bytecode` the lock (it removes whatever is not in
# it), then pip at the version `python -m venv` would bundle, and visionbench. Both paths end in the same environment,
# file for file (tests/test_install.py; scripts/compare_installs.sh builds both and diffs them).
set -euo pipefail
: "${PY:=python3}" "${VENV:=.venv}" "${INSTALLER:=auto}" "${UV_VERSION:=0.13.9}" "${UV_BOOT:=.venv-uv}"
BIN=$VENV/bin
t0=$(date +%s)

# one pip setting as pip itself reads it: the environment's PIP_* over [install] over [global] (`pip config list`)
PIP_CONFIG=$("$PY" -m pip config list 2>/dev/null || true)
pip_setting() {
    printf '%s\n' "$PIP_CONFIG" | awk -v k="$1" '{
        i = index($0, "="); key = substr($0, 1, i - 1); scope = substr(key, 1, length(key) - length(k) - 1)
        if (substr(key, length(scope) + 1) != "." k) next
        rank = (scope == ":env:") ? 3 : (scope == "install") ? 2 : (scope == "global") ? 1 : 0
        if (rank > best) { best = rank; value = substr($0, i + 2, length($0) - i - 2) }
    } END { print value }'
}

# uv from PATH, else the pinned one from PyPI into $UV_BOOT; prints its path, or nothing with the reason on stderr
find_uv() {
    if command -v uv; then return; fi
    if [ "$("$UV_BOOT/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
        echo "uv: not on PATH; installing uv==$UV_VERSION from PyPI into $UV_BOOT/" >&2
        mkdir -p "$UV_BOOT"
        if ! { "$PY" -m venv "$UV_BOOT" && "$UV_BOOT/bin/pip" install -q "uv==$UV_VERSION"; } > "$UV_BOOT/pip.log" 2>&1; then
            echo "uv could not be had ($(grep ERROR "$UV_BOOT/pip.log" 2>/dev/null | tail -n1))" >&2
            return
        fi
    fi
    echo "$UV_BOOT/bin/uv"
}

# pip's package sources, as uv's flags. pip takes the best wheel of a release from all its indexes together, uv from
# the first index holding that release (--index-strategy unsafe-best-match) and its --find-links pages: so a local
# (file://) PEP 503 index goes to uv as its projects' pages, one --find-links each (else uv took one index's
# py3-none-any tensorboard-data-server wheel where pip took another's manylinux one, with its server binary)
uv_sources() {
    local url name
    url=$(pip_setting index-url); [ -z "$url" ] || UV_ARGS+=(--index-url "$url")
    for url in $(pip_setting extra-index-url); do
        case $url in
            file://*)
                for name in pip setuptools wheel $(sed -n 's/^\([^#][^=]*\)==.*/\1/p' requirements.lock | tr 'A-Z_.' 'a-z--'); do
                    [ ! -f "${url#file://}/$name/index.html" ] || UV_ARGS+=(--find-links "${url%/}/$name/index.html")
                done;;
            *) UV_ARGS+=(--extra-index-url "$url");;
        esac
    done
    for url in $(pip_setting find-links); do UV_ARGS+=(--find-links "$url"); done
    for url in $(pip_setting constraint); do UV_ARGS+=(-c "$url"); done
    url=$(pip_setting cert); [ -z "$url" ] || export SSL_CERT_FILE="$url"
    url=$(pip_setting default-timeout); [ -z "$url" ] || export UV_HTTP_TIMEOUT="$url"
}

install_with_uv() {
    local uv=$1 pip_version pip_wheels
    UV_ARGS=(--python "$BIN/python" --index-strategy unsafe-best-match --compile-bytecode)
    uv_sources
    # pip as the pip path has it: the version Python's ensurepip bundles, from its own wheel
    pip_version=$("$PY" -c 'import ensurepip; print(ensurepip.version())' 2>/dev/null || true)
    pip_wheels=$("$PY" -c 'import ensurepip, os; print(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"))' \
        2>/dev/null || true)
    "$PY" -m venv --without-pip "$VENV" &&
        "$uv" pip sync -q "${UV_ARGS[@]}" requirements.lock &&
        "$uv" pip install -q "${UV_ARGS[@]}" ${pip_wheels:+--find-links "$pip_wheels"} "pip${pip_version:+==$pip_version}" \
            --no-deps -e .
}

install_with_pip() {
    "$PY" -m venv "$@" "$VENV" && "$BIN/pip" install -q -r requirements.lock && "$BIN/pip" install -q --no-deps -e .
}

how=pip
if [ "$INSTALLER" != pip ]; then
    uv=$(find_uv)
    if [ -n "$uv" ] && install_with_uv "$uv"; then
        how="uv ($uv)"
    else
        why=$([ -n "$uv" ] && echo "uv failed" || echo "uv could not be had")
        [ "$INSTALLER" != uv ] || { echo "INSTALLER=uv: $why" >&2; exit 1; }
        echo "$why: installing requirements.lock with pip instead"
        install_with_pip --clear
    fi
else
    install_with_pip
fi
echo "$VENV: requirements.lock installed with $how in $(( $(date +%s) - t0 )) s"
