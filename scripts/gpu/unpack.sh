# Sourced by the *-call.sh scripts on the GPU machine: unpacks the mini bundle
# (scripts/gpu/mini-bundle.sh, carried as build/gpu-extra/bundle.tar.xz) into build/gpu-x, sets
# $x to it, puts its libraries on LD_LIBRARY_PATH, makes $out, and defines has PART (is PART in
# the comma-separated $parts).
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out" build/gpu-x
tar -xJf build/gpu-extra/bundle.tar.xz -C build/gpu-x
x=$PWD/build/gpu-x
export LD_LIBRARY_PATH="$x/gpu-lib:$x/tools${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
has() { [[ ",${parts:-}," == *",$1,"* ]]; }
