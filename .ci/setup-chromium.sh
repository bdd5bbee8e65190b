#!/usr/bin/env bash
# Headless Chromium for the operator console's browser test
# (server/console_browser_test.go, which fails in CI without it): Debian's
# chromium package, nothing else.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
	chromium --version 2>/dev/null || true
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium
chromium --version 2>/dev/null || true
