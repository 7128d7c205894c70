"""Jobsite as a stranger installs it: its wheel in a fresh virtualenv, in a project of its own.

The suite builds the sdist and the wheel (the wheel from the sdist, as `python -m build` does)
and checks them with twine. The wheel goes into two fresh virtualenvs: Django 5.2 LTS with the
django-tasks backport and every other dependency at the lowest release pyproject.toml allows
(requirements/lowest.txt), on Python 3.12; and the newest Django on Python 3.13. Each holds a
small shop project (tests/outside/) that pins its own patch releases of Django, redis and httpx,
copied out of the repository with nothing of the checkout on its path. It mounts the app under
/ops/jobs/, runs migrate and check, enqueues a django.tasks task and an engine task, drains them
with `runworker --burst`, reads them back through the API, the admin, the API docs and the
websocket, then opens every dashboard page in headless Chromium under uvicorn: any failed
request, any console error or any chart without data fails the test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine.dev.devserver import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.timeout(900)

ENQUEUE = """
import json
from jobsite.jobs import services
from shop.tasks import add, double
result = add.enqueue(2, 3)
job = services.enqueue(double, 21)
print(json.dumps({"task": result.id, "engine": job.id}))
"""

READ_BACK = """
import asyncio, json, re
import django
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User
from django.test import Client
import jobsite
from jobsite.jobs.tasks.djtasks import default_task_backend
from shop.asgi import application

ids = IDS
boss = User.objects.create_superuser("boss", password="boss-password")
web = Client()
web.force_login(boss)
out = {"installed_from": jobsite.__file__, "django": django.get_version()}
for name, job_id in ids.items():
    response = web.get(f"/ops/jobs/api/v1/jobs/{job_id}")
    out[name] = [response.status_code, response.json().get("state"), response.json().get("result")]
out["django_result"] = [
    str(r.status) for r in [default_task_backend.get_result(ids["task"])]
] + [default_task_backend.get_result(ids["task"]).return_value]
changelist = web.get("/admin/jobsite/jobrecord/")
out["admin"] = [changelist.status_code, all(i in changelist.text for i in ids.values())]
page = web.get("/ops/jobs/dashboard/")
config = json.loads(re.search(r'id="jobsite-config"[^>]*>(.*?)</script>', page.text).group(1))
out["dashboard"] = [page.status_code, config["api"], config["socket"]]
docs = web.get("/ops/jobs/api/v1/docs")
out["docs"] = [docs.status_code, "/static/ninja/swagger-ui-bundle.js" in docs.text]
anonymous = Client().get("/ops/jobs/api/v1/jobs")
out["anonymous"] = anonymous.status_code


async def socket():
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"sessionid={web.cookies['sessionid'].value}".encode()),
    ]
    scope = {"type": "websocket", "path": out["dashboard"][2], "headers": headers,
             "query_string": b"", "subprotocols": [], "client": ("127.0.0.1", 5000)}
    talk = ApplicationCommunicator(application, scope)
    await talk.send_input({"type": "websocket.connect"})
    accepted = await talk.receive_output(10)
    first = await talk.receive_output(10) if accepted["type"] == "websocket.accept" else {}
    await talk.send_input({"type": "websocket.disconnect", "code": 1000})
    await talk.wait(5)
    return [accepted["type"], json.loads(first.get("text", "{}")).get("type")]


out["socket"] = asyncio.run(socket())
print(json.dumps(out))
"""

# Every chart the page draws, with the values of its series (the x column left out).
CHARTS = """() => Object.fromEntries(Object.entries(window.jobsiteCharts || {}).map(
  ([name, u]) => [name, u.data.slice(1).flatMap((column) => Array.from(column))]))"""


def python_for(version: str) -> str:
    """Return an interpreter of Python `version` (python3.X, a pyenv version, or this one)."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    named = shutil.which(f"python{version}")
    if named and subprocess.run([named, "-c", ""], capture_output=True).returncode == 0:
        return named
    if shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        for found in sorted(Path(root, "versions").glob(f"{version}.*"), reverse=True):
            if (found / "bin" / "python3").exists():
                return str(found / "bin" / "python3")
    pytest.fail(f"no Python {version} here: install it (e.g. `pyenv install {version}`)")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the sdist and the wheel from the checkout's files; twine checks them."""
    where = tmp_path_factory.mktemp("dist")
    source = where / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = where / "dist"
    subprocess.run([sys.executable, "-m", "build", "-q", "-o", str(out), str(source)], check=True)
    built = sorted(str(p) for p in out.iterdir())
    subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *built], check=True)
    return out


def test_the_wheel_holds_every_file_the_app_serves_and_nothing_of_the_demo(dist: Path) -> None:
    wheel = zipfile.ZipFile(next(dist.glob("jobsite-*.whl")))
    names = set(wheel.namelist())
    served = subprocess.run(
        ["git", "ls-files", "jobsite", "engine/lua"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    wanted = {n for n in served if "/static/" in n or "/templates/" in n or n.endswith(".lua")}
    assert any("vendor/uplot/" in n for n in wanted) and any(".html" in n for n in wanted)
    assert sorted(wanted - names) == []
    others = {n for n in names if n.split("/")[0] not in ("engine", "jobsite")}
    assert sorted(others) == sorted(n for n in names if ".dist-info/" in n)
    assert not {"jobsite/settings.py", "jobsite/serve.py", "jobsite/demo_tasks.py"} & names
    with tarfile.open(next(dist.glob("jobsite-*.tar.gz"))) as sdist:
        inside = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"CHANGELOG.md", "README.md", "pyproject.toml"} <= inside
    assert sorted(wanted - inside) == []


# (name, Python, extras, constraints): the lowest supported stack and the newest.
SHOPS = [
    ("django52", "3.12", "django52,client", "requirements/lowest.txt"),
    ("django61", "3.13", "client,fast", None),
]


@pytest.fixture(scope="module")
def shops(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Install the wheel and each shop's own pins into new virtualenvs, side by side."""
    wheel = next(dist.glob("jobsite-*.whl"))
    pythons, installs = {}, []
    for name, version, extras, lowest in SHOPS:
        where = tmp_path_factory.mktemp(name)
        subprocess.run([python_for(version), "-m", "venv", str(where / "venv")], check=True)
        python = pythons[name] = where / "venv" / "bin" / "python"
        reqs = ROOT / "tests" / "outside" / f"requirements-{name}.txt"
        extra = ["-c", str(ROOT / lowest)] if lowest else []
        pip = [python, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-compile"]
        spec = f"jobsite[{extras}] @ {wheel.as_uri()}"
        installs.append(subprocess.Popen([*pip, spec, "-r", reqs, *extra]))
    assert [proc.wait(timeout=600) for proc in installs] == [0] * len(installs)
    return pythons


@pytest.fixture(params=[s[0] for s in SHOPS])
def installed(request: pytest.FixtureRequest, shops: dict[str, Path]) -> tuple[str, Path]:
    return request.param, shops[request.param]


def test_a_fresh_project_installs_the_wheel_and_runs_jobs(
    installed: tuple[str, Path], tmp_path: Path, redis_server: RedisServer
) -> None:
    name, python = installed
    pinned = (ROOT / "tests" / "outside" / f"requirements-{name}.txt").read_text()
    project = tmp_path / "shop-project"
    shutil.copytree(ROOT / "tests" / "outside", project)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "REDIS_URL": redis_server.url,
        "DJANGO_SETTINGS_MODULE": "shop.settings",
    }

    def manage(*args: str, timeout_s: float = 120) -> str:
        proc = subprocess.run(
            [python, "manage.py", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        assert proc.returncode == 0, f"manage.py {args[0]}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    manage("migrate", "--no-input")
    assert "System check identified no issues" in manage("check", "--fail-level", "WARNING")
    ids = json.loads(manage("shell", "-c", ENQUEUE).strip().splitlines()[-1])
    manage("runworker", "--burst", "--queues", "default,mail", timeout_s=120)
    read = manage("shell", "-c", READ_BACK.replace("IDS", json.dumps(ids)))
    seen = json.loads(read.strip().splitlines()[-1])
    assert seen.pop("installed_from").startswith(str(python.parent.parent))
    assert f"Django=={seen.pop('django').removesuffix('.0')}\n" in pinned
    assert seen == {
        "task": [200, "completed", 5],
        "engine": [200, "completed", 42],
        "django_result": ["SUCCESSFUL", 5],
        "admin": [200, True],
        "dashboard": [200, "/ops/jobs/api/v1", "/ws/jobsite/dashboard/"],
        "docs": [200, True],
        "anonymous": 401,
        "socket": ["websocket.accept", "snapshot"],
    }
    problems = open_every_page(python, project, env, ids["engine"])
    assert problems == [], "\n".join(problems)


def open_every_page(python: Path, project: Path, env: dict[str, str], job_id: str) -> list[str]:
    """Serve the shop with uvicorn; open each dashboard page in Chromium; return what failed."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is missing: bin/test installs it (apt-get install chromium)")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (project / "uvicorn.log").open("wb")
    server = subprocess.Popen(
        [python, "-m", "uvicorn", "shop.asgi:application", "--port", str(port), "--ws", "wsproto"],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    problems: list[str] = []
    try:
        wait_up(f"{base}/admin/login/", server, project / "uvicorn.log")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
            )
            page = browser.new_page()
            watch(page, problems)
            page.goto(f"{base}/admin/login/?next=/ops/jobs/dashboard/")
            page.fill("#id_username", "boss")
            page.fill("#id_password", "boss-password")
            page.click("input[type=submit]")
            page.wait_for_url(f"{base}/ops/jobs/dashboard/")
            page.wait_for_load_state("networkidle")
            page.goto(f"{base}/ops/jobs/api/v1/docs")
            page.wait_for_selector(".swagger-ui .info", timeout=15_000)
            for path in ["", f"jobs/{job_id}/", "schedules/", "dead-letters/", "queues/"]:
                page.goto(f"{base}/ops/jobs/dashboard/{path}")
                # each page's script fills the status line once its first data is in
                try:
                    page.wait_for_selector("#status:not(:empty)", timeout=10_000)
                except PlaywrightError:
                    problems.append(f"dashboard/{path}: its script never filled #status")
                if path == "":
                    problems.extend(empty_charts(page))
                page.wait_for_load_state("networkidle")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    if problems:
        problems.append("uvicorn's log:\n" + (project / "uvicorn.log").read_text()[-3000:])
    return problems


def watch(page: Any, problems: list[str]) -> None:
    """Note every failed request and console error of `page` (the shop's missing favicon aside:
    the admin's pages declare none, the app's declare their own)."""

    def mine(url: str) -> bool:
        return not url.endswith("/favicon.ico")

    def console(m: Any) -> None:
        if m.type == "error" and mine(m.location.get("url", "")):
            problems.append(f"console: {m.text} ({m.location.get('url')})")

    def response(r: Any) -> None:
        if r.status >= 400 and mine(r.url):
            problems.append(f"HTTP {r.status}: {r.url}")

    page.on("console", console)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))
    page.on("response", response)


def empty_charts(page: Any, timeout_s: float = 20) -> list[str]:
    """Return the overview's charts without a point (after a refresh or two); a zero is one."""
    page.wait_for_selector("#charts[data-ready='1']", timeout=15_000)
    deadline = time.monotonic() + timeout_s
    while True:
        charts = page.evaluate(CHARTS)
        empty = [f"chart without data: {n}" for n, v in charts.items() if all(x is None for x in v)]
        if not charts:
            empty = ["no charts on the overview"]
        if not empty or time.monotonic() > deadline:
            return empty
        page.wait_for_timeout(1000)
        page.dispatch_event("#chart-picks select[name=range]", "change")


def wait_up(url: str, server: subprocess.Popen[bytes], log: Path, timeout_s: float = 30) -> None:
    """Wait until `url` answers, or fail with the server's log."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"uvicorn never answered {url}:\n{log.read_text()}")
            time.sleep(0.2)


# The docs whose code a new user copies into a project of their own.
COPIED_DOCS = ("install.md", "django.md", "testing.md")
# Packages a fresh project has: imports of others (the user's own `shop`, `myapp`...) are theirs.
INSTALLED_TOPS = {"engine", "jobsite", "django", "django_tasks", "channels", "ninja", "asgiref"}

RESOLVE = """
import importlib, json, sys
missing = []
for module, names, where in json.load(open(sys.argv[-1])):
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        missing.append(f"{where}: import {module}: {exc}")
        continue
    missing += [f"{where}: {module} has no {n}" for n in names if not hasattr(found, n)]
print(json.dumps(missing))
"""


def documented_imports(version: str) -> list[tuple[str, list[str], str]]:
    """Return (module, names, doc:line) of every import in the docs' Python blocks that a
    project on Django `version` runs: read with ast, never run; a line whose comment names
    another Django version (`# Django 5.2`) is left to that version."""
    import ast
    import re

    found = []
    for doc in COPIED_DOCS:
        text = (ROOT / "docs" / doc).read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            first = text.count("\n", 0, match.start(1)) + 1
            block = match.group(1)
            lines = block.splitlines()
            try:
                nodes = list(ast.walk(ast.parse(block)))
            except SyntaxError:  # a fragment (a settings excerpt): its import lines alone
                nodes = [
                    ast.increment_lineno(ast.parse(line.strip()).body[0], n)
                    for n, line in enumerate(lines)
                    if re.match(r"\s*(from \S+ import [^(]+|import \S+)\s*(#.*)?$", line)
                ]
            for node in nodes:
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                comment = lines[node.lineno - 1].partition("#")[2]
                said = re.search(r"Django (\d+\.\d+)", comment)
                if said and not said.group(1).startswith(version.split(".")[0] + "."):
                    continue
                where = f"docs/{doc}:{first + node.lineno - 1}"
                if isinstance(node, ast.ImportFrom):
                    pairs = [(node.module or "", [a.name for a in node.names])]
                else:
                    pairs = [(a.name, []) for a in node.names]
                found += [(m, n, where) for m, n in pairs if m.split(".")[0] in INSTALLED_TOPS]
    return found


def test_every_import_the_docs_show_exists_in_a_fresh_project(
    installed: tuple[str, Path], tmp_path: Path
) -> None:
    name, python = installed
    django = "5.2" if name == "django52" else "6.1"
    wanted = documented_imports(django)
    assert len(wanted) > 10, wanted  # the blocks were found
    listing = tmp_path / "imports.json"
    listing.write_text(json.dumps(wanted))
    project = tmp_path / "shop-project"
    shutil.copytree(ROOT / "tests" / "outside", project)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "DJANGO_SETTINGS_MODULE": "shop.settings",
    }
    script = "import django; django.setup()\n" + RESOLVE
    proc = subprocess.run(
        [python, "-c", script, str(listing)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
