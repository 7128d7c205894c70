"""Schemathesis against the OpenAPI schema: no 5xx, no schema violations, 401 without auth."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from demo.wsgi import application
from engine import EngineSettings
from jobsite.jobs.api.root import api

schema = schemathesis.openapi.from_dict(api.get_openapi_schema())
# derandomize: CI runs the same examples every time (a new finding never blocks a landing).
# Locally, JOBSITE_FUZZ_EXAMPLES=500 JOBSITE_FUZZ_RANDOM=1 explores new ones (see docs/security.md).
FUZZ = settings(
    max_examples=int(os.environ.get("JOBSITE_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not os.environ.get("JOBSITE_FUZZ_RANDOM"),
)
# No server errors and nothing that breaks the schema. (Task names and their arguments are
# checked at run time, so schema-valid bodies may still get a documented 422.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@FUZZ
def test_api_with_a_token(case: Case, engine: EngineSettings, token: str) -> None:
    case.call_and_validate(
        app=application, headers={"Authorization": f"Bearer {token}"}, checks=CHECKS
    )


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@FUZZ
def test_api_without_credentials_is_401(case: Case, engine: EngineSettings) -> None:
    response = case.call(app=application)
    if case.method.upper() != case.operation.method.upper():
        assert response.status_code == 405  # a method the operation does not have
        return
    assert response.status_code == 401, (case.method, case.path, response.status_code)
