#!/usr/bin/env bash
# FFmpeg's libraries for torchcodec (pinned in pyproject: the `torch` extra and `dev`), which
# `datasets` 5 needs to encode and decode `Audio()` values (conch.engines.hf, docs/media.md).
# Debian's packages: idempotent, a no-op when installed.
set -euo pipefail
if ldconfig -p | grep -q 'libavcodec\.so\.'; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends ffmpeg
