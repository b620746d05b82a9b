#!/bin/bash
# Device call 6: the full test_gemm and test_quant (the start-gate tests' new size), test_linear,
# test_autoprobe and the Python automatic-probing test with the 21-M default grid.
R=/tmp/r6; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack6.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
TMO=200 t test_gemm $C/bin/test_gemm &
TMO=200 t test_quant $C/bin/test_quant &
TMO=200 t test_linear $C/bin/test_linear &
TMO=200 t test_autoprobe $C/bin/test_autoprobe &
PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so FP8ROUTE_CLI=$C/bin/fp8route TMO=200 t pytest_autoprobe python3 -m pytest -q -s -p no:cacheprovider tests/python/test_autoprobe.py &
wait
grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED|passed|failed|probed row" $R/*.txt | head -30
cd /tmp && tar czf $OUT/r6.tgz r6
