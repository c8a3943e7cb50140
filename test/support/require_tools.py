"""In CI a missing linter, validator or toolchain must fail the run, not skip quietly.

The static and build tests of the image and workflows (hadolint, shellcheck, actionlint, check-jsonschema, the
install script in a venv, the nvcc AOT build) skip where their tool cannot be had: a developer offline, a
machine without nvcc. With SGLANG_BLACKWELL_REQUIRE_TOOLS=1, which .ci/run sets, a skip in one of those modules
is reported as a failure naming the reason, so "CI passed" means they ran. test/unit/conftest.py registers the
hook below.
"""

from __future__ import annotations

import os

import pytest

from sglang_blackwell import envswitch
from sglang_blackwell.errors import UserError

REQUIRE_TOOLS_ENV = "SGLANG_BLACKWELL_REQUIRE_TOOLS"
# every skip in these modules means "a tool is missing here"
MUST_RUN_IN_CI = frozenset({"test_docker_static.py", "test_workflows.py", "test_install_stack.py", "test_aot.py",
                            "test_serving_image.py"})


def tools_required() -> bool:
    """The switch, read by our one parser (1/true/on/yes, 0/false/off/no); any other value stops the run."""
    try:
        return envswitch.parse(REQUIRE_TOOLS_ENV, os.environ.get(REQUIRE_TOOLS_ENV), False)
    except UserError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_configure(config) -> None:
    tools_required()  # a value the switch does not accept stops the run before any test, naming it


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and tools_required() and item.path.name in MUST_RUN_IN_CI:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"{item.nodeid} would have been skipped ({reason}), but {REQUIRE_TOOLS_ENV}=1 (.ci/run): "
                        "this check must run in CI; install what it names")
