#!/usr/bin/env bash
# Headless Chromium for the operator console's browser test
# (server/console_browser_test.go, which fails in CI without it): Debian's
# chromium package, nothing else.
set -euo pipefail
CI_NAME=setup-chromium
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v chromium >/dev/null 2>&1 || apt_install chromium
chromium --version 2>/dev/null || true
