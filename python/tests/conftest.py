"""The tests run against a checkout's build (MIXPREC_LIB: build/libmixprec.so,
MIXPREC: build/mixprec; tests/test_python.sh sets both) or an installed package.

A test that needs torch 2.x (or a library bench/.venv holds) skips with a
reason saying so; the summary names those that waited, and with
MIXPREC_TORCH2=1 (make check-torch, in bench/.venv) such a skip is a failure."""
import os
import shutil

import pytest

_TORCH2 = ("needs torch >= 2", "no torch.compile in torch", "(bench/.venv has it)")


def _waited(report):
    """The reason a test skipped for want of torch 2.x, or None."""
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        reason = str(report.longrepr[2])
        if any(w in reason for w in _TORCH2):
            return reason
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    reason = _waited(rep)
    if reason and os.environ.get("MIXPREC_TORCH2") == "1":
        rep.outcome, rep.longrepr = "failed", "skipped where torch 2.x should run it (MIXPREC_TORCH2=1): " + reason


def pytest_terminal_summary(terminalreporter):
    waited = [r.nodeid.split("::", 1)[-1] for r in terminalreporter.stats.get("skipped", []) if _waited(r)]
    if waited:
        terminalreporter.write_line("%d tests waited for torch 2.x (make check-torch runs them in bench/.venv): %s"
                                    % (len(waited), ", ".join(waited)))


@pytest.fixture
def cli():
    """The mixprec command: $MIXPREC, or the one on PATH (pip installs it)."""
    path = os.environ.get("MIXPREC") or shutil.which("mixprec")
    if not path:
        pytest.fail("no mixprec command: set MIXPREC or put mixprec on PATH")
    return path
