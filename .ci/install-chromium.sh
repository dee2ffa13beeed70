#!/usr/bin/env bash
# Headless Chromium for the web inspector's browser tests (tests/apps/test_ui_browser.py).
# Debian's packages (no browser download of its own): idempotent, a no-op when installed.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver
