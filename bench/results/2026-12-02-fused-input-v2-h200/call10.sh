#!/bin/bash
# Device call 10: the cost of a kernel boundary at batch 1 (chain_latency.py), and which profilers the machine has.
R=/tmp/r10; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack9.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
(which ncu nsys; ls /usr/local/cuda/bin | grep -i -E "ncu|nsys|nsight"; ls /opt/nvidia 2>&1) > $R/profilers.txt 2>&1
timeout 400 env PYTHONPATH=$C/pylib:$REPO/python FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so python3 $C/chain_latency.py --n 64 > $R/chain_latency.txt 2>&1
echo "rc $?" >> $R/chain_latency.txt
cat $R/chain_latency.txt $R/profilers.txt
cd /tmp && tar czf $OUT/r10.tgz r10
