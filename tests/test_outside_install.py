"""Jobsite as a stranger installs it: its wheel in a fresh virtualenv, in a project of its own.

The project (tests/outside/) is copied out of the repository, with nothing of the checkout on
its path: it sees only what the wheel installed. It mounts the app under /ops/jobs/, runs
migrate and check, enqueues a django.tasks task and an engine task, drains them with
`runworker --burst`, and reads them back through the API, the admin, the dashboard, the API docs
and the websocket.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.devserver import RedisServer

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(600)

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
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User
from django.tasks import default_task_backend
from django.test import Client
import jobsite
from shop.asgi import application

ids = IDS
boss = User.objects.create_superuser("boss", password="x")
web = Client()
web.force_login(boss)
out = {"installed_from": jobsite.__file__}
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


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Build the wheel from the checkout's files, install it into a new virtualenv."""
    where = tmp_path_factory.mktemp("outside")
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
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", str(source), "-w", str(where / "dist")], check=True)
    wheel = next((where / "dist").glob("jobsite-*.whl"))
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "--disable-pip-version-check", "-q", "install", wheel],
        check=True,
    )
    yield python


def test_a_fresh_project_installs_the_wheel_and_runs_jobs(
    installed: Path, tmp_path: Path, redis_server: RedisServer
) -> None:
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
            [installed, "manage.py", *args],
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
    assert seen.pop("installed_from").startswith(str(installed.parent.parent))
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
