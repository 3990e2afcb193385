#!/usr/bin/env bash
# Installs what mpsrt's build and tests need on a fresh Debian/Ubuntu machine with Rust:
# Mesa's lavapipe (a CPU Vulkan driver, so every GPU kernel runs for real without a GPU) and
# a Python virtualenv (.venv) with the test-time packages. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

if [ "$(uname)" = Linux ]; then
  if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q libvulkan.so.1; then
    echo "[install-deps] installing lavapipe (mesa-vulkan-drivers) and the Vulkan loader"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  fi
fi

if [ -f python/requirements-dev.txt ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "[install-deps] creating .venv"
    python3 -m venv .venv
  fi
  stamp=.venv/.requirements-dev.stamp
  if [ ! -f "$stamp" ] || ! cmp -s python/requirements-dev.txt "$stamp"; then
    echo "[install-deps] installing Python test packages into .venv"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -r python/requirements-dev.txt
    cp python/requirements-dev.txt "$stamp"
  fi
fi
