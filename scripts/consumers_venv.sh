#!/usr/bin/env bash
# The trainers' venv: torch, torchvision, Ultralytics, anomalib and pycocotools at the versions
# scripts/check_consumers.py was run with, and shardsmith editable from this checkout.
#
#     scripts/consumers_venv.sh [VENV]        # default build/consumers-venv
#
# A venv of its own: PyPI's torchvision does not load beside the CPU torch wheel of the test
# extras ("operator torchvision::nms does not exist"), and Ultralytics installs opencv-python,
# which clashes with the headless OpenCV there.  The CUDA builds of torch 2.14.1 and
# torchvision 0.29.1 run on the CPU too (about 6.6 GB installed).
set -euo pipefail
venv="${1:-build/consumers-venv}"
python="${PYTHON:-python3}"
repo="$(cd "$(dirname "$0")/.." && pwd)"

"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
# torch and torchvision first and pinned together: an unpinned resolver may pair others.
"$venv/bin/pip" install --quiet torch==2.14.1 torchvision==0.29.1
"$venv/bin/pip" install --quiet torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190 \
    anomalib==2.7.0 pycocotools
"$venv/bin/pip" install --quiet -e "$repo"
touch "$venv/.installed"
