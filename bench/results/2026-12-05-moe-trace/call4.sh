#!/bin/bash
# Device call (at most 120 s). Carry .stage/rel8.tar.xz (the Python module of the working tree, the
# router kernel removed). The MoE model GPU tests with the expert-parallel test mended. Outputs:
# $OUT/call4.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call4 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
tar xJf .stage/rel8.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_models.py -k gpu > $R/models.txt 2>&1
echo "models rc $?" | tee $R/rc.txt; tail -4 $R/models.txt
tar czf $OUT/call4.tgz -C /tmp call4
