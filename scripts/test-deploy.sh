#!/usr/bin/env bash
# The deployment checks, offline: no cluster, no docker engine, no network.
#   helm lint + template (default and KEDA values), every rendered object
#   validated against the Kubernetes schemas, the chart's assertions
#   (deploy/tests/check_chart.py); promtool on the alert rules, their unit
#   tests and the Prometheus config; the Grafana dashboard; docker-compose.yml
#   against the Compose Specification; yamllint; hadolint on the Dockerfile.
# Tools: scripts/setup-ops-tools.sh (run by `make setup`). Exits non-zero if
# any check failed; the last line is "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION=1.30.0   # the schemas rendered objects are checked against

eval "$(bash scripts/setup-ops-tools.sh --env)"
for tool in "$FLEET_HELM" "$FLEET_OPS_PYTHON" "$FLEET_PROMTOOL" "$FLEET_OPS_BIN/yamllint" \
            "$FLEET_OPS_BIN/check-jsonschema" "$FLEET_OPS_BIN/hadolint"; do
  [ -x "$tool" ] || { echo "error: $tool is missing: run scripts/setup-ops-tools.sh (part of make setup)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# helm keeps its caches and config out of $HOME; no kubeconfig is read.
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data"
export KUBECONFIG="$tmp/no-kubeconfig"

passed=0
failed=0
failures=()
# check NAME COMMAND...: runs it quietly; on failure shows its output.
check() {
  local name=$1; shift
  if "$@" >"$tmp/out" 2>&1; then
    passed=$((passed + 1)); printf '  ok    %s\n' "$name"
  else
    failed=$((failed + 1)); failures+=("$name"); printf '  FAIL  %s\n' "$name"
    grep -v 'found symbolic link' "$tmp/out" | sed 's/^/        /' | tail -40
  fi
}
# group NAME COMMAND...: a script that prints its own ok/FAIL lines and a
# closing "N passed, N failed" line, whose counts are added to ours.
group() {
  local name=$1; shift
  printf '%s\n' "$name"
  "$@" 2>&1 | tee "$tmp/group" | grep -v ' passed, .* failed$'
  local summary
  summary=$(grep -E '^[a-z]+: [0-9]+ passed, [0-9]+ failed$' "$tmp/group" | tail -1)
  if [ -z "$summary" ]; then
    failed=$((failed + 1)); failures+=("$name (no result)")
    return
  fi
  local p f
  p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$summary")
  f=$(sed -E 's/.*, ([0-9]+) failed$/\1/' <<<"$summary")
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -eq 0 ] || failures+=("$name ($f)")
}
helm_quiet() { "$FLEET_HELM" "$@" 2> >(grep -v 'found symbolic link' >&2); }

started=$(date +%s)
echo "Helm chart (helm/fleet; $("$FLEET_HELM" version --short))"
check "helm lint (default values)" helm_quiet lint --strict helm/fleet
check "helm lint (values-keda.yaml)" helm_quiet lint --strict helm/fleet -f helm/fleet/values-keda.yaml
check "helm template (default values)" helm_quiet template fleet helm/fleet --namespace fleet
check "helm template (values-keda.yaml)" helm_quiet template fleet helm/fleet --namespace fleet -f helm/fleet/values-keda.yaml
check "chart files link to deploy/ (alerts, dashboard, adapter rule)" \
  bash -c 'for f in helm/fleet/files/*; do [ -L "$f" ] && [ -f "$f" ] || { echo "$f is not a working link"; exit 1; }; done'
group "Chart assertions and schema validation (Kubernetes $KUBERNETES_VERSION)" \
  "$FLEET_OPS_PYTHON" deploy/tests/check_chart.py --helm "$FLEET_HELM" --kubernetes-version "$KUBERNETES_VERSION"

echo "Prometheus ($("$FLEET_PROMTOOL" --version 2>&1 | head -1))"
check "promtool check rules deploy/prometheus/alerts.yml" "$FLEET_PROMTOOL" check rules deploy/prometheus/alerts.yml
check "promtool test rules deploy/prometheus/alerts_test.yml" "$FLEET_PROMTOOL" test rules deploy/prometheus/alerts_test.yml
check "promtool check config deploy/prometheus/prometheus.yml" "$FLEET_PROMTOOL" check config deploy/prometheus/prometheus.yml

group "Grafana dashboard (deploy/grafana/dashboards/fleet.json)" \
  "$FLEET_OPS_PYTHON" deploy/tests/check_dashboard.py --promtool "$FLEET_PROMTOOL"
check "dashboard_metrics.py lists the queried metrics" \
  bash -c '"$0" deploy/tests/dashboard_metrics.py | grep -qx kafka_consumergroup_lag' "$FLEET_OPS_PYTHON"

echo "docker-compose.yml and Dockerfile"
check "docker-compose.yml against the Compose Specification schema" \
  "$FLEET_OPS_BIN/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
group "Compose stack wiring" "$FLEET_OPS_PYTHON" deploy/tests/check_compose.py
check "hadolint Dockerfile" "$FLEET_OPS_BIN/hadolint" --no-color Dockerfile

echo "YAML style"
check "yamllint (.yamllint; Helm templates excluded)" \
  "$FLEET_OPS_BIN/yamllint" -c .yamllint --strict docker-compose.yml deploy helm .yamllint .hadolint.yaml

echo
echo "deployment checks took $(( $(date +%s) - started )) s"
if [ "$failed" -gt 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
