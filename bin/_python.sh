# Sourced by bin/run and bin/test: find Python 3.12+, make .venv, install the pinned packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# find_python [X.Y]: print a Python 3.12+ (exactly X.Y when given: python3.X or a pyenv version).
find_python() {
    local want="${1:-}" cand
    if [ -n "$want" ]; then
        # (a pyenv shim is on PATH for every version but runs only the selected ones)
        if "python$want" -c '' >/dev/null 2>&1; then command -v "python$want"; return 0; fi
        if command -v pyenv >/dev/null 2>&1; then
            for cand in $(ls -d "$(pyenv root)"/versions/"$want".* 2>/dev/null | sort -rV); do
                if [ -x "$cand/bin/python3" ]; then echo "$cand/bin/python3"; return 0; fi
            done
        fi
        return 1
    fi
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

# ensure_venv DIR EXTRAS [REQUIREMENTS] [DJANGO] [PYTHON]: make DIR with Python 3.12+ (PYTHON,
# e.g. 3.12, when given); install the project
# with EXTRAS (and REQUIREMENTS, a pip requirements file), pinned by requirements/lock.txt (with
# Django==DJANGO instead of the lock's Django when given), whenever those files changed.
ensure_venv() {
    local venv="$1" extras="$2" reqs="${3:-}" django="${4:-}" python="${5:-}"
    if [ ! -x "$venv/bin/python" ]; then
        local py
        if ! py="$(find_python "$python")"; then
            echo "No Python ${python:-3.12 or newer} found (tried python${python:-3.13, python3.12}, pyenv versions, python3). Install one, e.g. 'pyenv install ${python:-3.13}'." >&2
            exit 1
        fi
        echo "creating $venv with $py ($("$py" --version))"
        "$py" -m venv "$venv"
    fi
    local lock="requirements/lock.txt"
    if [ -n "$django" ] || [ -n "$reqs" ]; then
        lock="$venv/lock.txt"
        if [ -n "$django" ]; then
            sed "s/^Django==.*/Django==$django/" requirements/lock.txt > "$lock"
        else
            cp requirements/lock.txt "$lock"
        fi
        if [ -n "$reqs" ]; then
            # Beside other projects' pins (the benchmark's peers), only the project's own
            # dependencies keep the lock's versions; the rest resolve as those pins need.
            grep -iE '^(django|django[-_]ninja|channels|channels[-_]redis|redis|hiredis|orjson|croniter|prometheus[-_]client|uvloop|httpx)==' "$lock" > "$lock.direct"
            mv "$lock.direct" "$lock"
        fi
    fi
    local stamp="$venv/.installed" want
    want="$(cat pyproject.toml "$lock" $reqs | sha256sum | cut -d' ' -f1)-$extras"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$lock" \
            -e ".[$extras]" ${reqs:+-r "$reqs"}
        echo "$want" > "$stamp"
    fi
}
