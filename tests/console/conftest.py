"""Fixtures for the web console: a console process beside the module's broker, and headless Chromium."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.console import CHROMIUM, ConsoleProcess, launch_chromium


@pytest.fixture(scope="module")
def console_process(broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    process = ConsoleProcess(broker.bootstrap, tmp_path_factory.mktemp("console"), "--timeout", "10")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium through Playwright; skipped where it is missing, except in CI (.ci/run installs it)."""
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium) -> Iterator[Any]:
    """A fresh browser context per test; JavaScript errors and dialogs fail the test."""
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15000)
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    tab.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
           if msg.type == "error" and "status of 4" not in msg.text and "status of 5" not in msg.text else None)
    tab.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    tab.problems = problems
    try:
        yield tab
    finally:
        context.close()
    assert not problems, problems
