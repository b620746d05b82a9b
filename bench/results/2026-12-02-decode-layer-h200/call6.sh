#!/bin/bash
# The two test_gemm runs of the sanitizer matrix that did not pass: initcheck with every report
# printed (cuBLASLt's told apart), racecheck with the default per-run timeout.
cd "$(dirname "$0")/../.."
W=$PWD
tar xJf build/carry/pack23.tar.xz
export FP8ROUTE_SOURCE_DIR=$W
mkdir -p /tmp/r25
timeout 100 bash build/carry/tree/scripts/sanitize.sh --tools initcheck --suites test_gemm --log-dir /tmp/r25/i build/gpu > /tmp/r25/initcheck.txt 2>&1
tail -4 /tmp/r25/initcheck.txt
grep -A2 "Uninitialized" /tmp/r25/i/initcheck.test_gemm.log | grep "=========     at" | sed 's/<.*//;s/(.*//' | sort | uniq -c | sort -rn | head -5 > /tmp/r25/initcheck_kernels.txt; cat /tmp/r25/initcheck_kernels.txt
gzip -c /tmp/r25/i/initcheck.test_gemm.log | head -c 3000000 > /tmp/r25/initcheck.test_gemm.log.gz; rm -f /tmp/r25/i/initcheck.test_gemm.log
timeout 270 bash build/carry/tree/scripts/sanitize.sh --tools racecheck --suites test_gemm --timeout 250 --log-dir /tmp/r25/r build/gpu > /tmp/r25/racecheck.txt 2>&1
tail -4 /tmp/r25/racecheck.txt
tar czf $OUT/r25.tgz -C /tmp r25
