# Shared by scripts/run and scripts/test: make .venv and install the project
# into it (editable), reinstalling only when pyproject.toml or the extras change.
# shellcheck shell=bash
fw_venv() {
    local extras="$1"
    local py="${PYTHON:-python3}"
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "fabricwatch needs Python >= 3.11 (found: $("$py" --version 2>&1)); set PYTHON=..." >&2
        return 1
    fi
    if [ ! -x .venv/bin/python ]; then
        echo "==> creating .venv" >&2
        "$py" -m venv .venv || {
            echo "python venv failed: on Debian run 'apt-get install python3-venv'" >&2
            return 1
        }
    fi
    local stamp=".venv/.fabricwatch-installed"
    local want
    want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${extras}"
    if [ ! -f "$stamp" ] || ! grep -qxF "$want" "$stamp"; then
        echo "==> installing fabricwatch${extras:+[$extras]} into .venv" >&2
        .venv/bin/python -m pip install --quiet --upgrade pip >&2
        .venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}" >&2
        echo "$want" >> "$stamp"
    fi
}
