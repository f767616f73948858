#!/usr/bin/env bash
# nabla's container entrypoint. The first argument picks what runs:
#   jupyter   Jupyter Notebook on 8888 (token authentication; the token is printed below)
#   ssh       OpenSSH on 22, keys only
#   both      both (the default); SSH is left off, with a warning, when no key is given
#   anything else is run as a command (`docker run IMAGE nabla-train --help`).
# Keys for SSH: $NABLA_SSH_AUTHORIZED_KEYS (the keys' text), or a file mounted at
# /etc/nabla/authorized_keys or /root/.ssh/authorized_keys. $JUPYTER_TOKEN sets the token;
# otherwise a random one is made at each start. tini (the image's init) reaps what exits.
set -euo pipefail

say() { echo "nabla: $*"; }

# What GPU the container sees. --gpus all (docker) or --device nvidia.com/gpu=all (podman) mounts
# the driver's nvidia-smi and the device files.
report_gpu() {
  if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /tmp/gpus 2>/dev/null && [[ -s /tmp/gpus ]]; then
    while read -r line; do say "GPU: $line"; done < /tmp/gpus
  elif ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
    say "GPU device files are present, but nvidia-smi cannot read them; is the NVIDIA container toolkit set up?"
  else
    say "no GPU found: nabla runs on the CPU (start the container with --gpus all, or podman's --device nvidia.com/gpu=all, to use one)"
  fi
}

# Writes root's authorized_keys from the variable or the mounted file; false when there is none.
install_keys() {
  local keys=/root/.ssh/authorized_keys
  mkdir -p /root/.ssh && chmod 700 /root/.ssh
  if [[ -n ${NABLA_SSH_AUTHORIZED_KEYS:-} ]]; then
    printf '%s\n' "$NABLA_SSH_AUTHORIZED_KEYS" > "$keys"
  elif [[ -s /etc/nabla/authorized_keys ]]; then
    cp /etc/nabla/authorized_keys "$keys"
  fi
  [[ -s $keys ]] || return 1
  chmod 600 "$keys" 2> /dev/null || true  # a read-only mount keeps its own mode
}

# Prepares sshd: keys and this container's own host keys; false when there is no key.
prepare_ssh() {
  if ! install_keys; then
    say "no SSH key: set NABLA_SSH_AUTHORIZED_KEYS or mount a file at /etc/nabla/authorized_keys (there is no password login)"
    return 1
  fi
  ssh-keygen -A > /dev/null
  mkdir -p /run/sshd
  say "SSH on port 22: ssh root@HOST -p PORT (keys only)"
}

# The token goes to Jupyter through its environment, not its command line, which any user of
# the host could read with ps. A token the user chose is not printed.
run_jupyter() {
  if [[ -n ${JUPYTER_TOKEN:-} ]]; then
    say "Jupyter Notebook on port 8888, with the token you set in JUPYTER_TOKEN"
  else
    JUPYTER_TOKEN=$(openssl rand -hex 24)
    say "Jupyter Notebook on port 8888: http://127.0.0.1:8888/?token=$JUPYTER_TOKEN"
  fi
  export JUPYTER_TOKEN
  say "notebooks are in /workspace/notebooks"
  exec jupyter notebook --ip=0.0.0.0 --port=8888 --no-browser --allow-root --notebook-dir=/workspace
}

mode=${1:-both}
case "$mode" in
  jupyter)
    report_gpu
    run_jupyter
    ;;
  ssh)
    report_gpu
    prepare_ssh || exit 1
    exec /usr/sbin/sshd -D -e
    ;;
  both)
    report_gpu
    if prepare_ssh; then
      /usr/sbin/sshd -D -e &  # logs to the container's output; Jupyter holds the foreground
    else
      say "SSH is off; Jupyter only"
    fi
    run_jupyter
    ;;
  *)
    exec "$@"
    ;;
esac
