#!/bin/sh
# Fails when any given binary (or the tools beside the build) links libcuda.
status=0
for binary in "$@"; do
  if ldd "$binary" | grep -q 'libcuda\.so'; then
    echo "$binary links libcuda: it would not start on a machine without a GPU driver"
    status=1
  else
    echo "$binary: no libcuda dependency"
  fi
done
exit $status
