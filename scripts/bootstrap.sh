#!/usr/bin/env bash
# Idempotent set-up of everything `make test` / `make demo` need on a fresh Debian machine:
# system packages (redis-server, chromium, bubblewrap, fonts) and the project venv from the
# exact lock files. Quick when already done: a stamp records the hash of the inputs.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bootstrap: installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

inputs_hash=$(cat requirements/cpu-vlm.lock requirements/cpu-extra.lock requirements/patch_torchvision.sh \
  pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)
stamp="$VENV/.evr1-installed-$inputs_hash"
if [ -f "$stamp" ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip_quiet() {
  # pip's global config names local index folders that may not exist: hide that noise only.
  local log rc=0
  log=$(mktemp)
  "$VENV/bin/pip" "$@" >"$log" 2>&1 || rc=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" || true
  rm -f "$log"
  return $rc
}
echo "bootstrap: installing the locked Python stack into $VENV (a few minutes on a fresh machine)"
# torch==2.13.0 resolves to the local CPU wheel (PIP_FIND_LINKS); --no-deps keeps pip from
# ever pulling a CUDA build through some other package's requirement.
pip_quiet install -q --no-deps -r requirements/cpu-vlm.lock -r requirements/cpu-extra.lock
# PyPI's torchvision is a CUDA build: make it importable beside torch+cpu (see requirements/).
bash requirements/patch_torchvision.sh "$VENV/bin/python" >/dev/null
# CUDA-only or CUDA-built packages that break or bloat a CPU install.
pip_quiet uninstall -q -y triton torchaudio torchcodec >/dev/null || true
pip_quiet install -q --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import torch, torchvision, transformers, vllm, av, easyvideor1" \
  || { echo "bootstrap: import check failed" >&2; exit 1; }
rm -f "$VENV"/.evr1-installed-*
touch "$stamp"
echo "bootstrap: done"
