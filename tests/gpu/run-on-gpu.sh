#!/bin/sh
echo "run-on-gpu.sh: not written yet" >&2
exit 1
