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
request, any console error or any chart without data fails the test. Another follows the quick
start of docs/install.md ("A first job in seven steps") as written, read from the page, in a
project `django-admin startproject` made, up to its job shown completed on the dashboard under
`runserver`. A third runs every other Python block of install.md, django.md and testing.md in
such a project: files written where their first line says, settings checked over the shop's with
`manage.py check`, code imported, tests run with pytest and `TestCase`s with `manage.py test`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
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
                pytest.fail(f"the server never answered {url}:\n{log.read_text()}")
            time.sleep(0.2)


# install.md's quick start, which the test below follows as written.
FIRST_JOB = "## A first job in seven steps"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# The steps' commands that run until stopped (a terminal of their own each).
LONG_RUNNING = ("runworker", "runserver")


# The docs whose code a new user copies into a project of their own: every Python block of them
# runs in a fresh project (the quick start's too, by the test after this one).
COPIED_DOCS = ("install.md", "django.md", "testing.md")
# A block whose first line names a file (`# shop/tasks.py`) is that file's content; blocks naming
# the same file add to it, in the docs' order.
FILE_LINE = re.compile(r"# ([\w/]+\.py)\n")
# The settings module a block of settings is checked with: the shop's, the block over it (the
# apps and JOBSITE it names merged into the shop's, since a block shows only what it adds).
OVER_THE_SHOP = """from shop.settings import *  # noqa: F403
from shop import settings as _shop
from docs_blocks import {block} as _doc

for _name in [n for n in dir(_doc) if n.isupper()]:
    _value = getattr(_doc, _name)
    if _name == "INSTALLED_APPS":
        _value = _value + [app for app in _shop.INSTALLED_APPS if app not in _value]
    elif _name == "JOBSITE":
        _value = {{**_shop.JOBSITE, **_value}}
    globals()[_name] = _value
"""
IMPORT_ALL = """import importlib, sys
import django

django.setup()
for name in sys.argv[1:]:
    importlib.import_module(name)
"""


def for_django(block: str, version: str) -> str:
    """Return `block` as a project on Django `version` has it: a line whose comment names
    another Django version left out, a commented-out line naming this one brought back."""
    lines = []
    for line in block.splitlines():
        said = re.search(r"#.*\bDjango (\d+)\.\d+", line)
        if said and said.group(1) != version.split(".")[0]:
            continue
        if said:
            line = re.sub(r"^(\s*)# ", r"\1", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def kind(block: str) -> str:
    """Say what a block is: a file's content, settings, a TestCase, pytest tests or code."""
    if FILE_LINE.match(block):
        return "file"
    body = ast.parse(block).body
    if all(
        isinstance(node, ast.Assign)
        and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
        for node in body
    ):
        return "settings"
    if any(
        isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).endswith("TestCase") for base in node.bases)
        for node in body
    ):
        return "testcase"
    if any(isinstance(node, ast.FunctionDef) and node.name.startswith("test_") for node in body):
        return "pytest"
    return "code"


def doc_blocks(version: str, redis_url: str) -> list[tuple[str, str, str]]:
    """Return (name, kind, text) of every Python block of the copied docs but the quick start's,
    as a project on Django `version` whose Redis is `redis_url` has it; name is doc_line."""
    found = []
    for doc in COPIED_DOCS:
        text = (ROOT / "docs" / doc).read_text()
        quick = text.find(f"\n{FIRST_JOB}\n")
        end = text.find("\n## ", quick + 1) if quick != -1 else -1
        for match in FENCE.finditer(text):
            if quick != -1 and quick < match.start() < end:
                continue  # followed step by step by the quick start's test
            line = text.count("\n", 0, match.start(1)) + 1
            block = for_django(match.group(1), version)
            block = re.sub(r"redis://127\.0\.0\.1:6379/", f"{redis_url}/", block)
            try:
                found.append((f"{doc.removesuffix('.md')}_{line}", kind(block), block))
            except SyntaxError as exc:
                pytest.fail(f"docs/{doc}:{line}: the block is not Python: {exc}")
    return found


def test_every_python_block_of_the_docs_runs_in_a_fresh_project(
    installed: tuple[str, Path], tmp_path: Path, redis_server: RedisServer
) -> None:
    """Write the docs' files into the shop, check each block of settings over the shop's with
    `manage.py check`, import each block of code, run the tests with pytest (pytest-django) and
    the `TestCase`s with `manage.py test`, on the settings install.md shows."""
    _, python = installed
    version = subprocess.run(
        [python, "-c", "import django; print(django.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    project = tmp_path / "shop-project"
    shutil.copytree(ROOT / "tests" / "outside", project)
    blocks = doc_blocks(version, f"redis://127.0.0.1:{redis_server.port}")
    kinds = {k for _, k, _ in blocks}
    assert kinds == {"file", "settings", "testcase", "pytest", "code"}, kinds
    files: dict[str, str] = {}
    for block_name, what, text in blocks:
        if what == "file":
            path = FILE_LINE.match(text)[1]  # type: ignore[index]
            files[path] = files.get(path, "") + f"# from {block_name}\n{text}"
    assert {"shop/tasks.py", "shop/urls.py", "shop/asgi.py", "conftest.py"} <= files.keys()
    for path, text in files.items():
        (project / path).write_text(text)
    for folder in ("docs_blocks", "docs_tests"):
        (project / folder).mkdir()
        (project / folder / "__init__.py").write_text("")
    for block_name, what, text in blocks:
        folder = "docs_tests" if what in ("testcase", "pytest") else "docs_blocks"
        module = f"test_{block_name}" if folder == "docs_tests" else block_name
        (project / folder / f"{module}.py").write_text(text)
        if what == "settings":
            over = OVER_THE_SHOP.format(block=block_name)
            (project / f"settings_{block_name}.py").write_text(over)
    # install.md's settings (JOBSITE and TASKS): the configuration the docs tell users to run
    (documented,) = [
        n
        for n, k, text in blocks
        if k == "settings" and n.startswith("install_") and "TASKS" in text
    ]
    env = {
        "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "REDIS_URL": redis_server.url,
        "DJANGO_SETTINGS_MODULE": f"settings_{documented}",
    }

    def run(*args: str | Path) -> str:
        proc = subprocess.run(
            [python, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"{args}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return proc.stdout + proc.stderr

    for block_name, what, _ in blocks:
        if what == "settings":  # its errors fail; warnings (Redis on loopback...) are its own
            run("manage.py", "check", "--settings", f"settings_{block_name}")
    code = [f"docs_blocks.{n}" for n, k, _ in blocks if k == "code"]
    run("-c", IMPORT_ALL, *code)
    cases = [n for n, k, _ in blocks if k == "testcase"]
    said = run("manage.py", "test", *(f"docs_tests.test_{n}" for n in cases))
    assert f"Ran {count_tests(blocks, 'testcase')} tests" in said, said
    tests = [f"docs_tests/test_{n}.py" for n, k, _ in blocks if k == "pytest"]
    said = run("-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert f"{count_tests(blocks, 'pytest')} passed" in said, said


def count_tests(blocks: list[tuple[str, str, str]], what: str) -> int:
    """Return how many tests the blocks of kind `what` define."""
    return sum(text.count("def test_") for _, k, text in blocks if k == what)


def first_job_steps() -> tuple[str, list[str]]:
    """Return the quick start's intro and its numbered steps, each dedented as a document."""
    text = (ROOT / "docs" / "install.md").read_text()
    assert f"\n{FIRST_JOB}\n" in text, f"docs/install.md has no section {FIRST_JOB!r}"
    section = text.split(f"\n{FIRST_JOB}\n", 1)[1].split("\n## ", 1)[0]
    intro, *items = re.split(r"^(?=\d+\. )", section, flags=re.M)
    steps = []
    for number, item in enumerate(items, 1):
        head, _, rest = item.partition(". ")
        assert head == str(number), f"step {number} of {FIRST_JOB!r} is numbered {head}"
        steps.append(textwrap.dedent(" " * len(f"{head}. ") + rest))
    return intro, steps


def spans(text: str) -> list[str]:
    """Return the inline code of `text`, in order (the code blocks left out)."""
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def python_files(project: Path) -> dict[str, bytes]:
    """Return every .py file of `project` by its path, with its content."""
    return {str(p.relative_to(project)): p.read_bytes() for p in project.rglob("*.py")}


def add_beside_the_admin(urls: Path, step: str, entry: str) -> None:
    """Add `entry` to urlpatterns after the admin's, and the imports the step names."""
    text, added = re.subn(
        r"^( +)(path\(['\"]admin/['\"], admin\.site\.urls\),)$",
        lambda m: f"{m[1]}{m[2]}\n{m[1]}{entry},",
        urls.read_text(),
        flags=re.M,
    )
    assert added == 1, f"no admin entry in {urls}:\n{text}"
    for name, module in re.findall(r"`(\w+)` imported from `([\w.]+)`", step):
        line = re.search(rf"^from {re.escape(module)} import (.+)$", text, flags=re.M)
        names = sorted({name, *line[1].split(", ")}) if line else [name]
        new = f"from {module} import {', '.join(names)}"
        text = text.replace(line[0], new) if line else f"{new}\n{text}"
    urls.write_text(text)


class Reader:
    """Someone who follows the quick start in a terminal, in the venv `python` belongs to:
    runs its commands as written (the servers on a free port), writes its blocks where it says."""

    def __init__(self, python: Path, home: Path, redis_port: int, extras: str) -> None:
        self.home, self.project = home, home
        self.redis_port, self.extras = redis_port, set(extras.split(","))
        self.port = free_port()
        self.admin = {"username": "admin", "password": secrets.token_urlsafe(16)}
        self.env = {
            "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",  # its python, pip...
            "HOME": os.environ.get("HOME", str(home)),
            "DJANGO_SUPERUSER_USERNAME": self.admin["username"],
            "DJANGO_SUPERUSER_PASSWORD": self.admin["password"],
            "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
        }
        self.servers: dict[str, subprocess.Popen[bytes]] = {}
        self.page = ""  # the path of the page the last step opens

    def run(self, args: list[str]) -> str:
        proc = subprocess.run(
            args, cwd=self.project, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, f"{shlex.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def start_project(self, intro: str) -> None:
        """Make the project the section starts from: startproject's, with the app it names."""
        (startproject,) = [s for s in spans(intro) if s.startswith("django-admin startproject ")]
        self.run(shlex.split(startproject))
        self.project = self.home / shlex.split(startproject)[-1]
        app = re.search(r"with an app `(\w+)`", intro)
        assert app, intro
        self.run(["python", "manage.py", "startapp", app[1]])

    def follow(self, number: int, step: str) -> None:
        code, blocks = spans(step), FENCE.findall(step)
        if blocks:  # a file's content: at its end, or the whole file
            (block,) = blocks
            target = self.project / code[0]
            if step.startswith(f"At the end of `{code[0]}`"):
                # JOBSITE's REDIS_URL: the test's private redis-server, not 127.0.0.1:6379.
                local = f"redis://127.0.0.1:{self.redis_port}/"
                block, moved = re.subn(r"redis://127\.0\.0\.1:6379/", local, block)
                assert moved == 1, block
                block = f"{target.read_text()}\n{block}"
            target.write_text(block)
        elif code[0].endswith(".py"):  # a line beside another in a file
            (entry,) = [c for c in code[1:] if "(" in c]
            add_beside_the_admin(self.project / code[0], step, entry)
        elif code[0].startswith("pip install "):
            self.check_install(step)
        else:
            for command in code:
                self.command(number, command)
        pages = re.findall(r"http://127\.0\.0\.1:8000(/\S*/)", step)  # runserver's address
        if pages:
            (self.page,) = pages

    def check_install(self, step: str) -> None:
        """Check the step's pip line for this Django asks for no extra the `shops` fixture's
        install of the wheel left out."""
        django = self.run(["python", "-m", "django", "--version"]).strip()
        pips = re.findall(r"`(pip install [^`]+)` on (?:Django )?(\d+)\.(\d+|x)\b", step)
        (line,) = [p for p, *v in pips if django.startswith(".".join(v).removesuffix("x"))]
        spec = shlex.split(line)[-1]
        asked = set(re.findall(r"\[(.*)\]", spec)[0].split(",")) if "[" in spec else set()
        assert spec.split("[")[0] == "jobsite" and asked <= self.extras, line

    def command(self, number: int, command: str) -> None:
        args = shlex.split(command)
        assert args[:2] == ["python", "manage.py"], f"step {number}: run `{command}` how?"
        verb = args[2]
        if verb == "createsuperuser":  # its answers from DJANGO_SUPERUSER_*
            args.append("--noinput")
        if verb == "runserver":
            args += ["--noreload", f"127.0.0.1:{self.port}"]
        if verb not in LONG_RUNNING:
            self.run(args)
            return
        log = self.home / f"{verb}.log"
        with log.open("wb") as out:
            self.servers[verb] = subprocess.Popen(
                args, cwd=self.project, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        if verb == "runserver":
            wait_up(f"http://127.0.0.1:{self.port}/admin/login/", self.servers[verb], log)

    def stop(self) -> dict[str, int]:
        """Press Ctrl-C in each server's terminal; return their exit codes."""
        for proc in self.servers.values():
            proc.send_signal(signal.SIGINT)
        return {verb: proc.wait(timeout=60) for verb, proc in self.servers.items()}


def test_the_first_job_in_seven_steps_of_install_md_as_written(
    installed: tuple[str, Path], tmp_path: Path, redis_server: RedisServer
) -> None:
    import redis

    name, python = installed
    intro, steps = first_job_steps()
    assert 1 <= len(steps) <= 7, steps
    redis.Redis(port=redis_server.port).flushdb()  # no job of another test in its history
    reader = Reader(python, tmp_path, redis_server.port, {n: e for n, _, e, _ in SHOPS}[name])
    reader.start_project(intro)
    before = python_files(reader.project)
    try:
        for number, step in enumerate(steps, 1):
            reader.follow(number, step)
        assert reader.page, "no step names the page to open"
        problems = see_the_first_job(f"http://127.0.0.1:{reader.port}{reader.page}", reader.admin)
    finally:
        stopped = reader.stop()
    logs = [(tmp_path / f"{verb}.log").read_text()[-3000:] for verb in stopped]
    assert problems == [], "\n".join(problems + logs)
    assert stopped == dict.fromkeys(LONG_RUNNING, 0), logs
    after = python_files(reader.project)
    changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
    assert changed == {s for s in spans(intro) if s.endswith(".py")}, changed
    assert len(changed) <= 3, changed


def see_the_first_job(url: str, admin: dict[str, str]) -> list[str]:
    """Open `url` as `admin` through the admin's login; wait for the history to show the
    quick start's job completed; return what failed (the websocket's 404 under WSGI aside)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        page = browser.new_page()
        watch(page, problems)
        page.goto(url)  # staff only: the admin's login page first, then back here
        page.fill("#id_username", admin["username"])
        page.fill("#id_password", admin["password"])
        page.click("input[type=submit]")
        page.wait_for_url(url)
        try:  # the history's first page polls for new jobs
            page.wait_for_selector(
                "#search tbody tr:has-text('hello') td.state-completed", timeout=30_000
            )
        except PlaywrightError:
            problems.append(f"no completed job in the history: {page.text_content('#search')}")
        try:  # runserver answers the websocket's handshake 404: the page polls instead
            page.wait_for_selector("#status:text-is('polling')", timeout=10_000)
        except PlaywrightError:
            problems.append(f"the page does not say it polls: {page.text_content('#status')}")
        browser.close()
    socket = re.compile(r"console: WebSocket connection to '[^']*/ws/jobsite/dashboard/' failed")
    return [p for p in problems if not socket.match(p)]
