#!/usr/bin/env bash
# The CUDA backend on a GPU machine in one go, in under 8 minutes (issue 24): the peers' table
# (bench/cuda.py --peers: at most 300 s, no peer started after 240 s), the zoo and the op
# table on the device (tests/cuda_check.py device: at most 140 s), and every product form
# through cuBLAS (tests/cuda_check.py products: at most 30 s). Run from anywhere:
#
#     bash bench/cuda_device_check.sh            # PYTHON=... to use another interpreter
#
# Exits non-zero if either part failed; prints both parts' output.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m tapejit info 2>/dev/null | grep -i cuda
timeout 300 "$PY" bench/cuda.py --peers --timeout 90 --budget 240
peers=$?
timeout 140 "$PY" tests/cuda_check.py device
device=$?
timeout 30 "$PY" tests/cuda_check.py products
products=$?
echo "bench/cuda.py --peers: exit $peers; tests/cuda_check.py device: exit $device, products:" \
     "exit $products"
[ "$peers" -eq 0 ] && [ "$device" -eq 0 ] && [ "$products" -eq 0 ]
