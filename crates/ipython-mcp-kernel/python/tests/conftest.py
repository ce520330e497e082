"""The ``kernel`` fixture: one real ipykernel per test module, with the helper installed."""

import os
import shutil

import pytest

from harness import CONFIG, LIBDIR, TESTLIB_SOURCE, KernelClient, install_cells, load_helper, start_kernel


@pytest.fixture(scope="module")
def kernel():
    os.makedirs(LIBDIR, exist_ok=True)
    with open(os.path.join(LIBDIR, "mcp_testlib.py"), "w", encoding="utf-8") as file:
        file.write(TESTLIB_SOURCE)
    km, kc = start_kernel()
    client = KernelClient(kc)
    try:
        install, reinstall = install_cells(CONFIG)
        run = client.execute(install, silent=True)
        assert run.reply["content"]["status"] == "ok", run.reply["content"]
        client.open_comm()
        run = client.execute(reinstall, silent=True)
        assert run.reply["content"]["status"] == "ok", run.reply["content"]
        yield client
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        shutil.rmtree(LIBDIR, ignore_errors=True)


@pytest.fixture
def helper():
    """A fresh copy of the helper package (its module state included) for one test."""
    return load_helper()
