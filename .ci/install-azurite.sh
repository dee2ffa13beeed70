#!/usr/bin/env bash
# Azurite (Microsoft's Azure Storage emulator, from npm) for the az:// storage and object-store
# WAL tests; installed under .ci/node/ (git-ignored). Node.js comes from Debian's packages when
# missing. Idempotent: a no-op when this version is installed.
set -euo pipefail
VERSION=3.37.0
DIR="$(cd "$(dirname "$0")" && pwd)/node"
if [ -x "$DIR/node_modules/.bin/azurite-blob" ] && grep -q "\"version\": \"$VERSION\"" "$DIR/node_modules/azurite/package.json"; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    SUDO=""
    if [ "$(id -u)" != "0" ]; then
        SUDO="sudo"
    fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q nodejs npm
fi
mkdir -p "$DIR"
npm install --prefix "$DIR" --no-audit --no-fund --silent "azurite@$VERSION"
