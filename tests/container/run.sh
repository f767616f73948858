#!/usr/bin/env bash
# Builds nabla's image (docker/Dockerfile) with podman from a Debian 12 base made here, runs it,
# and checks what the README promises of it:
#   1. nabla-train trains inside (--max-steps 20 on Fashion-MNIST);
#   2. Jupyter answers on 127.0.0.1 with the token and refuses requests without it;
#   3. every shipped notebook runs top to bottom (jupyter nbconvert --execute), and the training
#      notebook writes its plot;
#   4. SSH logs in with a key, and offers no password login.
# It prints how long each step took and the image's size. It takes too long for CI (the first
# build compiles nabla inside the image; later ones hit the ccache cache mount), so it runs by
# hand: ./tests/container/run.sh   (as root, or with sudo rights; needs the Debian mirror).
#
# Facts about this machine it relies on: registries are unreachable, so the base is Debian 12
# from `debootstrap --variant=minbase`, imported with `podman import`; crun fails here, and so do
# podman's default ulimits, so a containers.conf picks runc and sets them (CONTAINERS_CONF).
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${NABLA_IMAGE:-localhost/nabla:check}
base=localhost/debian:bookworm-minbase
cache=${NABLA_CONTAINER_CACHE:-/var/tmp/nabla-container}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)

start=$(date +%s)
step_start=$start
step() {
  local now
  now=$(date +%s)
  printf 'container: [%4d s] %s\n' "$((now - step_start))" "$1"
  step_start=$now
}
fail() {
  echo "container: FAILED: $*" >&2
  exit 1
}

# --- tools -------------------------------------------------------------------------------------
tools=(podman buildah debootstrap runc uidmap slirp4netns openssh-client curl openssl python3)
missing=()
for p in "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
work=$(mktemp -d)
container=nabla-check-$$
cleanup() {
  "${sudo_cmd[@]}" podman rm -f "$container" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cat > "$work/containers.conf" << 'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$work/containers.conf
podman=("${sudo_cmd[@]}" env CONTAINERS_CONF="$CONTAINERS_CONF" podman)
step "tools ready (podman $(podman --version | awk '{print $3}'))"

# --- the Debian 12 base ------------------------------------------------------------------------
if ! "${podman[@]}" image exists "$base"; then
  rootfs=$cache/rootfs
  if [[ ! -x $rootfs/bin/bash ]]; then
    "${sudo_cmd[@]}" rm -rf "$rootfs"
    "${sudo_cmd[@]}" mkdir -p "$cache"
    "${sudo_cmd[@]}" debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 ||
      { tail -20 "$work/debootstrap.log"; fail "debootstrap of Debian 12 from $mirror"; }
  fi
  "${sudo_cmd[@]}" tar -C "$rootfs" -c . | "${podman[@]}" import - "$base" > /dev/null 2>&1
fi
step "base image $base"

# --- build -------------------------------------------------------------------------------------
"${podman[@]}" build --build-arg BASE="$base" -f docker/Dockerfile -t "$image" . > "$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; fail "podman build"; }
size=$("${podman[@]}" image inspect --format '{{.Size}}' "$image")
step "image built: $image, $((size / 1024 / 1024)) MiB"

# --- 1. nabla-train inside ---------------------------------------------------------------------
out=$("${podman[@]}" run --rm "$image" nabla-train --data fashion-mnist:/usr/share/datasets/fashion-mnist \
  --max-steps 20 --progress off --checkpoint-dir /tmp/run 2>&1) || { echo "$out"; fail "nabla-train inside"; }
grep -q "done: 20 steps" <<< "$out" || { echo "$out"; fail "nabla-train did not report 20 steps"; }
step "nabla-train --max-steps 20 ran inside ($(grep -o 'best val top-1 [0-9.]*%' <<< "$out"))"

# --- start the container: Jupyter and SSH ------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
jupyter_port=$(free_port)
ssh_port=$(free_port)
ssh-keygen -q -t ed25519 -N '' -f "$work/key"
"${podman[@]}" run -d --name "$container" -p "127.0.0.1:$jupyter_port:8888" -p "127.0.0.1:$ssh_port:22" \
  -e NABLA_SSH_AUTHORIZED_KEYS="$(cat "$work/key.pub")" "$image" > /dev/null
# Jupyter's token is made at start and printed in the log, as a user reads it there.
token=
for _ in $(seq 1 120); do
  logs=$("${podman[@]}" logs "$container" 2>&1)
  token=$(grep -oE 'token=[0-9a-f]{48}' <<< "$logs" | head -n 1 | cut -d= -f2 || true)
  [[ -n $token ]] && curl -sf "http://127.0.0.1:$jupyter_port/api/status?token=$token" > /dev/null && break
  sleep 0.5
done
[[ -n $token ]] || { echo "$logs"; fail "the log prints no Jupyter token"; }
grep -q "nabla: no GPU found" <<< "$logs" || { echo "$logs"; fail "the start did not report the GPU it sees"; }
step "container up (Jupyter on 127.0.0.1:$jupyter_port, SSH on 127.0.0.1:$ssh_port)"

# --- 2. Jupyter: the token opens it, nothing else does -----------------------------------------
with=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$jupyter_port/api/status?token=$token")
without=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$jupyter_port/api/status")
wrong=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$jupyter_port/api/status?token=wrong$token")
[[ $with == 200 ]] || { echo "$logs"; fail "Jupyter with its token answered $with, not 200"; }
[[ $without == 403 && $wrong == 403 ]] || fail "Jupyter without the token answered $without (wrong token: $wrong), not 403"
step "Jupyter: 200 with the token from the log, 403 without it or with a wrong one"

# --- 3. every notebook, headless ---------------------------------------------------------------
"${podman[@]}" exec -e NABLA_NOTEBOOK_STEPS=60 "$container" bash -c \
  'jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 --output-dir /tmp/executed /workspace/notebooks/*.ipynb' \
  > "$work/notebooks.log" 2>&1 || { tail -40 "$work/notebooks.log"; fail "a notebook failed"; }
count=$("${podman[@]}" exec "$container" bash -c 'ls /tmp/executed/*.ipynb | wc -l')
shipped=$(ls docker/notebooks/*.ipynb | wc -l)
[[ $count == "$shipped" ]] || fail "$count of $shipped notebooks were executed"
"${podman[@]}" exec "$container" test -s /workspace/runs/fashion-mnist.png || fail "the training notebook wrote no plot"
step "$count notebooks ran top to bottom; the training plot is /workspace/runs/fashion-mnist.png"

# --- 4. SSH: a key logs in, a password is not offered ------------------------------------------
ssh_options=(-p "$ssh_port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
  -o ConnectTimeout=10 -o LogLevel=ERROR)
login=$(ssh "${ssh_options[@]}" -i "$work/key" -o IdentitiesOnly=yes root@127.0.0.1 'nabla-train --help | head -n 1') ||
  fail "SSH with the key did not log in"
grep -q "nabla-train" <<< "$login" || fail "SSH with the key ran no nabla-train: $login"
# (ssh -v ends its lines with CR LF.)
refused=$(ssh "${ssh_options[@]}" -v -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive \
  root@127.0.0.1 true 2>&1 | tr -d '\r') && fail "SSH without a key logged in"
grep -q "Authentications that can continue: publickey$" <<< "$refused" ||
  { echo "$refused" | tail -5; fail "sshd offers more than public keys"; }
step "SSH: the key logs in; the server offers only publickey (no password login)"

echo "container: all checks passed in $(($(date +%s) - start)) s; image $image, $((size / 1024 / 1024)) MiB"
