#!/bin/bash
# compute-sanitizer over the GPU suites (scripts/sanitize.sh's full matrix), bounded to fit one call.
cd "$(dirname "$0")/../.."
W=$PWD
tar xJf build/carry/pack23.tar.xz
export FP8ROUTE_SOURCE_DIR=$W
mkdir -p /tmp/r24
timeout ${SAN_SECONDS:-500} bash build/carry/tree/scripts/sanitize.sh --timeout 150 --log-dir /tmp/r24 build/gpu > /tmp/r24/sanitize.txt 2>&1
echo "sanitize rc $?" >> /tmp/r24/sanitize.txt
tail -45 /tmp/r24/sanitize.txt
tar czf $OUT/r24.tgz -C /tmp r24
