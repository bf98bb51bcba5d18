"""The tests run against a checkout's build (MIXPREC_LIB: build/libmixprec.so,
MIXPREC: build/mixprec; tests/test_python.sh sets both) or an installed package."""
import os
import shutil

import pytest


@pytest.fixture
def cli():
    """The mixprec command: $MIXPREC, or the one on PATH (pip installs it)."""
    path = os.environ.get("MIXPREC") or shutil.which("mixprec")
    if not path:
        pytest.fail("no mixprec command: set MIXPREC or put mixprec on PATH")
    return path
