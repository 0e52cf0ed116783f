#!/usr/bin/env bash
# Debian's Chromium, for tests/test_browser.py (Playwright drives it; Playwright's own browser download
# cannot work on these machines). Installs it when missing, as root; run by scripts/test.sh.
# Not root and no Chromium: says so and leaves it to the test, which then skips outside CI (fails in CI).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "[setup] /usr/bin/chromium is missing and this is not root: the browser test cannot run" \
       "(as root: apt-get install -y chromium)" >&2
  exit 0
fi
echo "[setup] installing Debian's chromium for the browser test"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
