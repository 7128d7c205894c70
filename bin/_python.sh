# Sourced by bin/run and bin/test: find Python 3.12+, make .venv, install the pinned packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

find_python() {
    local cand
    for cand in python3.13 python3.12 python3.14; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$cand"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        local root; root="$(pyenv root)"
        for cand in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -rV); do
            if [ -x "$cand/bin/python3" ]; then echo "$cand/bin/python3"; return 0; fi
        done
    fi
    if command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        command -v python3; return 0
    fi
    return 1
}

if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server not found. Install Redis 7: 'apt-get install redis-server' (Debian/Ubuntu) or 'brew install redis'." >&2
    exit 1
fi

# ensure_venv DIR EXTRAS [REQUIREMENTS]: make DIR with Python 3.12+; install the project with EXTRAS
# (and REQUIREMENTS, a pip requirements file) whenever those files changed.
ensure_venv() {
    local venv="$1" extras="$2" reqs="${3:-}"
    if [ ! -x "$venv/bin/python" ]; then
        local py
        if ! py="$(find_python)"; then
            echo "No Python 3.12 or newer found (tried python3.13, python3.12, pyenv versions, python3). Install one, e.g. 'pyenv install 3.13'." >&2
            exit 1
        fi
        echo "creating $venv with $py ($("$py" --version))"
        "$py" -m venv "$venv"
    fi
    local stamp="$venv/.installed" want
    want="$(cat pyproject.toml $reqs | sha256sum | cut -d' ' -f1)-$extras"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]" ${reqs:+-r "$reqs"}
        echo "$want" > "$stamp"
    fi
}
