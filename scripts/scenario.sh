#!/usr/bin/env bash
# The user-visible scenario, shared by the simulated end-to-end run
# (e2e-sim.sh), the demo (demo.sh) and the kind run (kind-e2e.sh), so the
# three cannot drift. Source it after lib.sh; it needs:
#   kc        kubectl for the cluster
#   NS        namespace holding the sample Deployment and the model
#   TIMEOUT   seconds to wait for each step
# The model is manifests/example-openmedmodel.yaml; "unloadable" in a
# version makes a pod never ready, on the simulator and on kind alike.

MODEL=openmed-service
V1=OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1
V2=OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2
BAD=OpenMed/OpenMed-PII-unloadable-v3

model_field() { kc -n "$NS" get omm "$MODEL" -o "jsonpath=$1"; }

show() {
  kc -n "$NS" get omm "$MODEL"
  info "conditions: $(model_field '{range .status.conditions[*]}{.type}={.status}/{.reason} {end}')"
}

status_is() { [[ $(model_field "$1") == "$2" ]]; }

# wait_status JSONPATH VALUE
wait_status() {
  wait_for "$TIMEOUT" "$1 = $2" status_is "$1" "$2"
}

scenario_ready() {
  say "Apply the example OpenMedModel; wait for Ready on v1"
  kc apply -f "$REPO/manifests/example-openmedmodel.yaml" -n "$NS"
  wait_status '{.status.activeVersion}' "$V1"
  wait_status '{.status.phase}' Ready
  show
  local cm
  cm=$(kc -n "$NS" get configmap openmed-service-model-manifest -o 'jsonpath={.data.OPENMED_SERVICE_PRELOAD_MODELS}')
  [[ $cm == "$V1" ]] || die "ConfigMap holds '$cm', not $V1"
  local ref
  ref=$(kc -n "$NS" get deploy openmed-service -o 'jsonpath={.spec.template.spec.containers[?(@.name=="openmed-service")].env[?(@.name=="OPENMED_SERVICE_PRELOAD_MODELS")].valueFrom.configMapKeyRef.name}')
  [[ $ref == openmed-service-model-manifest ]] || die "Deployment env points at '$ref'"
}

scenario_v2() {
  say "Bump spec.version to v2; wait for Ready on v2"
  kc -n "$NS" patch omm "$MODEL" --type=merge -p "{\"spec\":{\"version\":\"$V2\"}}"
  wait_status '{.status.activeVersion}' "$V2"
  wait_status '{.status.phase}' Ready
  show
}

scenario_rollback() {
  say "Roll out an unloadable version with a short deadline; wait for the automatic rollback"
  kc -n "$NS" patch omm "$MODEL" --type=merge \
    -p "{\"spec\":{\"version\":\"$BAD\",\"rolloutStrategy\":{\"progressDeadlineSeconds\":${BAD_DEADLINE:-3}}}}"
  wait_status '{.status.phase}' RolledBack
  wait_status '{.status.conditions[?(@.type=="RolledBack")].reason}' RollbackSucceeded
  show
  [[ $(model_field '{.status.activeVersion}') == "$V2" ]] || die "not serving v2 after the rollback"
  [[ $(model_field '{.status.rollbackRequest}') == "automatic:$BAD" ]] || die "rollbackRequest is wrong"
}

scenario_manual() {
  say "Manual rollback to v1 with the openmed.ai/rollback-to annotation"
  kc -n "$NS" annotate omm "$MODEL" --overwrite "openmed.ai/rollback-to=$V1"
  wait_status '{.status.rollbackRequest}' "manual:$V1"
  wait_status '{.status.conditions[?(@.type=="RolledBack")].reason}' RollbackSucceeded
  show
  say "Make it permanent: spec.version=v1, annotation removed"
  kc -n "$NS" patch omm "$MODEL" --type=merge \
    -p "{\"metadata\":{\"annotations\":{\"openmed.ai/rollback-to\":null}},\"spec\":{\"version\":\"$V1\"}}"
  wait_status '{.status.desiredVersion}' "$V1"
  wait_status '{.status.phase}' Ready
  show
}

# The ConfigMap is gone: NotFound, not any error (a refused connection, a 403).
configmap_absent() {
  local err
  err=$(kc -n "$NS" get configmap openmed-service-model-manifest 2>&1) && return 1
  [[ $err == *NotFound* ]] || die "reading the ConfigMap: $err"
}

scenario_delete() {
  say "Delete the OpenMedModel; the ConfigMap goes, the preload is blanked, the finalizer released"
  kc -n "$NS" delete omm "$MODEL" --timeout="${TIMEOUT}s"
  wait_for "$TIMEOUT" "the ConfigMap to go" configmap_absent
  local env
  env=$(kc -n "$NS" get deploy openmed-service -o 'jsonpath={.spec.template.spec.containers[?(@.name=="openmed-service")].env[?(@.name=="OPENMED_SERVICE_PRELOAD_MODELS")]}')
  info "preload env now: $env"
  # The operator writes `value: ""`; API servers drop an empty value (omitempty).
  [[ $env == *OPENMED_SERVICE_PRELOAD_MODELS* && $env != *valueFrom* && ($env != *'"value"'* || $env == *'"value":""'*) ]] ||
    die "preload env not blanked: $env"
}

scenario_all() {
  scenario_ready
  scenario_v2
  scenario_rollback
  scenario_manual
  scenario_delete
  say "Events"
  local events
  events=$(kc -n "$NS" get events --field-selector involvedObject.kind=OpenMedModel --sort-by=.lastTimestamp)
  printf '%s\n' "$events"
  [[ $events == *RolloutSucceeded* ]] || die "no RolloutSucceeded among the Events, sorted by time"
}
