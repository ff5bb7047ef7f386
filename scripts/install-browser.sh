#!/usr/bin/env bash
# Debian's chromium for the browser tests (never `playwright install`: nothing outside the package
# registries can be downloaded). Idempotent; needs root, which CI and the dev machines have.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "install-browser: /usr/bin/chromium is missing and this is not root; browser tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
